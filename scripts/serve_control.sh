# Sourced by the serving benchmarks: serve MODEL EXTRA_FLAGS... starts `kestrel serve` (2 threads, 8192 KV
# tokens, 8 in flight) on $port and waits until /ready answers (exits if it never does), setting $server;
# stop ends it. Needs $port and $url.
serve() {
  local model=$1
  shift
  ./build/kestrel serve -m "$model" --port "$port" -t 2 -c 8192 --parallel 8 "$@" >/dev/null 2>&1 &
  server=$!
  for _ in $(seq 1 600); do curl -sf "$url/ready" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "server did not become ready" >&2
  exit 1
}
stop() { kill -TERM "$server"; wait "$server" || true; }
trap 'kill ${server:-} 2>/dev/null || true' EXIT
