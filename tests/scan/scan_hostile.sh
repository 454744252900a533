#!/bin/bash
# scan_hostile.sh SPINDLE_SCAN_BINARY NO_URING_EXEC_BINARY
#
# spindle-scan against hostile inputs (issue 3), on both I/O backends where
# both can run: missing paths, unreadable files and directories (run as
# `nobody` through setpriv when we are root), a file operand used as a
# directory, FIFOs, sockets and devices in the tree and on the command line,
# symlink loops, files that grow and shrink during the scan, empty files, a
# sparse file over 4 GiB, paths longer than PATH_MAX, file names that are
# not UTF-8, `ulimit -n 16`, and io_uring forbidden by a seccomp filter
# (NO_URING_EXEC runs the program under one). For each: the message on
# stderr, that the rest of the tree was still counted (compared with
# `LC_ALL=C grep -rca` where grep agrees), and the exit status (0 match,
# 1 none, 2 error; -s hides the messages, not the status). Every run is under
# `timeout` (a blocked open or read fails the test instead of hanging it),
# and any sanitizer report on stderr fails it (LeakSanitizer in the ASan
# build). Prints TAP (tap.sh) and exits non-zero on failure.
set -u
export LC_ALL=C

SCAN=${1:?usage: scan_hostile.sh SPINDLE_SCAN_BINARY NO_URING_EXEC_BINARY}
NO_URING=${2:?usage: scan_hostile.sh SPINDLE_SCAN_BINARY NO_URING_EXEC_BINARY}
SCAN=$(cd "$(dirname "$SCAN")" && pwd)/$(basename "$SCAN")
NO_URING=$(cd "$(dirname "$NO_URING")" && pwd)/$(basename "$NO_URING")
TIMEOUT=${SCAN_TEST_TIMEOUT:-120}

# shellcheck source=tap.sh
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

