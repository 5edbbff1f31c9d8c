// Package layout is the directory layout inside a container sandbox (the
// docker and kubernetes providers): where the private home, the temporary
// directory, the shim's run directory, outpost's binary and the workspace
// are. The providers make these directories when a sandbox starts (a
// volume or an emptyDir at StateDir, another at Workspace for kubernetes).
package layout

const (
	// StateDir holds the home, the temporary directory, the shim's run
	// directory and outpost's binary: a volume of the container, an
	// emptyDir of the pod.
	StateDir = "/outpost"
	// HomeDir is the private home.
	HomeDir = StateDir + "/home"
	// TmpDir is TMPDIR.
	TmpDir = StateDir + "/tmp"
	// RunDir is the shim's run directory (exit statuses, tokens).
	RunDir = StateDir + "/run"
	// BinaryPath is outpost's static binary (the init, the shim, the echo
	// agent); its directory leads the default PATH.
	BinaryPath = StateDir + "/bin/outpost"
	// Workspace is the working directory: the caller's directory, copied
	// (or, on docker, bind-mounted).
	Workspace = "/workspace"
	// DefaultPath follows outpost's binary directory in PATH when the
	// image sets no PATH.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)
