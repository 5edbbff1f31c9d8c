package docker

import (
	"testing"

	"github.com/outposthq/outpost/sandbox/driver"
)

func TestSharedMounts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	req := []driver.Mount{
		{Source: dir, Target: "/opt/outpost/bootstrap"},
		{Source: dir, Target: "/outpost/home/x"},     // inside the provider's own
		{Source: dir, Target: "/"},                   // over everything
		{Source: "relative", Target: "/opt/x"},       // not absolute
		{Source: dir + "/missing", Target: "/opt/y"}, // not there
		{Source: dir, Target: "/opt/../etc"},         // not clean
	}
	got := sharedMounts(&engine{local: true}, req)
	if len(got) != 1 || got[0] != req[0] {
		t.Errorf("sharedMounts = %+v, want only the first", got)
	}
	if got := sharedMounts(&engine{local: false}, req); len(got) != 0 {
		t.Errorf("a remote engine mounts %+v", got)
	}
	s := &Sandbox{shared: []driver.Mount{req[0]}}
	if p, ok := s.HostPath(dir + "/sha512-x/bin/claude"); !ok || p != "/opt/outpost/bootstrap/sha512-x/bin/claude" {
		t.Errorf("HostPath = %q, %v", p, ok)
	}
	if len(s.bindMounts()) != 1 || !s.bindMounts()[0].ReadOnly {
		t.Errorf("bindMounts = %+v", s.bindMounts())
	}
}
