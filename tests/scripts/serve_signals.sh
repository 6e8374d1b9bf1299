#!/usr/bin/env bash
# kestrel serve and SIGINT: the first signal drains (new requests 503, in-flight ones continue), the
# second stops at once, and a stream cut off ends with finish_reason "abort" and an error event.
# Usage: serve_signals.sh KESTREL_BINARY MODEL. Prints "elapsed_ms=N" (first signal to exit) and the
# stream's last lines; exits non-zero if the server did not stop.
set -euo pipefail
kestrel=$1
model=$2
log=$(mktemp)
stream=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill -9 ${server:-} 2>/dev/null || true; rm -f "$log" "$stream"' EXIT
start_server "$kestrel" "$log" -m "$model" -t 1 -c 8192 --shutdown-timeout 120
# A model without a chat template gets ChatML, with a warning at start-up.
chat=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" \
  -H 'Content-Type: application/json' -d '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}' || true)
echo "chat_without_template=$chat"
grep -q "ChatML" "$log" && echo "chatml_warning=yes"
curl -sN "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once", "max_tokens": 100000, "ignore_eos": true, "stream": true}' >"$stream" &
client=$!
for _ in $(seq 1 1200); do  # up to 60 s on a busy machine
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
for _ in $(seq 1 400); do  # up to 20 s
  kill -0 $server 2>/dev/null || break
  sleep 0.05
done
if kill -0 $server 2>/dev/null; then echo "server still running"; exit 1; fi
echo "elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))"
wait $client || true
tail -c 600 "$stream"
