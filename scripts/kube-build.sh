#!/usr/bin/env bash
# kube-build.sh — build the Kubernetes binaries the test cluster runs, from the
# Go module proxy, and cache them. Called by scripts/kube-up.sh; idempotent.
#
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kubelet,
# kube-proxy and kubectl from k8s.io/kubernetes@$OUTPOST_KUBE_VERSION into
#   ${OUTPOST_CACHE:-~/.cache/outpost}/kube/<version>/bin
# and does nothing when they are already there; a cache missing some of them
# (one from before kube-proxy was added) gets only the missing ones built. The Go build cache it needs
# (~3 GB) is private and deleted after the build; the modules (~560 MB) go to
# the ordinary module cache.
#
# It also builds the agent-sandbox controller (the kubernetes provider's
# via=agent-sandbox mode) from the module sigs.k8s.io/agent-sandbox@$OUTPOST_AGENT_SANDBOX_VERSION
# (its package cmd/agent-sandbox-controller, with the module's own go.sum) and
# copies the module's CRDs (k8s/crds/*.yaml) beside it, into
#   ${OUTPOST_CACHE:-~/.cache/outpost}/kube/agent-sandbox/<version>/{bin,crds}
#
# Environment: OUTPOST_CACHE, OUTPOST_KUBE_VERSION (default v1.34.4),
# OUTPOST_KUBE_STAGING_VERSION (default derived: v1.34.4 -> v0.34.4),
# OUTPOST_AGENT_SANDBOX_VERSION (default v1.0.1), GO.
set -euo pipefail

readonly VERSION=${OUTPOST_KUBE_VERSION:-v1.34.4}
readonly STAGING=${OUTPOST_KUBE_STAGING_VERSION:-v0.${VERSION#v1.}}
readonly CACHE=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/kube/$VERSION
readonly BIN=$CACHE/bin
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
readonly GO

say() { printf 'kube-build: %s\n' "$*" >&2; }

# build_agent_sandbox builds the agent-sandbox controller and copies its CRDs
# (cached: nothing when they are there).
build_agent_sandbox() {
	local v=${OUTPOST_AGENT_SANDBOX_VERSION:-v1.0.1}
	local dir=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/kube/agent-sandbox/$v
	[[ -f $dir/.complete && "$(cat "$dir/.complete")" == "$v" ]] && return 0
	local w mdir t
	t=$(date +%s)
	w=$(mktemp -d "${TMPDIR:-/tmp}/outpost-agent-sandbox-build.XXXXXX")
	say "building the agent-sandbox controller $v (cold: about 6 min of CPU; 70 min of wall time measured at load average 40)"
	mdir=$(cd "$w" && GOTOOLCHAIN=local "$GO" mod download -json "sigs.k8s.io/agent-sandbox@$v" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
	[[ -n $mdir ]] || { say "cannot download sigs.k8s.io/agent-sandbox@$v"; rm -rf "$w"; return 1; }
	rm -rf "$dir" && mkdir -p "$dir/bin" "$dir/crds"
	(cd "$mdir" && GOCACHE=$w/gocache GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local \
		"$GO" build -trimpath -ldflags "-s -w" -o "$dir/bin/agent-sandbox-controller" ./cmd/agent-sandbox-controller) || { rm -rf "$w"; return 1; }
	cp "$mdir"/k8s/crds/*.yaml "$dir/crds/"
	chmod -R u+w "$dir"
	rm -rf "$w"
	echo "$v" >"$dir/.complete"
	say "agent-sandbox controller built in $(($(date +%s) - t))s into $dir"
}
build_agent_sandbox

readonly CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
missing=()
if [[ -f $BIN/.complete && "$(cat "$BIN/.complete")" == "$VERSION" ]]; then
	for c in "${CMDS[@]}"; do [[ -x $BIN/$c ]] || missing+=("$c"); done
	((${#missing[@]})) || exit 0
else
	missing=("${CMDS[@]}")
fi

start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/outpost-kube-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "building ${missing[*]} of Kubernetes $VERSION (cold, all: about 10 minutes on 2 cores, ≥4 GB of memory)"
export GOCACHE=$work/gocache GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOTOOLCHAIN=local
cd "$work"
kdir=$("$GO" mod download -json "k8s.io/kubernetes@$VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
[[ -n $kdir ]] || { say "cannot download k8s.io/kubernetes@$VERSION"; exit 1; }
# The module zip lacks its staging modules: replace each with its published version.
{
	printf 'module outpostkube\n\ngo 1.24.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$VERSION"
	sed -n '/^replace (/,/^)/p' "$kdir/go.mod" | grep '=>' | awk -v v="$STAGING" '{print "\t"$1" => "$1" "v}'
	printf ')\n'
} >go.mod
pkgs=()
for c in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
{
	printf '//go:build tools\n\npackage tools\n\nimport (\n'
	printf '\t_ "%s"\n' "${pkgs[@]}"
	printf ')\n'
} >tools.go
"$GO" mod tidy
mm=${VERSION#v}
major=${mm%%.*}
mm=${mm#*.}
minor=${mm%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
	ldflags+=" -X $pkg.gitCommit=0000000000000000000000000000000000000000 -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
mkdir -p "$work/bin"
gostart=$(date +%s)
"$GO" build -trimpath -ldflags "$ldflags" -o "$work/bin/" "${pkgs[@]}"
say "go build of ${missing[*]}: $(($(date +%s) - gostart))s"
if ((${#missing[@]} < ${#CMDS[@]})); then
	mv "$work/bin/"* "$BIN/"
else
	rm -rf "$BIN"
	mkdir -p "$CACHE"
	mv "$work/bin" "$BIN"
fi
echo "$VERSION" >"$BIN/.complete"
say "built in $(($(date +%s) - start))s into $BIN"
