package settings

// The keys two or more providers take: one name and one meaning each. A
// provider adds its default (Key.With) and, for workspace, its values
// (Key.Only).
var (
	Image = Key{Name: "image", Kind: String, Doc: "the image every sandbox runs"}
	Pull  = Key{Name: "pull", Kind: Enum, Values: []string{"missing", "never", "always"},
		OldValues: map[string]string{"if-not-present": "missing"},
		Doc:       "when the image is pulled: when missing, never (fail when missing), always"}
	User = Key{Name: "user", Kind: String, Doc: "who the sandbox's processes run as"}
	CPU  = Key{Name: "cpu", Kind: Quantity, None: true, Old: []string{"cpus"},
		Doc: "CPU limit in CPUs (1.5, 500m)"}
	Memory = Key{Name: "memory", Kind: Size, None: true,
		Doc: "memory limit in bytes, binary suffixes (512m, 4g, 4Gi)"}
	ReadOnly = Key{Name: "readonly", Kind: Bool, Old: []string{"read_only", "read-only"},
		Doc: "a read-only root filesystem (/tmp, the home and the workspace stay writable)"}
	Workspace = Key{Name: "workspace", Kind: Enum, Values: []string{"copy"},
		Doc: "how the caller's working directory reaches the sandbox"}
	Binary = Key{Name: "binary", Kind: Path,
		Doc: "a static outpost binary for the sandbox's architecture (default: located or built)"}
	Host = Key{Name: "host", Kind: String, Doc: "the address of the machine that runs the sandboxes"}
	Root = Key{Name: "root", Kind: Path, Old: []string{"base"},
		Doc: "the provider's directory, which holds the leases' directories"}
	StartTimeout = Key{Name: "start_timeout", Kind: Duration, Old: []string{"dial_timeout"},
		Doc: "bound on bringing a sandbox up"}
)

// Common lists the shared keys, in the order of the docs.
var Common = []Key{Image, Pull, User, CPU, Memory, ReadOnly, Workspace, Binary, Host, Root, StartTimeout}

// IsCommon reports whether name is a shared key.
func IsCommon(name string) bool {
	for _, k := range Common {
		if k.Name == name {
			return true
		}
	}
	return false
}
