#!/bin/bash
# wc_vs_gnu.sh SPINDLE_WC_BINARY [sanitized]
#
# Compares spindle-wc with GNU `LC_ALL=C wc` byte for byte: stdout, exit
# status, and for error cases stderr (program names normalised), on a
# generated tree (make_tree.py) with -l, -w, -c, the default and
# combinations, operand forms, standard input, errors and small buffers,
# then on /usr/include, with both I/O backends (--io uring, --io
# threadpool; a backend that cannot run here is reported as skipped).
#
# The order compared: spindle-wc prints a directory's files sorted by path
# (bytes, as LC_ALL=C sort), operand after operand; GNU wc gets the same
# list as `find -H OPERAND -type f -print0 | LC_ALL=C sort -z`, operand
# after operand, through --files0-from=LIST (one wc invocation, so one total
# line and the same column width as for files named on its command line).
# Operands that are not directories are given to GNU wc as arguments.
# Unreadable files and directories are tested as `nobody` (setpriv) when we
# are root, and skipped when that is not possible. With "sanitized" (an
# ASan or TSan build, slower per byte) /usr/include is compared once per
# backend instead of once per option set. TAP output (tests/scan/tap.sh).
set -u
export LC_ALL=C

WC=${1:?usage: wc_vs_gnu.sh SPINDLE_WC_BINARY [sanitized]}
WC=$(cd "$(dirname "$WC")" && pwd)/$(basename "$WC")
SANITIZED=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${WC_TEST_TIMEOUT:-120}

# shellcheck source=../scan/tap.sh
source "$HERE/../scan/tap.sh"

