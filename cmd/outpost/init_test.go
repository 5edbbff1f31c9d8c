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

// The libraries' init runs in every outpost process, used or not (Go
// initialises every package linked). A library package may allocate up to
// libraryBytes and libraryAllocs; those known to do more are listed in
// heavyInit with their ceiling and why they are linked anyway; and the
// whole binary is held to totalBytes and totalAllocs. So a new dependency
// that compiles schemas or builds large tables at init fails the test,
// whoever imports it.
const (
	libraryBytes  = 192 << 10
	libraryAllocs = 2000
	totalBytes    = 4 << 20
	totalAllocs   = 38000
)

// heavyInit are the library packages allowed more than libraryBytes or
// libraryAllocs at init: their ceiling (about 10% over what they
// allocated on 2026-12-02) and why they are linked.
var heavyInit = map[string]struct {
	bytes, allocs int64
	why           string
}{
	"github.com/santhosh-tekuri/jsonschema/v6": {1900 << 10, 23500, "compiles the meta-schemas of five drafts; the structured-answer validator (docs/output.md says why it is kept)"},
	"github.com/distribution/reference":        {460 << 10, 4000, "compiles the image reference grammar; Docker's client"},
}

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

// librariesOverBudget lists the library packages in trace over their
// budget (heavyInit's ceiling, or libraryBytes and libraryAllocs), and the
// whole trace when its sum is over totalBytes or totalAllocs.
func librariesOverBudget(trace []testenv.Init) []string {
	var over []string
	var bytes, allocs int64
	for _, p := range trace {
		bytes += p.Bytes
		allocs += p.Allocs
		if strings.HasPrefix(p.Package, selfbin.Module) {
			continue
		}
		maxBytes, maxAllocs := int64(libraryBytes), int64(libraryAllocs)
		if h, ok := heavyInit[p.Package]; ok {
			maxBytes, maxAllocs = h.bytes, h.allocs
		}
		if p.Bytes > maxBytes || p.Allocs > maxAllocs {
			over = append(over, fmt.Sprintf("%s: %d bytes in %d allocations (budget %d, %d)", p.Package, p.Bytes, p.Allocs, maxBytes, maxAllocs))
		}
	}
	if bytes > totalBytes || allocs > totalAllocs {
		over = append(over, fmt.Sprintf("the whole binary: %d bytes in %d allocations (budget %d, %d)", bytes, allocs, totalBytes, totalAllocs))
	}
	return over
}

// TestInitBudget: no package of outpost does heavy work at init, nor does
// a library beyond its budget. It runs the built CLI with
// GODEBUG=inittrace=1 (`outpost version` does nothing else) and holds
// every outpost package to the budget, every library package to its own
// and the whole binary to its sum.
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
	for _, o := range librariesOverBudget(trace) {
		t.Errorf("%s: a library's init runs in every outpost process; choose one that does its work on first use, or list it in heavyInit with the reason", o)
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

// TestLibrariesOverBudget: the libraries' check, on traces as the runtime
// prints them: a heavy library not in heavyInit, one over its ceiling, and
// a whole binary over its sum though each package is within its own.
func TestLibrariesOverBudget(t *testing.T) {
	for _, tc := range []struct {
		name, trace string
		want        []string
	}{
		{"within", `init github.com/santhosh-tekuri/jsonschema/v6 @100 ms, 11 ms clock, 1782000 bytes, 21290 allocs
init github.com/spf13/cobra @101 ms, 0.1 ms clock, 4096 bytes, 40 allocs
`, nil},
		{"a new heavy library", `init github.com/pb33f/jsonschema/v6 @100 ms, 6 ms clock, 1782000 bytes, 21290 allocs
`, []string{"github.com/pb33f/jsonschema/v6: 1782000 bytes in 21290 allocations (budget 196608, 2000)"}},
		{"over its ceiling", `init github.com/distribution/reference @100 ms, 8 ms clock, 900000 bytes, 3599 allocs
`, []string{"github.com/distribution/reference: 900000 bytes in 3599 allocations (budget 471040, 4000)"}},
		{"the sum", strings.Repeat(`init example.com/lib @1 ms, 1 ms clock, 100000 bytes, 1000 allocs
`, 60), []string{"the whole binary: 6000000 bytes in 60000 allocations (budget 4194304, 38000)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			trace, err := testenv.ParseInitTrace(tc.trace)
			if err != nil {
				t.Fatal(err)
			}
			if got := librariesOverBudget(trace); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("librariesOverBudget = %q, want %q", got, tc.want)
			}
		})
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

// TestNoClientset: the kubernetes provider reaches the API server through
// client-go's REST client over its own scheme of the API groups it uses
// (agent-sandbox's types import only core/v1 and networking/v1): the CLI links neither client-go's clientset (its typed clients)
// nor its scheme (every built-in group, registered at init in every
// outpost process), nor any other API group.
func TestNoClientset(t *testing.T) {
	out, err := exec.Command(goTool(), "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	allowed := map[string]bool{
		"k8s.io/api/core/v1": true, "k8s.io/api/coordination/v1": true,
		"k8s.io/api/networking/v1": true, "k8s.io/api/authorization/v1": true,
	}
	var linked []string
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "k8s.io/client-go/kubernetes" || strings.HasPrefix(pkg, "k8s.io/client-go/kubernetes/") ||
			(strings.HasPrefix(pkg, "k8s.io/api/") && !allowed[pkg]) {
			linked = append(linked, pkg)
		}
	}
	if len(linked) > 0 {
		t.Errorf("cmd/outpost links %q; the kubernetes provider must use its own scheme (providers/kubernetes/api.go)", linked)
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}
