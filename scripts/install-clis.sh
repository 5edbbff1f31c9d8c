#!/usr/bin/env bash
# install-clis.sh — install the pinned coding-agent CLIs from npm, idempotently.
#
# Usage:
#   scripts/install-clis.sh [NAME...]     # no argument = every npm pin
#   scripts/install-clis.sh --list        # print "NAME PACKAGE VERSION PROGRAM DIR" per npm pin; install nothing
#
# The CLIs and their versions are not written here: they are the pins of kind
# "npm" in bootstrap/pins.json, read from `outpost bootstrap --list --json`
# (the binary named by $OUTPOST_BIN, else `go run ./cmd/outpost` in this
# repository). Today: claude, claude-acp, codex, codex-acp, copilot, gemini,
# opencode and qwen. The main package npm
# installed must carry the pin's SHA-512 (npm's integrity), or the install fails.
#
# Each CLI goes into its own npm prefix, so installing one never prunes another
# (an `npm install --no-save` into a shared prefix without package.json removes
# whatever the previous install put there):
#
#   ${OUTPOST_CACHE:-$HOME/.cache/outpost}/npm/<dirname>/
#
# where <dirname> is "<package>@<version>" with every '/' replaced by '+', e.g.
#
#   claude   @anthropic-ai/claude-code@2.1.332  ->  npm/@anthropic-ai+claude-code@2.1.332/
#
# The executables are in <dir>/node_modules/.bin/ (internal/testenv finds them
# there, deriving the same directories from the same pins).
#
# A directory counts as installed only when <dir>/.installed exists. The install
# runs in a temporary sibling directory that is renamed into place after npm
# succeeds and the command is found, and .installed is written last, so an
# interrupted install is never taken as complete; the next run starts over.
#
# stdout: one line per selected CLI, the absolute path of its bin dir.
# stderr: progress.
set -euo pipefail

