#!/usr/bin/env bash
# cputime.sh — `go test -exec` wrapper of scripts/test.sh: runs one
# package's test binary (the working directory is the package's) and
# appends to $OUTPOST_TEST_CPU_LOG one line, "user sys wall package": the
# CPU seconds of the binary and of the children it waited for (the real
# CLIs, the shims, the cluster's binaries), and its wall time. The test
# binary's exit status is this script's.
set -uo pipefail
exec 3>&2 4>&1
TIMEFORMAT="%U %S %R"
t=$({ time "$@" 1>&4 2>&3; } 2>&1)
rc=$?
printf '%s %s\n' "$t" "${PWD#"${OUTPOST_ROOT:-}"/}" >>"${OUTPOST_TEST_CPU_LOG:-/dev/null}"
exit "$rc"
