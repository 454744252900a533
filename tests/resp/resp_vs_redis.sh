#!/bin/bash
# resp_vs_redis.sh SPINDLE_RESP_BINARY
#
# spindle-resp against redis-server 7.0, on loopback only: both servers get
# the same commands through redis-cli (one command per invocation, then a
# script of many commands on one connection) and must print the same bytes
# with the same exit status: replies, errors (unknown commands, arity, INCR
# on a non-integer and past 2^63-1, SET options), binary values (NUL, CR,
# LF, bytes >= 0x80), the empty string, a 1 MiB random value, 2,000 keys.
# Raw exchanges over a socket check inline requests and protocol errors
# byte for byte (the reply, then the server closing the connection). Then
# redis-benchmark (ping, set, get; 20,000 requests, 20 clients; without and
# with -P 16 pipelining) runs against spindle-resp under a timeout and must
# report every test with no error; a bad command line and a port in use
# give exit statuses 2 and 1; SIGTERM and SIGINT (with clients connected)
# stop spindle-resp with status 0, SIGTERM stops redis-server with 0.
#
# redis-server is started as `redis-server --port P --save '' --appendonly
# no --bind 127.0.0.1` on a free port; spindle-resp with --port 0 (it
# prints the port it got). Every server is killed at exit (trap). Without
# redis-server, redis-cli or redis-benchmark the test is skipped. TAP output
# (tests/scan/tap.sh).
set -u
export LC_ALL=C

RESP=${1:?usage: resp_vs_redis.sh SPINDLE_RESP_BINARY}
RESP=$(cd "$(dirname "$RESP")" && pwd)/$(basename "$RESP")
HERE=$(cd "$(dirname "$0")" && pwd)

# shellcheck source=../scan/tap.sh
source "$HERE/../scan/tap.sh"

for tool in redis-server redis-cli redis-benchmark python3 timeout; do
  if ! command -v "$tool" >/dev/null; then
    skip "$tool is not installed (tools/install-deps installs it)"
    tap_end
    exit $?
  fi
done

WORK=$(mktemp -d /tmp/resp_vs_redis.XXXXXX)
PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

# free_port: a loopback TCP port nobody listens on now.
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# start_resp NAME ARGS...: starts spindle-resp on a free port with its
# stderr in $WORK/NAME.err; sets RESP_PID and RESP_PORT.
start_resp() {
  local name=$1
  shift
  "$RESP" --port 0 "$@" 2>"$WORK/$name.err" &
  RESP_PID=$!
  PIDS+=("$RESP_PID")
  RESP_PORT=
  for _ in $(seq 1 200); do
    RESP_PORT=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\).*/\1/p' "$WORK/$name.err")
    [ -n "$RESP_PORT" ] && return 0
    kill -0 "$RESP_PID" 2>/dev/null || break
    sleep 0.05
  done
  return 1
}

# wait_exit PID SECONDS: waits for PID (a child of this shell) to end and
# sets EXIT_STATUS to its exit status, or to "timeout" (and kills it).
wait_exit() {
  local pid=$1
  for _ in $(seq 1 $(($2 * 20))); do
    if ! kill -0 "$pid" 2>/dev/null; then
      wait "$pid"
      EXIT_STATUS=$?
      return
    fi
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null
  EXIT_STATUS=timeout
}

start_resp main --workers 2 || bail "spindle-resp did not start: $(cat "$WORK/main.err")"
note "$(cat "$WORK/main.err")"
SPINDLE_PORT=$RESP_PORT
SPINDLE_PID=$RESP_PID

REDIS_PORT=$(free_port)
redis-server --port "$REDIS_PORT" --save '' --appendonly no --bind 127.0.0.1 \
  --dir "$WORK" --logfile "$WORK/redis.log" &
