#!/bin/sh
# Starts sshd with the host key and authorized key the test passes in the
# environment (OUTPOST_SSHD_HOST_KEY: an OpenSSH private key, base64;
# OUTPOST_SSHD_AUTHORIZED_KEY: one authorized_keys line), so that every
# container start has fresh keys and nothing secret is baked into the image.
set -eu
umask 077
if [ -n "${OUTPOST_SSHD_HOST_KEY:-}" ]; then
	printf '%s' "$OUTPOST_SSHD_HOST_KEY" | base64 -d >/etc/outpost/ssh_host_ed25519_key
else
	ssh-keygen -q -t ed25519 -N '' -f /etc/outpost/ssh_host_ed25519_key
fi
printf '%s\n' "${OUTPOST_SSHD_AUTHORIZED_KEY:-}" >/etc/outpost/authorized_keys
chmod 0644 /etc/outpost/authorized_keys
unset OUTPOST_SSHD_HOST_KEY OUTPOST_SSHD_AUTHORIZED_KEY
exec /usr/sbin/sshd -D -e
