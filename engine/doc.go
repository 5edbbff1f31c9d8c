// Package engine is outpost's turn engine: Run takes one Turn (an agent,
// a prompt, a working directory, a conversation to resume or fork) to a
// Result and one coded error, on a sandbox it leases or one the caller
// holds, and Race runs several turns on one task and keeps the best.
//
// It uses package sandbox as any other user would: a *sandbox.Lease for
// every process, copy and listing; the few things it keeps with a lease
// across turns (which presets' credentials are in place, its tunnels to
// credential gateways) through Lease.Value. Its files follow the
// lifecycle (docs/ARCHITECTURE.md):
//
//	run.go          Run, the lease and its release around the steps
//	validate.go     1-2: refusals before allocation, variables, plans;
//	                preflight.go, the credential check (Preflight);
//	                dotdir.go, the mark of a .outpost/ the turn changed
//	environment.go  the process environment (credentials.Environment)
//	workspace.go    the workspace a turn starts from and its checkpoints
//	keyless.go      the secrets and egress modes, the gateway grant
//	lease.go        what the engine keeps with a lease (Lease.Value)
//	prepare.go      4-6: credentials and configuration, restore, command,
//	                bootstrap (bootstrap.go)
//	process.go      7: the agent process as a stream of events, with
//	                stdin.go, watchdog.go, steer.go, pumps.go, events.go
//	classify.go     8: the outcome as an error (pure)
//	capture.go      9-10: usage by mode, capture into the store;
//	                metering.go, the gateway's meter; hold.go, the
//	                store's hold
//	answer.go       structured answers and their repair, the changed
//	                files; check.go, the check command
//	wire.go         the result line of --json and the HTTP API
//	race.go         Race
package engine