REDIS_PID=$!
PIDS+=("$REDIS_PID")
for _ in $(seq 1 100); do
  [ "$(timeout 5 redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] && break
  sleep 0.05
done
[ "$(timeout 5 redis-cli -p "$REDIS_PORT" PING 2>/dev/null)" = PONG ] ||
  bail "redis-server did not start: $(tail -5 "$WORK/redis.log")"
note "redis-server $(redis-server --version | sed 's/.*v=\([^ ]*\).*/\1/') on port $REDIS_PORT," \
  "spindle-resp on port $SPINDLE_PORT"

# same WHAT [-x FILE] ARGS...: runs `redis-cli ARGS...` against both
# servers (with FILE on stdin for -x) and compares stdout and exit status.
n_same=0
same() {
  local what=$1 input=/dev/null
  shift
  if [ "$1" = "-x" ]; then
    input=$2
    shift 2
    set -- -x "$@"
  fi
  n_same=$((n_same + 1))
  local a=$WORK/same.$n_same.spindle b=$WORK/same.$n_same.redis ra rb
  timeout 30 redis-cli -p "$SPINDLE_PORT" "$@" <"$input" >"$a" 2>&1
  ra=$?
  timeout 30 redis-cli -p "$REDIS_PORT" "$@" <"$input" >"$b" 2>&1
  rb=$?
  if [ $ra = $rb ] && cmp -s "$a" "$b"; then
    ok "$what"
  else
    ko "$what: spindle-resp (status $ra) and redis-server (status $rb) differ"
    diff <(od -c "$a" | head -20) <(od -c "$b" | head -20) | sed 's/^/# /' | head -20
  fi
}

same "PING" PING
same "PING message" PING "hello world"
same "PING with two arguments" PING a b
same "ECHO" ECHO "some text"
same "ECHO with no argument" ECHO
same "GET of a missing key" GET missing
same "SET" SET k1 v1
same "GET" GET k1
same "SET to the empty string" SET empty ""
same "GET of the empty string" GET empty
same "EXISTS of several keys, one twice" EXISTS k1 k1 missing empty
same "SET NX on an existing key" SET k1 v2 NX
same "SET XX on a missing key" SET k2 v2 XX
same "SET XX GET" SET k1 v3 XX GET
same "SET NX XX" SET k1 v4 NX XX
same "SET with an unknown option" SET k1 v4 BOGUS
same "SET with one argument" SET k1
same "GET with two arguments" GET k1 k2
same "lower- and mixed-case names" sEt k3 MiXeD
same "GET of a mixed-case value" get k3
same "DEL of several keys" DEL k1 k3 missing k1
same "DEL with no key" DEL
same "EXISTS with no key" EXISTS
same "INCR of a missing key" INCR counter
same "INCR" INCR counter
same "DECR" DECR counter
same "INCRBY" INCRBY counter 41
same "DECRBY" DECRBY counter -100
same "GET of a counter" GET counter
same "SET a non-integer" SET text "12 monkeys"
same "INCR of a non-integer" INCR text
same "INCR of the empty string" INCR empty
same "INCRBY by a non-integer" INCRBY counter 1.5
same "SET a leading zero" SET zero 007
same "INCR of a leading zero" INCR zero
same "SET 2^63-2" SET big 9223372036854775806
same "INCR to 2^63-1" INCR big
same "INCR past 2^63-1" INCR big
same "DECRBY -2^63" DECRBY big -9223372036854775808
same "SET -2^63" SET small -9223372036854775808
same "DECR past -2^63" DECR small
same "INCR with no key" INCR
same "unknown command" FOO
same "unknown command with arguments" FOO bar "baz qux"
same "unknown command, long arguments" NOPE "$(printf 'a%.0s' $(seq 1 100))" \
  "$(printf 'b%.0s' $(seq 1 100))" c
same "unknown command with CR and LF" $'FO\r\nO' $'a\nb'

# Binary values: NUL, CR, LF, bytes >= 0x80, through redis-cli -x (stdin as
# the last argument, binary safe).
printf 'a\0b\r\n\xff\x80 "q" \\x00' >"$WORK/binary"
same "SET of a binary value" -x "$WORK/binary" SET bin
same "GET of a binary value" GET bin
same "binary key" SET $'k\xff\x01ey' $'v\tal\xfe'
same "GET of a binary key" GET $'k\xff\x01ey'
head -c $((1024 * 1024)) /dev/urandom >"$WORK/large"
same "SET of a 1 MiB value" -x "$WORK/large" SET large
same "GET of a 1 MiB value" GET large
timeout 30 redis-cli -p "$SPINDLE_PORT" GET large >"$WORK/large.got"
if { cat "$WORK/large"; echo; } | cmp -s - "$WORK/large.got"; then
  ok "the 1 MiB value comes back intact"
else
  ko "the 1 MiB value differs from what was stored"
fi
same "ECHO of a 1 MiB value" -x "$WORK/large" ECHO

# Many keys on one connection: redis-cli reads the commands from stdin.
python3 - "$WORK/script" <<'PY'
import sys
with open(sys.argv[1], "w") as f:
    for k in range(2000):
        f.write(f"SET key:{k} value-{k * 7919}\n")
    for k in range(0, 2000, 3):
        f.write(f"INCR key:{k}\n")
        f.write(f"DEL key:{k}\n")
        f.write(f"INCR key:{k}\n")
    for k in range(2000):
        f.write(f"GET key:{k}\n")
    f.write("EXISTS " + " ".join(f"key:{k}" for k in range(0, 2000, 7)) + "\n")
    f.write("DEL " + " ".join(f"key:{k}" for k in range(0, 2000, 2)) + "\n")
    f.write("EXISTS " + " ".join(f"key:{k}" for k in range(2000)) + "\n")
PY
same "2,000 keys: SET, INCR, DEL, GET, EXISTS on one connection" -x "$WORK/script"

# raw PORT INPUT: sends INPUT (Python bytes literal) on one connection and
# prints what comes back until the server closes it or 2 s pass, then
# "[closed]" or "[open]".
raw() {
  python3 - "$1" "$2" <<'PY'
import ast, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(ast.literal_eval(sys.argv[2]))
s.settimeout(2)
got, state = b"", "[open]"
try:
    while True:
        chunk = s.recv(65536)
        if not chunk:
            state = "[closed]"
            break
        got += chunk
except (socket.timeout, ConnectionResetError):
    pass
sys.stdout.write(repr(got) + " " + state + "\n")
PY
}

# same_raw WHAT INPUT: both servers answer INPUT with the same bytes and
# both close the connection, or both keep it open.
same_raw() {
  local a b
  a=$(raw "$SPINDLE_PORT" "$2")
  b=$(raw "$REDIS_PORT" "$2")
  if [ "$a" = "$b" ]; then
    ok "raw: $1"
  else
    ko "raw: $1: spindle-resp: $a; redis-server: $b"
  fi
}

same_raw "inline commands and a pipelined batch" \
  "b'PING\\r\\nECHO \"a b\\\\x41\"\\r\\n*2\\r\\n\$3\\r\\nGET\\r\\n\$1\\r\\nk\\r\\n*0\\r\\nSET k  v\\nGET k\\r\\n'"
same_raw "inline request with unbalanced quotes" "b'PING\\r\\nECHO \"abc\\r\\nPING\\r\\n'"
same_raw "invalid multibulk length" "b'PING\\r\\n*x\\r\\nPING\\r\\n'"
same_raw "QUIT" "b'PING\\r\\nQUIT\\r\\nPING\\r\\n'"
same_raw "an inline \$ line" "b'\$3\\r\\n'"
same_raw "empty lines" "b'\\r\\n\\n  \\r\\nPING\\r\\n'"

# A client that leaves mid-request, and one that sends garbage, do not
# disturb the server.
raw "$SPINDLE_PORT" "b'*3\\r\\n\$3\\r\\nSET\\r\\n\$1\\r\\nk\\r\\n\$100\\r\\nabc'" >/dev/null &
leaver=$!
sleep 0.2
kill "$leaver" 2>/dev/null
wait "$leaver" 2>/dev/null
raw "$SPINDLE_PORT" "b'*1\\r\\n!!!\\r\\n'" >"$WORK/garbage"
if grep -q "Protocol error" "$WORK/garbage" && grep -q "\[closed\]" "$WORK/garbage" &&
  [ "$(timeout 5 redis-cli -p "$SPINDLE_PORT" PING)" = PONG ]; then
  ok "garbage gets a protocol error and a close; the server goes on"
else
  ko "garbage: $(cat "$WORK/garbage"); then PING: $(timeout 5 redis-cli -p "$SPINDLE_PORT" PING 2>&1)"
fi

# redis-benchmark against spindle-resp (and, for the numbers in the log,
# against redis-server).
bench() {
  local port=$1
  shift
  timeout 60 redis-benchmark -h 127.0.0.1 -p "$port" -t ping,set,get -n 20000 -c 20 -q "$@" 2>&1 |
    tr '\r' '\n' | grep -v '^ *$' | grep -v ': rps=' >"$WORK/bench.out"
  return "${PIPESTATUS[0]}"
}
for pipeline in 1 16; do
  bench "$SPINDLE_PORT" -P $pipeline
  rc=$?
  results=$(grep -c 'requests per second' "$WORK/bench.out")
  if [ $rc = 0 ] && [ "$results" = 4 ] && ! grep -qi 'error' "$WORK/bench.out"; then
    ok "redis-benchmark -P $pipeline against spindle-resp: 4 tests, no error"
  else
    ko "redis-benchmark -P $pipeline against spindle-resp: status $rc, $results results"
  fi
  sed 's/^/# spindle-resp: /' "$WORK/bench.out"
  bench "$REDIS_PORT" -P $pipeline
  sed 's/^/# redis-server: /' "$WORK/bench.out"
done
# Its SETs stored a 3-byte value (-d 3) under key:__rand_int__.
value=$(timeout 5 redis-cli -p "$SPINDLE_PORT" GET key:__rand_int__ 2>&1)
if [ ${#value} = 3 ]; then
  ok "the benchmark's SETs are stored"
else
  ko "GET key:__rand_int__ after the benchmark: $value"
fi

# Command-line and start-up errors.
"$RESP" --frobnicate >/dev/null 2>"$WORK/flag.err"
rc=$?
if [ $rc = 2 ] && grep -q "frobnicate" "$WORK/flag.err"; then
  ok "an unknown flag: status 2 and a message"
else
  ko "an unknown flag: status $rc, stderr: $(cat "$WORK/flag.err")"
fi
"$RESP" --port 65536 >/dev/null 2>"$WORK/port.err"
rc=$?
[ $rc = 2 ] && ok "port 65536: status 2" || ko "port 65536: status $rc: $(cat "$WORK/port.err")"
"$RESP" --bind not-an-address >/dev/null 2>"$WORK/bind.err"
rc=$?
[ $rc = 2 ] && grep -q "not-an-address" "$WORK/bind.err" && ok "a bad --bind: status 2" ||
  ko "a bad --bind: status $rc: $(cat "$WORK/bind.err")"
timeout 10 "$RESP" --port "$REDIS_PORT" >/dev/null 2>"$WORK/inuse.err"
rc=$?
if [ $rc = 1 ] && grep -q "cannot listen on 127.0.0.1:$REDIS_PORT: Address already in use" "$WORK/inuse.err"; then
  ok "a port in use: status 1 and a message"
else
  ko "a port in use: status $rc, stderr: $(cat "$WORK/inuse.err")"
fi

# Shutdown: SIGTERM with a client connected mid-request and an idle one.
exec 3<>"/dev/tcp/127.0.0.1/$SPINDLE_PORT"
printf '*2\r\n$3\r\nGET\r\n' >&3
exec 4<>"/dev/tcp/127.0.0.1/$SPINDLE_PORT"
kill -TERM "$SPINDLE_PID"
wait_exit "$SPINDLE_PID" 20
rc=$EXIT_STATUS
if [ "$rc" = 0 ] && grep -q "SIGTERM, shutting down" "$WORK/main.err"; then
  ok "SIGTERM with clients connected: spindle-resp exits with status 0"
else
  ko "SIGTERM: status $rc, stderr: $(cat "$WORK/main.err")"
fi
exec 3>&- 4>&-

if start_resp second --workers 1; then
  exec 3<>"/dev/tcp/127.0.0.1/$RESP_PORT"
  timeout 5 redis-cli -p "$RESP_PORT" SET k v >/dev/null
  kill -INT "$RESP_PID"
  wait_exit "$RESP_PID" 20
  rc=$EXIT_STATUS
  exec 3>&-
  [ "$rc" = 0 ] && ok "SIGINT: spindle-resp exits with status 0" ||
    ko "SIGINT: status $rc, stderr: $(cat "$WORK/second.err")"
else
  ko "spindle-resp did not start again: $(cat "$WORK/second.err")"
fi

kill -TERM "$REDIS_PID"
wait_exit "$REDIS_PID" 20
rc=$EXIT_STATUS
[ "$rc" = 0 ] && ok "SIGTERM: redis-server exits with status 0" || ko "redis-server: status $rc"

tap_end
