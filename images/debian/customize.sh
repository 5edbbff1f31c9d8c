#!/bin/sh
# Runs inside the debootstrapped bookworm tree (chroot) before it is tarred
# and `docker import`ed as outpost/debian:test.
set -eu

# Non-root user for agent CLIs; outpost picks the user at container creation.
if ! getent group agent >/dev/null; then groupadd --gid 1000 agent; fi
if ! getent passwd agent >/dev/null; then
	useradd --uid 1000 --gid 1000 --create-home --home-dir /home/agent --shell /bin/bash agent
fi
chmod 0755 /home/agent
chmod 1777 /tmp /var/tmp

# Check what the tests rely on.
node -e 'require("https"); require("crypto").randomUUID(); console.log("nodejs", process.version, "ok")'
test -s /etc/ssl/certs/ca-certificates.crt

# Slim down: package caches and lists (run `apt-get update` before installing).
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/log/apt/* /var/log/dpkg.log /var/log/alternatives.log
# The engine provides these at run time.
: >/etc/hostname
rm -f /etc/resolv.conf
