package docker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestPing: an address where no engine listens is ErrNoEngine (also
// driver.ErrUnreachable) with the fix; the test engine answers with its
// version and builds nothing to do so.
func TestPing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := docker.Ping(ctx, "unix:///nonexistent/docker.sock")
	if !errors.Is(err, docker.ErrNoEngine) || !errors.Is(err, driver.ErrUnreachable) || !strings.Contains(err.Error(), docker.Fix) {
		t.Errorf("no engine: %v", err)
	}
	testenv.RequireDocker(t)
	e, err := docker.Ping(ctx, "")
	if err != nil || e.Version == "" || e.OS != "linux" || e.Host == "" {
		t.Errorf("the test engine: %+v %v", e, err)
	}
}
