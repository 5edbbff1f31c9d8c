package docker

import (
	"context"
	"fmt"
	"os"

	dockerclient "github.com/docker/docker/client"
)

// Engine is what Ping learned of a Docker Engine.
type Engine struct {
	Host    string // the address it answered at
	Version string // the engine's version
	OS      string // the OS of its containers ("linux")
	Arch    string
}

// Ping reports whether a Docker Engine answers at host ("": DOCKER_HOST,
// else the default socket) and which. Unlike a first Open it builds and
// starts nothing (`outpost doctor`). Errors wrap ErrNoEngine and say how
// to fix it (Fix); an engine that does not answer before ctx ends is one
// of them.
func Ping(ctx context.Context, host string) (Engine, error) {
	ops := []dockerclient.Opt{dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation()}
	if host != "" {
		ops = append(ops, dockerclient.WithHost(host))
	}
	cli, err := dockerclient.NewClientWithOpts(ops...)
	if err != nil {
		return Engine{}, fmt.Errorf("%w: %v; %s", ErrNoEngine, err, Fix)
	}
	defer cli.Close()
	e := Engine{Host: cli.DaemonHost()}
	where := e.Host
	if os.Getenv("DOCKER_HOST") == "" && host == "" {
		where += " (DOCKER_HOST is not set)"
	}
	v, err := cli.ServerVersion(ctx)
	if err != nil {
		return e, fmt.Errorf("%w at %s: %w; %s", ErrNoEngine, where, err, Fix)
	}
	e.Version, e.OS, e.Arch = v.Version, v.Os, v.Arch
	return e, nil
}
