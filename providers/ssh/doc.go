// Package ssh is the sandbox provider whose sandboxes live on another
// machine reached over SSH (golang.org/x/crypto/ssh): a build host, a GPU
// box, a VM. It needs nothing installed there but sh and tar (and Linux);
// outpost copies its own static binary to the host once, by digest.
//
// Selecting a host: Options.Host is [user@]host[:port] or a Host alias of
// ~/.ssh/config (read with github.com/kevinburke/ssh_config: HostName,
// Port, User, IdentityFile). Keys come from Options.Identity (or the
// config's IdentityFile, or ~/.ssh/id_*) and, with Options.Agent, from
// the agent at $SSH_AUTH_SOCK (golang.org/x/crypto/ssh/agent). The host's
// key is always verified against known_hosts
// (golang.org/x/crypto/ssh/knownhosts): an unknown or changed key is a
// configuration error that shows the key's fingerprint and how to accept
// it, and no option turns verification off.
//
// One provider holds one connection, dialled by the first lease (within
// Options.StartTimeout) and shared by every lease: each process, copy and
// signal is a session multiplexed over it. Keepalives find a dead peer;
// when the connection drops, the leases' processes fail with
// driver.ErrDisconnected (their sandboxes report Vanished) and the next lease
// reconnects.
//
// On the host, under the provider's root (default ~/.outpost, mode
// 0700):
//
//	bin/<digest>/outpost   outpost's static binary (the process shim), verified by SHA-512 on the host
//	trees/sha512-<hex>/    bootstrap trees mirrored from the caller's cache, verified likewise
//	leases/ssh-<12 hex>/   one lease: owner (the owner record), home/ (HOME, XDG_*),
//	                       tmp/ (TMPDIR), run/ (the shim's), workspace/ (copy mode)
//
// Every process runs under the shim's exec mode (internal/shim) in a
// process group of its own, with exactly the environment the turn gives it
// — sent on the session's standard input, never on a command line where
// the host's other users could read it. Signals go through the shim's
// signal mode; the exit status is exact, deaths by signal included.
//
// The working directory is copied to the lease's workspace when it is
// made and the sandbox's changes are copied back, conflict-safe, when it
// is released (internal/workspace, shared with the docker provider);
// Options.Workspace = Remote uses a directory of the host instead. CopyIn
// and CopyOut carry tar over a session, using the host's tar.
//
// Each lease directory carries an owner record (the owning process's
// host, boot id, pid and start time); the first lease of each provider
// sweeps the leases whose owner died (killing their process groups and
// removing their directories), and GC (outpost gc --sandbox ssh) does it
// on demand.
//
// The provider registers itself as "ssh"; see Settings for the keys
// sandbox.Open accepts and docs/sandboxes/ssh.md for the user's view.
package ssh
