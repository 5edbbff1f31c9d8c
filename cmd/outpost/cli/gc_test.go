package cli_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/sandbox/driver"
	"github.com/outposthq/outpost/sandbox/memsandbox"
)

// noCollector is a provider without driver.Collector: the embedded
// interface hides memsandbox's Collect.
type noCollector struct{ driver.Provider }

func (noCollector) Name() string { return "nocollect" }

func init() {
	driver.Register("nocollect", func(map[string]string) (driver.Provider, error) {
		return noCollector{memsandbox.New(nil)}, nil
	})
}

// TestGCThroughCollector: `outpost gc` works on any provider that
// implements driver.Collector (the in-memory one here, which keeps every
// sandbox of a live process), and on one that does not it fails with code
// configuration, saying so.
func TestGCThroughCollector(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	exit, out, errOut := run(t, home, wd, "gc", "--sandbox", "memory", "--json")
	if exit != 0 {
		t.Fatalf("gc --sandbox memory: exit %d\n%s%s", exit, out, errOut)
	}
	var col driver.Collection
	if err := json.Unmarshal([]byte(out), &col); err != nil {
		t.Fatalf("gc --json: %v\n%s", err, out)
	}
	if diff := cmp.Diff(driver.Collection{Where: memsandbox.Name}, col); diff != "" {
		t.Errorf("gc --json (-want +got):\n%s", diff)
	}
	exit, out, _ = run(t, home, wd, "gc", "--sandbox", "memory", "--dry-run")
	if exit != 0 || !strings.Contains(out, "would remove 0 orphans on memory; kept 0") {
		t.Errorf("gc --dry-run: exit %d, stdout %q", exit, out)
	}
	exit, out, errOut = run(t, home, wd, "gc", "--sandbox", "nocollect")
	if exit != 3 || !strings.Contains(errOut, "the nocollect sandbox cannot collect") || out != "" {
		t.Errorf("gc on a provider without a Collector: exit %d (want 3, configuration), stdout %q, stderr %q", exit, out, errOut)
	}
}
