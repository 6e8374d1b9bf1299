#!/usr/bin/env bash
# Prefill/decode disaggregation end to end. Usage: serve_disaggregated.sh KESTREL_BINARY MODEL SLOW_MODEL, with
# KESTREL_LAUNCHER an mpirun command line of P + 1 processes and SERVE_ARGS "--prefill-ranks P ...".
#  1. On MODEL, the disaggregated server's greedy completions with top-5 logprobs match a one-process server's:
#     the same tokens, every logprob within 1e-3 (the first token's logits come from a prefill rank, the
#     others from KV pages it computed), alone and 4 concurrent, a second time from the prefill side's cache.
#     Both servers keep F32 KV: with --tp the sums run in another order, and F16 pages would turn those
#     last-bit differences into other F16 roundings of K and V, which move logits by 1e-3 and more (AVX2).
#  2. On SLOW_MODEL (a prompt takes seconds to prefill), a client that leaves while its long prompt is being
#     prefilled and one that leaves mid-generation leave no KV blocks in use on either side, and the server
#     still answers.
# Prints "disaggregated serving ok" and the PD metrics; exits non-zero on the first failure.
set -euo pipefail
kestrel=$1
model=$2
slow_model=$3
log=$(mktemp)
plain_log=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill ${server:-} ${plain:-} 2>/dev/null || true; rm -f "$log" "$plain_log"' EXIT

KESTREL_LAUNCHER="" start_server "$kestrel" "$plain_log" -m "$model" -t 1 -ctk f32 -ctv f32
plain=$server
plain_port=$port
# shellcheck disable=SC2086
start_server "$kestrel" "$log" -m "$model" -t 1 -ctk f32 -ctv f32 ${SERVE_ARGS:-}
if ! curl -sf "http://127.0.0.1:$port/ready" >/dev/null; then echo "the server did not start:"; cat "$log"; exit 1; fi
python3 - "$plain_port" "$port" <<'PY'
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
plain, split = int(sys.argv[1]), int(sys.argv[2])
prompts = ["Once upon a time", "The little dog", "hello world, said the", "A cat and a bird", "She ran to the big"]
def ask(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 12, "temperature": 0, "ignore_eos": True, "logprobs": 5}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
    return json.load(urllib.request.urlopen(req, timeout=300))["choices"][0]["logprobs"]
want = [ask(plain, p) for p in prompts]
for concurrency in (1, 4, 4):
    with ThreadPoolExecutor(concurrency) as pool:
        got = list(pool.map(lambda p: ask(split, p), prompts))
    for p, w, g in zip(prompts, want, got):
        if w["tokens"] != g["tokens"]:
            sys.exit(f"'{p}' ({concurrency} concurrent): tokens {g['tokens']} instead of {w['tokens']}")
        worst = max(abs(a - b) for a, b in zip(w["token_logprobs"], g["token_logprobs"]))
        for wt, gt in zip(w["top_logprobs"], g["top_logprobs"]):
            for tok, lp in wt.items():
                worst = max(worst, abs(lp - gt.get(tok, -1e9)))
        if worst > 1e-3:
            sys.exit(f"'{p}' ({concurrency} concurrent): logprobs differ by {worst}")
print(f"{len(prompts)} prompts: the same tokens and top-5 logprobs as one process")
PY
curl -s "http://127.0.0.1:$port/metrics" | grep -E '^kestrel_(pd_|prefix_cache_hit)' || true
kill "$server" "$plain"
wait "$server" "$plain" 2>/dev/null || true
server="" plain=""

# shellcheck disable=SC2086
start_server "$kestrel" "$log" -m "$slow_model" -t 1 -b 32 -c 8192 ${SERVE_ARGS:-}
if ! curl -sf "http://127.0.0.1:$port/ready" >/dev/null; then echo "the slow server did not start:"; cat "$log"; exit 1; fi
python3 - "$port" <<'PY'
import json, random, re, socket, sys, time, urllib.request
port = int(sys.argv[1])
def metrics():
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    values = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    return values
def leave(body, after_s=None, until=None, during=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    data = json.dumps(body).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: "
              + str(len(data)).encode() + b"\r\n\r\n" + data)
    if after_s:
        time.sleep(after_s)
    if during:
        during()
    seen = b""
    while until and until not in seen:
        got = s.recv(4096)
        if not got:
            sys.exit(f"the server closed the connection before {until}: {seen[:300]}")
        seen += got
    s.close()
    return seen
def used(m):
    prefill = sum(v for k, v in m.items() if k.startswith("kestrel_pd_prefill_kv_blocks") and 'state="used"' in k)
    return m['kestrel_kv_blocks{state="used"}'], prefill, m["kestrel_requests_running"] + m["kestrel_requests_waiting"]
def wait_idle(what):
    for _ in range(300):
        m = metrics()
        if used(m) == (0, 0, 0):
            return m
        time.sleep(0.1)
    sys.exit(f"{what}: KV blocks still in use (decode, prefill, requests): {used(m)}")
random.seed(1)
long_prompt = [random.randrange(100, 1000) for _ in range(3000)]
before = metrics()
def until_prefilling():  # the prefill rank holds pages for it, rank 0 none yet
    for _ in range(300):
        m = used(metrics())
        if m[1] > 0:
            if m[0] != 0:
                sys.exit(f"while the long prompt was prefilled, rank 0 held KV blocks: {m}")
            return
        time.sleep(0.1)
    sys.exit("the long prompt never held KV blocks on the prefill rank")
leave({"prompt": long_prompt, "max_tokens": 4}, during=until_prefilling)
# While it is prefilled its pages are in use on the prefill rank; once the server sees the client gone
# they go back (the finished chunks stay cached).
m = wait_idle("a client leaving during prefill")
prefilled = sum(v for k, v in m.items() if k.startswith("kestrel_pd_prefill_prompt_tokens_total"))
prefilled_before = sum(v for k, v in before.items() if k.startswith("kestrel_pd_prefill_prompt_tokens_total"))
if prefilled - prefilled_before >= len(long_prompt):
    sys.exit("the long prompt was prefilled to the end: the client left too late to test a cancelled prefill")
leave({"prompt": [5, 6, 7], "max_tokens": 100000, "ignore_eos": True, "stream": True}, until=b"data: {")
wait_idle("a client leaving mid-generation")
body = json.dumps({"prompt": [5, 6, 7, 8], "max_tokens": 3, "temperature": 0, "ignore_eos": True}).encode()
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
r = json.load(urllib.request.urlopen(req, timeout=300))
if r["usage"]["completion_tokens"] != 3:
    sys.exit(f"after the disconnects: {r}")
print("clients leaving during prefill and mid-generation freed KV on both sides")
PY
echo "disaggregated serving ok"
