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

func TestShareable(t *testing.T) {
	own := []string{"/outpost", "/workspace"}
	for _, c := range []struct {
		m    Mount
		want bool
	}{
		{Mount{Source: "/host/cache", Target: "/cache"}, true},
		{Mount{Source: "/host/cache", Target: "/outposts"}, true},
		{Mount{Source: "rel", Target: "/cache"}, false},
		{Mount{Source: "/host", Target: "cache"}, false},
		{Mount{Source: "/host", Target: "/cache/"}, false},
		{Mount{Source: "/host", Target: "/a/../cache"}, false},
		{Mount{Source: "/host", Target: "/"}, false},
		{Mount{Source: "/host", Target: "/outpost"}, false},
		{Mount{Source: "/host", Target: "/workspace/sub"}, false},
		{Mount{Source: "/host", Target: "/work"}, true},
	} {
		if got := Shareable(c.m, own...); got != c.want {
			t.Errorf("Shareable(%+v) = %v, want %v", c.m, got, c.want)
		}
	}
	if Shareable(Mount{Source: "/host", Target: "/x"}, "/x/y") {
		t.Error("a target holding one of the sandbox's own directories is shareable")
	}
}
