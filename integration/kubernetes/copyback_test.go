package kubernetes

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/kubernetes/kubetest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestCopyBackOutlivesReleaseDeadline: a release's copy back is bounded by
// its progress (driver.ProgressBound), not by the release's deadline: it
// shared that deadline, so a workspace that took longer to copy back than
// the release allowed lost the agent's changes. The pod is deleted after
// it, with a bound of its own.
func TestCopyBackOutlivesReleaseDeadline(t *testing.T) {
	c := kubetest.Parallel(t)
	p := c.Provider(t, func(o *kubernetes.Options) { o.Image = kubetest.Busybox })
	dir := t.TempDir()
	write(t, dir, "big", strings.Repeat("outpost copy back\n", 1<<20)) // 18 MiB
	l, err := sandbox.Acquire(t.Context(), p, driver.Options{Workdir: dir})
	if err != nil {
		t.Fatal(err)
	}
	res, err := l.Exec(t.Context(), driver.ExecRequest{Path: "/bin/sh", Args: []string{"-c", "echo made inside > new.txt"}, Env: map[string]string{"PATH": "/bin"}}, 1<<20)
	if err != nil || !res.Status.Success() {
		t.Fatalf("exec: %v %+v %s", err, res.Status, res.Stderr)
	}
	sb := l.Sandbox().(*kubernetes.Sandbox)
	pod := sb.ID()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	// The provider's Close itself: the lease's gives it a deadline of its
	// own.
	if err := sb.Close(ctx); err != nil {
		t.Errorf("Close with 50 ms of deadline for the copy back of 18 MiB: %v", err)
	}
	if got := read(t, dir, "new.txt"); got != "made inside\n" {
		t.Errorf("the sandbox's new file on the host: %q", got)
	}
	got, err := c.Admin.CoreV1().Pods(c.Namespace).Get(context.Background(), pod, metav1.GetOptions{})
	if err == nil && got.DeletionTimestamp == nil {
		t.Errorf("pod %s outlived its release", pod)
	} else if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}
