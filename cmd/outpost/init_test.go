package main_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/testenv"
)

// Budget is what one of outpost's own packages may allocate while it is
// initialised, before main runs: enough for error values, settings
// declarations and small tables, not for compiled regular expressions,
// JSON schemas, metrics registries or presets, which are built on first
// use. The counts come from the runtime's init trace and do not depend on
// the machine's speed.
const (
	budgetBytes  = 32 << 10
	budgetAllocs = 100
)

// overBudget lists the packages of outpost in trace that allocated more
// than the budget at init.
func overBudget(trace []testenv.Init) []string {
	var over []string
	for _, p := range trace {
		if strings.HasPrefix(p.Package, selfbin.Module) && (p.Bytes > budgetBytes || p.Allocs > budgetAllocs) {
			over = append(over, fmt.Sprintf("%s: %d bytes in %d allocations", p.Package, p.Bytes, p.Allocs))
		}
	}
	return over
}

// TestInitBudget: no package of outpost does heavy work at init. It runs
// the built CLI with GODEBUG=inittrace=1 (`outpost version` does nothing
// else) and holds every outpost package to the budget.
func TestInitBudget(t *testing.T) {
	bin := testenv.OutpostBinary(t)
	trace := testenv.InitTrace(t, bin, "version")
	var ours int
	for _, p := range trace {
		if strings.HasPrefix(p.Package, selfbin.Module) {
			ours++
		}
	}
	if ours < 10 {
		t.Fatalf("the init trace names %d packages of outpost, want the CLI's (is the module path %s?)", ours, selfbin.Module)
	}
	for _, o := range overBudget(trace) {
		t.Errorf("%s; budget %d bytes, %d allocations: build it on first use (harness/kit/lazyre, sync.OnceValue)", o, budgetBytes, budgetAllocs)
	}
}

// TestOverBudget: the check itself, on a trace as the runtime prints it
// (the figures of harness/declarative before its patterns were lazy).
func TestOverBudget(t *testing.T) {
	trace, err := testenv.ParseInitTrace(`init runtime @0.28 ms, 13 ms clock, 0 bytes, 0 allocs
init github.com/outposthq/outpost/harness/declarative @182 ms, 13 ms clock, 343360 bytes, 4757 allocs
init github.com/outposthq/outpost/sandbox @183 ms, 0.037 ms clock, 16 bytes, 1 allocs
init k8s.io/client-go/kubernetes/scheme @100 ms, 11 ms clock, 653128 bytes, 5363 allocs
`)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"github.com/outposthq/outpost/harness/declarative: 343360 bytes in 4757 allocations"}
	if got := overBudget(trace); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("overBudget = %q, want %q", got, want)
	}
}

// TestNoKubernetesBuild: -tags nokubernetes (the README's first command)
// compiles no Kubernetes client, and the default build keeps it.
func TestNoKubernetesBuild(t *testing.T) {
	for _, tc := range []struct {
		tags string
		want bool
	}{{"", true}, {"nokubernetes", false}} {
		cmd := exec.Command(goTool(), "list", "-deps", "-tags", tc.tags, ".")
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps -tags %q: %v", tc.tags, err)
		}
		if got := strings.Contains(string(out), "\nk8s.io/client-go/"); got != tc.want {
			t.Errorf("-tags %q: the Kubernetes client is linked: %v, want %v", tc.tags, got, tc.want)
		}
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
