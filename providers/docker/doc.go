// Package docker is the sandbox provider whose sandboxes are containers of
// a Docker Engine, driven through the Engine API (github.com/docker/docker
// client, API version negotiated, so Debian's 20.10 engine and current
// ones both work).
//
// One lease is one container, kept alive between the lease's turns by a
// tiny init (outpost's own static binary in its hidden sandbox-shim mode).
// Inside it:
//
//	/outpost/home       the private home (HOME, XDG_*); TMPDIR is /outpost/tmp
//	/outpost/bin/outpost outpost's static binary (read-only bind mount, or a copy)
//	/workspace          the working directory: the caller's directory, copied
//	                    in and back (default) or bind-mounted
//
// /outpost and, in copy mode, /workspace are anonymous volumes of the
// container, so the root filesystem can be read-only and copies in and out
// go through the Engine API's archive endpoints; they are removed with the
// container.
//
// Every process runs under the shim's exec mode, in a process group of its
// own, with exactly the environment the turn gives it. `docker exec`
// cannot signal an exec'd process, so Process.Signal runs the shim's
// signal mode, which signals the group. When a process exits, what it left
// running in its group is killed, so its output ends with it.
//
// Containers are hardened by default: a non-root user (1000:1000), all
// capabilities dropped, no-new-privileges, pids, memory and CPU limits,
// the bridge network (egress allowed; "none" and "host" are settings), and
// optionally a read-only root filesystem (with a private /tmp). Each
// container carries labels naming its lease and its owner process (pid,
// start time, boot id, pid namespace, host), its creation time and the
// outpost version; containers whose owner died are removed by a sweep on
// the first lease of each provider, by GC (outpost gc), and every lease
// removes its own container on Close, on every path.
//
// The provider registers itself as "docker"; see Settings for the keys
// sandbox.Open accepts and docs/sandboxes/docker.md for the user's view.
package docker
