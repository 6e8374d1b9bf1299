#!/usr/bin/env bash
# Streamed and non-streamed completions give the same text, byte for byte, on a model whose output is full
# of byte tokens (sampling at temperature 0.8). Usage: stream_equals_plain.sh KESTREL_BINARY MODEL SEED...
# Run it under each KESTREL_ISA: the kernels' rounding picks different tokens. Prints one line per seed;
# exits non-zero on the first difference.
set -euo pipefail
kestrel=$1
model=$2
shift 2
log=$(mktemp)
plain=$(mktemp)
streamed=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$log" "$plain" "$streamed"' EXIT
start_server "$kestrel" "$log" -m "$model" -t 2
for seed in "$@"; do
  for stream in false true; do
    curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"prompt\": \"Once upon a time\", \"max_tokens\": 100, \"temperature\": 0.8, \"seed\": $seed, \"stream\": $stream}" \
      > "$([ $stream = true ] && echo "$streamed" || echo "$plain")"
  done
  python3 - "$plain" "$streamed" "$seed" <<'PY'
import json, sys
whole = json.load(open(sys.argv[1]))["choices"][0]["text"]
text = ""
for event in open(sys.argv[2], encoding="utf-8").read().split("\n\n"):
    if event.startswith("data: {"):
        text += json.loads(event[6:])["choices"][0]["text"]
same = text == whole
first = next((i for i, (a, b) in enumerate(zip(text, whole)) if a != b), min(len(text), len(whole)))
print(f"seed {sys.argv[3]}: {len(whole)} characters, " + ("equal" if same else f"differ from character {first}"))
sys.exit(0 if same else 1)
PY
done
