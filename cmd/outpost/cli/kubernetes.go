//go:build !nokubernetes

package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"

	dockerclient "github.com/docker/docker/client"
	"github.com/docker/docker/pkg/jsonmessage"
	"github.com/spf13/cobra"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/providers/kubernetes" // also registers "kubernetes"
)

// imageFlags are the flags of `outpost kubernetes image`.
type imageFlags struct {
	arch, output, address string
	containerd, docker    bool
}

func (a *app) kubernetesCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "kubernetes",
		Short: "Prepare a cluster for the kubernetes sandbox",
	}
	c.AddCommand(a.kubernetesImageCmd())
	return c
}

func (a *app) kubernetesImageCmd() *cobra.Command {
	var f imageFlags
	c := &cobra.Command{
		Use:   "image [--arch ARCH] [-o FILE] [--import [--address SOCKET]] [--docker]",
		Short: "Write the outpost image the kubernetes sandbox's pods start from",
		Long: `Write the outpost image every pod of the kubernetes sandbox starts from
(outpost's static binary, FROM scratch) as a docker-archive tar, for the
nodes' architecture. Its reference, ` + kubernetes.OutpostImageRepo + `:<12 hex of the binary>,
is what the provider asks for by default: a cluster that does not have it
fails the first turn with ErrImagePull.

--import loads it into the containerd of this machine (ctr, namespace k8s.io),
as on a node; --docker loads it into the Docker engine, to tag and push to a
registry the cluster pulls from (then set outpost_image to the pushed name).`,
		Example: `  outpost kubernetes image --arch amd64 -o outpost-image.tar
  outpost kubernetes image --import
  outpost kubernetes image --arch arm64 --docker`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return a.kubernetesImage(c.Context(), f)
		},
	}
	fl := c.Flags()
	fl.StringVar(&f.arch, "arch", runtime.GOARCH, "the nodes' architecture: amd64 or arm64")
	fl.StringVarP(&f.output, "output", "o", "", "write the image archive to FILE")
	fl.BoolVar(&f.containerd, "import", false, "import the image into containerd (ctr -n k8s.io images import)")
	fl.StringVar(&f.address, "address", "", "with --import: containerd's socket (default ctr's, /run/containerd/containerd.sock)")
	fl.BoolVar(&f.docker, "docker", false, "load the image into the Docker engine (DOCKER_HOST), to push it to a registry")
	return c
}

func (a *app) kubernetesImage(ctx context.Context, f imageFlags) error {
	if f.arch != "amd64" && f.arch != "arm64" {
		return usageError{fmt.Errorf("--arch %q: want amd64 or arm64", f.arch)}
	}
	if f.output == "" && !f.containerd && !f.docker {
		return usageError{fmt.Errorf("say where the image goes: -o FILE, --import or --docker")}
	}
	if f.address != "" && !f.containerd {
		return usageError{fmt.Errorf("--address applies to --import")}
	}
	bin, err := selfbin.LocateOrBuild(ctx, f.arch)
	if err != nil {
		return outpost.Errorf(outpost.Configuration, "image", "%w (%s)", err, selfbin.Hint)
	}
	var img bytes.Buffer
	ref, err := kubernetes.WriteOutpostImage(&img, bin, f.arch)
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "image", err)
	}
	if f.output != "" {
		if err := writeFileAtomic(f.output, func(w io.Writer) error { _, err := w.Write(img.Bytes()); return err }); err != nil {
			return outpost.Wrap(outpost.Configuration, "image", err)
		}
		fmt.Fprintf(a.stdout, "wrote %s (linux/%s) to %s\n", ref, f.arch, f.output)
	}
	if f.containerd {
		if err := ctrImport(ctx, f.address, img.Bytes()); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "imported %s into containerd (namespace k8s.io)\n", ref)
	}
	if f.docker {
		if err := dockerLoad(ctx, img.Bytes()); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "loaded %s into Docker: docker tag %s REGISTRY/outpost:TAG, push it, and set outpost_image=REGISTRY/outpost:TAG\n", ref, ref)
	}
	return nil
}

// ctrImport imports a docker-archive into containerd's k8s.io namespace,
// where the kubelet looks for images, with containerd's own ctr.
func ctrImport(ctx context.Context, address string, archive []byte) error {
	ctr, err := exec.LookPath("ctr")
	if err != nil {
		return outpost.New(outpost.Configuration, "image", "--import needs containerd's ctr on PATH: write the archive with -o FILE and run `ctr -n k8s.io images import FILE` on each node")
	}
	args := []string{"-n", "k8s.io", "images", "import", "-"}
	if address != "" {
		args = append([]string{"--address", address}, args...)
	}
	cmd := exec.CommandContext(ctx, ctr, args...)
	cmd.Stdin = bytes.NewReader(archive)
	if out, err := cmd.CombinedOutput(); err != nil {
		return outpost.Errorf(outpost.Sandbox, "image", "ctr images import: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// dockerLoad loads a docker-archive into the Docker engine DOCKER_HOST
// (or the default socket) names.
func dockerLoad(ctx context.Context, archive []byte) error {
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		return outpost.Wrap(outpost.Configuration, "image", err)
	}
	defer cli.Close()
	resp, err := cli.ImageLoad(ctx, bytes.NewReader(archive), dockerclient.ImageLoadWithQuiet(true))
	if err != nil {
		return outpost.Errorf(outpost.Sandbox, "image", "docker load at %s: %w", cli.DaemonHost(), err)
	}
	defer resp.Body.Close()
	// The engine reports a refused archive inside the stream.
	if err := jsonmessage.DisplayJSONMessagesStream(resp.Body, io.Discard, 0, false, nil); err != nil {
		return outpost.Errorf(outpost.Sandbox, "image", "docker load at %s: %w", cli.DaemonHost(), err)
	}
	return nil
}
