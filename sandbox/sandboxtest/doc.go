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
package sandboxtest
