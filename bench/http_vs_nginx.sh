#!/usr/bin/env bash
# spindle-http vs nginx on "GET / -> Hello, World!\n", side by side with wrk
# (informal: one run each, loopback, both servers with 2 workers).
#
# Usage: bench/http_vs_nginx.sh [BUILD_DIR] [SECONDS] [CONNECTIONS]
#   defaults: build, 5, 64. Needs wrk (tools/install-bench-deps); nginx
#   (Debian's nginx-light) is compared when installed. The nginx
#   configuration is generated in a temporary directory: worker_processes 2,
#   access_log off, `return 200 "Hello, World!\n";`.
set -euo pipefail
build=${1:-build}
seconds=${2:-5}
connections=${3:-64}
http=$build/examples/spindle-http
[ -x "$http" ] || { echo "no $http: build it first (ninja -C $build)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is not installed (tools/install-bench-deps)" >&2; exit 1; }

work=$(mktemp -d /tmp/http_vs_nginx.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# run NAME URL: one wrk run; prints "NAME  requests/s  (errors)".
run() {
  wrk -t1 -c"$connections" -d"${seconds}s" "$2" >"$work/$1.wrk" 2>&1
  printf '%-28s %12s requests/s  %s\n' "$1" "$(awk '/^Requests\/sec:/ {print $2}' "$work/$1.wrk")" \
    "$(grep -E 'Socket errors|Non-2xx' "$work/$1.wrk" | tr '\n' ' ')"
}

"$http" --port 0 --workers 2 >"$work/http.out" 2>&1 &
pids+=($!)
port=""
for _ in $(seq 100); do
  port=$(grep -o '127\.0\.0\.1:[0-9]*' "$work/http.out" | cut -d: -f2 || true)
  [ -n "$port" ] && break
  sleep 0.05
done
[ -n "$port" ] || { cat "$work/http.out" >&2; exit 1; }
echo "# wrk -t1 -c$connections -d${seconds}s, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "spindle-http (--workers 2)" "http://127.0.0.1:$port/"

if command -v nginx >/dev/null; then
  nginx_port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  cat >"$work/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx.error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000000;
  server {
    listen 127.0.0.1:$nginx_port;
    location / { default_type text/plain; return 200 "Hello, World!\n"; }
  }
}
CONF
  nginx -c "$work/nginx.conf" -p "$work" &
  pids+=($!)
  sleep 0.5
  run "nginx (worker_processes 2)" "http://127.0.0.1:$nginx_port/"
else
  echo "# nginx is not installed (apt-get install nginx-light): not compared"
fi
