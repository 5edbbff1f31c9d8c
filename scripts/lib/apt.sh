#!/usr/bin/env bash
# apt.sh — sourced by scripts/build-images.sh and scripts/docker-up.sh,
# which define say (a line on stderr) and die (say, then exit 1).
#
# apt_install PACKAGE...: install Debian packages quietly, without their
# Recommends (root only). The package lists are refreshed first when they
# lack a package, and once more before a retry when the install fails (a
# stale mirror); the log is /tmp/outpost-apt.log, whose tail is shown on
# failure.
apt_install() {
	export DEBIAN_FRONTEND=noninteractive NEEDRESTART_SUSPEND=1
	[[ $(id -u) -eq 0 ]] || die "need root to apt-get install $*"
	local log=/tmp/outpost-apt.log
	if ! apt-cache show "$@" >/dev/null 2>&1; then
		say "apt-get update (package lists lack: $*)"
		apt-get update -qq >>"$log" 2>&1 || { tail -n 20 "$log" >&2; return 1; }
	fi
	if ! apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1; then
		say "apt-get install $* failed; refreshing package lists and retrying (log: $log)"
		apt-get update -qq >>"$log" 2>&1 || true
		apt-get install -y -qq --no-install-recommends "$@" >>"$log" 2>&1 || { tail -n 20 "$log" >&2; return 1; }
	fi
}
