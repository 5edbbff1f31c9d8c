#!/bin/sh
# Lays out the busybox test image's filesystem under ROOT ($1, default /).
# Runs in two places, with the same result:
#   - inside `docker build` (RUN, ROOT=/), with busybox as the only program;
#   - on the host against a staging dir before `docker import` (needs root
#     for chown), when docker build is not usable.
# Every command goes through "$BB" because no applet links exist yet.
set -eu
R=${1:-}
R=${R%/}
BB=${BUSYBOX:-$R/bin/busybox}

"$BB" mkdir -p "$R/bin" "$R/sbin" "$R/usr/bin" "$R/usr/sbin" "$R/etc" "$R/tmp" "$R/root" "$R/home/agent" "$R/var/tmp"
# One symlink per applet at its canonical path (bin/sh, usr/bin/env, ...),
# like `busybox --install -s`, but also usable on a staging dir.
for a in $("$BB" --list-full); do
	case "$a" in */*) ;; *) continue ;; esac   # skip top-level oddities (linuxrc)
	[ -e "$R/$a" ] || [ -L "$R/$a" ] || "$BB" ln -s /bin/busybox "$R/$a"
done
"$BB" chmod 1777 "$R/tmp" "$R/var/tmp"
"$BB" chmod 0700 "$R/root"
"$BB" chmod 0755 "$R/home/agent"
"$BB" chown 1000:1000 "$R/home/agent"
"$BB" chmod 0644 "$R/etc/passwd" "$R/etc/group"
