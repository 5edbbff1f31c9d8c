#!/usr/bin/env bash
# debian-mirror.sh — sourced by scripts/build-images.sh (and its test).
#
# debian_mirror [APT_DIR]: print the Debian archive to debootstrap from:
# $OUTPOST_DEBIAN_MIRROR when set, else the first http(s) "deb" source of
# the machine's own apt configuration (APT_DIR, default /etc/apt): the
# URIs: of deb822 files sources.list.d/*.sources, then the deb lines of
# sources.list and sources.list.d/*.list. Security archives are skipped
# (debootstrap needs the main archive). Prints nothing and fails when
# there is none.
debian_mirror() {
	local apt_dir=${1:-/etc/apt}
	if [[ -n ${OUTPOST_DEBIAN_MIRROR:-} ]]; then
		printf '%s\n' "$OUTPOST_DEBIAN_MIRROR"
		return 0
	fi
	local f uri
	for f in "$apt_dir"/sources.list.d/*.sources; do
		[[ -f $f ]] || continue
		uri=$(_deb822_uri <"$f")
		[[ -n $uri ]] && { printf '%s\n' "$uri"; return 0; }
	done
	for f in "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*.list; do
		[[ -f $f ]] || continue
		uri=$(_one_line_uri <"$f")
		[[ -n $uri ]] && { printf '%s\n' "$uri"; return 0; }
	done
	return 1
}

# _deb822_uri: the first http(s) URI of an enabled "Types: deb" stanza.
_deb822_uri() {
	awk '
		function flush() {
			if (deb && enabled) for (i = 1; i <= n; i++) if (ok(u[i])) { print u[i]; found = 1; exit }
			deb = 0; enabled = 1; n = 0
		}
		function ok(s) { return s ~ /^https?:\/\// && s !~ /security/ }
		BEGIN { enabled = 1 }
		/^[[:space:]]*#/ { next }
		/^[[:space:]]*$/ { flush(); next }
		tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
		tolower($1) == "enabled:" { enabled = (tolower($2) != "no") }
		tolower($1) == "uris:" { for (i = 2; i <= NF; i++) u[++n] = $i }
		END { if (!found) flush() }
	'
}

# _one_line_uri: the first http(s) URI of a "deb [options] URI suite ..." line.
_one_line_uri() {
	awk '
		$1 != "deb" { next }
		{
			i = 2
			if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			if ($i ~ /^https?:\/\// && $i !~ /security/) { print $i; exit }
		}
	'
}
