# TAP output for spindle-scan's shell tests (sourced; Meson runs them with
# protocol 'tap'). Every check is one TAP line, so that Meson's log and its
# JUnit report (which .ci/run counts) show each check, and a check that
# cannot run here (no unprivileged user for permission checks, no room for a
# sparse file, no seccomp) is reported as skipped with its reason instead of
# passing silently. A script whose every check was skipped is a skipped test.
tap_n=0
passed=0
failed=0
skipped=0
# ok [WHAT]: one check passed.
ok() {
  passed=$((passed + 1))
  tap_n=$((tap_n + 1))
  echo "ok $tap_n${1:+ - $*}"
}
# ko WHAT: one check failed, and why.
ko() {
  failed=$((failed + 1))
  tap_n=$((tap_n + 1))
  echo "not ok $tap_n - $*"
}
# skip WHY: a check (or a group of them) that cannot run here.
skip() {
  skipped=$((skipped + 1))
  tap_n=$((tap_n + 1))
  echo "ok $tap_n - # SKIP $*"
}
# note TEXT: a diagnostic line.
note() { echo "# $*"; }
# notes: each line of standard input as a diagnostic line (a diff, a
# program's stderr), so that it cannot be taken for TAP.
notes() { sed 's/^/# /'; }
# bail WHY: nothing can be checked; the test fails.
bail() {
  echo "Bail out! $*"
  exit 1
}
# tap_end: the plan and the exit status (0 when no check failed).
tap_end() {
  echo "1..$tap_n"
  echo "# $passed passed, $failed failed, $skipped skipped"
  [ $failed -eq 0 ] && [ $((passed + skipped)) -gt 0 ]
}
