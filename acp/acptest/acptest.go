// Package acptest is the ACP client the tests of package acp and of
// integration drive `outpost acp` with: the Go SDK's client side,
// recording the session updates it gets.
package acptest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/coder/acp-go-sdk"
)

// Client is an ACP client (sdk.Client) that records the session updates
// and permission requests it gets, answers permissions by Answer
// (default: cancelled, a refusal) and has no files or terminals.
type Client struct {
	// Answer, when set, answers a permission request: the option chosen,
	// "" to cancel it. It may block (ctx ends when the agent withdraws
	// the request). Set it before the connection is used.
	Answer func(ctx context.Context, r sdk.RequestPermissionRequest) string

	mu      sync.Mutex
	updates []sdk.SessionNotification
	asked   []sdk.RequestPermissionRequest
	changed chan struct{}
}

// New returns a Client.
func New() *Client { return &Client{changed: make(chan struct{}, 1)} }

func (c *Client) SessionUpdate(_ context.Context, n sdk.SessionNotification) error {
	c.mu.Lock()
	c.updates = append(c.updates, n)
	c.mu.Unlock()
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return nil
}

func (c *Client) RequestPermission(ctx context.Context, r sdk.RequestPermissionRequest) (sdk.RequestPermissionResponse, error) {
	c.mu.Lock()
	c.asked = append(c.asked, r)
	c.mu.Unlock()
	if c.Answer != nil {
		if o := c.Answer(ctx, r); o != "" {
			return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeSelected(sdk.PermissionOptionId(o))}, nil
		}
	}
	return sdk.RequestPermissionResponse{Outcome: sdk.NewRequestPermissionOutcomeCancelled()}, nil
}

// Asked returns the permission requests so far and forgets them.
func (c *Client) Asked() []sdk.RequestPermissionRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.asked
	c.asked = nil
	return a
}
func (c *Client) ReadTextFile(context.Context, sdk.ReadTextFileRequest) (sdk.ReadTextFileResponse, error) {
	return sdk.ReadTextFileResponse{}, errors.New("no files")
}
func (c *Client) WriteTextFile(context.Context, sdk.WriteTextFileRequest) (sdk.WriteTextFileResponse, error) {
	return sdk.WriteTextFileResponse{}, errors.New("no files")
}
func (c *Client) CreateTerminal(context.Context, sdk.CreateTerminalRequest) (sdk.CreateTerminalResponse, error) {
	return sdk.CreateTerminalResponse{}, errors.New("no terminals")
}
func (c *Client) KillTerminal(context.Context, sdk.KillTerminalRequest) (sdk.KillTerminalResponse, error) {
	return sdk.KillTerminalResponse{}, errors.New("no terminals")
}
func (c *Client) TerminalOutput(context.Context, sdk.TerminalOutputRequest) (sdk.TerminalOutputResponse, error) {
	return sdk.TerminalOutputResponse{}, errors.New("no terminals")
}
func (c *Client) ReleaseTerminal(context.Context, sdk.ReleaseTerminalRequest) (sdk.ReleaseTerminalResponse, error) {
	return sdk.ReleaseTerminalResponse{}, errors.New("no terminals")
}
func (c *Client) WaitForTerminalExit(context.Context, sdk.WaitForTerminalExitRequest) (sdk.WaitForTerminalExitResponse, error) {
	return sdk.WaitForTerminalExitResponse{}, errors.New("no terminals")
}

// Take returns the updates so far and forgets them.
func (c *Client) Take() []sdk.SessionNotification {
	c.mu.Lock()
	defer c.mu.Unlock()
	u := c.updates
	c.updates = nil
	return u
}

// WaitFor waits until an update satisfies ok.
func (c *Client) WaitFor(t testing.TB, ok func(sdk.SessionUpdate) bool) {
	t.Helper()
	deadline := time.After(5 * time.Minute)
	for {
		c.mu.Lock()
		for _, n := range c.updates {
			if ok(n.Update) {
				c.mu.Unlock()
				return
			}
		}
		c.mu.Unlock()
		select {
		case <-c.changed:
		case <-deadline:
			t.Fatal("no such update within 5 minutes")
		}
	}
}

// Text is the agent's (or with user, the user's) text of the updates.
func Text(ns []sdk.SessionNotification, user bool) string {
	var b strings.Builder
	for _, n := range ns {
		u := n.Update
		switch {
		case !user && u.AgentMessageChunk != nil && u.AgentMessageChunk.Content.Text != nil:
			b.WriteString(u.AgentMessageChunk.Content.Text.Text)
		case user && u.UserMessageChunk != nil && u.UserMessageChunk.Content.Text != nil:
			b.WriteString(u.UserMessageChunk.Content.Text.Text + "\n")
		}
	}
	return b.String()
}
