#!/bin/bash
# scan_vs_grep.sh SPINDLE_SCAN_BINARY
#
# Compares spindle-scan with `LC_ALL=C grep -rca [-E|-F] ... | grep -v ':0$'`
# (sorted stdout, exit status, and for error cases stderr with the program
# name normalised) on a generated tree (make_tree.py) for a set of patterns
# and flags, on both I/O backends (SPINDLE_IO=uring and threadpool), then on
# /usr/include and /usr/share/perl. Unreadable files and directories are
# tested by running both programs as `nobody` (setpriv) when we are root.
# Every scan runs under `timeout` so that a FIFO that blocks fails the test
# instead of hanging it. Prints one closing line "N passed, M failed" and
# exits non-zero when something failed.
set -u
export LC_ALL=C

SCAN=${1:?usage: scan_vs_grep.sh SPINDLE_SCAN_BINARY}
SCAN=$(cd "$(dirname "$SCAN")" && pwd)/$(basename "$SCAN")
HERE=$(cd "$(dirname "$0")" && pwd)
TIMEOUT=${SCAN_TEST_TIMEOUT:-120}

# shellcheck source=tap.sh
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

WORK=$(mktemp -d /tmp/scan_vs_grep.XXXXXX)
cleanup() {
  chmod -R u+rwx "$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
chmod 755 "$WORK"
mkdir "$WORK/tree"
python3 "$HERE/make_tree.py" "$WORK/tree" || {
  bail "cannot build the test tree"
}

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

# grep's matcher flag for spindle-scan's arguments: -E unless -F is given.
grep_mode() {
  local a
  for a in "$@"; do
    case "$a" in
      -F | --fixed-strings) return ;;
      --) break ;;
    esac
  done
  printf '%s\n' -E
}

# compare DESCRIPTION DIR [RUNAS...] -- ARGS...
# Runs both programs in DIR with ARGS, compares sorted stdout and exit status;
# with CHECK_STDERR=1 also the sorted stderr (program names normalised).
# Options in the array EXTRA go to spindle-scan only.
EXTRA=()
compare() {
  local what=$1 dir=$2
  shift 2
  local runas=()
  while [ "$1" != "--" ]; do
    runas+=("$1")
    shift
  done
  shift
  local mode
  mode=$(grep_mode "$@")
  local b
  for b in "${BACKENDS[@]}"; do
    (cd "$dir" && SPINDLE_IO=$b timeout "$TIMEOUT" "${runas[@]}" "$SCAN" -j 2 "${EXTRA[@]}" "$@") \
      >"$WORK/scan.out" 2>"$WORK/scan.err"
    local scan_rc=$?
    (cd "$dir" && "${runas[@]}" grep -rca $mode "$@") >"$WORK/grep.raw" 2>"$WORK/grep.err"
    local grep_rc=$?
    grep -av ':0$' "$WORK/grep.raw" | sort >"$WORK/grep.out"
    sort -o "$WORK/scan.out" "$WORK/scan.out"
    if [ $scan_rc -eq 124 ]; then
      ko "$what [$b]: timed out (blocked?)"
      continue
    fi
    if ! cmp -s "$WORK/scan.out" "$WORK/grep.out"; then
      ko "$what [$b]: output differs (< spindle-scan, > grep)"
      diff "$WORK/scan.out" "$WORK/grep.out" | head -10 | notes
      # Why: a crash or a sanitizer report shows only here.
      note "spindle-scan exit status $scan_rc, grep $grep_rc; spindle-scan's stderr:"
      head -40 "$WORK/scan.err" | notes
      continue
    fi
    if [ $scan_rc -ne $grep_rc ]; then
      ko "$what [$b]: exit status $scan_rc, grep $grep_rc"
      head -20 "$WORK/scan.err" | notes
      continue
    fi
    if [ "${CHECK_STDERR:-0}" = 1 ]; then
      sed 's/^spindle-scan: /PROG: /' "$WORK/scan.err" | grep -v '^PROG: warning: ' | sort >"$WORK/scan.err2"
      sed 's/^grep: /PROG: /' "$WORK/grep.err" | grep -v '^PROG: warning: ' | sort >"$WORK/grep.err2"
      if ! cmp -s "$WORK/scan.err2" "$WORK/grep.err2"; then
        ko "$what [$b]: stderr differs (< spindle-scan, > grep)"
        diff "$WORK/scan.err2" "$WORK/grep.err2" | head -10
        continue
      fi
    elif [ $grep_rc -ne 2 ] && [ -s "$WORK/scan.err" ]; then
      ko "$what [$b]: unexpected stderr: $(head -2 "$WORK/scan.err")"
      continue
    fi
    ok
  done
}

