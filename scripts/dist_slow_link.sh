#!/usr/bin/env bash
# How a split model's step time grows on a slower link (docs/distributed.md, BENCHMARKS.md): runs
# `kestrel generate` split over 2 processes inside a network namespace of its own, the ranks talking over
# that namespace's loopback with Open MPI's TCP transport, the loopback rate-limited by a tbf qdisc
# (none, then each RATE; BURST bytes of credit, 32kb by default: a link, not a bucket that refills while
# the ranks compute). Prints decode ms per step for each. Needs root (ip netns, tc); touches nothing
# outside the namespace it creates. Usage: dist_slow_link.sh KESTREL MODEL "SPLIT FLAGS" [RATE...]
# e.g. dist_slow_link.sh build/kestrel tl.gguf "--tp 2" 1gbit 200mbit 50mbit
set -euo pipefail
kestrel=$(realpath "$1")
model=$(realpath "$2")
split=$3
shift 3
rates=("none" "$@")
ns=kestrel_slow_$$
ip netns add "$ns"
trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
# An Ethernet-sized MTU (the loopback's 64 KiB packets would not fit the token bucket's burst).
ip netns exec "$ns" ip link set lo mtu 1500 up
prompt=$(printf 'Once upon a time there was a little girl who lived in a village. %.0s' {1..4})
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {  # n tokens -> "generation: N tokens in S s" line
  ip netns exec "$ns" mpirun --oversubscribe --bind-to none --mca btl self,tcp --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo -np 2 "$kestrel" generate -m "$model" -p "$prompt" -n "$1" --temp 0 --ignore-eos -t 1 \
    $split 2>&1 >/dev/null | grep -E "^generation:|^rank 0"
}
for rate in "${rates[@]}"; do
  ip netns exec "$ns" tc qdisc del dev lo root 2>/dev/null || true
  [ "$rate" != none ] && ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst "${BURST:-32kb}" latency 100ms
  out=$(run 65)
  secs=$(echo "$out" | sed -n 's/^generation: \([0-9]*\) tokens in \([0-9.]*\) s.*/\2/p')
  echo "rate=$rate decode_ms_per_step=$(python3 -c "print(round($secs / 64 * 1000, 2))") | $(echo "$out" | grep '^rank 0')"
done
