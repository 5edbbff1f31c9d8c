package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/image"

	"github.com/outposthq/outpost/internal/layout"
	"github.com/outposthq/outpost/sandbox/driver"
)

// MinimalImage is the default image: a root filesystem of a few files
// (/etc/passwd and /etc/group with root, agent 1000:1000 and nobody; /tmp;
// /home/agent) that the provider imports into the engine on first use, so
// a sandbox needs no registry. It has no shell and no C library: enough
// for the echo agent and static agent CLIs, which outpost puts in the
// sandbox itself. The tag is a digest of the content.
var MinimalImage, minimalTar = minimal()

// LabelImage marks the images the provider builds.
const LabelImage = LabelPrefix + "image"

// imageFacts is what a container needs to know of its image.
type imageFacts struct {
	ref string
	id  string
	env []string // the image's environment
}

func minimal() (string, []byte) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(0, 0)
	var errs []error // none with this static content; checked anyway
	add := func(name string, typ byte, mode int64, uid int, data string) {
		h := &tar.Header{Name: name, Typeflag: typ, Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Size: int64(len(data)), Format: tar.FormatPAX}
		errs = append(errs, tw.WriteHeader(h))
		_, err := io.WriteString(tw, data)
		errs = append(errs, err)
	}
	add("etc/", tar.TypeDir, 0o755, 0, "")
	add("etc/passwd", tar.TypeReg, 0o644, 0, "root:x:0:0:root:/root:/sbin/nologin\nagent:x:1000:1000:agent:/home/agent:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n")
	add("etc/group", tar.TypeReg, 0o644, 0, "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n")
	add("etc/nsswitch.conf", tar.TypeReg, 0o644, 0, "hosts: files dns\n")
	add("home/", tar.TypeDir, 0o755, 0, "")
	add("home/agent/", tar.TypeDir, 0o755, 1000, "")
	add("root/", tar.TypeDir, 0o700, 0, "")
	add("tmp/", tar.TypeDir, 0o1777, 0, "")
	add("var/", tar.TypeDir, 0o755, 0, "")
	add("var/tmp/", tar.TypeDir, 0o1777, 0, "")
	if err := errors.Join(append(errs, tw.Close())...); err != nil {
		return "outpost/minimal:unbuildable", nil // importMinimal reports it
	}
	sum := sha256.Sum256(buf.Bytes())
	return "outpost/minimal:" + hex.EncodeToString(sum[:6]), buf.Bytes()
}

// image returns the facts of the lease's image, pulling or building it as
// the pull policy says, with the pull's or build's progress to report
// (driver.Options.Progress; nil: none). Errors wrap ErrImage, or are
// ctx's.
func (p *Provider) image(ctx context.Context, eng *engine, report func(driver.Progress)) (*imageFacts, error) {
	ref := p.opts.Image
	if ref == "" {
		ref = MinimalImage
	}
	p.imageMu.Lock()
	defer p.imageMu.Unlock()
	if f, ok := p.images[ref]; ok && p.opts.Pull != PullAlways {
		return f, nil
	}
	if p.opts.Pull == PullAlways && ref != MinimalImage {
		if err := pull(ctx, eng, ref, report); err != nil {
			return nil, err
		}
	}
	ins, err := eng.cli.ImageInspect(ctx, ref)
	if errdefs.IsNotFound(err) {
		switch {
		case ref == MinimalImage:
			err = importMinimal(ctx, eng, report)
		case p.opts.Pull == PullNever:
			return nil, fmt.Errorf("%w: %s is not present in the engine and pull=never (build or load it, or pull it with: docker pull %s)", ErrImage, ref, ref)
		default:
			err = pull(ctx, eng, ref, report)
		}
		if err != nil {
			return nil, err
		}
		ins, err = eng.cli.ImageInspect(ctx, ref)
	}
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: inspecting %s: %w", ErrImage, ref, err)
	}
	if ins.Os != "" && ins.Os != "linux" {
		return nil, fmt.Errorf("%w: %s is a %s image", ErrImage, ref, ins.Os)
	}
	f := &imageFacts{ref: ref, id: ins.ID}
	if ins.Config != nil {
		f.env = ins.Config.Env
	}
	if p.images == nil {
		p.images = map[string]*imageFacts{}
	}
	p.images[ref] = f
	return f, nil
}

func pull(ctx context.Context, eng *engine, ref string, report func(driver.Progress)) error {
	rc, err := eng.cli.ImagePull(ctx, ref, image.PullOptions{})
	return drain(ctx, rc, err, newImageProgress(driver.ProgressPull, ref, report), func(err error) error {
		return fmt.Errorf("%w: %s is not present in the engine and pulling it failed: %w", ErrImage, ref, err)
	})
}

// drain reads the progress stream of an image pull or import (the engine
// reports the operation's failure in it) into prog, and closes it. When
// ctx ended, the error is ctx's; otherwise a failure is wrapped by wrap.
func drain(ctx context.Context, rc io.ReadCloser, err error, prog *imageProgress, wrap func(error) error) error {
	if err == nil {
		err = prog.follow(rc)
		rc.Close()
	}
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return ctx.Err()
	}
	return wrap(err)
}

func importMinimal(ctx context.Context, eng *engine, report func(driver.Progress)) error {
	if minimalTar == nil {
		return fmt.Errorf("%w: the minimal image could not be assembled", ErrImage)
	}
	rc, err := eng.cli.ImageImport(ctx, image.ImportSource{Source: bytes.NewReader(minimalTar), SourceName: "-"}, MinimalImage, image.ImportOptions{
		Message: "outpost minimal sandbox image",
		Changes: []string{"ENV PATH=" + layout.DefaultPath, "WORKDIR /", "LABEL " + LabelImage + "=minimal"},
	})
	return drain(ctx, rc, err, newImageProgress(driver.ProgressBuild, MinimalImage, report), func(err error) error {
		return fmt.Errorf("%w: importing %s: %w", ErrImage, MinimalImage, err)
	})
}

// splitEnv turns KEY=VALUE entries into a map (later entries win).
func splitEnv(list []string) map[string]string {
	m := make(map[string]string, len(list))
	for _, kv := range list {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			m[k] = v
		}
	}
	return m
}