WORK=$(mktemp -d /tmp/wc_vs_gnu.XXXXXX)
cleanup() {
  chmod -R u+rwx "$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir "$WORK/tree"
# GNU's file lists, written by gnu_wc (perhaps as nobody: one per user).
SCRATCH=$WORK/scratch
mkdir -m 1777 "$SCRATCH"
python3 "$HERE/make_tree.py" "$WORK/tree" || bail "cannot build the test tree"

# Which backends run here?
BACKENDS=()
for b in uring threadpool; do
  if timeout 30 "$WC" --io "$b" /dev/null >/dev/null 2>"$WORK/probe.err"; then
    BACKENDS+=("$b")
  else
    skip "backend $b unavailable here: $(head -1 "$WORK/probe.err")"
  fi
done
[ ${#BACKENDS[@]} -gt 0 ] || bail "spindle-wc does not run with any backend"
note "backends: ${BACKENDS[*]}"

# gnu_wc FLAGS... -- OPERANDS...: GNU wc over the files spindle-wc counts.
gnu_wc() {
  local flags=()
  while [ "$1" != "--" ]; do
    flags+=("$1")
    shift
  done
  shift
  local op any_dir=0 list
  list=$SCRATCH/list.$(id -u)
  for op in "$@"; do
    [ -n "$op" ] && [ -d "$op" ] && any_dir=1
  done
  if [ $any_dir = 0 ]; then
    wc "${flags[@]}" "$@"
    return
  fi
  : >"$list"
  local find_rc=0
  for op in "$@"; do
    if [ -n "$op" ] && [ -d "$op" ]; then
      find -H "$op" -type f -print0 | sort -z >>"$list"
      [ "${PIPESTATUS[0]}" = 0 ] || find_rc=1
    else
      printf '%s\0' "$op" >>"$list"
    fi
  done
  wc "${flags[@]}" --files0-from="$list"
  local rc=$?
  [ $rc = 0 ] && rc=$find_rc
  return $rc
}

# compare DESCRIPTION DIR [RUNAS...] -- FLAGS... -- OPERANDS...
# Runs both in DIR; compares stdout and the exit status, and with
# CHECK_STDERR=1 stderr too (else spindle-wc's stderr must be empty when
# GNU wc succeeded). EXTRA: options for spindle-wc only.
EXTRA=()
compare() {
  local what=$1 dir=$2
  shift 2
  local runas=() flags=()
  while [ "$1" != "--" ]; do
    runas+=("$1")
    shift
  done
  shift
  while [ "$1" != "--" ]; do
    flags+=("$1")
    shift
  done
  shift
  (cd "$dir" && "${runas[@]}" bash -c "$(declare -f gnu_wc); SCRATCH=$SCRATCH; gnu_wc \"\$@\"" \
    gnu_wc "${flags[@]}" -- "$@") >"$WORK/gnu.out" 2>"$WORK/gnu.err"
  local gnu_rc=$?
  local b
  for b in "${BACKENDS[@]}"; do
    (cd "$dir" && timeout "$TIMEOUT" "${runas[@]}" "$WC" --io "$b" "${EXTRA[@]}" "${flags[@]}" \
      -- "$@") >"$WORK/wc.out" 2>"$WORK/wc.err"
    local wc_rc=$?
    if [ $wc_rc = 124 ]; then
      ko "$what [$b]: timed out"
    elif ! cmp -s "$WORK/wc.out" "$WORK/gnu.out"; then
      ko "$what [$b]: stdout differs (< spindle-wc, > GNU wc)"
      diff "$WORK/wc.out" "$WORK/gnu.out" | head -10 | sed 's/^/# /'
    elif [ $wc_rc != $gnu_rc ]; then
      ko "$what [$b]: exit status $wc_rc, GNU $gnu_rc"
      head -3 "$WORK/wc.err" | sed 's/^/# /'
    elif [ "${CHECK_STDERR:-0}" = 1 ] &&
      ! cmp -s <(sed 's/^spindle-wc: /PROG: /' "$WORK/wc.err") \
        <(sed 's/^wc: /PROG: /' "$WORK/gnu.err"); then
      ko "$what [$b]: stderr differs (< spindle-wc, > GNU wc)"
      diff <(sed 's/^spindle-wc: /PROG: /' "$WORK/wc.err") \
        <(sed 's/^wc: /PROG: /' "$WORK/gnu.err") | head -10 | sed 's/^/# /'
    elif [ "${CHECK_STDERR:-0}" != 1 ] && [ $gnu_rc = 0 ] && [ -s "$WORK/wc.err" ]; then
      ko "$what [$b]: unexpected stderr: $(head -2 "$WORK/wc.err")"
    else
      ok "$what [$b]"
    fi
  done
}

# ---------------------------------------------------------- generated tree
for flags in "" "-l" "-w" "-c" "-lw" "-lc" "-wc" "-c -l" "-l -w -c"; do
  # shellcheck disable=SC2086
  compare "tree ${flags:-(default)}" "$WORK" -- $flags -- tree
done

T=$WORK/tree
compare "operand tree/" "$WORK" -- -- tree/
compare "operand tree//" "$WORK" -- -- tree//
compare "operand ./tree" "$WORK" -- -lw -- ./tree
compare "several operands" "$T" -- -- src names binary/nuls long
compare "file operands" "$T" -- -- src/crlf.txt src/nofinal.txt binary/high
compare "one file" "$T" -- -- long/big.txt
compare "one file, one count" "$T" -- -w -- long/big.txt
compare "one file, two counts" "$T" -- -lc -- src/one_word
compare "same operand twice" "$T" -- -- src/crlf.txt src/crlf.txt
compare "a directory with one file" "$T" -- -- deep
compare "empty directory" "$T" -- -- empty/nothing_here
compare "empty file" "$T" -- -- empty
compare "special files skipped" "$T" -- -- special
compare "symlink operands" "$T" -- -- special/link_to_dir special/link_to_file
compare "names that need quoting" "$T" -- -- names
compare "quoted name operand" "$T/names" -- -- $'new\nline' 'with space'

# Standard input: no operand (no name, width 7 for a pipe), and "-".
for b in "${BACKENDS[@]}"; do
  what="stdin pipe [$b]"
  if cmp -s <(cat "$T/long/big.txt" | "$WC" --io "$b") <(cat "$T/long/big.txt" | wc); then
    ok "$what"
  else ko "$what"; fi
  what="stdin redirected from a file [$b]"
  if cmp -s <("$WC" --io "$b" -lw <"$T/src/crlf.txt") <(wc -lw <"$T/src/crlf.txt"); then
    ok "$what"
  else ko "$what"; fi
  what="'-' among operands [$b]"
  if cmp -s <(cd "$T" && "$WC" --io "$b" src/one_word - <src/crlf.txt) \
    <(cd "$T" && wc src/one_word - <src/crlf.txt); then
    ok "$what"
  else ko "$what"; fi
done

# Errors: reported in order, the rest still counted, exit status 1.
CHECK_STDERR=1 compare "missing operand" "$T" -- -- src/crlf.txt nope src/one_word
CHECK_STDERR=1 compare "missing first operand" "$T" -- -- nope long/big.txt
CHECK_STDERR=1 compare "missing operand with a directory" "$T" -- -l -- nope src
CHECK_STDERR=1 compare "empty operand" "$T" -- -- '' src/one_word
"$WC" --no-such-flag "$T" >/dev/null 2>"$WORK/flag.err"
rc=$?
if [ $rc = 1 ] && grep -q '^spindle-wc: ' "$WORK/flag.err"; then ok "bad flag"; else ko "bad flag: exit $rc"; fi
"$WC" --io carrier-pigeon "$T" >/dev/null 2>&1
rc=$?
if [ $rc = 1 ]; then ok "bad --io"; else ko "bad --io: exit $rc"; fi

# Small buffers (words and lines across many chunk boundaries), one worker,
# one fiber per worker.
EXTRA=(--buffer-size 1)
compare "1 KiB buffers" "$WORK" -- -- tree
EXTRA=(-j 1 --fibers 1)
compare "1 worker, 1 fiber" "$WORK" -- -- tree
EXTRA=(-j 2 --fibers 64)
compare "2 workers, 64 fibers each" "$WORK" -- -- tree
EXTRA=()

# Unreadable files and directories: as nobody when we are root.
mkdir -p "$WORK/perm/open/sub" "$WORK/perm/locked_dir/inner"
printf 'one two\n' >"$WORK/perm/open/a.txt"
printf 'x\ny\n' >"$WORK/perm/open/sub/b.txt"
printf 'hidden\n' >"$WORK/perm/locked_dir/inner/c.txt"
printf 'secret words\n' >"$WORK/perm/locked_file.txt"
chmod -R a+rX "$WORK/perm"
chmod 000 "$WORK/perm/locked_dir" "$WORK/perm/locked_file.txt"
RUNAS=()
can_check_perms=1
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$WC" --version >/dev/null 2>&1; then
    RUNAS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    can_check_perms=0
    skip "running as root and cannot run as nobody: unreadable-file checks"
  fi
fi
if [ $can_check_perms = 1 ]; then
  CHECK_STDERR=1 compare "unreadable file operand" "$WORK/perm" "${RUNAS[@]}" -- -- \
    open/a.txt locked_file.txt open/sub/b.txt
  # A directory that cannot be listed: GNU's side is find's message; check
  # stdout and status, and that spindle-wc names the directory.
  compare "unreadable file and directory in a tree" "$WORK" "${RUNAS[@]}" -- -- perm
  if grep -qx "spindle-wc: perm/locked_dir: Permission denied" "$WORK/wc.err" &&
    grep -qx "spindle-wc: perm/locked_file.txt: Permission denied" "$WORK/wc.err"; then
    ok "unreadable directory and file reported"
  else
    ko "unreadable directory and file reported: $(head -3 "$WORK/wc.err")"
  fi
fi

# ------------------------------------------------------------ a real tree
if [ -d /usr/include ]; then
  if [ -n "$SANITIZED" ]; then
    compare "/usr/include" / -- -- /usr/include
  else
    for flags in "" "-l" "-w" "-c" "-lw"; do
      # shellcheck disable=SC2086
      compare "/usr/include ${flags:-(default)}" / -- $flags -- /usr/include
    done
  fi
else
  skip "/usr/include missing"
fi

tap_end
