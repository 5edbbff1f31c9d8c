#!/usr/bin/env bash
# scale.sh — the scale curves of docs/benchmarks.md ("Scale"): runs the
# load harness (cmd/outpost-load) at the issue's sizes and writes its JSON
# lines, the Markdown tables and the SVG plots.
#
#   scripts/scale.sh                 # every curve, full sizes
#   SIZES=small scripts/scale.sh     # reduced sizes (minutes on 2 cores)
#   scripts/scale.sh concurrency     # one curve: concurrency, stored, watchers, replicas
#   STORED="100000" scripts/scale.sh stored   # the stored curve at these sizes only
#
# Output: $OUT (default docs/images/scale) holds runs.jsonl, the plots
# (*.svg) and tables.md, which go into docs/benchmarks.md by hand with the
# date and load average it prints. PostgreSQL: $OUTPOST_LOAD_PG (a
# loopback or Unix-socket URL), else a private server started here like
# internal/pgtest's (scripts/postgres-up.sh installs it), fsync on as the
# filesystem store's writes are durable. Run on a quiet machine: the
# figures are CPU and wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
which="${1:-all}"
out="${OUT:-docs/images/scale}"
mkdir -p "$out"
bin=$(mktemp -d)
pgdir=""
cleanup() {
	if [[ -n $pgdir ]]; then
		pgctl stop -m fast >/dev/null 2>&1 || true
		rm -rf "$pgdir"
	fi
	rm -rf "$bin"
}
trap cleanup EXIT
go build -o "$bin/outpost-load" ./cmd/outpost-load
load() { "$bin/outpost-load" --json "$out/runs.jsonl" "$@" >&2; }

if [[ ${SIZES:-full} == small ]]; then
	concurrency=(1 10 30 100)
	stored=(10 100 1000 10000)
	watchers=(1 10 30)
	replicas=(1 2 3)
	perreplica=20
else
	concurrency=(1 10 100 300 1000)
	stored=(10 100 1000 10000 100000)
	watchers=(1 10 30 100)
	replicas=(1 2 3)
	perreplica=100
fi

pgbin() { dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || command -v initdb)"; }
asuser() { if [[ $(id -u) == 0 ]]; then runuser -u outpost-pg -- "$@"; else "$@"; fi; }
pgctl() { asuser "$(pgbin)/pg_ctl" -D "$pgdir/data" "$@"; }

# pgstart starts a private PostgreSQL server (in this shell, so that the
# trap stops it) unless $OUTPOST_LOAD_PG names one.
pgstart() {
	if [[ -n ${OUTPOST_LOAD_PG:-} || -n $pgdir ]]; then
		return
	fi
	pgdir=$(mktemp -d /tmp/outpost-scale-pg-XXXXXX)
	chmod 0711 "$pgdir"
	if [[ $(id -u) == 0 ]]; then chown outpost-pg "$pgdir"; fi
	asuser "$(pgbin)/initdb" -D "$pgdir/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
	asuser mkdir -m 0755 "$pgdir/sock"
	pgctl -l "$pgdir/log" -w -o "-k $pgdir/sock -p 5499 -c listen_addresses= -c max_connections=300" start >/dev/null
}

# pg prints a URL of a new database (after pgstart).
pg() {
	if [[ -n ${OUTPOST_LOAD_PG:-} ]]; then
		echo "$OUTPOST_LOAD_PG"
		return
	fi
	local db="load$RANDOM$RANDOM"
	asuser "$(pgbin)/createdb" -h "$pgdir/sock" -p 5499 -U postgres "$db"
	echo "postgres://postgres@/$db?host=$pgdir/sock&port=5499"
}

echo "scale.sh: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg), sizes ${SIZES:-full}" >&2

if [[ -n ${STORED:-} ]]; then
	read -ra stored <<<"$STORED"
fi
if [[ $which == all || $which == concurrency ]]; then
	for n in "${concurrency[@]}"; do
		turns=$((n >= 300 ? 2 : (n >= 30 ? 3 : 10)))
		load --label "concurrency" --conversations "$n" --turns "$turns"
	done
fi
if [[ $which == all || $which == stored || $which == replicas ]]; then
	pgstart
fi
if [[ $which == all || $which == stored ]]; then
	for n in "${stored[@]}"; do
		# Seeding 100,000 conversations (each put durable) takes minutes.
		load --label "stored filesystem" --conversations 0 --stored "$n" --timeout 60m
		url=$(pg)
		load --label "stored postgres" --conversations 0 --stored "$n" --store "$url" --timeout 60m
	done
fi
if [[ $which == all || $which == watchers ]]; then
	for k in "${watchers[@]}"; do
		load --label "watchers" --conversations 10 --turns 3 --watchers "$k"
	done
fi
if [[ $which == all || $which == replicas ]]; then
	for r in "${replicas[@]}"; do
		url=$(pg)
		load --label "replicas" --conversations $((perreplica * r)) --turns 3 --replicas "$r" --store "$url"
	done
fi
"$bin/outpost-load" plot --out "$out" "$out/runs.jsonl"
echo "scale.sh: done, $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg); see $out/tables.md" >&2
