package docker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// TestCancelledAcquireLeavesNothing: Acquires cancelled at every moment
// of the container's creation and start leave no container behind. The
// engine goes on creating a container whose request was dropped, and a
// removal by name that came first found nothing: containers were left in
// state created.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	t.Parallel()
	dockertest.Require(t, dockertest.Busybox)
	p := dockertest.Provider(t, dockertest.Busybox)
	wd := workdir(t)
	label := map[string]string{"outpost-test-cancelled": t.Name()}
	for round := range 3 {
		var wg sync.WaitGroup
		for i := range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(round*10+i)*8*time.Millisecond)
				defer cancel()
				if l, err := sandbox.Acquire(ctx, p, driver.Options{Workdir: wd, Labels: label}); err == nil {
					l.Close(context.Background())
				}
			}()
		}
		wg.Wait()
	}
	list, err := dockertest.Client(t).ContainerList(context.Background(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", "outpost-test-cancelled="+t.Name()))})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range list {
		t.Errorf("a cancelled Acquire left container %s (%s, %v)", c.ID[:12], c.State, c.Names)
	}
}
