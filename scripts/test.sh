#!/usr/bin/env bash
# test.sh — the whole test suite, from a fresh clone.
#
# Installs what the suite needs, idempotently (fast when already there):
# the Docker Engine (Debian's docker.io, started if no daemon answers),
# PostgreSQL's server binaries (scripts/postgres-up.sh), the
# pinned agent CLIs from npm, the test images built locally, Debian's
# python3 packages of the Python client's tests (httpx, pytest, setuptools,
# wheel, venv), Debian's chromium (the web console's browser tests), and the Kubernetes test cluster's packages and binaries
# (scripts/kube-up.sh --prepare: built from source, cached;
# integration/kubernetes starts the cluster when a test needs it and
# stops it), and the trace
# test's OpenTelemetry Collector (scripts/build-otelcol.sh: built from its
# Go modules, cached). Then runs go
# vet, the gofmt check, every test with the race detector and the Python
# client's pytest suite (clients/python).
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./sandbox/...   # only these packages (still installs)
#   scripts/test.sh ./clients/python  # only the Python client's pytest suite
#
# The whole suite runs integration/presets and the Python tests beside the
# other packages (see below). The log ends with the CPU time of each
# package's test binary (scripts/lib/cputime.sh) and the Docker Engine's.
#
# Environment: OUTPOST_CACHE (install cache, default ~/.cache/outpost),
# OUTPOST_TEST_SKIP_SETUP=1 (run the tests with whatever is installed),
# GOTESTFLAGS (extra go test flags), OUTPOST_TEST_P (packages at a time,
# default 2), OUTPOST_PYTHON (the Python of the client's tests, default
# Debian's /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== [+%ss] %s\n' "$SECONDS" "$*" >&2; }

# engine_cpu prints the CPU seconds (user and system) that dockerd and
# containerd have used, 0 when neither runs.
engine_cpu() {
	local pid total=0 f
	for pid in $(pgrep -x dockerd || true) $(pgrep -x containerd || true); do
		read -ra f <"/proc/$pid/stat" 2>/dev/null || continue
		# utime and stime are fields 14 and 15 (the command has no space).
		total=$((total + f[13] + f[14]))
	done
	echo $((total / $(getconf CLK_TCK)))
}

# machine_cpu prints the machine's busy and idle clock ticks since boot
# (/proc/stat: idle and iowait are idle, the rest busy), to say how much
# of the cores the tests left unused.
machine_cpu() {
	local cpu user nice system idle iowait irq softirq steal
	read -r cpu user nice system idle iowait irq softirq steal _ </proc/stat
	echo "$((user + nice + system + irq + softirq + steal)) $((idle + iowait))"
}

# failures prints each failing test of a go test (or pytest) log with the
# indented lines that follow it (at most 80 a test), and any panic.
failures() {
	awk '
		/^[[:space:]]*--- FAIL/ { n = 80; print; next }
		/^(panic:|FAIL[[:space:]]|fatal error:|=+ FAILURES|FAILED )/ { print; n = 0; next }
		n > 0 && /^[[:space:]]/ { print; n--; next }
		{ n = 0 }
	' "$1"
}

