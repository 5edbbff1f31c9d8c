#!/usr/bin/env bash
# test.sh — the whole test suite, from a fresh clone.
#
# Installs what the suite needs, idempotently (fast when already there):
# the Docker Engine (Debian's docker.io, started if no daemon answers),
# PostgreSQL's server binaries (scripts/postgres-up.sh), the
# pinned agent CLIs from npm, and the test images built locally. Then runs
# go vet, the gofmt check and every test with the race detector.
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

if [[ "${OUTPOST_TEST_SKIP_SETUP:-}" != 1 ]]; then
	if [[ $(id -u) == 0 ]]; then
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
