#!/usr/bin/env bash
# kube-down.sh — stop the cluster scripts/kube-up.sh started and undo its
# changes to the host: only the processes whose pids kube-up.sh recorded
# (and the containerd shims bound to its own socket), its mounts, network
# namespaces, cgroups, bridge, iptables chains of the kubelet and kube-proxy
# (when none existed before),
# sysctls and the fixed host paths it created. The cached binaries stay
# ($OUTPOST_CACHE/kube); OUTPOST_KUBE_PURGE=1 also removes the PKI and the
# images kept under $OUTPOST_KUBE_DIR.
set -uo pipefail

readonly VERSION=${OUTPOST_KUBE_VERSION:-v1.34.4}
readonly BIN=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/kube/$VERSION/bin
readonly D=${OUTPOST_KUBE_DIR:-/tmp/outpost-kube}
readonly E=$D/etc V=$D/var R=$D/run
readonly SOCK=$R/containerd.sock BRIDGE=outpostkube0
export KUBECONFIG=$E/admin.kubeconfig KUBECACHEDIR=$V/kubecache

t0=$(date +%s)
say() { printf 'kube-down: [+%ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }
[[ -d $D ]] || { say "nothing to do ($D does not exist)"; exit 0; }
alive() { [[ -f $R/$1.pid ]] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
stop() { # name
	alive "$1" || { rm -f "$R/$1.pid"; return 0; }
	local p
	p=$(cat "$R/$1.pid")
	kill -TERM "$p"
	for _ in $(seq 40); do
		kill -0 "$p" 2>/dev/null || break
		sleep 0.25
	done
	kill -0 "$p" 2>/dev/null && kill -KILL "$p"
	rm -f "$R/$1.pid"
}

# 1. let the kubelet tear the pods down (volumes, sandboxes, CNI); the
# agent-sandbox controller first, or it would make its pods again
stop agent-sandbox
if alive kube-apiserver && alive kubelet; then
	say "deleting every pod"
	timeout 90 "$BIN/kubectl" delete pods --all -A --grace-period=1 --wait=true >/dev/null 2>&1 || true
fi
stop kubelet
for c in kube-proxy kube-scheduler kube-controller-manager kube-apiserver; do stop $c & done
wait

# 2. what is left in our containerd
if alive containerd; then
	for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io tasks kill -s SIGKILL "$t" >/dev/null 2>&1
	done
	sleep 1
	for t in $(ctr -a "$SOCK" -n k8s.io tasks ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io tasks rm -f "$t" >/dev/null 2>&1
	done
	for c in $(ctr -a "$SOCK" -n k8s.io containers ls -q 2>/dev/null); do
		ctr -a "$SOCK" -n k8s.io containers rm "$c" >/dev/null 2>&1
	done
fi
stop containerd
# shims of OUR containerd: matched on our exact socket path, by pid
for p in $(grep -l -a -- "$SOCK" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3); do
	kill -KILL "$p" 2>/dev/null && say "killed a leftover shim ($p)"
done
stop etcd

# 3. mounts, network namespaces, cgroups, bridge, links, iptables, sysctls
findmnt -rn -o TARGET | grep "^$D/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
if [[ -f $R/netns.before ]]; then
	for n in $(ls /var/run/netns 2>/dev/null); do
		grep -qx "$n" "$R/netns.before" || { umount "/var/run/netns/$n" 2>/dev/null; rm -f "/var/run/netns/$n"; }
	done
fi
for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
	[[ -d $h ]] && find "$h" -depth -type d -exec rmdir {} \; 2>/dev/null
done
ip link del "$BRIDGE" 2>/dev/null
for l in /var/log/containers/*; do
	[[ -L $l && "$(readlink "$l")" == "$D"/* ]] && rm -f "$l"
done
if [[ -f $R/created.list ]]; then
	while read -r h; do
		case $h in
		/run/containerd) find "$h" -depth -type d -empty -delete 2>/dev/null ;; # only empty directories
		/*) rm -rf "$h" ;;
		esac
	done <"$R/created.list"
fi
if [[ -f $R/iptables.clean ]]; then # no KUBE-* chain existed before: drop the kubelet's and kube-proxy's
	[[ -x $BIN/kube-proxy ]] && "$BIN/kube-proxy" --cleanup >/dev/null 2>&1
	for ipt in iptables ip6tables; do
		for t in mangle nat filter; do
			$ipt -t $t -S 2>/dev/null | grep -E '^-A (INPUT|OUTPUT|FORWARD|PREROUTING|POSTROUTING) .*-j KUBE-' |
				sed 's/^-A/-D/' | while read -r rule; do eval "$ipt -t $t $rule"; done
			for c in $($ipt -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do $ipt -t $t -F "$c"; done
			for c in $($ipt -t $t -S 2>/dev/null | awk '/^-N KUBE-/{print $2}'); do $ipt -t $t -X "$c"; done
		done
	done
fi
while iptables -D FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment outpost-kube -j ACCEPT 2>/dev/null; do :; done
[[ -f $R/sysctl.saved ]] && sysctl -q -p "$R/sysctl.saved"
rm -rf "$V" "$R" "$D/log" "$D/cluster.env"
[[ ${OUTPOST_KUBE_PURGE:-0} == 1 ]] && rm -rf "$D"
say "down"
