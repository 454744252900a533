#!/bin/bash
# scan_fifo.sh SPINDLE_SCAN_BINARY
#
# spindle-scan must never block on a FIFO: one in the tree (no writer, so an
# open without O_NONBLOCK or a read would wait forever), and one named on the
# command line (skipped, never opened). Each run is under `timeout 60`.
# Prints TAP (tap.sh) and exits non-zero on failure.
set -u
export LC_ALL=C
SCAN=${1:?usage: scan_fifo.sh SPINDLE_SCAN_BINARY}
SCAN=$(cd "$(dirname "$SCAN")" && pwd)/$(basename "$SCAN")
# shellcheck source=tap.sh
source "$(dirname "${BASH_SOURCE[0]}")/tap.sh"

WORK=$(mktemp -d /tmp/scan_fifo.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/t/sub"
mkfifo "$WORK/t/fifo" "$WORK/t/sub/fifo2" "$WORK/lonely_fifo"
printf 'foo\nbar\n' >"$WORK/t/a.txt"
printf 'foo\n' >"$WORK/t/sub/b.txt"

for b in uring threadpool; do
  (cd "$WORK" && SPINDLE_IO=$b timeout 60 "$SCAN" foo t) >"$WORK/out1" 2>"$WORK/err"
  rc=$?
  out=$(sort "$WORK/out1")
  if grep -q 'cannot start the runtime' "$WORK/err"; then
    skip "[$b] backend unavailable"
    continue
  fi
  want=$(cd "$WORK" && grep -rca foo t | grep -v ':0$' | sort)
  if [ "$out" = "$want" ] && [ $rc -eq 0 ]; then ok; else ko "[$b] FIFO in the tree: rc=$rc out=$out $(head -2 "$WORK/err")"; fi

  (cd "$WORK" && SPINDLE_IO=$b timeout 60 "$SCAN" foo lonely_fifo t/a.txt) >"$WORK/out2" 2>&1
  rc=$?
  if [ $rc -ne 124 ] && grep -qx 't/a.txt:1' "$WORK/out2"; then ok; else ko "[$b] FIFO operand: rc=$rc $(head -2 "$WORK/out2")"; fi

  (cd "$WORK" && SPINDLE_IO=$b timeout 60 "$SCAN" --all foo t/fifo) >"$WORK/out3" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && [ ! -s "$WORK/out3" ]; then ok; else ko "[$b] only a FIFO operand: rc=$rc $(head -2 "$WORK/out3")"; fi
done

tap_end