CACHE="${OUTPOST_CACHE:-$HOME/.cache/outpost}"
NPM_DIR="$CACHE/npm"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { printf 'install-clis: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# name -> "package version command", from the pin file; ALL: the names, sorted.
declare -A PINS=()
ALL=()
read_pins() {
  command -v node >/dev/null 2>&1 || die "node not found in PATH (npm needs it too)"
  local json
  if [[ -n "${OUTPOST_BIN:-}" ]]; then
    json="$("$OUTPOST_BIN" bootstrap --list --json)" || die "$OUTPOST_BIN bootstrap --list --json failed"
  else
    command -v go >/dev/null 2>&1 || die "go not found in PATH (or set OUTPOST_BIN to an outpost binary)"
    json="$(cd "$ROOT" && go run ./cmd/outpost bootstrap --list --json)" || die "go run ./cmd/outpost bootstrap --list --json failed"
  fi
  local lines name pkg ver cmd sri
  lines="$(printf '%s' "$json" | node -e '
    let s = "";
    process.stdin.on("data", d => s += d).on("end", () => {
      const agents = JSON.parse(s).agents || {};
      for (const n of Object.keys(agents).sort()) {
        const p = agents[n];
        if (!p || p.kind !== "npm") continue;
        const f = [n, p.package, p.version, p.program, p.integrity];
        if (!f.every(x => typeof x === "string" && /^[A-Za-z0-9@._\/+=-]+$/.test(x))) {
          console.error("install-clis: malformed pin " + JSON.stringify(n));
          process.exit(1);
        }
        console.log(f.join(" "));
      }
    });')" || die "cannot read the pins"
  while read -r name pkg ver cmd sri; do
    [[ -n "$name" ]] || continue
    PINS[$name]="$pkg $ver $cmd $sri"
    ALL+=("$name")
  done <<<"$lines"
  [[ ${#ALL[@]} -gt 0 ]] || die "no npm pins found"
}

# dirname_for PACKAGE VERSION -> filesystem-safe directory name
dirname_for() {
  local spec="$1@$2"
  printf '%s\n' "${spec//\//+}"
}

TMP_DIRS=()
cleanup() {
  local d
  for d in "${TMP_DIRS[@]+"${TMP_DIRS[@]}"}"; do
    [[ -n "$d" && -d "$d" ]] && rm -rf -- "$d"
  done
}
trap cleanup EXIT

install_one() {
  local name="$1"
  local pin="${PINS[$name]:-}"
  [[ -n "$pin" ]] || die "unknown CLI '$name' (known: ${ALL[*]})"
  local pkg ver cmd sri
  read -r pkg ver cmd sri <<<"$pin"

  local dname dir bin
  dname="$(dirname_for "$pkg" "$ver")"
  dir="$NPM_DIR/$dname"
  bin="$dir/node_modules/.bin"

  if [[ -f "$dir/.installed" ]]; then
    log "$pkg@$ver already installed in $dir"
    printf '%s\n' "$bin"
    return 0
  fi

  command -v npm >/dev/null 2>&1 || die "npm not found in PATH"
  mkdir -p "$NPM_DIR"

  # Serialise concurrent installs of the same package (flock is in util-linux).
  if command -v flock >/dev/null 2>&1; then
    local lockfd
    exec {lockfd}>"$NPM_DIR/.lock.$dname"
    flock "$lockfd"
    if [[ -f "$dir/.installed" ]]; then
      log "$pkg@$ver was installed meanwhile in $dir"
      exec {lockfd}>&-
      printf '%s\n' "$bin"
      return 0
    fi
  fi

  local tmp
  tmp="$(mktemp -d "$NPM_DIR/.tmp.$dname.XXXXXX")"
  TMP_DIRS+=("$tmp")
  chmod 755 "$tmp" # mktemp makes it 0700; the CLIs may run as another user

  log "installing $pkg@$ver into $dir (this can take a while)"
  npm install --prefix "$tmp" --no-save --no-audit --no-fund "$pkg@$ver" >&2 \
    || die "npm install $pkg@$ver failed"

  [[ -x "$tmp/node_modules/.bin/$cmd" ]] \
    || die "$pkg@$ver installed but $tmp/node_modules/.bin/$cmd is missing"

  # The main package must be the pinned one: npm records the SHA-512 of the
  # tarball it installed in its hidden lockfile.
  local got
  got="$(node -e 'const l = require(process.argv[1]); const p = l.packages && l.packages["node_modules/" + process.argv[2]]; console.log((p && p.integrity) || "")' \
    "$tmp/node_modules/.package-lock.json" "$pkg")" || die "cannot read the integrity npm recorded for $pkg"
  [[ "$got" == "$sri" ]] || die "$pkg@$ver: npm installed a tarball with integrity '$got', the pin says '$sri'"

  # Smoke test: the command must run. (An npm that skipped the claude package's
  # postinstall leaves a placeholder instead of the native binary.) HOME points
  # at a scratch dir so the check leaves no state in the real one.
  local scratch out
  scratch="$(mktemp -d)"
  TMP_DIRS+=("$scratch")
  # An ACP adapter may take no --version (codex-acp): then --help, stdin
  # closed (claude-code-acp serves ACP on stdin and exits at its end).
  if ! out="$(cd "$scratch" && HOME="$scratch" timeout 120 "$tmp/node_modules/.bin/$cmd" --version 2>&1 </dev/null)" &&
    ! out="$(cd "$scratch" && HOME="$scratch" timeout 120 "$tmp/node_modules/.bin/$cmd" --help 2>&1 </dev/null)"; then
    log "$cmd --version failed: $out"
    die "$pkg@$ver does not run (if npm skipped install scripts, allow them for $pkg)"
  fi
  log "$cmd --version: ${out##*$'\n'}"

  # Another process may have finished the same install meanwhile.
  if [[ -f "$dir/.installed" ]]; then
    log "$pkg@$ver was installed concurrently; keeping the existing copy"
    printf '%s\n' "$bin"
    return 0
  fi
  # A leftover directory without .installed is an incomplete install: replace it.
  if [[ -e "$dir" ]]; then
    rm -rf -- "$dir"
  fi
  mv -T -- "$tmp" "$dir"

  [[ -x "$bin/$cmd" ]] || die "$bin/$cmd is not executable after moving the install into place"
  printf '%s %s\n' "$pkg@$ver" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$dir/.installed.tmp"
  mv -f -- "$dir/.installed.tmp" "$dir/.installed"
  log "installed $pkg@$ver"
  if [[ -n "${lockfd:-}" ]]; then exec {lockfd}>&-; fi
  printf '%s\n' "$bin"
}

main() {
  read_pins
  if [[ "${1:-}" == "--list" ]]; then
    local n pkg ver cmd sri
    for n in "${ALL[@]}"; do
      read -r pkg ver cmd sri <<<"${PINS[$n]}"
      printf '%s %s %s %s %s\n' "$n" "$pkg" "$ver" "$cmd" "$NPM_DIR/$(dirname_for "$pkg" "$ver")"
    done
    return 0
  fi
  local names=("$@")
  if [[ ${#names[@]} -eq 0 ]]; then
    names=("${ALL[@]}")
  fi
  local n
  for n in "${names[@]}"; do
    [[ -n "${PINS[$n]:-}" ]] || die "unknown CLI '$n' (known: ${ALL[*]})"
  done
  for n in "${names[@]}"; do
    install_one "$n"
  done
}

main "$@"
