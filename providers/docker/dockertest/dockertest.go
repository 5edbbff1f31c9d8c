// Package dockertest is test scaffolding for the docker provider and the
// integration tests: it builds the static outpost binary the containers
// need (once per test process), requires a Docker Engine and the
// project's test images (failing under CI=true, skipping loudly
// otherwise, through internal/testenv), and checks in TestMain that a test
// process leaves no container or volume of its own behind.
package dockertest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dockerclient "github.com/docker/docker/client"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker"
)

// Images built by scripts/build-images.sh.
const (
	Busybox = "outpost/busybox:test" // FROM scratch + static busybox, user agent 1000:1000
	Debian  = "outpost/debian:test"  // debootstrap bookworm + node 18
)

// Binary returns the in-sandbox binary (testenv.SandboxBinary), built
// once per test process. It fails the test when the build fails.
func Binary(tb testing.TB) string {
	tb.Helper()
	return testenv.SandboxBinary(tb)
}

// Require fails or skips the test when no Docker Engine answers or image
// is missing (scripts/build-images.sh builds the project's images).
func Require(tb testing.TB, images ...string) {
	tb.Helper()
	testenv.RequireDocker(tb)
	for _, img := range images {
		testenv.RequireImage(tb, img)
	}
}

// Provider returns a docker provider for image with the test binary and
// mod applied to its options; it is closed when the test ends.
func Provider(tb testing.TB, image string, mod ...func(*docker.Options)) *docker.Provider {
	tb.Helper()
	return testenv.Provider(tb, &docker.Options{Image: image, Binary: Binary(tb)}, mod, docker.New)
}

// Client returns an Engine API client (API version negotiated).
func Client(tb testing.TB) *dockerclient.Client {
	tb.Helper()
	c, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

// Main runs the tests, then fails the run if this process left a
// container or a volume of its own behind (removing them), and removes the
// built binary. TestMain functions call it after their own setup.
func Main(m *testing.M) { testenv.Main(m, "Docker objects", testenv.RemoveBuilds, Leftovers) }

// Leftovers lists (and removes) the containers and volumes owned by this
// process. It returns "" when there are none or no engine answers.
func Leftovers() string {
	c, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return ""
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Ping(ctx); err != nil {
		return ""
	}
	mine := filters.NewArgs(
		filters.Arg("label", docker.LabelOwnerPID+"="+strconv.Itoa(os.Getpid())),
		filters.Arg("label", docker.LabelOwnerStart+"="+strconv.FormatUint(docker.Self().Start, 10)),
	)
	var out []string
	list, err := c.ContainerList(ctx, container.ListOptions{All: true, Filters: mine})
	if err == nil {
		for _, ct := range list {
			out = append(out, fmt.Sprintf("container %s (%s, %s)", ct.Labels[docker.LabelLease], ct.ID[:12], ct.State))
			c.ContainerRemove(ctx, ct.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	vols, err := c.VolumeList(ctx, volume.ListOptions{Filters: mine})
	if err == nil {
		for _, v := range vols.Volumes {
			out = append(out, "volume "+v.Name+" (lease "+v.Labels[docker.LabelLease]+")")
			c.VolumeRemove(ctx, v.Name, true)
		}
	}
	return strings.Join(out, "\n")
}

// BridgeGateway is the IPv4 address of the default bridge network's
// gateway: the host as containers on the bridge see it. An engine
// restarted over an existing bridge lists no gateway in its IPAM
// configuration; the bridge interface's own address is then the same
// host address.
func BridgeGateway(tb testing.TB) string {
	tb.Helper()
	nw, err := Client(tb).NetworkInspect(context.Background(), docker.DefaultNetwork, network.InspectOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	for _, c := range nw.IPAM.Config {
		if ip := net.ParseIP(c.Gateway); ip != nil && ip.To4() != nil {
			return c.Gateway
		}
	}
	name := nw.Options["com.docker.network.bridge.name"]
	if name == "" {
		name = "docker0"
	}
	if ifc, err := net.InterfaceByName(name); err == nil {
		if addrs, err := ifc.Addrs(); err == nil {
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
					return n.IP.String()
				}
			}
		}
	}
	tb.Fatalf("the %s network has no IPv4 gateway: %+v, and its interface %s no IPv4 address", docker.DefaultNetwork, nw.IPAM.Config, name)
	return ""
}
