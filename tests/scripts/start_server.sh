# Sourced by the test scripts that drive a real `kestrel serve`:
#   start_server KESTREL_BINARY LOG ARGS... -> starts `kestrel serve ARGS --port PORT` on a free port with its
#   output in LOG, waits (up to 60 s: the machine may be busy) until /ready answers, and sets $port and $server (the pid).
#   With KESTREL_LAUNCHER set (e.g. an mpirun command line), the server runs under it.
start_server() {
  local kestrel=$1 log=$2
  shift 2
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  ${KESTREL_LAUNCHER:-} "$kestrel" serve "$@" --port "$port" >"$log" 2>&1 &
  server=$!
  for _ in $(seq 1 600); do
    curl -sf "http://127.0.0.1:$port/ready" >/dev/null 2>&1 && break
    sleep 0.1
  done
}