T=$WORK/tree

# ---------------------------------------------------------------- patterns
cases=(
  "-F foo"
  "-F -i hello"
  "-F hello world"
  "-e foo -e bar"
  "-F -e foo -e HELLO -i"
  "-e ''"
  "-F -e ''"
  "-e xyz -e ''"
  "fo+"
  "^abc"
  "xyz\$"
  "end\$"
  "^\$"
  "'\\<word\\>'"
  "'\\bq'"
  "'[[:digit:]]{3}'"
  "'[^a-z ]'"
  "-i '[A-F]+[0-9]'"
  "'(ab|cd)+e'"
  "-e '^\$' -e 'end\$'"
  "\$'foo\\nbaz'"
  "a.b"
  "'\\w+\\s\\w+'"
  "-i 'HELLO\\>'"
  "'x*'"
  "'(a|b)\\1'"
  "'[^x]\$'"
  "'a[^x]*b'"
  "'[[:upper:]]{4}'"
  "-i 'caf.'"
  "\$'\\r\$'"
  "'a{,2}b{2}'"
  "'\\.txt'"
  "-F '\\'"
  "-F 'x=1;'"
  "'\\W\\W\\W'"
)
for c in "${cases[@]}"; do
  eval "args=($c)"
  compare "tree: ${args[*]}" "$WORK" -- "${args[@]}" tree
done

# Operand forms: trailing slashes, several operands, a file operand, none.
compare "operand tree/" "$WORK" -- foo tree/
compare "operand tree//" "$WORK" -- foo tree//
compare "operand ./tree" "$WORK" -- foo ./tree
compare "operands src + crlf.txt" "$T" -- -i hello src crlf.txt nofinal.txt
compare "single file operand" "$T" -- foo nofinal.txt
compare "single file, no match" "$T" -- zzzz nofinal.txt
compare "single dir operand" "$T" -- foo src
compare "no operand" "$T/src" -- -i 'hello|foo'
compare "no operand, no match" "$T/src" -- zzzzqqq
compare "dot operand" "$T/src" -- foo .
compare "symlink operand (dir)" "$T" -- foo links/dirlink
compare "symlink operand (file)" "$T" -- foo links/filelink
compare "operand with special files" "$T" -- foo special
compare "non-UTF-8 names" "$T" -- -i hello names
compare "no match at all" "$WORK" -- zzzznotthere tree
compare "-H single file" "$T" -- -H foo nofinal.txt

# --all is grep -rca without the filter.
for b in "${BACKENDS[@]}"; do
  (cd "$WORK" && SPINDLE_IO=$b timeout "$TIMEOUT" "$SCAN" --all -i hello tree) | sort >"$WORK/a1"
  (cd "$WORK" && grep -rca -E -i hello tree) | sort >"$WORK/a2"
  if cmp -s "$WORK/a1" "$WORK/a2"; then ok; else ko "--all [$b] differs from grep -rca"; fi
done

# -h: counts without names; grep prints the zero counts too.
(cd "$WORK" && timeout "$TIMEOUT" "$SCAN" -h foo tree/src) | sort >"$WORK/h1"
(cd "$WORK" && grep -rca -h foo tree/src) | grep -vx 0 | sort >"$WORK/h2"
if cmp -s "$WORK/h1" "$WORK/h2"; then ok; else ko "-h differs from grep -h"; fi

# Errors: a missing operand is reported and the rest still counted.
CHECK_STDERR=1 compare "missing operand" "$T" -- foo src nope crlf.txt
CHECK_STDERR=1 compare "invalid regex" "$T" -- 'a{1,2,3}' src
CHECK_STDERR=1 compare "unmatched [" "$T" -- '[[:alpha:]' src
CHECK_STDERR=1 compare "bad back reference" "$T" -- '(a)|\1' src
"$SCAN" --no-such-flag foo "$T" >/dev/null 2>"$WORK/flag.err"
rc=$?
if [ $rc -eq 2 ] && [ -s "$WORK/flag.err" ]; then ok; else ko "bad flag: exit $rc"; fi
"$SCAN" >/dev/null 2>&1
rc=$?
if [ $rc -eq 2 ]; then ok; else ko "no pattern: exit $rc"; fi

