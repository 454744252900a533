#!/bin/bash
# du_vs_gnu.sh SPINDLE_DU_BINARY [sanitized]
#
# Compares spindle-du with GNU `du -b` byte for byte after sorting (stdout),
# and exit status, with -a, -s, -l and their combinations, on a generated
# tree: hard links inside one directory and across directories, symlinks
# (to files, to directories, dangling: not followed), empty directories,
# names that are not UTF-8 (and with spaces, newlines are avoided: sort is
# by line), deep nesting, one directory of more than 10,000 entries (du then
# visits in inode order), several operands (hard links counted once across
# them), a file operand, a missing operand. The default --stat=auto stats
# with direct calls while they are fast, which they are here; again with
# --stat=uring (every statx in batches through the I/O driver), with
# --sync-stat (every statx a direct call), and with auto told that every
# statx is slow (SPINDLE_DU_SLOW_STATX_NS=0: each directory that probes
# switches to a batch after its second entry).
# Unreadable directories (du's "cannot read directory" on stderr, exit 1,
# the rest counted) and a readable directory without search permission
# (du's "cannot access" for each entry), in both modes, are checked
# as `nobody` (setpriv) when we are root, since root reads everything, and
# skipped when that is not possible. Then /usr (-s and the default), with a
# time bound; "sanitized" (an ASan or TSan build) compares /usr/include
# instead. TAP output (tests/scan/tap.sh).
set -u
export LC_ALL=C

DU=${1:?usage: du_vs_gnu.sh SPINDLE_DU_BINARY [sanitized]}
DU=$(cd "$(dirname "$DU")" && pwd)/$(basename "$DU")
SANITIZED=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${DU_TEST_TIMEOUT:-120}

# shellcheck source=../scan/tap.sh
source "$HERE/../scan/tap.sh"

