#!/usr/bin/env bash
# Starts `kestrel serve` on stories260K (chat template from ../shared) on a free port, runs the openai npm
# client test against it, and shuts the server down gracefully. Usage: run.sh KESTREL_BINARY SHARED_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
kestrel=$1
shared=$2
cd "$here"
[ -d node_modules/openai ] || npm ci --no-audit --no-fund --loglevel=error
log=$(mktemp)
source "$here/../scripts/start_server.sh"
trap 'kill $server 2>/dev/null || true; rm -f "$log"' EXIT
start_server "$kestrel" "$log" -m "$shared/models/stories260K/stories260K.gguf" -t 2 \
  --chat-template-file "$shared/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
status=0
KESTREL_URL="http://127.0.0.1:$port" node test.mjs || status=$?
kill -TERM $server
wait $server || { echo "kestrel serve exited with $?"; cat "$log"; status=1; }
exit $status