# Unreadable files and directories: run both as nobody when we are root.
mkdir -p "$WORK/perm/open/sub" "$WORK/perm/locked_dir/inner"
printf 'foo\n' >"$WORK/perm/open/a.txt"
printf 'foo\nfoo\n' >"$WORK/perm/open/sub/b.txt"
printf 'foo\n' >"$WORK/perm/locked_dir/inner/c.txt"
printf 'foo\n' >"$WORK/perm/locked_file.txt"
chmod -R a+rX "$WORK/perm"
chmod 000 "$WORK/perm/locked_dir" "$WORK/perm/locked_file.txt"
RUNAS=()
if [ "$(id -u)" = 0 ]; then
  if command -v setpriv >/dev/null &&
    setpriv --reuid=65534 --regid=65534 --clear-groups "$SCAN" --version >/dev/null 2>&1; then
    RUNAS=(setpriv --reuid=65534 --regid=65534 --clear-groups)
  else
    skip "root, and cannot run as nobody: unreadable-file checks"
  fi
fi
if [ "$(id -u)" != 0 ] || [ ${#RUNAS[@]} -gt 0 ]; then
  CHECK_STDERR=1 compare "unreadable file and dir" "$WORK" "${RUNAS[@]}" -- foo perm
  CHECK_STDERR=1 compare "unreadable operand" "$WORK/perm" "${RUNAS[@]}" -- foo locked_file.txt open
fi

# --json: one valid JSON object per line, the same results as the text output
# (with invalid UTF-8 replaced).
b=${BACKENDS[0]}
(cd "$WORK" && SPINDLE_IO=$b timeout "$TIMEOUT" "$SCAN" -i hello tree) >"$WORK/j_text"
(cd "$WORK" && SPINDLE_IO=$b timeout "$TIMEOUT" "$SCAN" --json -i hello tree) >"$WORK/j_json"
if python3 - "$WORK/j_text" "$WORK/j_json" <<'EOF'; then ok; else ko "--json output"; fi
import json, sys
text = open(sys.argv[1], "rb").read().splitlines()
want = sorted((l.rsplit(b":", 1)[0].decode("utf-8", "replace"), int(l.rsplit(b":", 1)[1])) for l in text)
got = []
for line in open(sys.argv[2], "rb").read().splitlines():
    obj = json.loads(line.decode("utf-8"))
    got.append((obj["path"], obj["count"]))
sys.exit(0 if sorted(got) == want and len(want) > 0 else 1)
EOF

# --stats prints its summary on stderr; stdout is unchanged.
(cd "$WORK" && timeout "$TIMEOUT" "$SCAN" --stats foo tree) >"$WORK/s_out" 2>"$WORK/s_err"
if grep -q '^files:' "$WORK/s_err" && grep -q '^GB/s:' "$WORK/s_err"; then ok; else ko "--stats"; fi

# Small read buffers: many chunks, lines carried over and grown.
EXTRA=(--buffer-size 4)
compare "4 KiB buffers" "$WORK" -- -i 'hello|end$' tree
compare "4 KiB buffers, -F" "$WORK" -- -F foo tree
EXTRA=(--max-in-flight 1)
compare "1 file in flight" "$WORK" -- -F foo tree
EXTRA=(-j 1)
compare "1 worker" "$WORK" -- -i hello tree
EXTRA=()

# ----------------------------------------------------- real trees
real_cases=(
  "-F PATTERN"
  "'\\<struct\\>'"
  "-i 'int[a-z0-9]*_t'"
  "'^#define [A-Z_]+ [0-9]+\$'"
  "-F -e malloc -e free"
  "'[[:space:]]\$'"
)
for c in "${real_cases[@]}"; do
  eval "args=($c)"
  compare "/usr/include: ${args[*]}" / -- "${args[@]}" /usr/include
done
if [ -d /usr/share/perl ]; then
  compare "/usr/share/perl: sub" / -- 'sub \w+' /usr/share/perl
  compare "/usr/share/perl: -i copyright" / -- -i -F copyright /usr/share/perl
else
  skip "/usr/share/perl missing"
fi

tap_end
