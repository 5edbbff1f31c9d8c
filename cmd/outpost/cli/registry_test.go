package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/harness/presets"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/server"
)

// TestRegistryAgreement: a preset is registered once (harness/presets) and
// its pin written once (bootstrap/pins.json); everything else derives from
// those two and agrees: the installer's bootstrap names, `outpost agents`,
// `outpost bootstrap --list --json`, the test environment's CLI pins
// (internal/testenv) and what scripts/install-clis.sh reads.
func TestRegistryAgreement(t *testing.T) {
	t.Setenv(bootstrap.PinsVariable, "")
	pins, err := bootstrap.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	inst := &bootstrap.Installer{}

	// Registry -> pins: every preset's bootstrap name has a pin, and every
	// pin belongs to a preset.
	used := map[string]bool{}
	for _, name := range presets.Names() {
		h, ok := presets.Lookup(name)
		if !ok || h.Name != name {
			t.Fatalf("Lookup(%q) = %v, %v", name, h, ok)
		}
		if h.Bootstrap == "" {
			continue
		}
		used[h.Bootstrap] = true
		if _, ok := pins.Lookup(h.Bootstrap); !ok || !inst.Known(h.Bootstrap) || !bootstrap.Known(h.Bootstrap) {
			t.Errorf("preset %s names bootstrap %q, which has no pin", name, h.Bootstrap)
		}
	}
	for _, n := range pins.Names() {
		if !used[n] {
			t.Errorf("pin %q belongs to no registered preset", n)
		}
	}
	if d := cmp.Diff(pins.Names(), inst.Names()); d != "" {
		t.Errorf("installer names (-pins +installer):\n%s", d)
	}

	// `outpost agents --json`: one row per preset, with its pin's facts
	// (no preset files: an empty agents directory).
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	code, out, errOut := run(t, t.TempDir(), t.TempDir(), "agents", "--json")
	if code != 0 {
		t.Fatalf("agents: exit %d: %s", code, errOut)
	}
	var rows []server.Agent
	var sbs []server.Sandbox
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, `{"sandbox":`) {
			var sb server.Sandbox
			if err := json.Unmarshal([]byte(line), &sb); err != nil {
				t.Fatalf("sandbox line %q: %v", line, err)
			}
			sbs = append(sbs, sb)
			continue
		}
		var r server.Agent
		if err := json.Unmarshal([]byte(line), &r); err != nil || len(sbs) > 0 {
			t.Fatalf("agents line %q (after %d sandbox lines): %v", line, len(sbs), err)
		}
		rows = append(rows, r)
	}
	// Then the local sandbox, with the isolation its leases get here.
	if len(sbs) != 1 || sbs[0].Name != "local" || (sbs[0].Isolation != "namespaces" && sbs[0].Isolation != "none") || sbs[0].Error != "" {
		t.Errorf("sandbox lines %+v, want local's with its isolation", sbs)
	}
	if d := cmp.Diff(server.Agents(&server.AgentsOptions{Installer: inst}), rows, cmpopts.IgnoreFields(server.Agent{}, "Path")); d != "" {
		t.Errorf("outpost agents (-derived +printed):\n%s", d)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Name)
		pin, ok := pins.Lookup(r.Bootstrap)
		if !ok {
			continue
		}
		if r.Version != pin.Version || r.Kind != string(pin.Kind) || r.Package != pin.Package || r.Program != pin.Program {
			t.Errorf("agent %s: %+v, pin %+v", r.Name, r, pin)
		}
	}
	if d := cmp.Diff(presets.Names(), names); d != "" {
		t.Errorf("agents (-registry +printed):\n%s", d)
	}

	// `outpost bootstrap --list --json` is the pin file.
	code, out, errOut = run(t, t.TempDir(), t.TempDir(), "bootstrap", "--list", "--json")
	if code != 0 {
		t.Fatalf("bootstrap --list --json: exit %d: %s", code, errOut)
	}
	canon, err := pins.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(string(canon), out); d != "" {
		t.Errorf("bootstrap --list --json (-pins.json +printed):\n%s", d)
	}

	// The test environment's CLIs: the npm pins.
	var want []string
	for _, n := range pins.Names() {
		pin, _ := pins.Lookup(n)
		if pin.Kind != bootstrap.KindNPM {
			continue
		}
		dir := filepath.Join(testenv.Cache(), "npm", strings.ReplaceAll(pin.Package, "/", "+")+"@"+pin.Version)
		want = append(want, fmt.Sprintf("%s %s %s %s %s", n, pin.Package, pin.Version, pin.Program, dir))
	}
	var env []string
	for _, n := range testenv.CLIs() {
		env = append(env, fmt.Sprintf("%s %s %s %s %s", n, testenv.CLIPackage(n), testenv.CLIVersion(n), testenv.CLIProgram(n), testenv.CLIDir(n)))
	}
	if d := cmp.Diff(want, env); d != "" {
		t.Errorf("internal/testenv (-pins +testenv):\n%s", d)
	}

	// scripts/install-clis.sh --list: what the script reads from `outpost
	// bootstrap --list --json` (this test binary, as outpost).
	if _, err := exec.LookPath("node"); err != nil {
		testenv.Missing(t, "node (scripts/install-clis.sh parses the pins with it)", "apt-get install nodejs npm")
	}
	bin := filepath.Join(t.TempDir(), "outpost")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, bin); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "../../../scripts/install-clis.sh", "--list")
	cmd.Env = append(os.Environ(), "OUTPOST_BIN="+bin, bootstrap.PinsVariable+"=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("install-clis.sh --list: %v\n%s", err, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if d := cmp.Diff(want, lines); d != "" {
		t.Errorf("scripts/install-clis.sh --list (-pins +script):\n%s", d)
	}
}
