//go:build !nokubernetes

package cli_test

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/image"

	"github.com/outposthq/outpost/internal/selfbin"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/docker/dockertest"
	"github.com/outposthq/outpost/providers/kubernetes"
)

// staticELF writes the smallest file selfbin takes for a static Linux
// executable of arch (an ELF header, no program interpreter) and points
// OUTPOST_STATIC_BINARY at it: the image command needs no build.
func staticELF(t *testing.T, machine elf.Machine) string {
	t.Helper()
	h := elf.Header64{Type: uint16(elf.ET_EXEC), Machine: uint16(machine), Version: uint32(elf.EV_CURRENT), Ehsize: 64, Phentsize: 56, Shentsize: 64}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS], h.Ident[elf.EI_DATA], h.Ident[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, &h)
	b.WriteString("outpost test binary " + t.Name())
	p := filepath.Join(t.TempDir(), "outpost-static")
	if err := os.WriteFile(p, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(selfbin.EnvVar, p)
	return p
}

// TestKubernetesImage: `outpost kubernetes image -o FILE` writes a
// docker-archive of the outpost image for the architecture asked: its
// manifest names the reference the provider asks for, its config the
// architecture, its layer holds the binary at kubernetes.ImageBinary.
func TestKubernetesImage(t *testing.T) {
	bin := staticELF(t, elf.EM_AARCH64)
	file := filepath.Join(t.TempDir(), "outpost-image.tar")
	code, out, errb := run(t, t.TempDir(), t.TempDir(), "kubernetes", "image", "--arch", "arm64", "-o", file)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	ref, err := kubernetes.OutpostImageRef(bin)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "wrote "+ref+" (linux/arm64) to "+file) {
		t.Errorf("stdout %q", out)
	}
	archive := readTar(t, mustRead(t, file))
	var manifest []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	if err := json.Unmarshal(archive["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].RepoTags) != 1 || manifest[0].RepoTags[0] != ref || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest %s: %v", archive["manifest.json"], err)
	}
	var cfg struct {
		Architecture, OS string
		Config           struct{ Entrypoint []string }
	}
	if err := json.Unmarshal(archive[manifest[0].Config], &cfg); err != nil || cfg.Architecture != "arm64" || cfg.OS != "linux" || len(cfg.Config.Entrypoint) != 1 || cfg.Config.Entrypoint[0] != kubernetes.ImageBinary {
		t.Errorf("config %s: %v", archive[manifest[0].Config], err)
	}
	layer := readTar(t, archive[manifest[0].Layers[0]])
	if got := layer[strings.TrimPrefix(kubernetes.ImageBinary, "/")]; !bytes.Equal(got, mustRead(t, bin)) {
		t.Errorf("the layer's %s is not the binary (%d bytes)", kubernetes.ImageBinary, len(got))
	}

	// Refused before anything is written.
	for _, args := range [][]string{
		{"kubernetes", "image", "--arch", "mips", "-o", file},
		{"kubernetes", "image"},
		{"kubernetes", "image", "-o", file, "--address", "/run/x.sock"},
	} {
		if code, _, errb := run(t, t.TempDir(), t.TempDir(), args...); code != 2 {
			t.Errorf("%q: exit %d, want 2: %s", args, code, errb)
		}
	}
	// A binary for another architecture is a configuration error.
	if code, _, errb := run(t, t.TempDir(), t.TempDir(), "kubernetes", "image", "--arch", "amd64", "-o", file); code != 3 || !strings.Contains(errb, "not amd64") {
		t.Errorf("amd64 with an arm64 binary: exit %d: %s", code, errb)
	}
}

// TestKubernetesImageDocker: --docker loads the image into the engine,
// under the reference the provider asks for.
func TestKubernetesImageDocker(t *testing.T) {
	testenv.RequireDocker(t)
	bin := staticELF(t, elf.EM_X86_64)
	ref, err := kubernetes.OutpostImageRef(bin)
	if err != nil {
		t.Fatal(err)
	}
	cli := dockertest.Client(t)
	t.Cleanup(func() { cli.ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true}) })
	code, out, errb := run(t, t.TempDir(), t.TempDir(), "kubernetes", "image", "--arch", "amd64", "--docker")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errb)
	}
	if !strings.Contains(out, "loaded "+ref+" into Docker") {
		t.Errorf("stdout %q", out)
	}
	ins, err := cli.ImageInspect(context.Background(), ref)
	if err != nil {
		t.Fatalf("the engine has no %s: %v", ref, err)
	}
	if ins.Architecture != "amd64" || ins.Os != "linux" {
		t.Errorf("loaded %s/%s", ins.Os, ins.Architecture)
	}
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// readTar returns a tar's regular files by name.
func readTar(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			files[h.Name], _ = io.ReadAll(tr)
		}
	}
}
