package server_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAbuseAgentFiles: the default agent (echo) takes its file directives
// from a prompt that came over the network; a turn asking it to write
// outside the server's working directory, by an absolute path, by "..", or
// through a symbolic link, writes nothing there, and says so with a
// permission_denied failure for each.
func TestAbuseAgentFiles(t *testing.T) {
	ts := start(t, nil)
	outside := t.TempDir()
	if err := os.Symlink(outside, filepath.Join(ts.workdir, "link")); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(outside, "x")
	prompt := "#write=" + abs + " #write=../x #write=link/x #write=inside.txt"
	st := ts.startTurn(map[string]any{"prompt": prompt})
	items := ts.events(st.ID, 0, nil)
	var denied []string
	for _, it := range items {
		if it.data["type"] == "failure" && it.data["kind"] == "permission_denied" {
			denied = append(denied, it.data["text"].(string))
		}
	}
	if len(denied) != 3 {
		t.Errorf("%d permission_denied failures, want 3: %q", len(denied), denied)
	}
	for _, p := range []string{abs, filepath.Join(filepath.Dir(ts.workdir), "x")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("the turn wrote %s, outside its working directory", p)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Errorf("the turn wrote through the link: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(ts.workdir, "inside.txt")); err != nil {
		t.Errorf("the directive inside the working directory did not run: %v", err)
	}
	res := items[len(items)-1].data
	errObj, _ := res["error"].(map[string]any)
	if res["type"] != "result" || errObj == nil || errObj["code"] != "process" || !strings.Contains(errObj["message"].(string), "outside the working directory") {
		t.Errorf("result %v", res)
	}
}