WORK=$(mktemp -d /tmp/scan_hostile.XXXXXX)
WRITERS=()
cleanup() {
  local p
  for p in "${WRITERS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  chmod -R u+rwx "$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"

# Which backends can run here?
BACKENDS=()
for b in uring threadpool; do
  if SPINDLE_IO=$b timeout 30 "$SCAN" -F x /dev/null >/dev/null 2>"$WORK/probe.err"; [ $? -le 1 ]; then
    BACKENDS+=("$b")
  else
    skip "backend $b unavailable here: $(head -1 "$WORK/probe.err")"
  fi
done
if [ ${#BACKENDS[@]} -eq 0 ]; then
  bail "spindle-scan does not run with any backend"
fi

# Root reads everything: unreadable-file checks run as nobody.
RUNAS=()
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$SCAN" --version >/dev/null 2>&1; then
    RUNAS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    note "root, and cannot run as nobody (setpriv)"
  fi
fi
CAN_DENY=0
if [ "$(id -u)" != 0 ] || [ ${#RUNAS[@]} -gt 0 ]; then CAN_DENY=1; fi

# run_scan BACKEND DIR [PREFIX... --] ARGS...: spindle-scan in DIR under
# timeout, -j 2 (BACKEND auto: SPINDLE_IO unset); stdout sorted in
# $WORK/out, stderr in $WORK/err, status in $rc. PREFIX (until --) goes
# before the program (setpriv, no_uring_exec). With LIMIT_N set, the run is
# under `ulimit -n $LIMIT_N` (soft and hard).
run_scan() {
  local b=$1 dir=$2
  shift 2
  local prefix=()
  if [[ " $* " == *" -- "* ]]; then
    while [ "$1" != "--" ]; do
      prefix+=("$1")
      shift
    done
    shift
  fi
  [ "$b" = auto ] && b=
  (cd "$dir" && { [ -z "${LIMIT_N:-}" ] || ulimit -n "$LIMIT_N"; } &&
    SPINDLE_IO=$b exec timeout "$TIMEOUT" "${prefix[@]}" "$SCAN" -j 2 "$@") \
    >"$WORK/out.raw" 2>"$WORK/err"
  rc=$?
  sort "$WORK/out.raw" >"$WORK/out"
  if grep -q 'Sanitizer' "$WORK/err"; then
    ko "sanitizer report: $(grep -m1 'Sanitizer' "$WORK/err")"
    sed -n 1,30p "$WORK/err" | notes
  fi
}

# run_grep DIR [PREFIX... --] ARGS...: LC_ALL=C grep -rca, ':0' lines
# dropped, sorted, in $WORK/gout; stderr (prog name normalised, sorted) in
# $WORK/gerr; status in $grc.
run_grep() {
  local dir=$1
  shift
  local prefix=()
  if [[ " $* " == *" -- "* ]]; then
    while [ "$1" != "--" ]; do
      prefix+=("$1")
      shift
    done
    shift
  fi
  (cd "$dir" && timeout "$TIMEOUT" "${prefix[@]}" grep -rca "$@") >"$WORK/gout.raw" 2>"$WORK/gerr.raw"
  grc=$?
  grep -av ':0$' "$WORK/gout.raw" | sort >"$WORK/gout"
  sed 's/^grep: /PROG: /' "$WORK/gerr.raw" | sort >"$WORK/gerr"
}

# same_as_grep WHAT: compares the last run_scan with the last run_grep
# (stdout, normalised stderr, status).
same_as_grep() {
  local what=$1
  sed 's/^spindle-scan: /PROG: /' "$WORK/err" | grep -v '^PROG: warning: ' | sort >"$WORK/err2"
  grep -v '^PROG: warning: ' "$WORK/gerr" >"$WORK/gerr2"
  if [ $rc -eq 124 ]; then
    ko "$what: timed out (blocked?)"
  elif ! cmp -s "$WORK/out" "$WORK/gout"; then
    ko "$what: output differs from grep (< spindle-scan, > grep)"
    diff "$WORK/out" "$WORK/gout" | head -10
  elif [ $rc -ne $grc ]; then
    ko "$what: exit status $rc, grep $grc: $(head -2 "$WORK/err")"
  elif ! cmp -s "$WORK/err2" "$WORK/gerr2"; then
    ko "$what: stderr differs from grep (< spindle-scan, > grep)"
    diff "$WORK/err2" "$WORK/gerr2" | head -10
  else
    ok
  fi
}

# expect WHAT WANT_RC [STDERR_REGEX]: status of the last run_scan, and (if
# given) a line of stderr matching the regex; without it stderr is empty.
expect() {
  local what=$1 want=$2 pattern=${3:-}
  if [ $rc -eq 124 ]; then
    ko "$what: timed out (blocked?)"
  elif [ $rc -ne "$want" ]; then
    ko "$what: exit status $rc, want $want: $(head -3 "$WORK/err")"
  elif [ -n "$pattern" ] && ! grep -Eq -- "$pattern" "$WORK/err"; then
    ko "$what: no message /$pattern/ on stderr: $(head -3 "$WORK/err")"
  elif [ -z "$pattern" ] && [ -s "$WORK/err" ]; then
    ko "$what: unexpected stderr: $(head -3 "$WORK/err")"
  else
    ok
  fi
}

# ------------------------------------------------------------ the tree
H=$WORK/h
mkdir -p "$H"/{plain/sub,empty/void,special,loops,names,perm/open,perm/locked_dir/in,perm/nosearch/in,perm/nolist}
printf 'foo\nbar\nfoo bar\n' >"$H/plain/a.txt"
printf 'no match here\n' >"$H/plain/b.txt"
printf 'foo' >"$H/plain/sub/nofinal.txt"
for k in $(seq 1 40); do printf 'line %d\nfoo %d\n' "$k" "$k" >"$H/plain/sub/f$k.txt"; done
: >"$H/empty/zero.txt"
: >"$H/empty/void/zero2.txt"
printf '\n\n\n' >"$H/empty/newlines.txt"
# Special files: a FIFO with no writer, a listening UNIX socket's node, and
# device nodes when we may create them (a read of /dev/zero never ends).
mkfifo "$H/special/fifo"
printf 'foo\n' >"$H/special/regular.txt"
python3 -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' "$H/special/sock"
HAVE_DEV=0
if mknod "$H/special/zero" c 1 5 2>/dev/null && mknod "$H/special/null" c 1 3 2>/dev/null; then
  HAVE_DEV=1
else
  skip "cannot mknod here: device nodes in the tree (/dev/zero is still checked on the command line)"
fi
# Symlink loops (skipped below the command line; ELOOP on it).
ln -s self "$H/loops/self"
ln -s b "$H/loops/a"
ln -s a "$H/loops/b"
ln -s . "$H/loops/dot"
ln -s .. "$H/loops/up"
printf 'foo\n' >"$H/loops/real.txt"
# Names that are not UTF-8 (printed byte for byte).
printf 'foo\n' >"$H/names/$(printf 'caf\xe9.txt')"
printf 'foo\nfoo\n' >"$H/names/$(printf '\xff\xfe\x80')"
printf 'foo\n' >"$H/names/$(printf 'new\nline.txt')"
printf 'foo\n' >"$H/names/$(printf 'tab\tand\\back')"
# Permissions (root: exercised as nobody).
printf 'foo\n' >"$H/perm/open/ok.txt"
printf 'foo\n' >"$H/perm/locked.txt"
printf 'foo\n' >"$H/perm/locked_dir/in/x.txt"
printf 'foo\n' >"$H/perm/nosearch/in.txt"
printf 'foo\n' >"$H/perm/nolist/hidden.txt"
chmod -R a+rX "$H"
chmod 000 "$H/perm/locked.txt" "$H/perm/locked_dir"
chmod 644 "$H/perm/nosearch" # listable, not searchable: its entries fail
chmod 311 "$H/perm/nolist"   # searchable, not listable
# Paths longer than PATH_MAX (4096): 24 levels of 200-byte names, a file at
# the bottom and one half-way. Built with *at() calls: no path is ever used.
python3 - "$H" <<'EOF'
import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
os.mkdir("long", dir_fd=fd)
nfd = os.open("long", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd); os.close(fd); fd = nfd
for level in range(24):
    name = ("L%02d" % level) + "x" * 197
    os.mkdir(name, dir_fd=fd)
    nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
    if level == 12:
        w = os.open("middle.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(w, b"foo\nfoo\n"); os.close(w)
w = os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
os.write(w, b"foo\nbar\nfoo\nfoo\n"); os.close(w)
os.close(fd)
EOF
LONGEST=$(cd "$H" && find long -name bottom.txt | head -1)

b0=${BACKENDS[0]}

# ------------------------------------------------- the whole tree (root)
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$WORK" foo h
  run_grep "$WORK" foo h
  if [ "$(id -u)" = 0 ]; then
    same_as_grep "[$b] whole tree"
  elif [ $rc -eq 2 ] && [ $grc -eq 2 ] && cmp -s "$WORK/out" "$WORK/gout"; then
    ok # as a user the unreadable entries are errors for both
  else
    ko "[$b] whole tree as a user: rc=$rc grep=$grc"
  fi
done

# ------------------------------------------------------- missing paths
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo plain nope also/missing
  run_grep "$H" foo plain nope also/missing
  same_as_grep "[$b] missing operands"
  grep -qx 'spindle-scan: nope: No such file or directory' "$WORK/err" || ko "[$b] missing: message"
  run_scan "$b" "$H" -s foo plain nope
  expect "[$b] -s missing operand: status 2, silent" 2
  grep -qx 'plain/a.txt:2' "$WORK/out" || ko "[$b] -s missing operand: rest not counted"
  run_scan "$b" "$H" foo nope
  expect "[$b] only a missing operand" 2 '^spindle-scan: nope: No such file or directory$'
  ln -sfn /nonexistent/target "$WORK/dangling"
  run_scan "$b" "$WORK" foo dangling h/plain/a.txt
  expect "[$b] dangling symlink operand" 2 '^spindle-scan: dangling: No such file or directory$'
  grep -qx 'h/plain/a.txt:2' "$WORK/out" || ko "[$b] dangling operand: rest not counted"
done

# ------------------------------------ a file where a directory was expected
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo plain/a.txt/ plain/a.txt/x plain/sub
  run_grep "$H" foo plain/a.txt/ plain/a.txt/x plain/sub
  same_as_grep "[$b] file used as a directory"
  grep -qx 'spindle-scan: plain/a.txt/: Not a directory' "$WORK/err" || ko "[$b] ENOTDIR message"
done

# ---------------------------------------------------- permission denied
if [ $CAN_DENY = 1 ]; then
  for b in "${BACKENDS[@]}"; do
    run_scan "$b" "$H" "${RUNAS[@]}" -- foo perm
    run_grep "$H" "${RUNAS[@]}" -- foo perm
    same_as_grep "[$b] unreadable files and directories"
    for p in perm/locked.txt perm/locked_dir perm/nolist perm/nosearch/in.txt; do
      grep -qx "spindle-scan: $p: Permission denied" "$WORK/err" || ko "[$b] no EACCES message for $p"
    done
    grep -qx 'perm/open/ok.txt:1' "$WORK/out" || ko "[$b] readable file not counted next to unreadable ones"
    run_scan "$b" "$H" "${RUNAS[@]}" -- -s foo perm
    expect "[$b] -s: unreadable silent, status 2" 2
    grep -qx 'perm/open/ok.txt:1' "$WORK/out" || ko "[$b] -s: rest not counted"
    run_scan "$b" "$H" "${RUNAS[@]}" -- foo perm/locked.txt
    expect "[$b] unreadable single operand" 2 '^spindle-scan: perm/locked.txt: Permission denied$'
  done
else
  skip "no unprivileged user: permission checks"
fi

# ------------------------------------------ FIFOs, sockets and devices
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo special
  run_grep "$H" foo special
  same_as_grep "[$b] special files in the tree"
  # On the command line they are skipped (grep would read them: block or
  # never end), the rest is counted.
  run_scan "$b" "$H" foo special/fifo special/sock /dev/zero /dev/null special/regular.txt
  expect "[$b] special operands never block" 0
  grep -qx 'special/regular.txt:1' "$WORK/out" || ko "[$b] special operands: rest not counted"
  if [ $HAVE_DEV = 1 ]; then
    run_scan "$b" "$H" --all foo special/zero
    expect "[$b] device node operand" 1
  fi
done

# ------------------------------------------------------ symlink loops
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo loops
  run_grep "$H" foo loops
  same_as_grep "[$b] symlink loops in the tree"
  run_scan "$b" "$H" foo loops/self loops/a loops/real.txt
  run_grep "$H" foo loops/self loops/a loops/real.txt
  same_as_grep "[$b] symlink loops as operands"
  grep -qx 'spindle-scan: loops/self: Too many levels of symbolic links' "$WORK/err" ||
    ko "[$b] ELOOP message"
  # A symlink to a directory on the command line is followed; its ".."
  # loop below it is not.
  run_scan "$b" "$H" foo loops/dot
  run_grep "$H" foo loops/dot
  same_as_grep "[$b] symlink to . as operand"
done

# ---------------------------------------------------------- empty files
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" --all foo empty
  (cd "$H" && grep -rca foo empty) | sort >"$WORK/gall"
  if [ $rc -eq 1 ] && cmp -s "$WORK/out" "$WORK/gall" && grep -qx 'empty/zero.txt:0' "$WORK/out"; then
    ok
  else
    ko "[$b] empty files: rc=$rc $(diff "$WORK/out" "$WORK/gall" | head -4)"
  fi
  run_scan "$b" "$H" -e '' empty
  (cd "$H" && grep -rca -e '' empty) | grep -v ':0$' | sort >"$WORK/gall"
  if [ $rc -eq 0 ] && cmp -s "$WORK/out" "$WORK/gall"; then ok; else ko "[$b] empty pattern on empty files"; fi
  run_scan "$b" "$H" foo empty/zero.txt
  if [ $rc -eq 1 ] && [ "$(cat "$WORK/out")" = 0 ]; then ok; else ko "[$b] single empty file: rc=$rc"; fi
done

# ------------------------------------------------- non-UTF-8 file names
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo names
  run_grep "$H" foo names
  same_as_grep "[$b] non-UTF-8 names, byte for byte"
  if grep -aq "$(printf 'caf\xe9.txt'):1" "$WORK/out"; then ok; else ko "[$b] latin-1 name not printed as is"; fi
  # A missing non-UTF-8 operand: the message carries the bytes as given.
  run_scan "$b" "$H" foo "$(printf 'miss\xff')"
  expect "[$b] missing non-UTF-8 operand" 2 "^spindle-scan: $(printf 'miss\xff'): No such file or directory\$"
done

# ---------------------------------------------- paths longer than PATH_MAX
if [ ${#LONGEST} -le 4096 ]; then ko "the long path is only ${#LONGEST} bytes"; fi
for b in "${BACKENDS[@]}"; do
  run_scan "$b" "$H" foo long plain
  if [ $rc -eq 0 ] && [ ! -s "$WORK/err" ] && grep -qxF "$LONGEST:3" "$WORK/out" &&
    grep -q '/middle.txt:2$' "$WORK/out" && grep -qx 'plain/a.txt:2' "$WORK/out"; then
    ok
  else
    ko "[$b] paths over PATH_MAX: rc=$rc $(head -c 300 "$WORK/err")"
  fi
  run_grep "$H" foo long plain
  if [ $grc -eq 0 ]; then same_as_grep "[$b] paths over PATH_MAX vs grep"; fi
  # The same with descriptors so scarce that the walker keeps no ancestor
  # open and finds each parent again through "..".
  cp "$WORK/out" "$WORK/free"
  LIMIT_N=16 run_scan "$b" "$H" foo long plain
  if [ $rc = 0 ] && [ ! -s "$WORK/err" ] && cmp -s "$WORK/out" "$WORK/free"; then
    ok
  else
    ko "[$b] paths over PATH_MAX with ulimit -n 16: rc=$rc $(head -c 300 "$WORK/err")"
  fi
done

# --------------------------------------------------- ulimit -n 16
# The scan slows down (a smaller window), never fails: the same results as
# without the limit, on the whole readable tree and on /usr/include. The
# default window fits in what the limit leaves (the directories' half, and
# two descriptors for the rest of the process): no open runs out of
# descriptors. With a window past it (--max-in-flight 64), opens fail with
# EMFILE and are retried in a smaller window, with the same results; not in
# a build with UBSan's vptr check, which needs a pipe() for each type it
# has not seen yet and reports a valid object as invalid when the process
# has no descriptor left for it (sanitizer_common's IsAccessibleMemoryRange;
# it happened in CI, once in about 200 runs, in a thread-pool thread's wake).
chmod -R a+rX "$H/perm" && chmod 755 "$H/perm/nosearch" "$H/perm/nolist"
# SCAN_SANITIZE is meson's b_sanitize (tests/scan/meson.build). Run by
# hand, a binary that names a sanitizer's handler is taken to have both.
VPTR_CHECK=0
SANITIZED=0
case ${SCAN_SANITIZE:-unknown} in
  none) ;;
  unknown)
    if grep -q __ubsan_handle_dynamic_type_cache_miss "$SCAN"; then VPTR_CHECK=1 SANITIZED=1; fi ;;
  *undefined*) VPTR_CHECK=1 SANITIZED=1 ;;
  *) SANITIZED=1 ;;
esac
for b in "${BACKENDS[@]}"; do
  for target in "$WORK:h" "/usr:include"; do
    dir=${target%%:*}
    what=${target##*:}
    [ -d "$dir/$what" ] || continue
    run_scan "$b" "$dir" foo "$what"
    cp "$WORK/out" "$WORK/free"
    free_rc=$rc
    LIMIT_N=16 run_scan "$b" "$dir" --stats foo "$what"
    if [ $rc = "$free_rc" ] && [ $free_rc -le 1 ] && cmp -s "$WORK/out" "$WORK/free" &&
      ! grep -q 'Too many open files' "$WORK/err" &&
      grep -q ' 0 opens retried (out of descriptors)$' "$WORK/err"; then
      ok
    else
      ko "[$b] ulimit -n 16 on $dir/$what: rc=$rc (free: $free_rc) $(grep -m2 'spindle-scan\|^in flight' "$WORK/err")"
    fi
    grep '^in flight' "$WORK/err" | sed "s|^|# note: [$b] ulimit -n 16, $what: |"
    if [ $VPTR_CHECK = 1 ]; then
      skip "[$b] built with -fsanitize=vptr, which needs free descriptors itself: --max-in-flight 64 under ulimit -n 16 on $what"
      continue
    fi
    LIMIT_N=16 run_scan "$b" "$dir" --stats --max-in-flight 64 foo "$what"
    if [ $rc = "$free_rc" ] && cmp -s "$WORK/out" "$WORK/free" &&
      ! grep -q 'Too many open files' "$WORK/err" &&
      grep -q '^in flight: .* [1-9][0-9]* opens retried (out of descriptors)$' "$WORK/err"; then
      ok
    else
      ko "[$b] --max-in-flight 64, ulimit -n 16 on $dir/$what: rc=$rc (free: $free_rc) $(grep -m2 'spindle-scan\|^in flight' "$WORK/err")"
    fi
    grep '^in flight' "$WORK/err" | sed "s|^|# note: [$b] ulimit -n 16, --max-in-flight 64, $what: |"
  done
  # Too few descriptors for even one file besides the runtime's: a real
  # error, reported per file, without hanging. The smallest limit the
  # runtime starts with, plus one that the directory takes. Not under a
  # sanitizer, which takes descriptors itself: UBSan's vptr check (see
  # above), TSan's background thread (it took the one spare descriptor
  # with the thread pool).
  if [ $SANITIZED = 1 ]; then
    skip "[$b] built with a sanitizer, which takes descriptors itself: the no-descriptor case"
    continue
  fi
  lim=
  for n in $(seq 4 40); do
    (ulimit -n $n && SPINDLE_IO=$b exec "$SCAN" -j 2 x /dev/null) >/dev/null 2>"$WORK/probe.err"
    if [ $? = 1 ] && [ ! -s "$WORK/probe.err" ]; then
      lim=$((n + 1))
      break
    fi
  done
  if [ -n "$lim" ]; then
    LIMIT_N=$lim run_scan "$b" "$H" foo plain
    expect "[$b] ulimit -n $lim: no descriptor for any file" 2 \
      '^spindle-scan: plain/a.txt: Too many open files$'
  else
    ko "[$b] the runtime does not start even with ulimit -n 40"
  fi
done

# ------------------------------------ files that grow and shrink meanwhile
mkdir -p "$WORK/live"
for k in $(seq 1 20); do printf 'foo\nbar\n' >"$WORK/live/static$k.txt"; done
: >"$WORK/live/grow.txt"
(
  n=0
  while [ $n -lt 400000 ]; do
    printf 'foo %d\nbar\n' $n >>"$WORK/live/grow.txt"
    n=$((n + 1))
  done
) &
WRITERS+=($!)
( while :; do
  : >"$WORK/live/shrink.txt"
  printf 'foo\nfoo\nfoo\nfoo\nfoo\nfoo\nfoo\nfoo\n' >>"$WORK/live/shrink.txt"
  truncate -s 5 "$WORK/live/shrink.txt"
done ) &
WRITERS+=($!)
sleep 0.3
for round in 1 2 3; do
  for b in "${BACKENDS[@]}"; do
    run_scan "$b" "$WORK" --all --buffer-size 4 foo live
    grow=$(grep -a '^live/grow.txt:' "$WORK/out" | cut -d: -f2)
    shrink=$(grep -a '^live/shrink.txt:' "$WORK/out" | cut -d: -f2)
    statics=$(grep -ac '^live/static[0-9]*.txt:1$' "$WORK/out")
    # grow.txt: at most every line written; shrink.txt: at most 8 lines;
    # (a file truncated to nothing between listing and open may be absent)
    if [ $rc -eq 0 ] && [ ! -s "$WORK/err" ] && [ "$statics" -eq 20 ] &&
      [ "${grow:-0}" -ge 0 ] && [ "${grow:-0}" -le 400000 ] && [ "${shrink:-0}" -le 8 ]; then
      ok
    else
      ko "[$b] round $round, files changing: rc=$rc grow=$grow shrink=$shrink statics=$statics $(head -2 "$WORK/err")"
    fi
  done
done
for p in "${WRITERS[@]}"; do kill "$p" 2>/dev/null; done
wait 2>/dev/null
WRITERS=()

# ------------------------------------------------ sparse file over 4 GiB
# 5 GiB, a few KiB on disk: "bar" at 0, "foo" just past 4 GiB (a 32-bit
# offset would wrap and find nothing, or "bar" again), a newline every
# 64 MiB so that no line is held whole in memory beyond that.
mkdir -p "$WORK/sparse"
if python3 - "$WORK/sparse/big" <<'EOF'; then
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.ftruncate(fd, 5 << 30)
os.pwrite(fd, b"bar\n", 0)
step = 64 << 20
for off in range(step, 5 << 30, step):
    os.pwrite(fd, b"\n", off)
os.pwrite(fd, b"\nfoo after 4 GiB\n", (4 << 30) + 4096)
os.close(fd)
EOF
  printf 'foo\n' >"$WORK/sparse/small.txt"
  kib=$(du -k "$WORK/sparse/big" | cut -f1)
  [ "$kib" -lt 65536 ] || note "the sparse file takes $kib KiB on disk"
  for b in "${BACKENDS[@]}"; do
    run_scan "$b" "$WORK/sparse" --stats --json foo big small.txt
    bytes=$(grep -o '"bytes":[0-9]*' "$WORK/err" | cut -d: -f2)
    if [ $rc -eq 0 ] && grep -qx '{"path":"big","count":1}' "$WORK/out" &&
      grep -qx '{"path":"small.txt","count":1}' "$WORK/out" && [ "$bytes" = $(((5 << 30) + 4)) ]; then
      ok
    else
      ko "[$b] sparse 5 GiB file: rc=$rc bytes=$bytes $(cat "$WORK/out" | head -2) $(grep -v '^{' "$WORK/err" | head -2)"
    fi
  done
else
  skip "cannot create a 5 GiB sparse file here"
fi
rm -rf "$WORK/sparse"

# ------------------------------------ io_uring forbidden by seccomp
"$NO_URING" true
seccomp_rc=$?
if [ $seccomp_rc = 77 ]; then
  skip "seccomp unavailable: the io_uring fallback checks"
else
  # automatic falls back to the thread pool and finds everything.
  run_scan auto "$WORK" "$NO_URING" -- --stats foo h/plain h/names
  run_grep "$WORK" foo h/plain h/names
  if [ $rc -eq 0 ] && cmp -s "$WORK/out" "$WORK/gout" && grep -q '(io: threadpool,' "$WORK/err"; then
    ok
  else
    ko "seccomp, --io=auto: rc=$rc $(head -2 "$WORK/err")"
  fi
  # An explicit uring request fails clearly, exit 2.
  run_scan auto "$WORK" "$NO_URING" -- --io=uring foo h/plain
  expect "seccomp, --io=uring" 2 '^spindle-scan: cannot start the runtime: .*io_uring unavailable'
  run_scan uring "$WORK" "$NO_URING" -- foo h/plain
  expect "seccomp, SPINDLE_IO=uring" 2 '^spindle-scan: cannot start the runtime: .*io_uring unavailable'
  # And under ulimit -n 16 at the same time.
  LIMIT_N=16 run_scan auto "$WORK" "$NO_URING" -- foo h
  run_grep "$WORK" foo h
  same_as_grep "seccomp and ulimit -n 16"
fi

tap_end
