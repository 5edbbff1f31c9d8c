// Package sandboxtest is the conformance suite every sandbox provider
// passes, in the manner of go-cloud's drivertest.
//
// A provider's test calls RunConformanceTests with a Harness that makes
// the provider and says how to run a handful of small programs (Program)
// inside its sandboxes. Providers with a POSIX shell (local, docker with a
// busybox or Debian image) leave Harness.Command nil and get Shell; the
// in-memory provider maps each Program to one of its Go programs.
//
// Every check goes through *sandbox.Lease, the portable type users hold, so
// the suite tests what a user can rely on whatever the provider: lease
// lifecycle and closed checks, paths and environment, process I/O and exit
// statuses, signals and process-group cleanup, cancellation, tar copies in
// and out and the refusal of hostile archives. Subtests that need a
// capability the provider says it lacks are skipped, naming it.
//
// The tunnel tests (driver.Tunneler, reached through Lease.Sandbox) run
// the client of a tunnel inside the sandbox with outpost's in-sandbox
// binary, found as `outpost` on the sandbox's PATH (TunnelBinary): every
// provider that implements tunnels runs that binary. RunTunnelTests runs
// them alone, failing a provider without tunnels.
//
// RunEscapeTests is the escape suite: a hostile agent's attempts, one
// table row each (read the user's ~/.ssh or a secret outside the
// workspace, see a host process, reach the host's loopback or an address
// off the allowlist directly, also with curl --noproxy '*' and Node's
// fetch, find the Docker socket, write outside the workspace, read another
// lease's home, plant a file in outpost's home), run in a lease with
// egress gateway; each must fail. A provider that does not enforce egress
// gateway (Capabilities.Egress false: local with isolation=none) is
// reported unenforced, its escapes listed rather than failed; rows whose
// tool the sandbox lacks are reported not tried.
package sandboxtest
