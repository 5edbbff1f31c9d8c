package driver

import "testing"

func TestMapMount(t *testing.T) {
	mounts := []Mount{{Source: "/host/cache/trees", Target: "/opt/outpost/bootstrap"}}
	cases := []struct {
		in, want string
		ok       bool
	}{
		{"/host/cache/trees", "/opt/outpost/bootstrap", true},
		{"/host/cache/trees/sha512-ab/bin/claude", "/opt/outpost/bootstrap/sha512-ab/bin/claude", true},
		{"/host/cache/trees/../blobs/x", "", false},
		{"/host/cache/treesX/y", "", false},
		{"/elsewhere", "", false},
	}
	for _, c := range cases {
		got, ok := MapMount(mounts, c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("MapMount(%q) = %q, %v; want %q, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}
