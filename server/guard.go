package server

import (
	"context"
	"time"

	"github.com/outposthq/outpost/internal/conncap"
)

// A connection is unauthenticated from its accept until a request on it
// authenticates (a valid token, an allowed Unix peer, or any request when
// the server has no tokens). Before that a client has Options.AuthTimeout
// in all (headers, and whatever body the server would drain after
// refusing it), after which the connection is closed; and at most
// Options.MaxUnauthConns such connections are held: a new one closes the
// oldest (internal/conncap, the credential gateway's cap too). So idle or
// trickling clients (slowloris) cannot exhaust serve's connections, and a
// client that sends its request at once (every real one) always gets in.
// Once authenticated, a connection is bounded by the http.Server's own
// timeouts only (issue 43).
func newConnGuard(max int, timeout time.Duration) *conncap.Cap {
	return conncap.New(conncap.Options{MaxPending: max, PendingTimeout: timeout})
}

type guardKey struct{}

// refuseConn stops reading the request's connection, after its refusal
// (a no-op for a handler mounted in another server).
func refuseConn(ctx context.Context) {
	if cc, ok := ctx.Value(guardKey{}).(*conncap.Conn); ok {
		cc.Refuse()
	}
}

// markAuthenticated tells the guard that the request's connection has
// authenticated (a no-op for a handler mounted in another server).
func markAuthenticated(ctx context.Context) {
	if cc, ok := ctx.Value(guardKey{}).(*conncap.Conn); ok {
		cc.Authenticate()
	}
}
