#!/bin/bash
# wordfreq_vs_coreutils.sh SPINDLE_WORDFREQ_BINARY [sanitized]
#
# Compares spindle-wordfreq (examples/processes) byte for byte with the
# reference pipeline over the same files:
#   find -H PATH -type f -print0 | xargs -0 sed -s '$a\' | tr -cs A-Za-z '\n' |
#     grep -v '^$' | LC_ALL=C sort | uniq -c
# (sed -s '$a\' is cat that ends every file with a newline: a word never
# runs on from one file into the next).
# on a generated tree (words split across buffer-sized files, mixed case,
# digits and punctuation between words, empty files, a symlink not to be
# followed), on /usr/include with several reader/shard counts, then the
# error cases: a missing path (exit 1, the rest counted), an unknown option
# and a bad count (exit 2), and --help (exit 0; CLI11 parses the arguments). With "sanitized" (an ASan or TSan build)
# /usr/include is compared once instead of twice. TAP output
# (tests/scan/tap.sh).
set -u
export LC_ALL=C

WF=${1:?usage: wordfreq_vs_coreutils.sh SPINDLE_WORDFREQ_BINARY}
WF=$(cd "$(dirname "$WF")" && pwd)/$(basename "$WF")
SANITIZED=${2:-}
HERE=$(cd "$(dirname "$0")" && pwd)

# shellcheck source=../scan/tap.sh
source "$HERE/../scan/tap.sh"

WORK=$(mktemp -d /tmp/wordfreq_vs_coreutils.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

reference() {
  find -H "$@" -type f -print0 | xargs -0 sed -s '$a\' | tr -cs A-Za-z '\n' | grep -v '^$' | sort | uniq -c
}

# compare NAME ARGS... -- PATHS...: spindle-wordfreq ARGS PATHS vs reference PATHS.
compare() {
  local name=$1
  shift
  local args=()
  while [ "$1" != "--" ]; do
    args+=("$1")
    shift
  done
  shift
  reference "$@" >"$WORK/want" 2>/dev/null
  if ! "$WF" "${args[@]}" "$@" >"$WORK/got" 2>"$WORK/err"; then
    ko "$name: exit status $? ($(head -c 300 "$WORK/err"))"
    return
  fi
  if cmp -s "$WORK/want" "$WORK/got"; then
    ok "$name ($(wc -l <"$WORK/want") words)"
  else
    ko "$name: output differs: $(diff "$WORK/want" "$WORK/got" | head -5 | tr '\n' '|')"
  fi
}

# A generated tree.
T=$WORK/tree
mkdir -p "$T/a/b" "$T/c"
python3 - "$T" <<'PY'
import os, random, sys
root = sys.argv[1]
rng = random.Random(4)
words = ["alpha", "Beta", "gamma", "DELTA", "x", "spindle", "process", "Mailbox", "pid"] + [
    "".join(rng.choice("abcXYZ") for _ in range(rng.randint(1, 9))) for _ in range(300)]
seps = [" ", "\n", "  ", ", ", "3", "--", "\t", "_", "é", "'", "42x"]
for d in ["", "a", "a/b", "c"]:
    for i in range(12):
        n = rng.choice([0, 1, 10, 1000, 20000])
        text = "".join(rng.choice(words) + rng.choice(seps) for _ in range(n))
        with open(os.path.join(root, d, f"f{i}.txt"), "w", encoding="utf-8") as f:
            f.write(text)
with open(os.path.join(root, "c", "binary.bin"), "wb") as f:
    f.write(bytes(rng.randrange(256) for _ in range(100000)))
PY
ln -s "$T/a" "$T/c/link-to-a"  # below the command line: not followed
compare "generated tree" -- "$T"
compare "generated tree, 1 reader 1 shard" -r 1 -s 1 -- "$T"
compare "generated tree, 7 readers 13 shards 1 worker" -j 1 -r 7 -s 13 -- "$T"
compare "two operands" -- "$T/a" "$T/c"

if [ -d /usr/include ]; then
  compare "/usr/include" -- /usr/include
  if [ -z "$SANITIZED" ]; then
    compare "/usr/include, 2 readers 3 shards" -r 2 -s 3 -- /usr/include
  fi
else
  skip "no /usr/include"
fi

# Errors.
"$WF" "$T/a" "$WORK/missing" >"$WORK/got" 2>"$WORK/err"
rc=$?
reference "$T/a" >"$WORK/want"
if [ $rc -eq 1 ] && grep -q "missing" "$WORK/err" && cmp -s "$WORK/want" "$WORK/got"; then
  ok "missing path: exit 1, the rest counted"
else
  ko "missing path: exit $rc, stderr: $(head -c 200 "$WORK/err")"
fi
"$WF" --bogus "$T" >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--bogus" "$WORK/err" && grep -q "^usage:" "$WORK/err"; then
  ok "unknown option: exit 2, named, with a usage line"
else
  ko "unknown option: exit $rc"
fi
"$WF" --help >"$WORK/out" 2>"$WORK/err"
rc=$?
if [ $rc -eq 0 ] && grep -q -- "--readers" "$WORK/out"; then ok "--help: exit 0"; else ko "--help: exit $rc"; fi
"$WF" -s 0 "$T" >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc -eq 2 ]; then ok "bad shard count: exit 2"; else ko "bad shard count: exit $rc"; fi
"$WF" >/dev/null 2>"$WORK/err"
rc=$?
if [ $rc -eq 2 ]; then ok "no path: exit 2"; else ko "no path: exit $rc"; fi

tap_end