kube_pid=
if [[ "${OUTPOST_TEST_SKIP_SETUP:-}" != 1 ]]; then
	# The trace test's OpenTelemetry Collector, built from its Go modules
	# (CPU-bound, cached): beside the other installs.
	step "OpenTelemetry Collector (in the background)"
	mkdir -p "${TMPDIR:-/tmp}"
	otelcol_log=$(mktemp "${TMPDIR:-/tmp}/outpost-otelcol.XXXXXX")
	scripts/build-otelcol.sh >"$otelcol_log" 2>&1 &
	otelcol_pid=$!
	if [[ $(id -u) == 0 ]]; then
		# The cluster's cold build is CPU-bound (minutes) and the other
		# installs mostly wait on the network and disks: run it beside them.
		# (The build needs no package; kube-up.sh --prepare installs the
		# cluster's packages afterwards, so apt never runs twice at once.)
		step "Kubernetes test cluster: building its binaries (in the background)"
		mkdir -p "${TMPDIR:-/tmp}"
		kube_log=$(mktemp "${TMPDIR:-/tmp}/outpost-kube-build.XXXXXX")
		scripts/kube-build.sh >"$kube_log" 2>&1 &
		kube_pid=$!
		step "Docker Engine"
		scripts/docker-up.sh
		step "test images"
		# serve: deploy/kubernetes's image, which integration/kubernetes
		# (TestFleetOnCluster) loads into the test cluster
		OUTPOST_SKIP_DOCKER_UP=1 scripts/build-images.sh busybox debian sshd sshd-node serve
	else
		echo "test.sh: not root: skipping the Docker Engine install; docker tests need a running engine" >&2
	fi
	if [[ $(id -u) == 0 ]]; then step "PostgreSQL"; scripts/postgres-up.sh; fi
	if [[ $(id -u) == 0 ]]; then
		# The Python client's tests use only what Debian ships (Python's
		# package index is not reachable from every machine).
		step "Debian packages: the Python client's python3, bubblewrap, chromium, acct"
		# bubblewrap: the local sandbox's isolation (isolation=auto|namespaces).
		# chromium: the web console's browser tests (server/ui, docs/console.md).
		# acct: process accounting, the log's CPU seconds by command.
		py_pkgs=(python3 python3-httpx python3-pytest python3-setuptools python3-wheel python3-venv bubblewrap chromium acct)
		if [[ $(dpkg-query -W -f='${db:Status-Abbrev}\n' "${py_pkgs[@]}" 2>/dev/null | grep -c '^ii') != "${#py_pkgs[@]}" ]]; then
			DEBIAN_FRONTEND=noninteractive apt-get update -qq
			DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${py_pkgs[@]}" >/dev/null
		fi
	fi
	step "pinned agent CLIs"
	scripts/install-clis.sh >/dev/null
	step "TypeScript client dependencies"
	# npm ci from the committed lockfile, again only when the lockfile changed.
	lock=$(sha256sum clients/typescript/package-lock.json | cut -d' ' -f1)
	if [[ "$(cat clients/typescript/node_modules/.outpost-lock 2>/dev/null)" != "$lock" ]]; then
		(cd clients/typescript && npm ci --no-audit --no-fund >/dev/null && echo "$lock" >node_modules/.outpost-lock)
	fi
	if [[ -n $kube_pid ]]; then
		step "Kubernetes test cluster: waiting for the build, then its packages"
		if ! wait "$kube_pid"; then
			cat "$kube_log" >&2
			echo "test.sh: scripts/kube-build.sh failed" >&2
			exit 1
		fi
		cat "$kube_log" >&2
		rm -f "$kube_log"
		scripts/kube-up.sh --prepare
	fi
	step "OpenTelemetry Collector: waiting for the build"
	wait "$otelcol_pid" || { cat "$otelcol_log" >&2; echo "test.sh: scripts/build-otelcol.sh failed" >&2; exit 1; }
	cat "$otelcol_log" >&2
	rm -f "$otelcol_log"
fi

step "go vet"
# With -race: vet compiles every dependency to read its export data, and
# the race-instrumented compilation is the one go test -race below needs,
# so it is done once. Measured on an empty build cache, 2 cores: go vet
# then the race build of every test binary took 795 + 779 CPU-s; go vet
# -race then the same build, 827 + 112 (docs/benchmarks.md).
go vet -race ./...
step "gofmt"
unformatted=$(gofmt -l . 2>&1 | grep -v '^vendor/' || true)
if [[ -n "$unformatted" ]]; then
	echo "gofmt needed:" >&2
	echo "$unformatted" >&2
	exit 1
fi

