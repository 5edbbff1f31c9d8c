package selfbin

import "runtime/debug"

// Version is the running outpost's module version and, when the build
// recorded it, the first 12 hex of its commit ("devel" when it has
// neither, "unknown" without build information): what the providers
// write in their labels and owner records.
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	if v == "" {
		v = "devel"
	}
	return v
}
