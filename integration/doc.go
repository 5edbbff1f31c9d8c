// Package integration holds outpost's end-to-end tests: the built outpost
// binary, a real Docker Engine, and the real agent CLIs (installed at their
// pinned versions by scripts/install-clis.sh) talking to the fake model APIs
// of internal/fakeapi on loopback. They are part of the normal suite: a
// test skips only when its dependency is truly absent, and says so loudly;
// under CI=true it fails instead (internal/testenv).
package integration
