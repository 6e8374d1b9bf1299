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
log_llama=$(mktemp)
log_mistral=$(mktemp)
source "$here/../scripts/start_server.sh"
trap 'kill $server $server_llama $server_mistral 2>/dev/null || true; rm -f "$log" "$log_llama" "$log_mistral"' EXIT
model="$shared/models/stories260K/stories260K.gguf"
# Two more servers with other template families, for the tool-call round trips (three formats).
start_server "$kestrel" "$log_llama" -m "$model" -t 1 --chat-template-file "$shared/chat-templates/meta-llama-Llama-3.1-8B-Instruct.jinja"
server_llama=$server port_llama=$port
start_server "$kestrel" "$log_mistral" -m "$model" -t 1 --chat-template-file "$shared/chat-templates/mistralai-Mistral-Nemo-Instruct-2407.jinja"
server_mistral=$server port_mistral=$port
start_server "$kestrel" "$log" -m "$model" -t 2 --chat-template-file "$shared/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja"
status=0
KESTREL_URL="http://127.0.0.1:$port" \
  KESTREL_TOOL_URLS="qwen=http://127.0.0.1:$port,llama3=http://127.0.0.1:$port_llama,mistral=http://127.0.0.1:$port_mistral" \
  node test.mjs || status=$?
for s in $server $server_llama $server_mistral; do kill -TERM $s; done
for pair in "$server:$log" "$server_llama:$log_llama" "$server_mistral:$log_mistral"; do
  wait "${pair%%:*}" || { echo "kestrel serve exited with $?"; cat "${pair#*:}"; status=1; }
done
exit $status
