#!/usr/bin/env bash
# kestrel serve returns the greedy text `kestrel generate` prints for the same model file, prompt by prompt,
# one request at a time and 6 concurrent (continuous batching). Usage: serve_equals_generate.sh
# KESTREL_BINARY MODEL [ARGS...]: ARGS go to both (e.g. KV cache types). SERVE_ARGS (environment) go to the
# server alone, and it runs under KESTREL_LAUNCHER when set (tensor parallel: the launcher is mpirun and
# SERVE_ARGS has --tp). Prints one line; exits non-zero on the first difference.
set -euo pipefail
kestrel=$1
model=$2
shift 2
log=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$log"' EXIT
prompts=("Once upon a time" "The little dog" "hello world, said the" "A cat and a bird" "She ran to" "In the morning")
expected=()
for p in "${prompts[@]}"; do
  expected+=("$("$kestrel" generate -m "$model" -p "$p" -n 24 --temp 0 --ignore-eos --no-display-prompt -t 2 "$@" 2>/dev/null)")
done
# shellcheck disable=SC2086
start_server "$kestrel" "$log" -m "$model" -t 2 "$@" ${SERVE_ARGS:-}
if ! curl -sf "http://127.0.0.1:$port/ready" >/dev/null; then echo "the server did not start:"; cat "$log"; exit 1; fi
for concurrency in 1 6; do
  python3 - "$port" "$concurrency" "${prompts[@]}" >"$log.got" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
port, concurrency, prompts = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
def run(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 24, "temperature": 0, "ignore_eos": True}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["text"]
with ThreadPoolExecutor(concurrency) as pool:
    print(json.dumps(list(pool.map(run, prompts))))
PY
  for i in "${!prompts[@]}"; do
    got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[int(sys.argv[2])], end="")' "$log.got" "$i")
    if [ "$got" != "${expected[$i]}" ]; then
      echo "prompt '${prompts[$i]}' ($concurrency concurrent): serve gave '$got', generate '${expected[$i]}'"
      rm -f "$log.got"
      exit 1
    fi
  done
done
rm -f "$log.got"
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^kestrel_(tensor_parallel|pipeline|expert_parallel|context_parallel|expert_rank|dist|router|replica|pd)_|^kestrel_prefix_cache_hit' || true
echo "serve equals generate on ${#prompts[@]} prompts, alone and 6 concurrent"
