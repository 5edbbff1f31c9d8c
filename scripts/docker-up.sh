#!/usr/bin/env bash
# docker-up.sh — make sure a Docker Engine answers on the default socket.
#
# Idempotent: when a daemon already answers this returns at once (well under
# a second). Otherwise, as root, it installs Debian's engine (docker.io) if
# dockerd is missing, picks a storage driver that works on this machine and
# starts dockerd in the background, then waits (bounded) until it answers.
#
# Environment:
#   OUTPOST_DOCKERD_LOG             dockerd log file   (default /tmp/outpost-dockerd.log)
#   OUTPOST_DOCKER_STORAGE_DRIVER   force a storage driver (overlay2, fuse-overlayfs, vfs)
#   OUTPOST_DOCKERD_EXTRA_ARGS      extra dockerd flags (word-split)
#   OUTPOST_DOCKER_WAIT             seconds to wait for the daemon (default 60)
#   DOCKER_HOST                     honoured: if set to anything but the default
#                                   unix socket we only check it, never start a daemon
set -euo pipefail

readonly SOCK=/var/run/docker.sock
readonly LOG=${OUTPOST_DOCKERD_LOG:-/tmp/outpost-dockerd.log}
readonly WAIT=${OUTPOST_DOCKER_WAIT:-60}
readonly PIDFILE=/var/run/docker.pid

