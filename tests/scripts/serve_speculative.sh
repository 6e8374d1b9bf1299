#!/usr/bin/env bash
# kestrel serve with speculative decoding returns the plain server's greedy completions token for token,
# one request at a time and 8 concurrent, with a draft model and with n-gram drafts, and its /metrics
# count the drafts. Usage: serve_speculative.sh KESTREL_BINARY TARGET DRAFT. Prints one line per setup;
# exits non-zero on the first difference.
set -euo pipefail
kestrel=$1
target=$2
draft=$3
log=$(mktemp)
expected=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill ${server:-} 2>/dev/null || true; rm -f "$log" "$expected"' EXIT

# completions.py PORT CONCURRENCY OUT: 50 greedy completions of seeded token-id prompts (every third
# repeats itself, so n-grams recur) written to OUT as JSON, one list of token ids per prompt.
completions() {
  python3 - "$@" <<'PY'
import json, random, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
port, concurrency, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = random.Random(7)
prompts = []
for i in range(50):
    p = [rng.randrange(3, 250) for _ in range(4 + i % 13)]
    prompts.append(p + p if i % 3 == 0 else p)
def run(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 40, "temperature": 0, "ignore_eos": True, "logprobs": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    choice = json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]
    return choice["logprobs"]["tokens"]
with ThreadPoolExecutor(concurrency) as pool:
    json.dump(list(pool.map(run, prompts)), open(out, "w"))
PY
}

start_server "$kestrel" "$log" -m "$target" -t 2
completions "$port" 1 "$expected"
kill "$server"; wait "$server" 2>/dev/null || true

for setup in "-md $draft --draft-max 4" "--spec-ngram 3 --draft-max 6"; do
  # shellcheck disable=SC2086
  start_server "$kestrel" "$log" -m "$target" -t 2 --spec-max-batch 8 --spec-always $setup
  for concurrency in 1 8; do
    got=$(mktemp)
    completions "$port" "$concurrency" "$got"
    if ! cmp -s "$expected" "$got"; then
      echo "speculative ($setup, $concurrency concurrent): completions differ from the plain server's"
      rm -f "$got"
      exit 1
    fi
    rm -f "$got"
  done
  metrics=$(curl -sf "http://127.0.0.1:$port/metrics")
  drafted=$(echo "$metrics" | awk '$1 == "kestrel_spec_draft_tokens_total" {print $2}')
  accepted=$(echo "$metrics" | awk '$1 == "kestrel_spec_accepted_tokens_total" {print $2}')
  echo "speculative ($setup): identical alone and 8 concurrent; drafted=$drafted accepted=$accepted"
  echo "$metrics" | grep -q '^kestrel_spec_acceptance_by_position{position="0"}' || { echo "no acceptance by position"; exit 1; }
  [ "${accepted%.*}" -gt 0 ] || { echo "no draft was accepted"; exit 1; }
  kill "$server"; wait "$server" 2>/dev/null || true
done
