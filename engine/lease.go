package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/outposthq/outpost/gateway"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/sandbox"
)

// leaseKey is the key of the engine's state on a lease (sandbox.Lease.Value).
type leaseKey struct{}

// leaseState is what the engine keeps with a lease across its turns: which
// presets' plans are in place (a preset's Credentials hook is called once
// per lease) with their credential plans, and the tunnels to credential
// gateways it opened.
type leaseState struct {
	mu      sync.Mutex
	applied map[string]bool         // preset names whose plans are in place
	plans   map[string]harness.Plan // the credential plan of each applied preset
	tunnels map[*gateway.Gateway]string
}

func stateOf(l *sandbox.Lease) *leaseState {
	return l.Value(leaseKey{}, func() any {
		return &leaseState{applied: map[string]bool{}, plans: map[string]harness.Plan{}, tunnels: map[*gateway.Gateway]string{}}
	}).(*leaseState)
}

// planned reports whether a preset's plans are in place on l.
func planned(l *sandbox.Lease, name string) bool {
	s := stateOf(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applied[name]
}

// markPlanned records that a preset's plans are in place on l, and keeps
// its credential plan.
func markPlanned(l *sandbox.Lease, name string, p harness.Plan) {
	s := stateOf(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.applied[name] = true
	s.plans[name] = p
}

// unplan forgets that a preset's plans are in place, so that the next
// turn applies them again (a new gateway token).
func unplan(l *sandbox.Lease, name string) {
	s := stateOf(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.applied, name)
}

// planOf returns the credential plan a preset's earlier turn made on l.
func planOf(l *sandbox.Lease, name string) (harness.Plan, bool) {
	s := stateOf(l)
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.plans[name]
	return p, ok
}

// gatewayAddr is the address at which processes of the sandbox reach gw:
// a tunnel of the sandbox's own (sandbox.Lease.Tunnel); the host's
// loopback for a sandbox on the host (not Isolated: local); "" for a
// sandbox that has neither. The tunnel is served until the lease is
// released, and used again by the lease's next turns on gw.
func gatewayAddr(ctx context.Context, l *sandbox.Lease, gw *gateway.Gateway) (string, error) {
	s := stateOf(l)
	s.mu.Lock()
	defer s.mu.Unlock() // one tunnel a gateway, however many turns ask at once
	if addr, ok := s.tunnels[gw]; ok {
		return addr, nil
	}
	addr, ln, err := l.Tunnel(ctx)
	switch {
	case errors.Is(err, errors.ErrUnsupported) && l.Isolated():
		return "", nil
	case errors.Is(err, errors.ErrUnsupported):
		return gw.Listen()
	case err != nil:
		return "", err
	}
	go gw.Serve(ln) //nolint:errcheck // ends when the tunnel or the gateway closes
	s.tunnels[gw] = addr
	return addr, nil
}
