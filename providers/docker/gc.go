package docker

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/outposthq/outpost/internal/owner"
	"github.com/outposthq/outpost/sandbox/driver"
)

// Labels on every container (and its volumes) the provider creates.
const (
	LabelPrefix = "com.github.outposthq.outpost."
	// LabelLease holds the lease id (also the container's name); its
	// presence marks a container as outpost's.
	LabelLease = LabelPrefix + "lease"
	// The owner process: pid, start time (clock ticks after boot, as in
	// /proc/PID/stat), the kernel's boot id, the pid namespace and the
	// host name (owner.Labels). Together they tell whether the owner
	// still runs.
	LabelOwnerPID   = LabelPrefix + owner.KeyPID
	LabelOwnerStart = LabelPrefix + owner.KeyStart
	LabelOwnerBoot  = LabelPrefix + owner.KeyBoot
	LabelOwnerPidNS = LabelPrefix + owner.KeyPidNS
	LabelOwnerHost  = LabelPrefix + owner.KeyHost
	// LabelCreated is the creation time (RFC 3339, UTC).
	LabelCreated = LabelPrefix + "created"
	// LabelVersion is the outpost version that created the container.
	LabelVersion = LabelPrefix + "version"
	// LabelWorkspace is the workspace mode (copy, bind).
	LabelWorkspace = LabelPrefix + "workspace"
)

// Owner identifies a process on a machine (internal/owner).
type Owner = owner.Owner

var self = owner.Self

// Self is the current process as an owner.
func Self() Owner { return self() }

// Liveness of an owner as seen from this process.
type Liveness = owner.Liveness

const (
	Alive   = owner.Alive
	Dead    = owner.Dead
	Unknown = owner.Unknown // another machine or pid namespace
)

// GCOptions configure GC.
type GCOptions struct {
	// All removes every outpost container, whatever its owner's state
	// (use when owners on other machines are known to be gone).
	All bool
	// DryRun lists what would be removed without removing it.
	DryRun bool
}

// Collected is one container GC found.
type Collected struct {
	Container string    `json:"container"` // engine id
	Lease     string    `json:"lease"`
	Owner     Owner     `json:"owner"`
	Liveness  Liveness  `json:"liveness"`
	Created   time.Time `json:"created,omitzero"`
	Version   string    `json:"version,omitempty"`
	Removed   bool      `json:"removed"`
	Error     string    `json:"error,omitempty"`
}

// GCReport is what GC did.
type GCReport struct {
	// Containers are the outpost containers whose owner is dead (or all
	// of them with GCOptions.All), removed unless DryRun.
	Containers []Collected `json:"containers"`
	// Kept counts outpost containers left alone (owner alive or unknown).
	Kept int `json:"kept"`
	// Volumes are dangling outpost volumes removed (left behind by a
	// container removed without its volumes).
	Volumes []string `json:"volumes,omitempty"`
}

// GC removes the containers (and their volumes) of leases whose owner
// process is dead, and dangling outpost volumes. It is what `outpost gc`
// runs, and what every provider does (without All) on its first Open and
// at most once a minute after. Errors removing one container are recorded
// in its entry and joined in the returned error; the sweep goes on.
func (p *Provider) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	eng, err := p.connect(ctx)
	if err != nil {
		return GCReport{}, err
	}
	return gc(ctx, eng, opts)
}

