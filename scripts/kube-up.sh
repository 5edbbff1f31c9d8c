#!/usr/bin/env bash
# kube-up.sh — a real single-node Kubernetes cluster on this machine, for the
# kubernetes provider's tests (integration/kubernetes) and for trying it out.
#
#   scripts/kube-up.sh        # build (cached), start, wait for a Ready node
#   scripts/kube-up.sh --prepare  # only install the packages and build the binaries
#   scripts/kube-down.sh      # stop it and undo every change to the host
#
# No cluster image can be pulled, so the cluster is built from parts:
#   - kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
#     kube-proxy (iptables mode: ClusterIP Services and 10.0.0.1:443 route
#     from the host and from pods) and kubectl from the module k8s.io/kubernetes (scripts/kube-build.sh;
#     cached in $OUTPOST_CACHE/kube/<version>/bin: ~10 min cold on 2 cores, nothing after);
#   - the agent-sandbox controller and its CRDs (the kubernetes provider's
#     via=agent-sandbox mode), built from the module sigs.k8s.io/agent-sandbox
#     (scripts/kube-build.sh, cached beside the binaries): its CRDs applied,
#     the controller (with its extensions: claims, templates, warm pools) run
#     as a host process with the admin kubeconfig, like kube-controller-manager;
#   - etcd, containerd (+ runc) and the CNI plugins from Debian;
#   - the pause image (images/kube-pause, static Go, FROM scratch) and the
#     test images (outpost/busybox:test, outpost/debian:test from
#     scripts/build-images.sh, when Docker has them) imported into a private
#     containerd: pods use imagePullPolicy Never.
# Cached binaries: ~10 s to a Ready node. Idempotent: a cluster that already
# answers is left running. containerd's image store is cached beside the
# binaries, so images are imported only when Docker's copy changed.
#
# What it writes: state under $OUTPOST_KUBE_DIR (default /tmp/outpost-kube),
# with cluster.env (KUBECONFIG=admin, OUTPOST_KUBECONFIG=a user with no
# rights until a Role binds it, CONTAINERD_ADDRESS, GATEWAY...). Host
# changes (undone by kube-down.sh): the kubelet's and kube-proxy's sysctls
# and iptables chains, the bridge outpostkube0 (10.244.0.1/24, pods' gateway to the
# host; a fixed MAC address) with one FORWARD rule (bridge to bridge), and the
# fixed host paths the kubelet and containerd use.
# Ports: 6443 (apiserver, every address: pods reach it through 10.0.0.1),
# 12379/12380 (etcd), 10250/10248 (kubelet), 10257/10259 (controller-manager,
# scheduler), 10249/10256 (kube-proxy, 127.0.0.1). Needs root,
# overlayfs, bridge/veth; amd64 is what is tested.
#
# Environment: OUTPOST_CACHE, OUTPOST_KUBE_DIR, OUTPOST_KUBE_VERSION,
# OUTPOST_KUBE_IMAGES (docker images to import; default the test images).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
readonly VERSION=${OUTPOST_KUBE_VERSION:-v1.34.4}
readonly KCACHE=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/kube
readonly BIN=$KCACHE/$VERSION/bin
readonly AS=$KCACHE/agent-sandbox/${OUTPOST_AGENT_SANDBOX_VERSION:-v1.0.1}
# containerd's root (its image store) is a cache too: kept across down/up, so
# a warm start imports nothing
readonly CROOT=$KCACHE/containerd
readonly D=${OUTPOST_KUBE_DIR:-/tmp/outpost-kube}
readonly P=$D/pki E=$D/etc V=$D/var R=$D/run L=$D/log
readonly SOCK=$R/containerd.sock
readonly NODE=outpost-kube BRIDGE=outpostkube0 SUBNET=10.244.0.0/24 GATEWAY=10.244.0.1
readonly BRIDGE_MAC=02:6f:75:74:00:01 # locally administered
readonly PAUSE=outpost/kube-pause:1
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
export KUBECONFIG=$E/admin.kubeconfig KUBECACHEDIR=$V/kubecache

