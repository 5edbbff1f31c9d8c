#!/usr/bin/env bash
# test.sh — the whole test suite, from a fresh clone.
#
# Installs what the suite needs, idempotently (fast when already there):
# the Docker Engine (Debian's docker.io, started if no daemon answers),
# PostgreSQL's server binaries (scripts/postgres-up.sh), the
# pinned agent CLIs from npm, the test images built locally, and the
# Kubernetes test cluster's packages and binaries (scripts/kube-up.sh
# --prepare: built from source, cached; integration/kubernetes starts the
# cluster and stops it). Then runs go vet, the gofmt check and every test
# with the race detector.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./sandbox/...   # only these packages (still installs)
#
# Environment: OUTPOST_CACHE (install cache, default ~/.cache/outpost),
# OUTPOST_TEST_SKIP_SETUP=1 (run the tests with whatever is installed),
# GOTESTFLAGS (extra go test flags).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*" >&2; }

kube_pid=
if [[ "${OUTPOST_TEST_SKIP_SETUP:-}" != 1 ]]; then
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
		OUTPOST_SKIP_DOCKER_UP=1 scripts/build-images.sh
	else
		echo "test.sh: not root: skipping the Docker Engine install; docker tests need a running engine" >&2
	fi
	if [[ $(id -u) == 0 ]]; then step "PostgreSQL"; scripts/postgres-up.sh; fi
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
fi

step "go vet"
go vet ./...
step "gofmt"
unformatted=$(gofmt -l . 2>&1 | grep -v '^vendor/' || true)
if [[ -n "$unformatted" ]]; then
	echo "gofmt needed:" >&2
	echo "$unformatted" >&2
	exit 1
fi

step "go test"
pkgs=("$@")
[[ ${#pkgs[@]} -gt 0 ]] || pkgs=(./...)
# shellcheck disable=SC2086
go test -race -count=1 -timeout 20m ${GOTESTFLAGS:-} "${pkgs[@]}"
