package shim

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestLookPathResult(t *testing.T) {
	if p, err := LookPathResult("docker", "node", 0, []byte("/usr/bin/node\n"), nil); err != nil || p != "/usr/bin/node" {
		t.Errorf("exit 0 = %q, %v", p, err)
	}
	if _, err := LookPathResult("ssh", "node", 1, nil, nil); !errors.Is(err, exec.ErrNotFound) {
		t.Errorf("exit 1 = %v, want exec.ErrNotFound", err)
	}
	for _, c := range []struct {
		code   int
		stdout string
	}{{0, " \n"}, {2, ""}, {126, "/x"}} {
		_, err := LookPathResult("kubernetes", "node", c.code, []byte(c.stdout), []byte(" bad PATH \n"))
		if err == nil || errors.Is(err, exec.ErrNotFound) || !strings.HasPrefix(err.Error(), "kubernetes: looking up node: exit ") || !strings.HasSuffix(err.Error(), ": bad PATH") {
			t.Errorf("exit %d, stdout %q = %v, want kubernetes's failure with the shim's stderr", c.code, c.stdout, err)
		}
	}
}
