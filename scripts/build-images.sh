#!/usr/bin/env bash
# build-images.sh — build outpost's local test images, without pulling anything.
#
#   scripts/build-images.sh              # all: busybox debian sshd sshd-node
#   scripts/build-images.sh busybox      # just one (or several, by name)
#
# Images (each also tagged with a content tag, outpost/NAME:<12 hex>, computed
# from its recipe; when that tag exists the build is skipped):
#   outpost/busybox:test  FROM scratch + Debian's static busybox, user agent 1000:1000
#   outpost/debian:test   debootstrap --variant=minbase bookworm + ca-certificates,
#                         nodejs, user agent 1000:1000 (docker import of a cached tarball)
#   outpost/sshd:test     FROM outpost/debian:test + Debian's openssh-server (apt-get in
#                         docker build; keys are given at container start by the tests)
#   outpost/sshd-node:test  FROM outpost/sshd:test + this machine's node (>= 20) at
#                         /usr/local/bin/node, for the ssh tests of Gemini CLI and Qwen Code
#   outpost/serve:test    FROM outpost/busybox:test + the static outpost command, for
#                         deploy/kubernetes (only when named: scripts/build-images.sh serve)
#
# Environment:
#   OUTPOST_CACHE           cache root (default $HOME/.cache/outpost); the debian
#                           rootfs tarball is kept in $OUTPOST_CACHE/images/
#   OUTPOST_DEBIAN_MIRROR   debootstrap mirror (default: the first deb source of this
#                           machine's apt configuration, /etc/apt/sources.list.d/*.sources
#                           URIs: or /etc/apt/sources.list deb lines)
#   OUTPOST_IMAGE_BUILDER   busybox: auto (docker build, falling back to import),
#                           build, or import                      (default auto)
#   OUTPOST_REBUILD=1       rebuild even if the content tag exists (debian still
#                           re-imports its cached tarball: delete
#                           $OUTPOST_CACHE/images/debian-*.tar to re-run debootstrap)
#   OUTPOST_SKIP_DOCKER_UP=1  do not run scripts/docker-up.sh first
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
readonly ROOT
readonly IMAGES_DIR=$ROOT/images
readonly CACHE=${OUTPOST_CACHE:-${HOME:-/root}/.cache/outpost}/images
# shellcheck source=lib/debian-mirror.sh
source "$ROOT/scripts/lib/debian-mirror.sh"
# shellcheck source=lib/apt.sh
source "$ROOT/scripts/lib/apt.sh"
readonly BUILDER=${OUTPOST_IMAGE_BUILDER:-auto}
readonly REBUILD=${OUTPOST_REBUILD:-0}
readonly DEBIAN_SUITE=bookworm
readonly IMAGE_PATH_ENV='PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
readonly LABEL_KEY=com.github.outposthq.outpost.content
# Bump to force every image to rebuild after a change in this script's recipe.
readonly RECIPE_VERSION=1

say() { printf 'build-images: %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1fs", b-a}'; }

# hash_inputs LABEL FILE... : sha256 over a label and files (by relative name and content).
hash_inputs() {
	local label=$1; shift
	{
		printf 'recipe=%s\n%s\n' "$RECIPE_VERSION" "$label"
		local f
		for f in "$@"; do
			printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "${f#"$ROOT"/}"
		done
	} | sha256sum | cut -c1-12
}

# Temporary dirs removed on exit (debootstrap trees are unmounted first).
CLEANUP=()
cleanup() {
	local d
	for d in ${CLEANUP[@]+"${CLEANUP[@]}"}; do safe_rm_tree "$d"; done
	CLEANUP=()
}
trap cleanup EXIT

image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

# retag REPO HASH OLD_ID : point REPO:test at REPO:HASH; drop the image a
# forced rebuild replaced (only if nothing else refers to it).
retag() {
	local repo=$1 hash=$2 old=${3:-} new
	docker tag "$repo:$hash" "$repo:test"
	new=$(docker image inspect --format '{{.Id}}' "$repo:$hash")
	if [[ -n $old && $old != "$new" ]]; then
		docker rmi "$old" >/dev/null 2>&1 || true
	fi
	# Drop content tags of older recipes of this image.
	local tag
	for tag in $(docker images "$repo" --format '{{.Tag}}'); do
		if [[ $tag =~ ^[0-9a-f]{12}$ && $tag != "$hash" ]]; then
			docker rmi "$repo:$tag" >/dev/null 2>&1 || true
		fi
	done
}
old_id() { docker image inspect --format '{{.Id}}' "$1" 2>/dev/null || true; }

