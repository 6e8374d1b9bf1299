#!/usr/bin/env bash
# Starts `kestrel serve` on stories260K (chat template from ../shared) on a free port, runs the openai npm
# client test against it, and shuts the server down gracefully. Usage: run.sh KESTREL_BINARY SHARED_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kestrel=$1
shared=$2
cd "$here"
[ -d node_modules/openai ] || npm ci --no-audit --no-fund --loglevel=error
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
"$kestrel" serve -m "$shared/models/stories260K/stories260K.gguf" --port "$port" -t 2 \
  --chat-template-file "$shared/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja" >"$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
  sleep 0.1
done
status=0
KESTREL_URL="http://127.0.0.1:$port" node test.mjs || status=$?
kill -TERM $server
wait $server || { echo "kestrel serve exited with $?"; cat "$log"; status=1; }
exit $status
