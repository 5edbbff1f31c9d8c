package kubernetes

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outposthq/outpost/internal/layout"
)

// ImageBinary is where the outpost image holds outpost's static binary
// (not under /outpost, where every pod mounts its state volume).
const ImageBinary = "/usr/local/bin/outpost"

// OutpostImageRepo is the repository of the default outpost image.
const OutpostImageRepo = "outpost/outpost"

// ImageHint follows the error of a pod whose nodes cannot get the outpost
// image (%s: the image): the command that makes it.
const ImageHint = "the nodes do not have the outpost image %s: write it with `outpost kubernetes image --arch ARCH -o outpost-image.tar` and import it on each node (`ctr -n k8s.io images import outpost-image.tar`, or --import on the node), or load it with --docker and push it to a registry the cluster pulls from, then set outpost_image (docs/sandboxes/kubernetes.md)"

// OutpostImageRef is the default outpost image's reference for a static
// binary: OutpostImageRepo tagged with the first 12 hex digits of the
// binary's SHA-256, so that a cluster never runs a stale binary under a
// known tag.
func OutpostImageRef(binary string) (string, error) {
	f, err := os.Open(binary)
	if err != nil {
		return "", fmt.Errorf("kubernetes: outpost binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("kubernetes: outpost binary: %w", err)
	}
	return OutpostImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12], nil
}

// WriteOutpostImage writes the outpost image for a static binary as a
// docker-archive tar (what `docker load` and `ctr images import` read)
// and returns its reference (OutpostImageRef). The image is FROM scratch:
// ImageBinary, /etc/passwd and /etc/group (root, agent
// 1000:1000, nobody), /tmp and /home/agent. Load it into the nodes'
// runtime or push it to a registry the cluster pulls from.
func WriteOutpostImage(w io.Writer, binary, arch string) (string, error) {
	ref, err := OutpostImageRef(binary)
	if err != nil {
		return "", err
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		return "", fmt.Errorf("kubernetes: outpost binary: %w", err)
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	mtime := time.Unix(0, 0)
	add := func(name string, typ byte, mode int64, uid int, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: typ, Mode: mode, Uid: uid, Gid: uid, ModTime: mtime, Size: int64(len(data)), Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	for _, e := range []struct {
		name string
		typ  byte
		mode int64
		uid  int
		data string
	}{
		{"etc/", tar.TypeDir, 0o755, 0, ""},
		{"etc/passwd", tar.TypeReg, 0o644, 0, "root:x:0:0:root:/root:/sbin/nologin\nagent:x:1000:1000:agent:/home/agent:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n"},
		{"etc/group", tar.TypeReg, 0o644, 0, "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n"},
		{"home/", tar.TypeDir, 0o755, 0, ""},
		{"home/agent/", tar.TypeDir, 0o755, 1000, ""},
		{"tmp/", tar.TypeDir, 0o1777, 0, ""},
		{"usr/", tar.TypeDir, 0o755, 0, ""},
		{"usr/local/", tar.TypeDir, 0o755, 0, ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, 0, ""},
	} {
		if err := add(e.name, e.typ, e.mode, e.uid, []byte(e.data)); err != nil {
			return "", err
		}
	}
	if err := add(ImageBinary[1:], tar.TypeReg, 0o555, 0, bin); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	diff := sha256.Sum256(layer.Bytes())
	cfg, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": []string{ImageBinary},
			"User":       "1000:1000",
			"Env":        []string{"PATH=" + layout.DefaultPath},
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diff[:])}},
	})
	if err != nil {
		return "", err
	}
	cfgSum := sha256.Sum256(cfg)
	cfgName := hex.EncodeToString(cfgSum[:]) + ".json"
	manifest, err := json.Marshal([]map[string]any{{"Config": cfgName, "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return "", err
	}
	out := tar.NewWriter(w)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {cfgName, cfg}, {"layer.tar", layer.Bytes()}} {
		if err := out.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data)), ModTime: mtime}); err != nil {
			return "", err
		}
		if _, err := out.Write(f.data); err != nil {
			return "", err
		}
	}
	return ref, out.Close()
}
