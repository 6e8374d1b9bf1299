#!/usr/bin/env bash
# kestrel serve and SIGINT: the first signal drains (new requests 503, in-flight ones continue), the
# second stops at once, and a stream cut off ends with finish_reason "abort" and an error event.
# Usage: serve_signals.sh KESTREL_BINARY MODEL. Prints "elapsed_ms=N" (first signal to exit) and the
# stream's last lines; exits non-zero if the server did not stop.
set -euo pipefail
kestrel=$1
model=$2
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
stream=$(mktemp)
"$kestrel" serve -m "$model" --port "$port" -t 1 --shutdown-timeout 120 >"$log" 2>&1 &
server=$!
trap 'kill -9 $server 2>/dev/null || true; rm -f "$log" "$stream"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once", "max_tokens": 100000, "ignore_eos": true, "stream": true}' >"$stream" &
client=$!
for _ in $(seq 1 100); do
  grep -q '"text"' "$stream" 2>/dev/null && break
  sleep 0.05
done
start=$(date +%s%N)
kill -INT $server
sleep 0.5
# Draining: the stream still runs and new requests are refused.
refused=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/completions" \
  -H 'Content-Type: application/json' -d '{"prompt": "x", "max_tokens": 1}' || true)
echo "refused_while_draining=$refused"
kill -INT $server
for _ in $(seq 1 100); do
  kill -0 $server 2>/dev/null || break
  sleep 0.05
done
if kill -0 $server 2>/dev/null; then echo "server still running"; exit 1; fi
echo "elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))"
wait $client || true
tail -c 600 "$stream"
