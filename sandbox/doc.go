// Package sandbox is outpost's portable layer over sandbox providers.
//
// Providers implement the small contract in sandbox/driver
// (providers/local, providers/docker, the in-memory sandbox/memsandbox)
// and register themselves with driver.Register; Open finds one by name.
// Users hold the concrete *Lease that wraps a driver.Sandbox and adds the
// behaviour every provider shares: closed checks, errors coded once
// (details.vanished for a sandbox gone), the default working directory,
// tar path checks, and processes run, reaped by group and drained with a
// bound (Launch, Job.Wait, Exec). Pool keeps leases opened and warmed
// ahead of turns; Install installs a pinned CLI into a lease; Collect
// removes what dead outpost processes left behind.
//
// The turn engine (package engine) is one user of the layer among others:
// what it keeps with a lease across turns goes through Lease.Value.
//
// Every provider passes the conformance suite in sandbox/sandboxtest.
package sandbox
