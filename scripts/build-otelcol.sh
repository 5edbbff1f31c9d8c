#!/usr/bin/env bash
# build-otelcol.sh — build the OpenTelemetry Collector of the end-to-end trace
# test (integration/otelcol_test.go) from the Collector's Go modules, and cache
# it. Called by scripts/test.sh; idempotent.
#
# Builds internal/tools/otelcol (a Go module of its own, so that the
# Collector's dependencies stay out of outpost's go.mod: the OTLP receiver and
# the OTLP/HTTP and debug exporters, all at the release its go.mod pins) into
#   ${OUTPOST_CACHE:-~/.cache/outpost}/otelcol/<version>/otelcol
# and does nothing when a build of the same sources (go.mod, go.sum, main.go)
# is already there. Prints the binary's path.
#
# Environment: OUTPOST_CACHE, GO.
set -euo pipefail

src=$(cd "$(dirname "$0")/../internal/tools/otelcol" && pwd)
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
version=$(awk '$1 == "go.opentelemetry.io/collector/otelcol" { print $2 }' "$src/go.mod")
[[ -n $version ]] || { echo "build-otelcol: no Collector version in $src/go.mod" >&2; exit 1; }
dir=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/otelcol/$version
stamp=$(cat "$src/go.mod" "$src/go.sum" "$src/main.go" | sha256sum | cut -d' ' -f1)

if [[ -x $dir/otelcol && "$(cat "$dir/.stamp" 2>/dev/null)" == "$stamp" ]]; then
	echo "$dir/otelcol"
	exit 0
fi
mkdir -p "$dir"
start=$(date +%s)
echo "build-otelcol: building the OpenTelemetry Collector $version (cold: a few minutes on 2 cores)" >&2
tmp=$(mktemp "$dir/otelcol.XXXXXX")
trap 'rm -f "$tmp"' EXIT
(cd "$src" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOTOOLCHAIN=local "$GO" build -trimpath -o "$tmp" .)
mv -f "$tmp" "$dir/otelcol"
echo "$stamp" >"$dir/.stamp"
echo "build-otelcol: built in $(($(date +%s) - start)) s" >&2
echo "$dir/otelcol"
