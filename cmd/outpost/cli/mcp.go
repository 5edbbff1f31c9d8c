package cli

import (
	"context"
	"errors"
	"io"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/server"
)

// mcpCmd is `outpost mcp`: the MCP server over stdio (docs/mcp.md).
func (a *app) mcpCmd() *cobra.Command {
	var f serveFlags
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve outpost's tools to an MCP client over standard input and output",
		Long: `Serve outpost as a Model Context Protocol server on standard input and
output, for a coding agent or any MCP client to start: its tools run_turn,
get_conversation, list_conversations and list_agents run turns of other
agents in sandboxes (docs/mcp.md). A run_turn's events are sent as
progress notifications; cancelling the call cancels the turn. Logs go to
standard error. The same server is at /mcp of ` + "`outpost serve`" + ` (streamable HTTP).
Without a pool by default, every turn opens its own sandbox and destroys it.`,
		Example: `  outpost mcp
  outpost mcp --sandbox docker --image outpost/debian:test
  claude --mcp-config '{"mcpServers":{"outpost":{"command":"outpost","args":["mcp"]}}}'`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return a.mcp(c.Context(), f) },
	}
	fl := c.Flags()
	serverFlags(fl, &f, -1)
	fl.DurationVar(&f.grace, "grace", 30*time.Second, "at the end of input, how long running turns may finish before they are cancelled")
	return c
}

func (a *app) mcp(ctx context.Context, f serveFlags) error {
	opts, err := a.serverOptions(f)
	if err != nil {
		return err
	}
	opts.Name = "outpost mcp"
	srv, err := server.New(opts)
	if err != nil {
		return err
	}
	in, out := io.NopCloser(a.stdin), nopWriteCloser{a.stdout}
	err = srv.MCP().Run(ctx, &mcp.IOTransport{Reader: in, Writer: out})
	if errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
		err = nil
	}
	if err != nil {
		// What ends the session early is what the client sent: not
		// JSON-RPC, a batch the protocol forbids, a duplicate id.
		err = outpost.Errorf(outpost.Configuration, "mcp", "the client's messages on standard input: %w", err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.grace+2*time.Minute)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		err = errors.Join(err, outpost.Wrap(outpost.Sandbox, "shutdown", serr))
	}
	return err
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
