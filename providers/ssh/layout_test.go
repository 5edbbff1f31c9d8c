package ssh_test

import (
	"encoding/json"
	"path"
	"strings"
	"testing"

	"github.com/outposthq/outpost/internal/owner"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/providers/ssh/sshtest"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestLeaseLayout: a lease is a 0700 directory under the 0700 root, with
// an owner record naming this process, a home with the XDG directories,
// and the environment of the local provider's rules.
func TestLeaseLayout(t *testing.T) {
	srv := sshtest.Shared(t)
	l := lease(t, sshtest.Provider(t, srv), driver.Options{})
	s := l.Sandbox().(*sshp.Sandbox)
	dir := s.Dir()
	root := path.Dir(path.Dir(dir))
	if got := srv.MustExec(t, "stat", "-c", "%a %U", root, dir, s.Home()); got != "700 agent\n700 agent\n700 agent\n" {
		t.Errorf("modes of the root, the lease and its home:\n%s", got)
	}
	var rec sshp.Record
	if err := json.Unmarshal([]byte(srv.MustExec(t, "cat", path.Join(dir, "owner"))), &rec); err != nil {
		t.Fatal(err)
	}
	if me := owner.Self(); rec.Owner != me || rec.Lease != s.ID() || rec.Workspace != sshp.Copy || rec.Created.IsZero() {
		t.Errorf("owner record %+v, want owner %+v", rec, me)
	}
	env := l.Environment()
	want := map[string]string{
		"HOME": s.Home(), "XDG_CONFIG_HOME": s.Home() + "/.config", "XDG_DATA_HOME": s.Home() + "/.local/share",
		"XDG_STATE_HOME": s.Home() + "/.local/state", "XDG_CACHE_HOME": s.Home() + "/.cache", "TMPDIR": dir + "/tmp",
	}
	for k, v := range want {
		if env.Fixed[k] != v {
			t.Errorf("%s = %q, want %q", k, env.Fixed[k], v)
		}
	}
	first, _, _ := strings.Cut(env.Defaults["PATH"], ":")
	if !strings.HasPrefix(first, root+"/bin/") {
		t.Errorf("PATH %q does not start with outpost's directory", env.Defaults["PATH"])
	}
	for k := range env.Defaults {
		if !strings.Contains(" "+strings.Join(sshp.Allowlist, " ")+" ", " "+k+" ") {
			t.Errorf("default %s is not in the allowlist", k)
		}
	}
	if got := sh(t, l, "echo $HOME; pwd; ls -A $HOME | tr '\\n' ' '"); got != s.Home()+"\n"+dir+"/workspace\n.cache .config .local" {
		t.Errorf("inside: %q", got)
	}
}