WORK=$(mktemp -d /tmp/du_vs_gnu.XXXXXX)
cleanup() {
  chmod -R u+rwx "$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"
T=$WORK/tree
mkdir -p "$T"

# --- the tree
make_tree() {
  mkdir -p "$T/a/b/c/d/e/f/g/h" "$T/empty" "$T/links" "$T/other" "$T/wide"
  printf 'hello\n' >"$T/a/one"
  head -c 12345 /dev/zero >"$T/a/b/two"
  head -c 7777 /dev/zero >"$T/a/b/c/d/e/f/g/h/deep"
  head -c 4096 /dev/zero >"$T/links/orig"
  ln "$T/links/orig" "$T/links/same_dir_link"
  ln "$T/links/orig" "$T/other/cross_dir_link"
  ln "$T/links/orig" "$T/a/b/c/third_link"
  head -c 999 /dev/zero >"$T/other/x"
  ln "$T/other/x" "$T/a/x_link"
  ln -s ../a "$T/other/dir_symlink"
  ln -s ../links/orig "$T/other/file_symlink"
  ln -s /nonexistent/target "$T/other/dangling"
  : >"$T/empty_file"
  mkdir "$T/$(printf 'bad\xff\xfe name')"
  printf 'latin1' >"$T/$(printf 'bad\xff\xfe name')/$(printf 'caf\xe9')"
  printf 'sp' >"$T/a/with space"
  mkfifo "$T/other/fifo"
  # One directory of more than 10,000 entries, some of them hard links.
  (cd "$T/wide" && seq 1 10050 | xargs touch && for i in 1 500 9000; do ln "$i" "link$i"; done)
  printf 'x%.0s' $(seq 1 300) >"$T/wide/5000"
}
make_tree || bail "cannot build the test tree"

# compare NAME ARGS...: sorted stdout and exit status of both.
compare() {
  local name=$1
  shift
  local s_out=$WORK/s.out g_out=$WORK/g.out s_rc g_rc
  # shellcheck disable=SC2086
  timeout "$TIMEOUT" "$DU" ${DU_EXTRA:-} "$@" >"$s_out" 2>"$WORK/s.err"
  s_rc=$?
  du -b "$@" >"$g_out" 2>"$WORK/g.err"
  g_rc=$?
  if [ "$s_rc" -ne "$g_rc" ]; then
    ko "$name: exit $s_rc, du $g_rc ($(head -2 "$WORK/s.err"))"
  elif ! cmp -s <(sort "$s_out") <(sort "$g_out"); then
    ko "$name: output differs: $(diff <(sort "$s_out") <(sort "$g_out") | head -5 | tr '\n' '|')"
  else
    ok "$name"
  fi
}

note "$(date +%T) tree built"
for flags in "" "-a" "-s" "-l" "-a -l" "-s -l"; do
  # shellcheck disable=SC2086
  compare "tree ${flags:-default}" $flags "$T"
done
compare "trailing slash" "$T/a/"
compare "several operands share hard links" -a "$T/links" "$T/other" "$T/a"
compare "the same directory twice" "$T/a" "$T/a"
compare "a file operand" "$T/a/one"
compare "a symlink operand is not followed" "$T/other/dir_symlink"
compare "a missing operand" "$T/nope" "$T/a"
DU_EXTRA="-j 1" compare "one worker (-j 1)" -a "$T"
DU_EXTRA="-j 3" compare "three workers (-j 3)" -a "$T"
# The statx of the entries as direct system calls (--sync-stat), all in
# batches through the I/O driver (--stat=uring), and auto switching to
# batches in every directory that probes (SPINDLE_DU_SLOW_STATX_NS=0).
for mode in "--sync-stat" "--stat=uring"; do
  for flags in "" "-a" "-l"; do
    # shellcheck disable=SC2086
    DU_EXTRA="$mode" compare "$mode ${flags:-default}" $flags "$T"
  done
  DU_EXTRA="$mode" compare "$mode several operands" -a "$T/links" "$T/other" "$T/a"
done
export SPINDLE_DU_SLOW_STATX_NS=0
for flags in "" "-a" "-l"; do
  # shellcheck disable=SC2086
  compare "--stat=auto, every statx slow, ${flags:-default}" $flags "$T"
done
unset SPINDLE_DU_SLOW_STATX_NS

# --json: one entry per du line.
if "$DU" --json "$T" | python3 -c '
import json, sys
rows = json.load(sys.stdin)
sys.exit(0 if rows and all(set(r) == {"path", "bytes"} for r in rows) else 1)'; then
  if [ "$("$DU" --json "$T" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))')" = "$(du -b "$T" | wc -l)" ]; then
    ok "--json: one object per line of du"
  else
    ko "--json: row count differs from du"
  fi
else
  ko "--json: not a JSON array of {path, bytes}"
fi

# A bad flag: usage error, exit 1 as du.
if "$DU" --no-such-flag "$T" >/dev/null 2>&1; then ko "bad flag accepted"; else ok "bad flag refused"; fi

# --- unreadable directories (as nobody when root: root reads everything)
RUNAS=()
if [ "$(id -u)" -eq 0 ]; then
  if command -v setpriv >/dev/null &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$DU" --version >/dev/null 2>&1; then
    RUNAS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  fi
fi
if [ "$(id -u)" -eq 0 ] && [ ${#RUNAS[@]} -eq 0 ]; then
  skip "running as root and cannot run as nobody: unreadable-directory checks"
else
  U=$WORK/unreadable
  mkdir -p "$U/open/sub" "$U/closed/inner" "$U/noexec/sub"
  printf '12345' >"$U/open/f"
  printf 'abc' >"$U/closed/inner/hidden"
  printf 'xy' >"$U/noexec/f"
  chmod 755 "$U" "$U/open" "$U/open/sub"
  chmod 644 "$U/open/f"
  chmod 000 "$U/closed"
  # Readable but not searchable: the names are listed, every statx of an
  # entry fails (du: cannot access ..., not descended).
  chmod 644 "$U/noexec"
  for mode in "" "--sync-stat" "--stat=uring"; do
    label="unreadable directories${mode:+ ($mode)}"
    # shellcheck disable=SC2086
    "${RUNAS[@]}" "$DU" $mode "$U" >"$WORK/s.out" 2>"$WORK/s.err"
    s_rc=$?
    "${RUNAS[@]}" du -b "$U" >"$WORK/g.out" 2>"$WORK/g.err"
    g_rc=$?
    if [ $s_rc -eq 1 ] && [ $g_rc -eq 1 ] && cmp -s <(sort "$WORK/s.out") <(sort "$WORK/g.out"); then
      ok "$label: exit 1, the rest counted"
    else
      ko "$label: exit $s_rc (du $g_rc): $(diff <(sort "$WORK/s.out") <(sort "$WORK/g.out") | head -3 | tr '\n' '|')"
    fi
    if [ "$(sed 's/^spindle-du: //' "$WORK/s.err")" = "$(sed 's/^du: //' "$WORK/g.err")" ]; then
      ok "$label: du's messages"
    else
      ko "$label: messages '$(cat "$WORK/s.err")' vs '$(cat "$WORK/g.err")'"
    fi
  done
  chmod 755 "$U/closed" "$U/noexec"
fi

note "$(date +%T) generated tree done"
# --- a real tree
if [ -n "$SANITIZED" ]; then
  compare "/usr/include" /usr/include
  compare "/usr/include -a" -a /usr/include
else
  compare "/usr -s" -s /usr
  compare "/usr" /usr
  compare "/usr/include -a" -a /usr/include
fi

tap_end
