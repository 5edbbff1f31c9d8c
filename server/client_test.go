package server_test

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
)

func newLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// clientEnv makes the test binary a one-shot client: a request over the
// Unix socket it names (clientReqEnv's "METHOD PATH [JSON BODY]", by
// default GET /v1/agents), printing the status and the body on one line.
// The peer-credential test runs it as other users.
const (
	clientEnv    = "OUTPOST_SERVER_TEST_CLIENT"
	clientReqEnv = "OUTPOST_SERVER_TEST_CLIENT_REQ"
)

func maybeClient() {
	sock := os.Getenv(clientEnv)
	if sock == "" {
		return
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	method, rest, _ := strings.Cut(cmp.Or(os.Getenv(clientReqEnv), "GET /v1/agents"), " ")
	path, body, _ := strings.Cut(rest, " ")
	req, err := http.NewRequest(method, "http://outpost"+path, strings.NewReader(body))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	fmt.Println(resp.StatusCode, strings.TrimSpace(string(b)))
	os.Exit(0)
}
