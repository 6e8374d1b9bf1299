#!/usr/bin/env bash
# Data-parallel serving: `kestrel serve --dp 2` with the cache-aware router against round-robin on a
# shared-prefix workload of several system prompts (BENCHMARKS.md). Usage: dp_router_bench.sh KESTREL MODEL
# [KV tokens per replica]. Environment: PREFIXES (8), PT prefix tokens (400), REQ (64), CONC (8), GEN (16),
# VOCAB (32000); KESTREL_LAUNCHER: an mpirun command line of 2 processes puts each replica on its own rank.
set -euo pipefail
K=$1
M=$2
CTX=${3:-8192}
for policy in cache round-robin; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log=$(mktemp)
  # shellcheck disable=SC2086
  ${KESTREL_LAUNCHER:-} "$K" serve -m "$M" --dp 2 -t 1 --dp-policy $policy -c "$CTX" --port "$port" >"$log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
  for _ in $(seq 1 600); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "== $policy, $CTX KV tokens per replica"
  "$K" bench serve --url "http://127.0.0.1:$port" --workload shared-prefix --prefixes "${PREFIXES:-8}" \
    --prefix-tokens "${PT:-400}" --unique-tokens 15 --requests "${REQ:-64}" --concurrency "${CONC:-8}" \
    --max-tokens "${GEN:-16}" --vocab "${VOCAB:-32000}" | grep -E '^\| (workload|---|shared)'
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^kestrel_(router_requests|replica_prefix_cache_hit)' || true
  kill -INT $pid
  wait $pid || true
  trap - EXIT
  rm -f "$log"
done
