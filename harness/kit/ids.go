package kit

import (
	"crypto/rand"
	"fmt"
	"strings"

	"github.com/outposthq/outpost/harness"

	"github.com/outposthq/outpost/harness/kit/lazyre"
)

var uuidRE = lazyre.New(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// UUID reports whether id is a UUID in its canonical text form, as the
// CLIs that name sessions by UUID (Claude Code, Copilot) print them.
// Outpost always resumes by full id, never by a prefix or a name.
func UUID(id string) bool { return uuidRE.MatchString(id) }

// NewUUID returns a random (version 4) UUID.
func NewUUID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16]), nil
}

// InSessionDir reports whether rel, relative to a storage root, is a file
// of the directory <native>/ that holds a conversation's files, lock files
// aside (the CLIs' .workspace-fork.lock and the like, only meaningful to a
// running process). The preset checks native's form first.
func InSessionDir(rel, native string) bool {
	sub, ok := strings.CutPrefix(rel, native+"/")
	if !ok || sub == "" || !harness.RelativePath(sub) {
		return false
	}
	return !strings.HasSuffix(sub, ".lock")
}
