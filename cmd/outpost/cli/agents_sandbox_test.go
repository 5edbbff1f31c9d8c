package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/isolate"
)

// TestAgentsSandboxes: `outpost agents` shows each sandbox's effective
// isolation: local in namespaces where bwrap works (the default auto),
// none when asked, none with the NOT ISOLATED note where auto falls back;
// a sandbox that does not open is listed with its error; a --set that is
// not PROVIDER.KEY=VALUE is a usage error.
func TestAgentsSandboxes(t *testing.T) {
	sbs, err := listSandboxes([]string{"local", "local"}, []string{"local.isolation=none"})
	if err != nil || len(sbs) != 2 || sbs[0].Isolation != "none" || sbs[0].Egress != "unenforced" || sbs[0].Note != "" {
		t.Errorf("local with isolation=none: %+v, %v", sbs, err)
	}
	if _, err := isolate.Probe(""); err == nil {
		if sbs, _ := listSandboxes(nil, nil); len(sbs) != 1 || sbs[0].Isolation != "namespaces" || sbs[0].Egress != "enforced" {
			t.Errorf("local by default where bwrap works: %+v", sbs)
		}
	}
	if sbs, _ := listSandboxes([]string{"local"}, []string{"local.isolation=sideways"}); sbs[0].Error == "" {
		t.Errorf("a bad setting: %+v, want its error", sbs[0])
	}
	if _, err := listSandboxes(nil, []string{"isolation=none"}); err == nil {
		t.Error("--set without a provider was accepted")
	}
	t.Setenv("PATH", t.TempDir())
	sbs, _ = listSandboxes(nil, nil)
	var out bytes.Buffer
	(&app{stdout: &out}).printSandboxes(sbs)
	if len(sbs) != 1 || sbs[0].Isolation != "none" || !strings.Contains(out.String(), "NOT ISOLATED") || !strings.Contains(out.String(), "bwrap") {
		t.Errorf("local by default without bwrap: %+v\n%s", sbs, out.String())
	}
}