# up_to_date REPO HASH : the content tag exists; make :test point at it.
up_to_date() {
	local repo=$1 hash=$2
	[[ $REBUILD == 1 ]] && return 1
	image_exists "$repo:$hash" || return 1
	docker tag "$repo:$hash" "$repo:test"
	return 0
}

# current NAME REPO HASH T0 : up_to_date, said.
current() {
	up_to_date "$2" "$3" || return 1
	say "$1: $2:test is up to date ($2:$3) [$(elapsed "$4")]"
}

# ---- busybox -------------------------------------------------------------------
build_busybox() {
	local repo=outpost/busybox t0 bb hash ctx files
	t0=$(now)
	bb=$(command -v busybox || true)
	if [[ -z $bb ]] || ! file_is_static "$bb"; then
		say "busybox: installing busybox-static"
		apt_install busybox-static
		bb=/bin/busybox
	fi
	file_is_static "$bb" || die "$bb is not a static binary (install busybox-static)"

	mapfile -t files < <(find "$IMAGES_DIR/busybox" -type f | LC_ALL=C sort)
	hash=$(hash_inputs "busybox-bin=$(sha256sum <"$bb" | cut -d' ' -f1)" "${files[@]}")
	if up_to_date "$repo" "$hash"; then
		say "busybox: $repo:test is up to date ($repo:$hash) [$(elapsed "$t0")]"
		return 0
	fi

	mkdir -p "$CACHE"
	ctx=$(mktemp -d "$CACHE/busybox-ctx.XXXXXX")
	CLEANUP+=("$ctx")
	cp -a "$IMAGES_DIR/busybox/." "$ctx/"
	mkdir -p "$ctx/rootfs/bin"
	cp "$bb" "$ctx/rootfs/bin/busybox"
	chmod 0755 "$ctx/rootfs/bin/busybox"

	local built=0 old
	old=$(old_id "$repo:$hash")
	if [[ $BUILDER == auto || $BUILDER == build ]]; then
		say "busybox: docker build $repo:$hash"
		if docker build -q --label "$LABEL_KEY=$hash" -t "$repo:$hash" "$ctx" >"$CACHE/busybox-build.log" 2>&1; then
			built=1
			rm -f "$CACHE/busybox-build.log"
		else
			say "busybox: docker build failed:"
			sed 's/^/    /' "$CACHE/busybox-build.log" >&2
			[[ $BUILDER == build ]] && die "docker build failed"
			say "busybox: falling back to docker import"
		fi
	fi
	if [[ $built == 0 ]]; then
		[[ $(id -u) -eq 0 ]] || die "the import path needs root (it chowns files in a staging dir)"
		local stage=$CACHE/busybox-stage.$$
		rm -rf "$stage"
		CLEANUP+=("$stage")
		mkdir -p "$stage"
		cp -a "$ctx/rootfs/." "$stage/"
		chown -R 0:0 "$stage"
		BUSYBOX=$bb sh "$ctx/setup.sh" "$stage"
		say "busybox: docker import $repo:$hash"
		tar --numeric-owner -C "$stage" -cf - . |
			docker import \
				--change "ENV $IMAGE_PATH_ENV" \
				--change 'WORKDIR /' \
				--change 'CMD ["/bin/sh"]' \
				--change "LABEL $LABEL_KEY=$hash" \
				- "$repo:$hash" >/dev/null
	fi
	retag "$repo" "$hash" "$old"

	# Smoke test: shell, applets, users, permissions.
	local out
	out=$(docker run --rm --network none "$repo:test" sh -c \
		'id agent && stat -c "%a %u:%g %n" /tmp /home/agent && env | grep ^PATH= && ls / >/dev/null && echo ok')
	[[ $out == *ok ]] || die "busybox smoke test failed: $out"
	out=$(docker run --rm --network none --user 1000:1000 "$repo:test" sh -c 'touch /home/agent/x /tmp/y && id -u')
	[[ $out == 1000 ]] || die "busybox smoke test as 1000 failed: $out"
	cleanup
	say "busybox: built $repo:test ($repo:$hash) [$(elapsed "$t0")]"
}

