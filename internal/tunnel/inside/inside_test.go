package inside_test

import (
	"testing"
	"time"

	"github.com/outposthq/outpost/internal/shim"
	"github.com/outposthq/outpost/internal/tunnel/inside"
)

// TestConfigToleratesLateAnswers: a tunnel keeps its keep-alives but
// gives a ping's answer as long as the serving connection gives a write
// (yamux's default, 10 s, ended healthy tunnels on a loaded machine:
// integration/kubernetes's TestTunnelEgressGateway, "its end in the
// sandbox exited with status 0"; a sandbox side stopped for 26 s
// reproduces it on the test cluster).
func TestConfigToleratesLateAnswers(t *testing.T) {
	c := inside.Config()
	if !c.EnableKeepAlive || c.KeepAliveInterval <= 0 {
		t.Errorf("keep-alives off (%v, every %v): a stream that stopped moving would go unnoticed", c.EnableKeepAlive, c.KeepAliveInterval)
	}
	if want := shim.MuxConfig().ConnectionWriteTimeout; c.ConnectionWriteTimeout < want || c.ConnectionWriteTimeout < 30*time.Second {
		t.Errorf("a ping's answer may take %v, want at least %v (the serving connection's) and 30 s", c.ConnectionWriteTimeout, want)
	}
}
