#!/usr/bin/env bash
# Prefill/decode disaggregation against colocated serving on one machine, the same cores each way: a mixed
# workload of short prompts that decode and long prompts that arrive among them (BENCHMARKS.md).
# Colocated: one `kestrel serve -t 2`; disaggregated: `mpirun -np 2 kestrel serve --prefill-ranks 1 -t 1`
# (a prefill rank and a decode rank, one core each). Usage: pd_bench.sh KESTREL MODEL. Environment: REQ (48),
# CONC (8), GEN (64), LONG (1024 tokens), SHARE (0.25 of requests long), BATCH (-b, 256), VOCAB (32000).
set -euo pipefail
K=$1
M=$2
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpi="mpirun --oversubscribe --bind-to none --mca btl self,vader --mca btl_vader_single_copy_mechanism none -np 2"
for mode in colocated disaggregated; do
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log=$(mktemp)
  if [ $mode = colocated ]; then
    "$K" serve -m "$M" -t 2 -b "${BATCH:-256}" --port "$port" >"$log" 2>&1 &
  else
    $mpi "$K" serve -m "$M" -t 1 -b "${BATCH:-256}" --prefill-ranks 1 --port "$port" >"$log" 2>&1 &
  fi
  pid=$!
  trap 'kill $pid 2>/dev/null || true; rm -f "$log"' EXIT
  for _ in $(seq 1 1200); do curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break; sleep 0.1; done
  echo "== $mode"
  "$K" bench serve --url "http://127.0.0.1:$port" --workload unique --unique-tokens 16 --long-share "${SHARE:-0.25}" \
    --long-tokens "${LONG:-1024}" --requests "${REQ:-48}" --concurrency "${CONC:-8}" --max-tokens "${GEN:-64}" \
    --vocab "${VOCAB:-32000}" | grep -E '^\| (workload|---|unique)'
  curl -s "http://127.0.0.1:$port/metrics" | grep -E '^kestrel_(pd_(prefill_time|decode_time|kv_transfer|prefill_compute)|prompt_tokens_total)' || true
  kill -INT $pid
  wait $pid || true
  rm -f "$log"
done
