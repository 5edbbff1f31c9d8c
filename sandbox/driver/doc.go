// Package driver is the contract a sandbox provider implements: Provider,
// Sandbox, Process and the optional interfaces the portable layer looks
// for: Vanisher, PathLooker, Lister, HostPather (and HostPathExplainer),
// Snapshotter (whose snapshot type is in the leaf snapshot), Warmer on a
// sandbox, Collector on a provider.
//
// Providers (providers/local, providers/docker, sandbox/memsandbox) import
// this package, harness and the root package only. Callers never hold a
// driver value directly: they hold the portable *sandbox.Lease, which wraps
// a Sandbox with the behaviour every provider shares (closed checks, coded
// errors, tar path checks, bounded output). Drivers stay small and return
// raw errors; the portable layer wraps each once, with a code. This is
// go-cloud's blob / blob/driver split.
//
// Every provider passes the conformance suite in sandbox/sandboxtest.
package driver