# ./clients/python in the list (or no list) runs the Python client's tests.
pkgs=() python_tests=$(($# == 0))
for p in "$@"; do
	if [[ ${p%/} == ./clients/python || ${p%/} == clients/python ]]; then python_tests=1; else pkgs+=("$p"); fi
done
# The whole suite runs four things at once: integration/presets (the real
# CLIs of the last presets, mostly waiting on their retries and bootstraps:
# four tests at a time), integration/kubernetes (waiting on pods) and the
# Python client's tests beside every other package. Their output follows
# the main run's.
# go test's own vet pass is off (-vet=off): `go vet -race ./...` above ran every
# analyzer on the same packages, test files included. On an empty build
# cache go test's pass cost about 130 CPU-seconds more (974 vet processes,
# from process accounting), a repeat of work already done.
side=() fail=0
# Every test binary runs under scripts/lib/cputime.sh, which notes its CPU
# time; the end of the log lists the packages that took the most, and the
# Docker Engine's own CPU over the tests.
export OUTPOST_ROOT=$PWD OUTPOST_TEST_CPU_LOG OUTPOST_TEST_BUILDS
OUTPOST_TEST_CPU_LOG=$(mktemp "${TMPDIR:-/tmp}/outpost-cpu.XXXXXX")
# The test processes share their builds of cmd/outpost, cmd/outpost-sandbox
# and the rest (internal/testenv.SharedBuildsVariable): the first to need
# one links it, the others take it. A dozen processes each linked their
# own before (137 links in a run, 116 CPU-s).
OUTPOST_TEST_BUILDS=$(mktemp -d "${TMPDIR:-/tmp}/outpost-builds.XXXXXX")
cpuexec=(-exec "$PWD/scripts/lib/cputime.sh")
engine_cpu0=$(engine_cpu)
read -r busy0 idle0 < <(machine_cpu)
# Process accounting (root, Debian's acct) over the tests: every process
# that ends, in containers and the cluster too, is one record, so the end
# of the log can say which commands took the machine's CPU (compilers,
# linkers, the real CLIs' node, the cluster's binaries), not only the test
# binaries. It is the machine's one accounting file while the tests run.
acct_file=
if [[ $(id -u) == 0 ]] && command -v accton >/dev/null && command -v sa >/dev/null; then
	acct_file=$(mktemp "${TMPDIR:-/tmp}/outpost-acct.XXXXXX")
	accton "$acct_file" >/dev/null 2>&1 || acct_file=
fi
if [[ $# -eq 0 ]]; then
	# The longest packages first (integration ~18 min and providers/docker
	# ~6 min on a two-core machine), so that the rest fills the slots beside
	# them instead of waiting behind.
	long=(./integration ./providers/docker)
	mapfile -t pkgs < <(go list ./... | grep -v -e '/integration/presets$' -e '/integration$' -e '/integration/kubernetes$' -e '/providers/docker$')
	pkgs=("${long[@]}" "${pkgs[@]}")
	presets_log=$(mktemp "${TMPDIR:-/tmp}/outpost-presets.XXXXXX")
	# shellcheck disable=SC2086
	go test -race -count=1 -vet=off -timeout 30m -parallel 4 "${cpuexec[@]}" ${GOTESTFLAGS:-} ./integration/presets >"$presets_log" 2>&1 &
	side+=("$!:$presets_log:go test ./integration/presets")
	# integration/kubernetes mostly waits on the cluster's pods (104 CPU-s
	# of its own over 810 s when it took a slot of the main run, its tests
	# one at a time): its tests run beside each other, each in a namespace
	# of its own, and the package beside the main run.
	kube_log=$(mktemp "${TMPDIR:-/tmp}/outpost-kube.XXXXXX")
	# shellcheck disable=SC2086
	go test -race -count=1 -vet=off -timeout 25m -parallel 6 "${cpuexec[@]}" ${GOTESTFLAGS:-} ./integration/kubernetes >"$kube_log" 2>&1 &
	side+=("$!:$kube_log:go test ./integration/kubernetes")
fi
if [[ $python_tests == 1 ]]; then
	# Debian's Python, whose packages the set-up installed (the tests
	# build the outpost binary, or take $OUTPOST_BIN).
	python_log=$(mktemp "${TMPDIR:-/tmp}/outpost-pytest.XXXXXX")
	"${OUTPOST_PYTHON:-/usr/bin/python3}" -m pytest -q -p no:cacheprovider clients/python >"$python_log" 2>&1 &
	side+=("$!:$python_log:Python client: pytest")
fi
if [[ ${#pkgs[@]} -gt 0 ]]; then
	step "go test"
	# shellcheck disable=SC2086
	# Two packages at a time (go test's default on two cores). Three were
	# tried once, beside another build on the machine: it was 97% busy over
	# the tests, the real CLIs' retries in integration/presets outran its
	# 20 min bound and integration took 29 min. OUTPOST_TEST_P sets another number.
	main_log=$(mktemp "${TMPDIR:-/tmp}/outpost-gotest.XXXXXX")
	go test -race -count=1 -vet=off -timeout 30m -p "${OUTPOST_TEST_P:-2}" "${cpuexec[@]}" ${GOTESTFLAGS:-} "${pkgs[@]}" 2>&1 | tee "$main_log" || fail=1
fi
failed_log=$(mktemp "${TMPDIR:-/tmp}/outpost-failed.XXXXXX")
[[ -n ${main_log:-} ]] && failures "$main_log" >>"$failed_log"
for s in "${side[@]}"; do
	IFS=: read -r pid log what <<<"$s"
	wait "$pid" || fail=1
	step "$what"
	cat "$log"
	failures "$log" >>"$failed_log"
	rm -f "$log"
done
# A long log is often cut to its two ends: the failing tests again, last.
if [[ -s $failed_log ]]; then
	step "what failed (again, from the logs above)"
	cat "$failed_log"
fi
rm -f "$failed_log" "${main_log:-}"
step "CPU seconds of the test binaries, the most first"
{
	echo "     cpu     user   system     wall  package"
	awk '{printf "%8.1f %8.1f %8.1f %8.1f  %s\n", $1 + $2, $1, $2, $3, $4}' "$OUTPOST_TEST_CPU_LOG" | sort -g -r | awk 'NR <= 12'
} >&2
awk '{u += $1; s += $2} END {printf "all %d packages: %.0f s user, %.0f s system\n", NR, u, s}' "$OUTPOST_TEST_CPU_LOG" >&2
printf 'the Docker Engine (dockerd and containerd): %s s\n' "$(($(engine_cpu) - engine_cpu0))" >&2
read -r busy1 idle1 < <(machine_cpu)
awk -v b=$((busy1 - busy0)) -v i=$((idle1 - idle0)) -v hz="$(getconf CLK_TCK)" -v n="$(nproc)" 'BEGIN {
	if (b + i > 0) printf "the machine over the tests (%d cores, compiles, cluster and containers included): %.0f s busy, %.0f s idle (%.0f%% busy)\n", n, b / hz, i / hz, 100 * b / (b + i)
}' >&2
if [[ -n $acct_file ]]; then
	accton off >/dev/null 2>&1 || true
	step "CPU seconds by command over the tests (process accounting: processes that ended), the most first"
	# sa's columns (--print-seconds): calls, then real and CPU (user +
	# system) seconds a call, then the command; the first row is the sum.
	{
		printf '%8s %10s  %s\n' calls cpu command
		sa -a --print-seconds --dont-read-summary-files -f "$acct_file" 2>/dev/null |
			awk 'NR == 1 { printf "%8d %10.1f  %s\n", $1, $1 * $3, "(all)"; next }
				{ printf "%8d %10.1f  %s\n", $1, $1 * $3, $NF }' | sort -k2,2 -g -r -s | awk 'NR <= 21'
	} >&2 || true
	rm -f "$acct_file"
fi
rm -f "$OUTPOST_TEST_CPU_LOG"
rm -rf "$OUTPOST_TEST_BUILDS"
step "done (exit $fail): set-up and tests took ${SECONDS}s"
exit "$fail"