say() { printf 'docker-up: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

daemon_answers() {
	command -v docker >/dev/null 2>&1 || return 1
	docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1
}

report_up() {
	local v
	v=$(docker version --format 'engine {{.Server.Version}}, API {{.Server.APIVersion}}' 2>/dev/null || true)
	say "daemon is up (${v:-unknown version}) on ${DOCKER_HOST:-unix://$SOCK}"
}

# ---- fast path ---------------------------------------------------------------
if daemon_answers; then
	report_up
	exit 0
fi

if [[ -n ${DOCKER_HOST:-} && ${DOCKER_HOST} != "unix://$SOCK" && ${DOCKER_HOST} != "unix:///run/docker.sock" ]]; then
	die "DOCKER_HOST=$DOCKER_HOST does not answer; not starting a local daemon for a non-default host"
fi
unset DOCKER_HOST

[[ $(id -u) -eq 0 ]] || die "no Docker daemon answers on $SOCK and starting one needs root (try: sudo $0)"

# ---- install -----------------------------------------------------------------
# shellcheck source=lib/apt.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/apt.sh"

if ! command -v dockerd >/dev/null 2>&1; then
	say "dockerd not found; installing Debian's docker.io (this takes ~20-60 s)"
	# docker.io Recommends are not needed; iptables, containerd and runc are Depends.
	apt_install docker.io
	command -v dockerd >/dev/null 2>&1 || die "docker.io installed but dockerd still not on PATH"
fi
if ! command -v docker >/dev/null 2>&1; then
	die "docker client not on PATH (docker.io ships /usr/bin/docker; check PATH=$PATH)"
fi

# ---- systemd hosts: let systemd own the daemon ---------------------------------
if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
	say "systemd detected; systemctl start docker"
	if systemctl start docker; then
		for _ in $(seq 1 "$WAIT"); do
			daemon_answers && { report_up; exit 0; }
			sleep 1
		done
	fi
	say "systemd did not bring docker up; starting dockerd by hand"
fi

# ---- a dockerd that is still starting? wait for it, do not start a second one ---
existing_dockerd_pid() {
	local pid
	[[ -s $PIDFILE ]] || return 1
	pid=$(<"$PIDFILE")
	[[ $pid =~ ^[0-9]+$ ]] || return 1
	kill -0 "$pid" 2>/dev/null || return 1
	alive "$pid" || return 1
	[[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 1
	echo "$pid"
}

# alive PID: the process exists and is not a zombie (PID 1 on some sandboxes
# reaps orphans late, so a killed dockerd can linger as a zombie for a while).
alive() {
	local state
	kill -0 "$1" 2>/dev/null || return 1
	state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)
	[[ -n $state && $state != Z && $state != X ]]
}

if pid=$(existing_dockerd_pid); then
	say "dockerd (pid $pid) is running but not answering yet; waiting up to ${WAIT}s"
	for _ in $(seq 1 $((WAIT * 4))); do
		daemon_answers && { report_up; exit 0; }
		alive "$pid" || break
		sleep 0.25
	done
	alive "$pid" && die "dockerd pid $pid does not answer on $SOCK; see $LOG (kill it and re-run)"
	say "dockerd pid $pid is gone; starting a new one"
fi

# Stale pid files (dead or zombie owner) make dockerd, and its managed
# containerd, refuse to start or try to reuse a dead process: remove them.
for f in "$PIDFILE" /var/run/docker/containerd/containerd.pid; do
	if [[ -e $f ]]; then
		p=$(cat "$f" 2>/dev/null || true)
		if ! [[ $p =~ ^[0-9]+$ ]] || ! alive "$p"; then
			say "removing stale pid file $f (pid ${p:-?} is gone)"
			rm -f "$f"
		fi
	fi
done

# ---- storage driver ----------------------------------------------------------
# Probe a real overlay mount on the filesystem that holds /var/lib/docker.
overlay_works() {
	local d rc=1
	mkdir -p /var/lib/docker
	d=$(mktemp -d /var/lib/docker/.outpost-overlay-probe.XXXXXX)
	mkdir -p "$d"/{lower,upper,work,merged}
	echo ok >"$d/lower/f"
	if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
		if [[ $(cat "$d/merged/f" 2>/dev/null) == ok ]] && echo x >"$d/merged/g" 2>/dev/null; then
			rc=0
		fi
		umount "$d/merged" 2>/dev/null || umount -l "$d/merged" 2>/dev/null || true
	fi
	rm -rf "$d"
	return $rc
}

fuse_overlayfs_works() {
	[[ -e /dev/fuse ]] || return 1
	if ! command -v fuse-overlayfs >/dev/null 2>&1; then
		say "installing fuse-overlayfs"
		apt_install fuse-overlayfs || return 1
	fi
	return 0
}

pick_storage_driver() {
	if [[ -n ${OUTPOST_DOCKER_STORAGE_DRIVER:-} ]]; then
		echo "$OUTPOST_DOCKER_STORAGE_DRIVER"
	elif overlay_works; then
		echo overlay2
	elif fuse_overlayfs_works; then
		echo fuse-overlayfs
	else
		echo vfs
	fi
}

# iptables: Debian defaults to the nft backend; switch to legacy if only that works.
iptables_ok() {
	command -v iptables >/dev/null 2>&1 || return 1
	iptables -t nat -L -n >/dev/null 2>&1 && iptables -t filter -L -n >/dev/null 2>&1
}
fix_iptables_backend() {
	iptables_ok && return 0
	if command -v iptables-legacy >/dev/null 2>&1 && iptables-legacy -t nat -L -n >/dev/null 2>&1; then
		say "iptables (nft backend) does not work here; switching alternatives to iptables-legacy"
		update-alternatives --set iptables /usr/sbin/iptables-legacy >/dev/null 2>&1 || true
		update-alternatives --set ip6tables /usr/sbin/ip6tables-legacy >/dev/null 2>&1 || true
		iptables_ok && return 0
	fi
	return 1
}

# start_dockerd ARGS... : start dockerd, wait. 0 = answers, 1 = died, 2 = timed out.
start_dockerd() {
	local pid
	say "starting: dockerd $* (log: $LOG)"
	{ printf '\n==== %s docker-up.sh: dockerd %s\n' "$(date -u +%FT%TZ)" "$*"; } >>"$LOG"
	# setsid + nohup: the daemon must outlive this script and its session.
	setsid nohup dockerd "$@" </dev/null >>"$LOG" 2>&1 &
	pid=$!
	for _ in $(seq 1 $((WAIT * 4))); do
		if daemon_answers; then return 0; fi
		if ! alive "$pid"; then
			say "dockerd exited early; last log lines:"
			log_since_last_start | grep -v 'module=grpc' | tail -n 15 | sed 's/^/    /' >&2
			return 1
		fi
		sleep 0.25
	done
	say "dockerd (pid $pid) did not answer within ${WAIT}s; stopping it"
	kill "$pid" 2>/dev/null || true
	return 2
}

# The log written by the latest start attempt, without our own header line.
log_since_last_start() { awk '/^==== .* docker-up.sh: dockerd/{buf=""; next} {buf=buf $0 "\n"} END{printf "%s", buf}' "$LOG"; }
# Only its error lines: the retry decisions below key on these.
errors_since_last_start() { log_since_last_start | grep -iE 'level=(error|fatal)|failed to start daemon|^error' || true; }

driver=$(pick_storage_driver)
say "storage driver: $driver"

net_args=()
if ! fix_iptables_backend; then
	say "iptables does not work here; starting dockerd with --iptables=false --ip-masq=false"
	say "  (containers still get bridge IPs and reach the host via the docker0 address, but have no NAT to outside)"
	net_args=(--iptables=false --ip-masq=false)
fi

# shellcheck disable=SC2206 # deliberate word splitting of user-supplied flags
extra=(${OUTPOST_DOCKERD_EXTRA_ARGS:-})

attempt() { start_dockerd --storage-driver="$1" "${@:2}" ${extra[@]+"${extra[@]}"}; }

rc=0
attempt "$driver" ${net_args[@]+"${net_args[@]}"} || rc=$?
if [[ $rc -eq 1 ]]; then
	tail_log=$(errors_since_last_start)
	if grep -qiE 'iptables|nat chain|ip6tables|nftables|xtables' <<<"$tail_log" && [[ ${#net_args[@]} -eq 0 ]]; then
		say "retrying without iptables management (--iptables=false --ip-masq=false)"
		net_args=(--iptables=false --ip-masq=false)
		rc=0; attempt "$driver" "${net_args[@]}" || rc=$?
		tail_log=$(errors_since_last_start)
	fi
	if [[ $rc -eq 1 ]] && grep -qiE 'bridge|docker0|network controller|netlink' <<<"$tail_log"; then
		say "retrying with --bridge=none: only --network none/host will work (no default bridge)"
		net_args=(--iptables=false --ip-masq=false --bridge=none)
		rc=0; attempt "$driver" "${net_args[@]}" || rc=$?
		tail_log=$(errors_since_last_start)
	fi
	if [[ $rc -eq 1 && $driver != vfs ]] && grep -qiE 'graphdriver|storage.driver|driver not supported|overlay.*(not supported|failed|invalid argument)|fuse' <<<"$tail_log"; then
		say "retrying with the vfs storage driver (slow, but works anywhere)"
		driver=vfs
		rc=0; attempt "$driver" ${net_args[@]+"${net_args[@]}"} || rc=$?
	fi
fi

if [[ $rc -ne 0 ]]; then
	die "could not start dockerd; see $LOG"
fi
report_up
