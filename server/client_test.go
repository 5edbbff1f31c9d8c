package server_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
)

func newLogger(w *syncBuffer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// clientEnv makes the test binary a one-shot client: GET a path over the
// Unix socket it names, print the status. The peer-credential test runs
// it as another user.
const clientEnv = "OUTPOST_SERVER_TEST_CLIENT"

func maybeClient() {
	sock := os.Getenv(clientEnv)
	if sock == "" {
		return
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://outpost/v1/agents")
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(0)
	}
	resp.Body.Close()
	fmt.Println(resp.StatusCode)
	os.Exit(0)
}
