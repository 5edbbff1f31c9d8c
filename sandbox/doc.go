// Package sandbox is outpost's portable layer over sandbox providers, and
// its turn engine.
//
// Providers implement the small contract in sandbox/driver
// (providers/local, providers/docker, the in-memory sandbox/memsandbox)
// and register themselves with driver.Register; Open finds one by name.
// Users hold the concrete *Lease that wraps a driver.Sandbox and adds the
// behaviour every provider shares: closed checks, errors coded once
// (details.vanished for a sandbox gone), the default working directory,
// tar path checks, and processes run, reaped by group and drained with a
// bound (Launch, Job.Wait, Exec). Run strings the turn lifecycle together:
// validate, resolve variables, lease, credentials and configuration,
// bootstrap, restore, run and stream, classify, usage, capture, release
// (docs/ARCHITECTURE.md).
//
// Every provider passes the conformance suite in sandbox/sandboxtest.
package sandbox