func gc(ctx context.Context, eng *engine, opts GCOptions) (GCReport, error) {
	var rep GCReport
	list, err := eng.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", LabelLease))})
	if err != nil {
		return rep, fmt.Errorf("docker: listing outpost containers: %w", err)
	}
	var errs []error
	for _, c := range list {
		o := owner.FromLabels(LabelPrefix, c.Labels)
		lv := o.Liveness()
		if !opts.All && lv != Dead {
			rep.Kept++
			continue
		}
		col := Collected{Container: c.ID, Lease: c.Labels[LabelLease], Owner: o, Liveness: lv, Version: c.Labels[LabelVersion]}
		col.Created, _ = time.Parse(time.RFC3339Nano, c.Labels[LabelCreated])
		if !opts.DryRun {
			err := eng.cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true, RemoveVolumes: true})
			switch {
			case err == nil || errdefs.IsNotFound(err):
				col.Removed = true
			case errdefs.IsConflict(err):
				// Removal already in progress (another sweep, the owner's
				// own Close): the report says removed once it is gone.
				if err := awaitRemoval(ctx, eng, c.ID); err != nil {
					col.Error = err.Error()
					errs = append(errs, fmt.Errorf("docker: removing %s (lease %s): %w", shortID(c.ID), col.Lease, err))
					break
				}
				col.Removed = true
			default:
				col.Error = err.Error()
				errs = append(errs, fmt.Errorf("docker: removing %s (lease %s): %w", shortID(c.ID), col.Lease, err))
			}
		}
		rep.Containers = append(rep.Containers, col)
	}
	vols, err := eng.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", LabelLease), filters.Arg("dangling", "true"))})
	if err != nil {
		errs = append(errs, fmt.Errorf("docker: listing outpost volumes: %w", err))
	} else {
		for _, v := range vols.Volumes {
			if opts.DryRun {
				rep.Volumes = append(rep.Volumes, v.Name)
				continue
			}
			if err := eng.cli.VolumeRemove(ctx, v.Name, false); err != nil && !errdefs.IsNotFound(err) {
				if !errdefs.IsConflict(err) { // in use again: not dangling any more
					errs = append(errs, fmt.Errorf("docker: removing volume %s: %w", v.Name, err))
				}
				continue
			}
			rep.Volumes = append(rep.Volumes, v.Name)
		}
	}
	sort.Slice(rep.Containers, func(i, j int) bool { return rep.Containers[i].Created.Before(rep.Containers[j].Created) })
	return rep, errors.Join(errs...)
}

// removalWait bounds awaitRemoval.
const removalWait = 60 * time.Second

// awaitRemoval waits until a container whose removal another client began
// is gone, at most removalWait.
func awaitRemoval(ctx context.Context, eng *engine, id string) error {
	ctx, cancel := context.WithTimeout(ctx, removalWait)
	defer cancel()
	wait, errc := eng.cli.ContainerWait(ctx, id, container.WaitConditionRemoved)
	select {
	case <-wait:
		return nil
	case err := <-errc:
		if errdefs.IsNotFound(err) {
			return nil // gone before the wait began
		}
		return fmt.Errorf("waiting for a removal another client began: %w", err)
	}
}

// sweepInterval bounds how often a provider sweeps orphans on Open.
const sweepInterval = time.Minute

// sweep starts GC for dead owners, on the first Open and at most once per
// sweepInterval after, and returns a function that waits for it to end:
// Open overlaps the sweep's requests with its own and waits before it
// returns. Failures are ignored: the sweep is a courtesy, `outpost gc`
// reports them.
func (p *Provider) sweep(ctx context.Context, eng *engine) (wait func()) {
	p.mu.Lock()
	due := !p.swept || time.Since(p.sweptAt) > sweepInterval
	if due {
		p.swept, p.sweptAt = true, time.Now()
	}
	p.mu.Unlock()
	if !due {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = gc(ctx, eng, GCOptions{})
	}()
	return func() { <-done }
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Collect implements driver.Collector: GC, its report also in the
// portable form `outpost gc` prints.
func (p *Provider) Collect(ctx context.Context, opts driver.CollectOptions) (driver.Collection, error) {
	eng, err := p.connect(ctx)
	if err != nil {
		return driver.Collection{}, err
	}
	rep, err := gc(ctx, eng, GCOptions{All: opts.All, DryRun: opts.DryRun})
	col := driver.Collection{Where: eng.cli.DaemonHost(), Kept: rep.Kept, Report: rep}
	for _, c := range rep.Containers {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "container", Name: c.Lease, Owner: c.Owner.String(), State: string(c.Liveness),
			Created: c.Created, Removed: c.Removed, Error: c.Error})
	}
	for _, v := range rep.Volumes {
		col.Orphans = append(col.Orphans, driver.Orphan{Kind: "volume", Name: v, Removed: !opts.DryRun})
	}
	return col, err
}
