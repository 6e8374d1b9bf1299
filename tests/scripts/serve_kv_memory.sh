#!/usr/bin/env bash
# kestrel serve --kv-memory: the byte budget becomes KV blocks for the chosen KV types (f32 pages hold half
# the tokens of f16 ones, quantized pages more), reported on /metrics; a size that is not one, or one below
# a block, is refused.
# Usage: serve_kv_memory.sh KESTREL_BINARY MODEL. Prints "TYPE bytes_per_token=N kv_bytes=M" lines.
set -euo pipefail
kestrel=$1
model=$2
log=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$log"' EXIT
for type in f16 f32 q8_0 tq3; do
  start_server "$kestrel" "$log" -m "$model" -t 1 --kv-memory 1MiB -ctk "$type" -ctv "$type"
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
  echo "$type bytes_per_token=$(echo "$metrics" | awk '$1 == "kestrel_kv_bytes_per_token" {print $2}')" \
       "kv_bytes=$(echo "$metrics" | awk '$1 == "kestrel_kv_bytes" {print $2}')" \
       "free_blocks=$(echo "$metrics" | awk '$1 == "kestrel_kv_blocks{state=\"free\"}" {print $2}')"
  kill "$server"; wait "$server" 2>/dev/null || true
done
for bad in 12x 1 -5M; do
  if "$kestrel" serve -m "$model" --kv-memory "$bad" --port 0 >"$log" 2>&1; then echo "accepted --kv-memory $bad"; exit 1; fi
  echo "refused $bad: $(grep -m1 error "$log")"
done
