// Package bootstrap installs an agent's pinned CLI into a sandbox that
// lacks it, before the turn runs, without trusting the network.
//
// Every built-in agent has a bootstrap name: its pin's key in pins.json,
// embedded in the binary (the file is the only list of them: Known,
// Names, Installer.Known). A pin holds the CLI's version and, per platform
// ("linux-x64", "linux-x64-musl", "linux-arm64", "darwin-arm64", ...), the
// artifact to install with its SHA-512 digest — for npm CLIs the
// registry's sha512 integrity of the main package and of each native
// platform package, for archives the hex SHA-512. `go run
// ./bootstrap/cmd/pins claude@VERSION` regenerates an npm pin from the
// registry, so a version bump is one reviewed diff. $OUTPOST_PINS names a
// file of pins that replace the embedded ones (the antigravity archive's
// URL and digest are such configuration), and $OUTPOST_NPM_REGISTRY points
// the npm pins at a mirror.
//
// An install (Installer.Install) picks the artifact for the sandbox's
// platform (its architecture and C library, read from the dynamic loaders
// it has), then downloads it into a host-side cache keyed by digest:
// into <digest>.unverified, hashing while the bytes arrive, renamed into
// place only when the SHA-512 matches. A mismatch or a truncated body
// leaves nothing behind and fails with an *outpost.Error of code
// bootstrap whose details name the expected and actual digests. The
// verified archive is unpacked once into the cache, refusing entries that
// escape it, links that resolve outside it, devices and setuid bits.
// Concurrent installs of the same pin, in one process or several, share
// one download (a lock file per digest). Native CLIs are installed as
// their native binary alone — Claude Code's and Copilot's per-platform
// package, Codex's musl binary — so the sandbox needs neither node nor
// npm: a sandbox sharing the host's filesystem (local) runs it from the
// cache; an isolated one (docker) gets a copy in its home, under
// .outpost/bootstrap/<name>@<version>/. A second sandbox needing the same
// pin installs from the cache without any download.
//
// A pin of kind self (the echo agent's) installs outpost's own binary: on a sandbox that
// shares the host's filesystem it is the running executable itself; an
// isolated sandbox uses the outpost it has on its PATH (the docker
// provider puts one there) and otherwise gets a copy of a static outpost
// binary in its home (internal/selfbin finds one).
//
// Progress (download bytes, verification, unpacking, copying) is
// reported through EnsureOptions.Progress; Progress.Event turns it into
// the notice events (kind "bootstrap") that `outpost run --json` prints.
//
// bootstrap does not import sandbox: it declares what it needs of one
// (Target and the optional interfaces beside it), which *sandbox.Lease
// satisfies.
package bootstrap
