package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/server"
)

// newExampleServer is a server of echo turns on local sandboxes, in a
// temporary directory removed by the function it returns.
func newExampleServer() (*server.Server, func()) {
	dir, err := os.MkdirTemp("", "outpost-example-")
	if err != nil {
		log.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	os.Mkdir(work, 0o700)
	srv, err := server.New(&server.Options{
		Workdir:      work,
		Store:        conversation.NewFS(filepath.Join(dir, "store")),
		DefaultAgent: "echo",
		Sandboxes:    []string{"local"},
		PoolSize:     -1, // every turn opens its own sandbox
	})
	if err != nil {
		log.Fatal(err)
	}
	return srv, func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		srv.Shutdown(ctx)
		os.RemoveAll(dir)
	}
}

// The server embedded in another program: its handler mounted under a
// prefix of the program's own mux, next to the program's routes. A
// client starts a turn and follows its events (Server-Sent Events) to
// the result line.
func ExampleServer_Handler() {
	srv, cleanup := newExampleServer()
	defer cleanup()

	mux := http.NewServeMux()
	mux.Handle("/outpost/", http.StripPrefix("/outpost", srv.Handler()))
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "the program's own route\n") })
	hs := httptest.NewServer(mux)
	defer hs.Close()

	resp, err := http.Post(hs.URL+"/outpost/v1/turns", "application/json", strings.NewReader(`{"prompt": "hello"}`))
	if err != nil {
		log.Fatal(err)
	}
	var turn server.TurnStatus
	json.NewDecoder(resp.Body).Decode(&turn)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, turn.Agent)

	events, err := http.Get(hs.URL + "/outpost/v1/turns/" + turn.ID + "/events")
	if err != nil {
		log.Fatal(err)
	}
	defer events.Body.Close()
	sc := bufio.NewScanner(events.Body)
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		var ev struct{ Type, Text string }
		json.Unmarshal([]byte(data), &ev)
		if ev.Type == "result" {
			fmt.Println(ev.Type, ev.Text)
		} else {
			fmt.Println(ev.Type)
		}
	}
	// Output:
	// 202 echo
	// session
	// message
	// finished
	// result echo: hello (turn 1)
}

// The MCP server (what `outpost mcp` serves over stdio and `outpost
// serve` at /mcp), here connected in memory to the Go SDK's client: a
// run_turn call streams the turn's events as progress notifications and
// returns the answer, with the result line as structured content.
func ExampleServer_MCP() {
	srv, cleanup := newExampleServer()
	defer cleanup()
	ctx := context.Background()

	clientEnd, serverEnd := mcp.NewInMemoryTransports()
	if _, err := srv.MCP().Connect(ctx, serverEnd, nil); err != nil {
		log.Fatal(err)
	}
	var progress []string
	client := mcp.NewClient(&mcp.Implementation{Name: "example", Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			var ev struct{ Type string }
			json.Unmarshal([]byte(req.Params.Message), &ev)
			progress = append(progress, ev.Type)
		},
	})
	session, err := client.Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	params := &mcp.CallToolParams{Name: "run_turn", Arguments: map[string]any{"agent": "echo", "prompt": "hello over MCP"}}
	params.SetProgressToken("turn-1")
	res, err := session.CallTool(ctx, params)
	if err != nil {
		log.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	fmt.Println(strings.Split(text, "\n")[0])
	fmt.Println("progress:", strings.Join(progress, " "))
	fmt.Println("structured:", res.StructuredContent.(map[string]any)["text"])
	// Output:
	// echo: hello over MCP (turn 1)
	// progress: session message finished
	// structured: echo: hello over MCP (turn 1)
}