t0=$(date +%s)
say() { printf 'kube-up: [+%ss] %s\n' "$(($(date +%s) - t0))" "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
[[ $(id -u) == 0 ]] || die "needs root (containerd, the kubelet, a bridge)"
alive() { [[ -f $R/$1.pid ]] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
waitfor() { # what seconds cmd...
	local what=$1 s=$2
	shift 2
	for _ in $(seq $((s * 4))); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.25
	done
	say "timeout waiting for $what; logs in $L"
	tail -n 20 "$L"/*.log >&2 || true
	return 1
}

# ---- packages and binaries
pk=()
command -v etcd >/dev/null || pk+=(etcd-server)
[[ -x /usr/lib/cni/bridge ]] || pk+=(containernetworking-plugins)
command -v containerd >/dev/null || pk+=(containerd)
command -v openssl >/dev/null || pk+=(openssl)
command -v iptables >/dev/null || pk+=(iptables)
command -v curl >/dev/null || pk+=(curl)
command -v ip >/dev/null || pk+=(iproute2)
if ((${#pk[@]})); then
	say "apt-get install ${pk[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-cache show "${pk[@]}" >/dev/null 2>&1 || apt-get update -qq >/dev/null
	# The etcd package must not start a service of its own.
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d.outpost
	[[ -e /usr/sbin/policy-rc.d ]] || { cp /usr/sbin/policy-rc.d.outpost /usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && rmpolicy=1; }
	apt-get install -y -qq --no-install-recommends "${pk[@]}" >/dev/null
	[[ ${rmpolicy:-} == 1 ]] && rm -f /usr/sbin/policy-rc.d
	rm -f /usr/sbin/policy-rc.d.outpost
fi
GO=$GO "$ROOT/scripts/kube-build.sh"
if [[ ${1:-} == --prepare ]]; then
	say "prepared: packages installed, binaries in $BIN"
	exit 0
fi

mkdir -p "$P" "$E/cni/net.d" "$V" "$R" "$L"

# ---- already running?
if alive kube-apiserver && alive kubelet && "$BIN/kubectl" get --raw=/readyz >/dev/null 2>&1; then
	say "the cluster is already up"
	up=1
fi

# ---- host paths the kubelet and containerd hard-code: remember which did
# not exist, so kube-down.sh removes them
if [[ ! -f $R/created.list ]]; then
	: >"$R/created.list.tmp"
	for h in /var/log/containers /var/lib/kubelet /var/lib/cni /run/containerd; do
		[[ -e $h ]] || echo "$h" >>"$R/created.list.tmp"
	done
	mv "$R/created.list.tmp" "$R/created.list"
fi

# ---- images, as docker-archive tars (no registry, no docker needed for pause)
mkimage() { # ref rootfs-dir entrypoint-json user out.tar
	local w cfg diff
	w=$(mktemp -d "$V/img.XXXXXX")
	tar --numeric-owner --owner=0 --group=0 --mtime=@0 --sort=name -C "$2" -cf "$w/layer.tar" .
	diff=sha256:$(sha256sum "$w/layer.tar" | cut -d' ' -f1)
	printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"User":"%s"},"rootfs":{"type":"layers","diff_ids":["%s"]}}' "$3" "$4" "$diff" >"$w/config.json"
	cfg=$(sha256sum "$w/config.json" | cut -d' ' -f1)
	mv "$w/config.json" "$w/$cfg.json"
	printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["layer.tar"]}]' "$cfg" "$1" >"$w/manifest.json"
	tar -C "$w" -cf "$5" manifest.json "$cfg.json" layer.tar
	rm -rf "$w"
}
mkdir -p "$CROOT"
if [[ ! -f $KCACHE/pause.tar ]]; then
	say "pause image"
	rm -rf "$V/pause-root" && mkdir -p "$V/pause-root"
	(cd "$ROOT" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false "$GO" build -trimpath -ldflags "-s -w" -o "$V/pause-root/pause" ./images/kube-pause)
	mkimage "$PAUSE" "$V/pause-root" '["/pause"]' 65535:65535 "$V/pause.tar.tmp"
	mv "$V/pause.tar.tmp" "$KCACHE/pause.tar"
	rm -rf "$V/pause-root"
fi

# ---- PKI
if [[ ! -f $P/outpost.crt ]]; then
	say "pki"
	hostip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
	(
		cd "$P"
		openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 3650 \
			-keyout ca.key -out ca.crt -subj "/CN=outpost-kube-ca" 2>/dev/null
		cert() { # name subject [SAN]
			openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
			printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth,clientAuth\n%s\n' \
				"${3:+subjectAltName=$3}" >"$1.ext"
			openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile "$1.ext" -out "$1.crt" 2>/dev/null
		}
		cert apiserver "/CN=kube-apiserver" "IP:127.0.0.1,IP:10.0.0.1${hostip:+,IP:$hostip},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc"
		cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
		cert admin "/O=system:masters/CN=admin"
		cert controller-manager "/CN=system:kube-controller-manager"
		cert scheduler "/CN=system:kube-scheduler"
		cert kubelet "/O=system:nodes/CN=system:node:$NODE"
		# A user with no rights of its own: tests bind the shipped Role to it.
		cert outpost "/CN=outpost-ci"
		openssl genrsa -out sa.key 2048 2>/dev/null
		openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
	)
fi
if [[ ! -f $P/kube-proxy.crt ]]; then # also for a PKI made before kube-proxy was added
	(
		cd "$P"
		openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout kube-proxy.key -out kube-proxy.csr -subj "/CN=system:kube-proxy" 2>/dev/null
		printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth\n' >kube-proxy.ext
		openssl x509 -req -in kube-proxy.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -extfile kube-proxy.ext -out kube-proxy.crt 2>/dev/null
	)
fi

# ---- configuration
for u in admin controller-manager scheduler kubelet kube-proxy outpost; do
	cat >"$E/$u.kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters:
- name: outpost-kube
  cluster: {server: "https://127.0.0.1:6443", certificate-authority: "$P/ca.crt"}
users:
- name: $u
  user: {client-certificate: "$P/$u.crt", client-key: "$P/$u.key"}
contexts:
- name: outpost-kube
  context: {cluster: outpost-kube, user: $u}
current-context: outpost-kube
KC
done
cat >"$E/containerd.toml" <<TOML
version = 2
root = "$CROOT/root"
state = "$R/containerd/state"
[grpc]
  address = "$SOCK"
[plugins."io.containerd.internal.v1.opt"]
  path = "$V/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "$PAUSE"
  netns_mounts_under_state_dir = true
  # Without CAP_SYS_RESOURCE the kernel refuses oom_score_adj < 0 (the
  # pause container's -998): clamp to containerd's own instead.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "$R/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$E/cni/net.d"
TOML
cat >"$E/cni/net.d/10-outpost.conflist" <<CNI
{"cniVersion": "0.4.0", "name": "outpost-kube",
 "plugins": [{"type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": "$V/cni", "ranges": [[{"subnet": "$SUBNET", "gateway": "$GATEWAY"}]],
            "routes": [{"dst": "0.0.0.0/0"}]}}]}
CNI
cat >"$E/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: "$P/ca.crt"}
authorization: {mode: Webhook}
cgroupDriver: cgroupfs
containerRuntimeEndpoint: "unix://$SOCK"
podLogsDir: "$V/log/pods"
failSwapOn: false
failCgroupV1: false
readOnlyPort: 0
port: 10250
healthzPort: 10248
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
evictionHard: {memory.available: "100Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
YAML
cat >"$D/cluster.env" <<ENV
KUBECONFIG=$E/admin.kubeconfig
OUTPOST_KUBECONFIG=$E/outpost.kubeconfig
OUTPOST_KUBE_USER=outpost-ci
CONTAINERD_ADDRESS=$SOCK
CONTAINERD_NAMESPACE=k8s.io
GATEWAY=$GATEWAY
POD_CIDR=$SUBNET
NODE=$NODE
KUBECTL=$BIN/kubectl
AGENT_SANDBOX_READYZ=http://127.0.0.1:18081/readyz
ENV

# ---- what the host looked like, for kube-down.sh
[[ -f $R/sysctl.saved ]] || for s in vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes net.ipv4.conf.all.route_localnet; do
	echo "$s=$(sysctl -n $s)"
done >"$R/sysctl.saved"
[[ -f $R/netns.before ]] || ls /var/run/netns >"$R/netns.before" 2>/dev/null || : >"$R/netns.before"
if [[ ! -f $R/iptables.saved ]]; then
	(iptables-save 2>/dev/null; ip6tables-save 2>/dev/null) | grep -c KUBE- >/dev/null || touch "$R/iptables.clean"
	touch "$R/iptables.saved"
fi

start() { # name cmd...
	local n=$1
	shift
	alive "$n" && return 0
	setsid "$@" >"$L/$n.log" 2>&1 </dev/null &
	echo $! >"$R/$n.pid"
}

# ---- the bridge exists before the first pod, so a test can listen on
# the gateway address from the start
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
	ip link add "$BRIDGE" type bridge
	touch "$R/bridge.created"
fi
# A fixed address: a bridge without one takes the lowest of its ports',
# which changes as pods come and go, and the pods' ARP entries for the
# gateway go stale (their connections to the host and to 10.0.0.1 would
# stall).
ip link set dev "$BRIDGE" address "$BRIDGE_MAC"
[[ $(ip -4 addr show dev "$BRIDGE") == *"inet $GATEWAY/"* ]] || ip addr add "$GATEWAY/24" dev "$BRIDGE"
ip link set "$BRIDGE" up
# Pod to pod across the bridge (a pod reaching a Service whose endpoint is
# a pod): the host's FORWARD policy may be DROP (Docker's), and kube-proxy
# accepts only established flows. kube-down.sh deletes the rule.
iptables -C FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment outpost-kube -j ACCEPT 2>/dev/null ||
	iptables -I FORWARD -i "$BRIDGE" -o "$BRIDGE" -m comment --comment outpost-kube -j ACCEPT

hostip=$(ip -4 route get 1.1.1.1 2>/dev/null | sed -n 's/.* src \([0-9.]*\).*/\1/p')
[[ -n $hostip ]] || hostip=$(hostname -I | awk '{print $1}')
say "etcd, containerd"
start etcd etcd --name outpost-kube --data-dir "$V/etcd" \
	--listen-client-urls http://127.0.0.1:12379 --advertise-client-urls http://127.0.0.1:12379 \
	--listen-peer-urls http://127.0.0.1:12380 --initial-advertise-peer-urls http://127.0.0.1:12380 \
	--initial-cluster outpost-kube=http://127.0.0.1:12380
start containerd containerd --config "$E/containerd.toml"
waitfor containerd 30 ctr -a "$SOCK" version
say "import images"
ctr -a "$SOCK" -n k8s.io images ls -q | grep -cx "docker.io/$PAUSE" >/dev/null || ctr -a "$SOCK" -n k8s.io images import "$KCACHE/pause.tar" >/dev/null
imgs=${OUTPOST_KUBE_IMAGES-outpost/busybox:test outpost/debian:test}
present=()
for i in $imgs; do
	if docker image inspect "$i" >/dev/null 2>&1; then
		id=$(docker image inspect -f '{{.Id}}' "$i")
		# skip what containerd already has at the same id
		if [[ "$(cat "$CROOT/imported.$(echo "$i" | tr '/:' '__')" 2>/dev/null)" != "$id" ]]; then
			present+=("$i")
			echo "$id" >"$CROOT/imported.$(echo "$i" | tr '/:' '__').new"
		fi
	else
		say "docker has no $i (scripts/build-images.sh): not imported"
	fi
done
if ((${#present[@]})); then
	docker save "${present[@]}" | ctr -a "$SOCK" -n k8s.io images import - >/dev/null
	for f in "$CROOT"/imported.*.new; do mv "$f" "${f%.new}"; done
fi
waitfor etcd 30 curl -sf http://127.0.0.1:12379/health

if [[ -z ${up:-} ]]; then
	say "kube-apiserver"
	start kube-apiserver "$BIN/kube-apiserver" --etcd-servers=http://127.0.0.1:12379 \
		--bind-address=0.0.0.0 --advertise-address="$hostip" --secure-port=6443 \
		--tls-cert-file="$P/apiserver.crt" --tls-private-key-file="$P/apiserver.key" --client-ca-file="$P/ca.crt" \
		--service-cluster-ip-range=10.0.0.0/24 --authorization-mode=Node,RBAC \
		--service-account-issuer=https://kubernetes.default.svc.cluster.local \
		--service-account-key-file="$P/sa.pub" --service-account-signing-key-file="$P/sa.key" \
		--kubelet-client-certificate="$P/apiserver-kubelet-client.crt" --kubelet-client-key="$P/apiserver-kubelet-client.key" \
		--kubelet-preferred-address-types=InternalIP --cert-dir="$V/apiserver"
	waitfor apiserver 90 "$BIN/kubectl" get --raw=/readyz
	say "controller-manager, scheduler, kubelet"
	start kube-controller-manager "$BIN/kube-controller-manager" --kubeconfig="$E/controller-manager.kubeconfig" \
		--authentication-kubeconfig="$E/controller-manager.kubeconfig" --authorization-kubeconfig="$E/controller-manager.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false --service-account-private-key-file="$P/sa.key" \
		--root-ca-file="$P/ca.crt" --use-service-account-credentials=true --cert-dir="$V/kcm"
	start kube-scheduler "$BIN/kube-scheduler" --kubeconfig="$E/scheduler.kubeconfig" \
		--authentication-kubeconfig="$E/scheduler.kubeconfig" --authorization-kubeconfig="$E/scheduler.kubeconfig" \
		--bind-address=127.0.0.1 --leader-elect=false
	start kubelet "$BIN/kubelet" --config="$E/kubelet.yaml" --kubeconfig="$E/kubelet.kubeconfig" \
		--root-dir="$V/kubelet" --cert-dir="$V/kubelet/pki" --hostname-override="$NODE" --node-ip="$hostip"
fi
# kube-proxy (iptables mode) routes ClusterIP Services, 10.0.0.1:443 (the
# API server, for in-cluster config) included, from the host and from pods.
# conntrack-max-per-core=0 leaves the host's conntrack table size alone.
start kube-proxy "$BIN/kube-proxy" --kubeconfig="$E/kube-proxy.kubeconfig" --proxy-mode=iptables \
	--hostname-override="$NODE" --cluster-cidr="$SUBNET" --conntrack-max-per-core=0 \
	--bind-address=127.0.0.1 --metrics-bind-address=127.0.0.1:10249 --healthz-bind-address=127.0.0.1:10256
waitfor kube-proxy 60 curl -sf http://127.0.0.1:10256/healthz
waitfor "node Ready" 120 "$BIN/kubectl" wait --for=condition=Ready "node/$NODE" --timeout=2s
waitfor "the default service account" 60 "$BIN/kubectl" get serviceaccount default
# agent-sandbox: its CRDs, then its controller (leader election off: one;
# metrics and probes on loopback ports of their own)
"$BIN/kubectl" apply --server-side -f "$AS/crds" >/dev/null
waitfor "agent-sandbox's CRDs" 60 "$BIN/kubectl" wait --for=condition=Established crd --all --timeout=2s
start agent-sandbox "$AS/bin/agent-sandbox-controller" --kubeconfig="$E/admin.kubeconfig" --extensions \
	--leader-elect=false --metrics-bind-address=127.0.0.1:18080 --health-probe-bind-address=127.0.0.1:18081
waitfor agent-sandbox 60 curl -sf http://127.0.0.1:18081/readyz
say "up: export KUBECONFIG=$KUBECONFIG (or source $D/cluster.env)"
