#!/usr/bin/env bash
# chaos.sh — the chaos run of docs/scale.md ("Chaos"): `outpost-load chaos`
# on a PostgreSQL server and a Docker daemon of its own, which it restarts
# during the run; the machine's own Docker Engine and PostgreSQL are never
# touched (the test image is copied from the machine's engine with
# docker save | docker load).
#
#   scripts/chaos.sh                    # 3 replicas, 9 conversations, every 3rd on docker
#   scripts/chaos.sh --conversations 30 # flags go to outpost-load chaos
#
# Its private daemons live in one temporary directory, removed at the end:
# PostgreSQL (initdb, pg_ctl; a Unix socket only) and dockerd (its own -H
# unix socket, --data-root, --exec-root, --pidfile and containerd, in a
# network namespace of its own; no bridge, no iptables: the sandboxes run
# with network none). Run as root
# (dockerd); PostgreSQL then runs as outpost-pg (scripts/postgres-up.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
self="$PWD/scripts/chaos.sh"

pgbin() { dirname "$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sort -V | tail -1 || command -v initdb)"; }
asuser() { if [[ $(id -u) == 0 ]]; then runuser -u outpost-pg -- "$@"; else "$@"; fi; }
pgctl() { asuser "$(pgbin)/pg_ctl" -D "$1/pg/data" "${@:2}"; }

# dockerd_start DIR: a daemon of its own in DIR, waited for (60 s).
dockerd_start() {
	local d=$1
	# In a network namespace of its own: a dockerd without a bridge
	# (--bridge=none) deletes the host's docker0 at its start, which the
	# machine's own engine (and every test on it) needs; in its own
	# namespace it finds none to delete.
	unshare --net dockerd -H "unix://$d/docker.sock" --data-root "$d/docker" --exec-root "$d/exec" --pidfile "$d/docker.pid" \
		--bridge=none --iptables=false --ip-masq=false --ip6tables=false --userland-proxy=false \
		>>"$d/dockerd.log" 2>&1 &
	for _ in $(seq 1 600); do
		if DOCKER_HOST="unix://$d/docker.sock" docker version >/dev/null 2>&1; then return 0; fi
		sleep 0.1
	done
	echo "chaos.sh: the private dockerd did not answer; see $d/dockerd.log" >&2
	return 1
}

# dockerd_stop DIR: SIGTERM to the daemon of DIR, waited for (its
# containers are stopped with it: no live restore).
dockerd_stop() {
	local pid
	pid=$(cat "$1/docker.pid" 2>/dev/null) || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
}

case "${1:-}" in
restart-postgres) pgctl "$2" -m immediate -w restart >/dev/null; exit ;;
restart-docker) dockerd_stop "$2" && dockerd_start "$2"; exit ;;
esac

dir=$(mktemp -d /tmp/outpost-chaos-XXXXXX)
chmod 0711 "$dir"
cleanup() {
	pgctl "$dir" -m immediate stop >/dev/null 2>&1 || true
	dockerd_stop "$dir" || true
	umount "$dir"/docker/overlay2/*/merged 2>/dev/null || true
	umount "$dir/docker" 2>/dev/null || true # dockerd mounts its data root on itself
	rm -rf "$dir"
}
trap cleanup EXIT

mkdir -p "$dir/pg"
if [[ $(id -u) == 0 ]]; then chown outpost-pg "$dir/pg"; fi
asuser "$(pgbin)/initdb" -D "$dir/pg/data" -U postgres --auth=trust -E UTF8 --locale=C --no-sync >/dev/null
asuser mkdir -m 0755 "$dir/pg/sock"
pgctl "$dir" -l "$dir/pg/log" -w -o "-k $dir/pg/sock -p 5498 -c listen_addresses= -c max_connections=300" start >/dev/null
url="postgres://postgres@/postgres?host=$dir/pg/sock&port=5498"

dockerd_start "$dir"
docker save outpost/busybox:test | DOCKER_HOST="unix://$dir/docker.sock" docker load >/dev/null
go build -o "$dir/outpost-load" ./cmd/outpost-load

echo "chaos.sh: $(date -u +%FT%TZ), load average $(cut -d' ' -f1-3 /proc/loadavg); private PostgreSQL and dockerd in $dir" >&2
DOCKER_HOST="unix://$dir/docker.sock" "$dir/outpost-load" chaos --store "$url" --docker-every 3 \
	--restart-postgres "$self restart-postgres $dir" --restart-docker "$self restart-docker $dir" "$@"