file_is_static() {
	# ldd prints "not a dynamic executable" (and exits non-zero) for static binaries.
	! ldd "$1" >/dev/null 2>&1
}

# ---- debian ------------------------------------------------------------------
# Unmount everything below $1 (debootstrap mounts proc/sys/devpts in the target
# and may leave them behind on failure), deepest first.
umount_below() {
	local dir=$1 m ms
	[[ -d $dir ]] || return 0
	dir=$(cd "$dir" && pwd -P)
	for _ in 1 2 3; do
		mapfile -t ms < <(awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {print $2}' /proc/self/mounts | sort -r)
		[[ ${#ms[@]} -eq 0 ]] && return 0
		for m in "${ms[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
	done
	awk -v d="$dir" '$2 == d || index($2, d "/") == 1 {found=1} END{exit !found}' /proc/self/mounts && return 1
	return 0
}

safe_rm_tree() {
	local dir=$1
	[[ -n $dir && -d $dir ]] || return 0
	if umount_below "$dir"; then
		rm -rf --one-file-system "$dir"
	else
		say "WARNING: mounts remain under $dir; not removing it"
	fi
}

build_debian() {
	local repo=outpost/debian t0 hash files pkgs tarball
	t0=$(now)
	mapfile -t files < <(find "$IMAGES_DIR/debian" -type f | LC_ALL=C sort)
	hash=$(hash_inputs "suite=$DEBIAN_SUITE variant=minbase env=$IMAGE_PATH_ENV" "${files[@]}")
	if up_to_date "$repo" "$hash"; then
		say "debian: $repo:test is up to date ($repo:$hash) [$(elapsed "$t0")]"
		return 0
	fi

	mkdir -p "$CACHE"
	tarball=$CACHE/debian-$DEBIAN_SUITE-$hash.tar
	if [[ -s $tarball ]]; then
		say "debian: using cached rootfs $tarball"
	else
		[[ $(id -u) -eq 0 ]] || die "debootstrap needs root"
		command -v debootstrap >/dev/null 2>&1 || { say "debian: installing debootstrap"; apt_install debootstrap; }
		pkgs=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' "$IMAGES_DIR/debian/packages.txt" | paste -sd, -)
		local work
		work=$(mktemp -d "$CACHE/debian-root.XXXXXX")
		CLEANUP+=("$work")
		rm -f "$tarball.part"
		local tb
		tb=$(now)
		local mirror
		mirror=$(debian_mirror) || die "no Debian mirror: /etc/apt has no http(s) deb source; set OUTPOST_DEBIAN_MIRROR to a Debian archive URL"
		say "debian: debootstrap --variant=minbase --include=$pkgs $DEBIAN_SUITE (mirror $mirror; ~1 min)"
		if ! debootstrap --variant=minbase --include="$pkgs" "$DEBIAN_SUITE" "$work/root" "$mirror" >"$work/debootstrap.log" 2>&1; then
			tail -n 30 "$work/debootstrap.log" | sed 's/^/    /' >&2
			[[ -f $work/root/debootstrap/debootstrap.log ]] && tail -n 30 "$work/root/debootstrap/debootstrap.log" | sed 's/^/    /' >&2
			die "debootstrap failed"
		fi
		say "debian: debootstrap done [$(elapsed "$tb")]"
		umount_below "$work/root" || die "could not unmount filesystems below $work/root"
		cp "$IMAGES_DIR/debian/customize.sh" "$work/root/tmp/outpost-customize.sh"
		if ! chroot "$work/root" /bin/sh /tmp/outpost-customize.sh 2>&1 | sed 's/^/    /' >&2; then
			die "customize.sh failed in the chroot"
		fi
		rm -f "$work/root/tmp/outpost-customize.sh"
		rm -rf "$work/root/debootstrap"
		# The engine mounts its own /dev, /proc, /sys; ship them empty.
		find "$work/root/dev" -mindepth 1 -delete
		umount_below "$work/root" || die "mounts remain below $work/root"
		tar --numeric-owner --one-file-system -C "$work/root" -cf "$tarball.part" .
		mv "$tarball.part" "$tarball"
		cleanup
		# Drop older tarballs of this image.
		find "$CACHE" -maxdepth 1 -name "debian-$DEBIAN_SUITE-*.tar" ! -name "$(basename "$tarball")" -delete
		say "debian: rootfs cached at $tarball ($(du -h "$tarball" | cut -f1))"
	fi

	local ti old
	ti=$(now)
	old=$(old_id "$repo:$hash")
	docker import \
		--change "ENV $IMAGE_PATH_ENV" \
		--change 'WORKDIR /' \
		--change 'CMD ["/bin/bash"]' \
		--change "LABEL $LABEL_KEY=$hash" \
		"$tarball" "$repo:$hash" >/dev/null
	retag "$repo" "$hash" "$old"
	say "debian: docker import done [$(elapsed "$ti")]"

	local out
	out=$(docker run --rm --network none --user 1000:1000 "$repo:test" sh -c \
		'cd && id -un && node -e "require(\"https\"); console.log(process.version)" && test -s /etc/ssl/certs/ca-certificates.crt && echo ok')
	[[ $out == *ok ]] || die "debian smoke test failed: $out"
	say "debian: built $repo:test ($repo:$hash; node $(sed -n 2p <<<"$out")) [$(elapsed "$t0")]"
}

# ---- sshd --------------------------------------------------------------------
# OpenSSH's server for the ssh provider's tests, on top of outpost/debian:test
# (built first when missing). The content tag covers the recipe files and the
# debian image it is built from.
build_sshd() {
	local repo=outpost/sshd t0 hash files base old
	t0=$(now)
	image_exists outpost/debian:test || build_debian
	base=$(docker image inspect --format '{{.Id}}' outpost/debian:test)
	mapfile -t files < <(find "$IMAGES_DIR/sshd" -type f | LC_ALL=C sort)
	hash=$(hash_inputs "base=$base" "${files[@]}")
	if up_to_date "$repo" "$hash"; then
		say "sshd: $repo:test is up to date ($repo:$hash) [$(elapsed "$t0")]"
		return 0
	fi
	old=$(old_id "$repo:$hash")
	say "sshd: docker build $repo:$hash (apt-get install openssh-server)"
	if ! docker build -q --label "$LABEL_KEY=$hash" -t "$repo:$hash" "$IMAGES_DIR/sshd" >"$CACHE/sshd-build.log" 2>&1; then
		sed 's/^/    /' "$CACHE/sshd-build.log" >&2
		die "sshd: docker build failed"
	fi
	rm -f "$CACHE/sshd-build.log"
	retag "$repo" "$hash" "$old"
	local out
	out=$(docker run --rm --network none --entrypoint /bin/sh "$repo:test" -c 'test -x /usr/sbin/sshd && command -v tar >/dev/null && id agent >/dev/null && echo ok')
	[[ $out == *ok ]] || die "sshd smoke test failed: $out"
	say "sshd: built $repo:test ($repo:$hash) [$(elapsed "$t0")]"
}

# ---- sshd-node -----------------------------------------------------------------
# outpost/sshd:test plus this machine's node (20 or later) at /usr/local/bin:
# the ssh host of the CLIs that need node >= 20 (Gemini CLI, Qwen Code).
# The content tag covers the recipe, the sshd image and the node binary.
build_sshd_node() {
	local repo=outpost/sshd-node t0 hash node major ctx old out
	t0=$(now)
	image_exists outpost/sshd:test || build_sshd
	node=$(command -v node || true)
	[[ -n $node ]] || die "sshd-node: no node on this machine (Node.js 20 or later is needed)"
	node=$(readlink -f "$node")
	major=$("$node" -p 'process.versions.node.split(".")[0]')
	((major >= 20)) || die "sshd-node: $node is Node.js $major; Gemini CLI and Qwen Code need 20 or later"
	hash=$(hash_inputs "base=$(old_id outpost/sshd:test) node=$(sha256sum <"$node" | cut -d' ' -f1)" "$IMAGES_DIR/sshd-node/Dockerfile")
	current sshd-node "$repo" "$hash" "$t0" && return 0
	# The context holds only node; the Dockerfile is read from images/.
	mkdir -p "$CACHE"
	ctx=$(mktemp -d "$CACHE/sshd-node-ctx.XXXXXX")
	CLEANUP+=("$ctx")
	cp "$node" "$ctx/node"
	old=$(old_id "$repo:$hash")
	docker build -q --label "$LABEL_KEY=$hash" -t "$repo:$hash" -f "$IMAGES_DIR/sshd-node/Dockerfile" "$ctx" >/dev/null || die "sshd-node: docker build failed"
	retag "$repo" "$hash" "$old"
	out=$(docker run --rm --network none --user 1000:1000 --entrypoint /bin/sh "$repo:test" -c 'test -x /usr/sbin/sshd && node -p process.versions.node')
	[[ ${out%%.*} -ge 20 ]] || die "sshd-node smoke test failed: $out"
	cleanup
	say "sshd-node: built $repo:test ($repo:$hash; node $out) [$(elapsed "$t0")]"
}

# ---- serve ---------------------------------------------------------------------
# outpost/serve:test: the static outpost command on the busybox image, for
# deploy/kubernetes (`outpost serve` in a cluster). Not in the default set:
# its content tag changes with every change of the code.
build_serve() {
	local repo=outpost/serve t0 hash ctx old files
	t0=$(now)
	image_exists outpost/busybox:test || build_busybox
	ctx=$(mktemp -d "${TMPDIR:-/tmp}/serve-ctx.XXXXXX")
	CLEANUP+=("$ctx")
	cp -a "$IMAGES_DIR/outpost/." "$ctx/"
	(cd "$ROOT" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$ctx/outpost" ./cmd/outpost) || die "serve: go build failed"
	files=("$ctx/Dockerfile" "$ctx/outpost")
	hash=$(hash_inputs "serve-base=$(old_id outpost/busybox:test)" "${files[@]}")
	if up_to_date "$repo" "$hash"; then
		say "serve: $repo:test is up to date ($repo:$hash) [$(elapsed "$t0")]"
		return 0
	fi
	old=$(old_id "$repo:$hash")
	docker build -q --label "$LABEL_KEY=$hash" -t "$repo:$hash" "$ctx" >/dev/null || die "serve: docker build failed"
	retag "$repo" "$hash" "$old"
	local out
	# The whole help, not `| head -1`: under pipefail head's early exit
	# would end the pipeline with SIGPIPE (exit 141).
	out=$(docker run --rm --network none "$repo:test" serve --help 2>&1) || true
	out=${out%%$'\n'*}
	[[ $out == *"HTTP API"* ]] || die "serve smoke test failed: $out"
	say "serve: built $repo:test ($repo:$hash) [$(elapsed "$t0")]"
}

# ---- main --------------------------------------------------------------------
targets=("$@")
[[ ${#targets[@]} -eq 0 ]] && targets=(busybox debian sshd sshd-node)
for t in "${targets[@]}"; do
	case $t in
	busybox | debian | sshd | sshd-node | serve) ;;
	all) targets=(busybox debian sshd sshd-node); break ;;
	*) die "unknown image '$t' (known: busybox debian sshd sshd-node serve all)" ;;
	esac
done

if [[ ${OUTPOST_SKIP_DOCKER_UP:-0} != 1 ]]; then
	"$ROOT/scripts/docker-up.sh"
fi
command -v docker >/dev/null 2>&1 || die "docker client not found"
docker version --format '{{.Server.APIVersion}}' >/dev/null 2>&1 || die "no Docker daemon answers (run scripts/docker-up.sh)"

T0=$(now)
for t in "${targets[@]}"; do
	"build_${t//-/_}"
done
say "done: ${targets[*]} [$(elapsed "$T0")]"
