#!/usr/bin/env bash
# spindle-http against curl (TAP, tests/scan/tap.sh): two servers on free
# loopback ports (--port 0; the port is read from the server's first line),
# one with --root over a generated tree, one without. Checks status codes
# (200, 400, 403, 404, 405, 413), bodies byte-identical to the files (text,
# binary, a multi-MB file, a name with a space, an index.html), HEAD,
# keep-alive reuse (curl -v over two URLs shows "Re-using existing
# connection"), HTTP/1.0 with and without keep-alive, pipelined requests
# over one raw connection, a bounded wrk smoke run when wrk is installed
# (no socket errors, no non-2xx), a port in use (exit 1), a bad flag
# (exit 2), and SIGTERM (exit 0). As root the servers run as nobody
# (setpriv), so that an unreadable file is unreadable to them (403).
# Servers are killed on exit (trap). Loopback only.
#
# Usage: http_vs_curl.sh SPINDLE_HTTP
set -u
HTTP=$1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scan/tap.sh
source "$HERE/../scan/tap.sh"

command -v curl >/dev/null || {
  echo "1..0 # SKIP curl is not installed (tools/install-deps installs it)"
  exit 0
}

WORK=$(mktemp -d /tmp/http_vs_curl.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  chmod -R u+rwX "$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"

# ---------------------------------------------------------------- the tree
ROOT=$WORK/root
mkdir -p "$ROOT/sub" "$ROOT/empty_dir" "$WORK/outside"
printf 'hello, spindle\n' >"$ROOT/hello.txt"
printf '<p>root index</p>\n' >"$ROOT/index.html"
printf '<p>sub index</p>\n' >"$ROOT/sub/index.html"
printf 'spaced\n' >"$ROOT/with space.txt"
: >"$ROOT/empty.txt"
python3 -c 'import sys; sys.stdout.buffer.write(bytes(range(256)) * 777)' >"$ROOT/binary.bin"
head -c 5000001 /dev/urandom >"$ROOT/big.bin"
printf 'secret\n' >"$WORK/outside/secret.txt"
ln -s "$WORK/outside/secret.txt" "$ROOT/escape.txt"
ln -s hello.txt "$ROOT/link.txt"
printf 'locked\n' >"$ROOT/locked.txt"
chmod 000 "$ROOT/locked.txt"
chmod -R go+rX "$ROOT" "$WORK/outside"
chmod 000 "$ROOT/locked.txt"
head -c 1200000 /dev/zero >"$WORK/upload.bin"

RUNAS=()
AS_NOBODY=0
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$HTTP" --version >/dev/null 2>&1; then
    RUNAS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    AS_NOBODY=1
  fi
else
  AS_NOBODY=1  # unprivileged already
fi

# start_server NAME ARGS...: starts spindle-http on a free loopback port;
# sets SERVER_PID and SERVER_PORT.
start_server() {
  local name=$1
  shift
  "${RUNAS[@]}" "$HTTP" --port 0 --workers 2 "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
  local pid=$!
  PIDS+=("$pid")
  local port=""
  for _ in $(seq 100); do
    port=$(grep -o '127\.0\.0\.1:[0-9]*' "$WORK/$name.out" 2>/dev/null | head -n1 | cut -d: -f2)
    [ -n "$port" ] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.05
  done
  [ -n "$port" ] || bail "spindle-http $* did not start: $(cat "$WORK/$name.err")"
  SERVER_PID=$pid
  SERVER_PORT=$port
}

start_server files --root "$ROOT"
files_PID=$SERVER_PID
files_PORT=$SERVER_PORT
start_server hello
hello_PID=$SERVER_PID
hello_PORT=$SERVER_PORT
F=http://127.0.0.1:$files_PORT
H=http://127.0.0.1:$hello_PORT
note "file server on $F (pid $files_PID), hello server on $H"

# check_status WHAT EXPECTED CURL-ARGS...
check_status() {
  local what=$1 want=$2
  shift 2
  local got
  got=$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@")
  if [ "$got" = "$want" ]; then ok "$what: $want"; else ko "$what: status $got, expected $want"; fi
}

# check_body WHAT FILE URL: GET answers 200 and the file's bytes.
check_body() {
  local what=$1 file=$2 url=$3
  local code
  code=$(curl -s -o "$WORK/body" -w '%{http_code}' --max-time 20 "$url")
  if [ "$code" = 200 ] && cmp -s "$WORK/body" "$file"; then
    ok "$what: 200, $(stat -c %s "$file") bytes identical"
  else
    ko "$what: status $code, $(stat -c %s "$WORK/body" 2>/dev/null) bytes, differs from $file"
  fi
}

# raw PORT REQUEST: sends REQUEST over one connection (bash /dev/tcp) and
# prints everything the server answers until it closes.
raw() {
  timeout 10 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$1 && printf "%b" "$2" >&3 && cat <&3' _ "$1" "$2"
}

# ---------------------------------------------------------------- bodies
body=$(curl -s --max-time 10 "$H/")
[ "$body" = "Hello, World!" ] && ok "GET / without --root: Hello, World!" ||
  ko "GET / without --root: '$body'"
headers=$(curl -s -D - -o /dev/null --max-time 10 "$H/" | tr -d '\r')
grep -qx 'Content-Length: 14' <<<"$headers" && grep -qx 'Content-Type: text/plain; charset=utf-8' <<<"$headers" &&
  grep -q '^Date: ' <<<"$headers" && ok "GET /: Content-Length 14, text/plain, Date" ||
  ko "GET / headers: $headers"
check_status "GET /other without --root" 404 "$H/other"

check_body "GET /hello.txt" "$ROOT/hello.txt" "$F/hello.txt"
check_body "GET / (index.html)" "$ROOT/index.html" "$F/"
check_body "GET /sub/ (its index.html)" "$ROOT/sub/index.html" "$F/sub/"
check_body "GET a binary file" "$ROOT/binary.bin" "$F/binary.bin"
check_body "GET a 5 MB file" "$ROOT/big.bin" "$F/big.bin"
check_body "GET an empty file" "$ROOT/empty.txt" "$F/empty.txt"
check_body "GET a name with a space" "$ROOT/with space.txt" "$F/with%20space.txt"
check_body "GET a symlink inside the root" "$ROOT/hello.txt" "$F/link.txt"
check_body "GET with a query" "$ROOT/hello.txt" "$F/hello.txt?x=1"
type=$(curl -s -o /dev/null -w '%{content_type}' "$F/index.html")
[ "$type" = "text/html; charset=utf-8" ] && ok "index.html is text/html" || ko "index.html type: $type"

# ---------------------------------------------------------------- status codes
check_status "missing file" 404 "$F/missing.txt"
check_status "directory without index.html" 404 "$F/empty_dir/"
check_status "symlink out of the root" 403 "$F/escape.txt"
check_status "../ out of the root" 403 --path-as-is "$F/../outside/secret.txt"
check_status "%2e%2e out of the root" 403 --path-as-is "$F/%2e%2e/outside/secret.txt"
if [ $AS_NOBODY -eq 1 ]; then
  check_status "unreadable file" 403 "$F/locked.txt"
else
  skip "unreadable file: root, and cannot run as nobody (setpriv)"
fi
check_status "POST" 405 -X POST -d 'a=b' "$F/hello.txt"
check_status "DELETE" 405 -X DELETE "$F/hello.txt"
allow=$(curl -s -D - -o /dev/null -X PUT -d x "$F/hello.txt" | tr -d '\r' | grep -i '^Allow:')
[ "$allow" = "Allow: GET, HEAD" ] && ok "405 carries Allow: GET, HEAD" || ko "405 Allow: '$allow'"
check_status "a body over --max-body" 413 --data-binary "@$WORK/upload.bin" "$F/hello.txt"
answer=$(raw "$files_PORT" 'GARBAGE\r\n\r\nGET / HTTP/1.1\r\nHost: h\r\n\r\n' | tr -d '\r')
if [ "$(head -n1 <<<"$answer")" = "HTTP/1.1 400 Bad Request" ] && grep -qx 'Connection: close' <<<"$answer" &&
  [ "$(grep -c '^HTTP/1.1' <<<"$answer")" = 1 ]; then
  ok "malformed request: 400, then the connection closes"
else
  ko "malformed request answered: $answer"
fi
answer=$(raw "$files_PORT" 'GET / HTTP/1.1\r\n\r\n' | head -n1 | tr -d '\r')
[ "$answer" = "HTTP/1.1 400 Bad Request" ] && ok "HTTP/1.1 without Host: 400" || ko "no Host: $answer"

# ---------------------------------------------------------------- HEAD
raw "$files_PORT" 'HEAD /big.bin HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n' >"$WORK/head"
if grep -q $'^Content-Length: 5000001\r$' "$WORK/head" &&
  [ "$(tail -c 4 "$WORK/head" | od -An -tx1 | tr -d ' \n')" = 0d0a0d0a ]; then
  ok "HEAD: Content-Length of the file, no body"
else
  ko "HEAD answered $(stat -c %s "$WORK/head") bytes: $(head -c 300 "$WORK/head")"
fi
check_status "curl -I" 200 -I "$F/hello.txt"

# ---------------------------------------------------------------- keep-alive
curl -sv -o "$WORK/ka1" -o "$WORK/ka2" "$F/hello.txt" "$F/binary.bin" 2>"$WORK/ka.log"
if grep -q 'Re-using existing connection' "$WORK/ka.log" && cmp -s "$WORK/ka1" "$ROOT/hello.txt" &&
  cmp -s "$WORK/ka2" "$ROOT/binary.bin"; then
  ok "HTTP/1.1 keep-alive: the second request re-uses the connection"
else
  ko "HTTP/1.1 keep-alive: $(grep -i 'connection' "$WORK/ka.log" | head -n 5)"
fi
curl -sv -d 'discard=me' -o /dev/null "$F/hello.txt" --next -o "$WORK/ka3" "$F/hello.txt" \
  2>"$WORK/ka.log"
if grep -q '< HTTP/1.1 405' "$WORK/ka.log" && grep -q 'Re-using existing connection' "$WORK/ka.log" &&
  cmp -s "$WORK/ka3" "$ROOT/hello.txt"; then
  ok "a request body is read and discarded: the connection serves the next request"
else
  ko "after a body: $(grep -i 'connection\|< HTTP' "$WORK/ka.log" | head -n 5)"
fi
curl -sv -0 -o /dev/null "$F/hello.txt" -o /dev/null "$F/hello.txt" 2>"$WORK/h10.log"
if grep -q '< HTTP/1.1 200' "$WORK/h10.log" && grep -qi '< Connection: close' "$WORK/h10.log" &&
  ! grep -q 'Re-using existing connection' "$WORK/h10.log"; then
  ok "HTTP/1.0: Connection: close, no re-use"
else
  ko "HTTP/1.0: $(grep -i 'connection\|< HTTP' "$WORK/h10.log" | head -n 5)"
fi
curl -sv -0 -H 'Connection: keep-alive' -o /dev/null "$F/hello.txt" -o "$WORK/ka4" "$F/hello.txt" \
  2>"$WORK/h10.log"
if grep -qi '< Connection: keep-alive' "$WORK/h10.log" &&
  grep -q 'Re-using existing connection' "$WORK/h10.log" && cmp -s "$WORK/ka4" "$ROOT/hello.txt"; then
  ok "HTTP/1.0 with Connection: keep-alive: re-used"
else
  ko "HTTP/1.0 keep-alive: $(grep -i 'connection\|< HTTP' "$WORK/h10.log" | head -n 5)"
fi
curl -sv -H 'Connection: close' -o /dev/null "$F/hello.txt" -o /dev/null "$F/hello.txt" \
  2>"$WORK/close.log"
if grep -qi '< Connection: close' "$WORK/close.log" && ! grep -q 'Re-using' "$WORK/close.log"; then
  ok "Connection: close is honoured"
else
  ko "Connection: close: $(grep -i 'connection' "$WORK/close.log" | head -n 5)"
fi

# ---------------------------------------------------------------- pipelining
answer=$(raw "$files_PORT" 'GET /hello.txt HTTP/1.1\r\nHost: h\r\n\r\nGET /missing HTTP/1.1\r\nHost: h\r\n\r\nGET /link.txt HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n' | tr -d '\r')
statuses=$(grep '^HTTP/1.1' <<<"$answer" | cut -d' ' -f2 | tr '\n' ' ')
bodies=$(grep -c '^hello, spindle$' <<<"$answer")
if [ "$statuses" = "200 404 200 " ] && [ "$bodies" = 2 ]; then
  ok "three pipelined requests answered in order"
else
  ko "pipelined: statuses '$statuses', $bodies bodies"
fi

# ---------------------------------------------------------------- wrk
if command -v wrk >/dev/null; then
  timeout 20 wrk -t1 -c16 -d1s "$H/" >"$WORK/wrk.log" 2>&1
  rate=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.log")
  if [ -n "$rate" ] && ! grep -q 'Socket errors\|Non-2xx' "$WORK/wrk.log" &&
    [ "${rate%%.*}" -gt 0 ]; then
    ok "wrk -t1 -c16 -d1s: $rate requests/s, no socket errors, no non-2xx"
  else
    ko "wrk: $(tr '\n' ' ' <"$WORK/wrk.log")"
  fi
else
  skip "wrk is not installed (tools/install-bench-deps installs it)"
fi

# ---------------------------------------------------------------- process
"$HTTP" --port "$hello_PORT" >/dev/null 2>"$WORK/inuse.err"
rc=$?
[ $rc -eq 1 ] && grep -q 'Address already in use' "$WORK/inuse.err" &&
  ok "a port in use: exit 1, $(cat "$WORK/inuse.err")" || ko "port in use: exit $rc, $(cat "$WORK/inuse.err")"
"$HTTP" --no-such-flag >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok "a bad flag: exit 2" || ko "a bad flag: exit $rc"
"$HTTP" --port 70000 >/dev/null 2>&1
rc=$?
[ $rc -eq 2 ] && ok "--port 70000: exit 2" || ko "--port 70000: exit $rc"

# A connection left open (keep-alive, idle) does not hold the shutdown up.
exec 4<>"/dev/tcp/127.0.0.1/$files_PORT"
printf 'GET /hello.txt HTTP/1.1\r\nHost: h\r\n\r\n' >&4
# stop_server NAME PID: SIGTERM, then the exit status must be 0.
stop_server() {
  kill -TERM "$2"
  timeout 10 tail --pid="$2" -f /dev/null
  wait "$2"
  local rc=$?
  [ $rc -eq 0 ] && ok "SIGTERM: the $1 server exits 0" ||
    ko "SIGTERM: the $1 server exits $rc: $(cat "$WORK/$1.err")"
}
stop_server files "$files_PID"
stop_server hello "$hello_PID"
exec 4>&-
if [ -s "$WORK/files.err" ] || [ -s "$WORK/hello.err" ]; then
  ko "the servers wrote to stderr: $(cat "$WORK/files.err" "$WORK/hello.err" | head -c 2000)"
else
  ok "nothing on stderr"
fi

tap_end
