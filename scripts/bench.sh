#!/usr/bin/env bash
# bench.sh — reproducible overhead figures: each benchmark pair runs a
# sub-benchmark "direct" (the invocation outpost wraps, run by hand) and one
# or more others through outpost; this prints the median ns/op of each and
# the ratio to "direct", as a Markdown table (docs/benchmarks.md). A paired
# benchmark, which runs both ways within each iteration and reports the
# median of its per-pair ratios as a metric named "ratio" or "A/B" (the ACP
# benchmarks), gets a row per such metric: the median over the runs.
#
#   scripts/bench.sh                       # every pair
#   scripts/bench.sh BenchmarkEchoTurn     # one pair
#
# Environment: COUNT (runs per benchmark, default 10), BENCHTIME (default
# 50x), PKGS (default ./...). Run on a quiet machine: the figures are wall
# time.
set -euo pipefail
cd "$(dirname "$0")/.."
pattern="${1:-.}"
count="${COUNT:-10}"
benchtime="${BENCHTIME:-50x}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# shellcheck disable=SC2086
go test -run '^$' -bench "$pattern" -benchtime "$benchtime" -count "$count" ${PKGS:-./...} | tee "$out" >&2
echo "| benchmark | median | ratio to direct |"
echo "|---|---|---|"
(awk '
/^Benchmark/ && /ns\/op/ {
	name = $1; sub(/-[0-9]+$/, "", name)
	for (i = 2; i <= NF; i++) {
		if ($(i) == "ns/op") v = $(i-1)
		if ($(i) == "ratio" || ($(i) != "ns/op" && $(i) ~ /^[a-z-]+\/[a-z-]+$/)) pairs[name " " $(i)] = pairs[name " " $(i)] " " $(i-1)
	}
	vals[name] = vals[name] " " v
}
function median(s,   a, n, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
END {
	for (name in vals) m[name] = median(vals[name])
	for (name in m) {
		base = name; sub(/\/[^\/]*$/, "/direct", base)
		ratio = (base in m && base != name) ? sprintf("%.3f×", m[name] / m[base]) : "—"
		printf "| %s | %.2f ms | %s |\n", name, m[name] / 1e6, ratio
	}
	for (k in pairs) {
		split(k, nk, " ")
		printf "| %s (paired, %s) | — | %.3f× |\n", nk[1], nk[2], median(pairs[k])
	}
}' "$out" | sort)
