#!/usr/bin/env bash
# postgres-up.sh — install what the PostgreSQL tests need, idempotently.
#
# Installs Debian's postgresql server binaries (initdb, pg_ctl, postgres)
# when none is found, and creates the outpost-pg system user the tests run
# the server as when they run as root (PostgreSQL refuses to run as root).
# It starts no server: each test package starts its own, on a private
# socket directory and port (internal/pgtest). Run as root; fast when
# everything is there.
set -euo pipefail

have_pg() {
	command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null
}

if ! have_pg; then
	if [[ $(id -u) != 0 ]]; then
		echo "postgres-up.sh: PostgreSQL is not installed and this is not root: run it as root" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	# postgresql-common would create and start a cluster: tests start
	# their own, so only the server binaries are installed, with no
	# cluster created.
	mkdir -p /etc/postgresql-common
	if [[ ! -f /etc/postgresql-common/createcluster.conf ]] || ! grep -q '^create_main_cluster = false' /etc/postgresql-common/createcluster.conf; then
		echo 'create_main_cluster = false' >>/etc/postgresql-common/createcluster.conf
	fi
	apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi

if [[ $(id -u) == 0 ]] && ! id outpost-pg >/dev/null 2>&1; then
	useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin outpost-pg
fi

bin=$(command -v initdb 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/initdb | sort -V | tail -1)
"$bin" --version
