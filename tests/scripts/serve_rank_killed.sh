#!/usr/bin/env bash
# A split server whose follower rank is killed mid-request ends the whole job (no hang) with a message
# naming the rank, and the client's request fails instead of waiting forever. Usage: serve_rank_killed.sh
# KESTREL_BINARY MODEL (run with KESTREL_LAUNCHER set to an mpirun command line of 2 processes and SERVE_ARGS
# to the split flags). Prints "ended rc=N" and the launcher's last lines.
set -euo pipefail
kestrel=$1
model=$2
log=$(mktemp)
source "$(dirname "$0")/start_server.sh"
trap 'kill -9 ${server:-} 2>/dev/null || true; rm -f "$log"' EXIT
# shellcheck disable=SC2086
start_server "$kestrel" "$log" -m "$model" ${SERVE_ARGS:-}
curl -sf "http://127.0.0.1:$port/ready" >/dev/null || { echo "the server did not start"; cat "$log"; exit 1; }
curl -s -m 120 "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
  -d '{"prompt": "Once", "max_tokens": 100000, "ignore_eos": true, "stream": true}' >/dev/null &
client=$!
sleep 1
# The last rank of this job: found among the launcher's descendants by the rank Open MPI gives it, never by
# name (other tests may run servers of the same binary and model at the same time).
descendants() { local child; for child in $(pgrep -P "$1"); do echo "$child"; descendants "$child"; done; }
follower=""
for pid in $(descendants "$server"); do
  rank=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
  size=$(tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_SIZE=//p')
  if [ -n "$rank" ] && [ "$rank" = "$((size - 1))" ]; then follower=$pid; fi
done
[ -n "$follower" ] || { echo "no follower rank found under the launcher (pid $server)"; exit 1; }
kill -9 "$follower"
for _ in $(seq 1 600); do  # up to 60 s
  kill -0 "$server" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$server" 2>/dev/null; then echo "the job still runs 60 s after a rank was killed"; exit 1; fi
set +e
wait "$server"
echo "ended rc=$?"
wait "$client"
echo "client rc=$?"
tail -n 4 "$log"
