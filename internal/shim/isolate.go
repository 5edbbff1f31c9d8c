package shim

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/outposthq/outpost/internal/isolate"
	"github.com/outposthq/outpost/internal/tunnel/inside"
)

// Isolation is how the exec shim runs its program in bubblewrap's
// namespaces on a host that is not outpost's own (an ssh host): the
// bwrap to run and what the program sees. The provider passes it as the
// exec shim's --isolate argument (IsolateArg); the shim adds what only
// the host can tell: the program's tree, its PATH's directories and, for
// the tunnels, its own binary as the forwarder. It holds paths only,
// never a value of the environment.
type Isolation struct {
	Bwrap string       `json:"bwrap"`
	Spec  isolate.Spec `json:"spec"`
}

// IsolateArg is the exec shim's argument that runs the program under iso.
func IsolateArg(iso Isolation) string {
	b, _ := json.Marshal(iso)
	return "--isolate=" + base64.RawURLEncoding.EncodeToString(b)
}

// DecodeIsolation reads the value of --isolate.
func DecodeIsolation(s string) (Isolation, error) {
	var iso Isolation
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(b, &iso)
	}
	if err != nil {
		return iso, fmt.Errorf("not an isolation spec: %w", err)
	}
	if iso.Bwrap == "" || iso.Spec.Home == "" || iso.Spec.Workdir == "" {
		return iso, errors.New("an isolation spec needs bwrap, a home and a workspace")
	}
	return iso, nil
}

// command is bwrap's command that runs path with args in dir as iso says,
// with the reporter of the forwarder when it runs the program (tunnels).
func (iso *Isolation) command(path string, args []string, dir, pathEnv string) (*exec.Cmd, *isolate.Reporter, error) {
	spec := iso.Spec
	spec.Exists = func(p string) bool { _, err := os.Lstat(p); return err == nil }
	spec.Shown = append([]string(nil), spec.Shown...)
	spec.Show(path, pathEnv)
	if dir == "" {
		dir = spec.Workdir
	}
	cmd := exec.Command(iso.Bwrap, spec.Args(path, args, dir)...)
	if !spec.Forwarding() {
		return cmd, nil, nil
	}
	self, err := os.Executable()
	if err != nil {
		return nil, nil, fmt.Errorf("the forwarder of an isolated process: %w", err)
	}
	spec.Shim, spec.ForwardMode = self, inside.ForwardArgs()
	rep, err := isolate.NewReporter()
	if err != nil {
		return nil, nil, err
	}
	cmd = exec.Command(iso.Bwrap, spec.Args(path, args, dir)...)
	cmd.ExtraFiles = []*os.File{rep.Child()}
	return cmd, rep, nil
}

// target is the process group a signal for the program started as pgid
// goes to: in bubblewrap, the session it made inside (a signal to bwrap
// itself would end the namespace with a SIGKILL), once it is there.
func target(pgid int, isolated bool) int {
	if isolated {
		if g := isolate.InnerSession(pgid); g > 0 {
			return g
		}
	}
	return pgid
}

// ProbeMode is the shim's mode that tells whether bubblewrap makes the
// namespaces on this host (isolate.Probe): it prints bwrap's absolute
// path, or the reason on stderr with exit status 1.
const ProbeMode = "bwrap-probe"

// ProbeArgs returns the command line of the probe of bwrap ("" or a path).
func ProbeArgs(binary, bwrap string) []string {
	a := []string{binary, Subcommand, ProbeMode}
	if bwrap != "" {
		a = append(a, bwrap)
	}
	return a
}

func probeMain(args []string, stdout, stderr io.Writer) int {
	if len(args) > 1 {
		fmt.Fprintln(stderr, "usage: outpost sandbox-shim bwrap-probe [BWRAP]")
		return 2
	}
	bwrap := ""
	if len(args) == 1 {
		bwrap = args[0]
	}
	p, err := isolate.Probe(bwrap)
	if err != nil {
		fmt.Fprintln(stderr, strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	fmt.Fprintln(stdout, p)
	return 0
}
