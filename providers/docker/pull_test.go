package docker

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"path"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	dockerclient "github.com/docker/docker/client"

	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/sandbox/driver"
)

// fakeRegistry serves one image (a manifest of schema 2 and its blobs)
// under every repository name, on the loopback, which the engine reaches
// without TLS (127.0.0.0/8 is an insecure registry by default). No
// registry image can be pulled here; the engine's own pull is the thing
// tested.
type fakeRegistry struct {
	tag      string
	manifest []byte
	blobs    map[string][]byte // by digest
	layers   int64             // the layers' compressed bytes
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// tarOf is a tar of the files (name → content; a name ending in / is a
// directory).
func tarOf(t *testing.T, files map[string][]byte, order ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range order {
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(files[name])), ModTime: time.Unix(0, 0), Typeflag: tar.TypeReg}
		if strings.HasSuffix(name, "/") {
			h.Mode, h.Typeflag, h.Size = 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[name]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func newFakeRegistry(t *testing.T, tag string) *fakeRegistry {
	t.Helper()
	r := &fakeRegistry{tag: tag, blobs: map[string][]byte{}}
	noise := make([]byte, 3<<20) // incompressible: the download shows its bytes
	rand.New(rand.NewSource(1)).Read(noise)
	layerTars := [][]byte{
		tarOf(t, map[string][]byte{"etc/": nil, "tmp/": nil, "etc/passwd": []byte("root:x:0:0:root:/root:/sbin/nologin\n")}, "etc/", "etc/passwd", "tmp/"),
		tarOf(t, map[string][]byte{"noise": noise}, "noise"),
	}
	type desc struct {
		MediaType string `json:"mediaType"`
		Size      int    `json:"size"`
		Digest    string `json:"digest"`
	}
	var layers []desc
	var diffIDs []string
	for _, lt := range layerTars {
		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		zw.Write(lt)
		zw.Close()
		d := digestOf(gz.Bytes())
		r.blobs[d] = gz.Bytes()
		r.layers += int64(gz.Len())
		layers = append(layers, desc{"application/vnd.docker.image.rootfs.diff.tar.gzip", gz.Len(), d})
		diffIDs = append(diffIDs, digestOf(lt))
	}
	config, _ := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}}, "rootfs": map[string]any{"type": "layers", "diff_ids": diffIDs}})
	r.blobs[digestOf(config)] = config
	r.manifest, _ = json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
		"config": desc{"application/vnd.docker.container.image.v1+json", len(config), digestOf(config)}, "layers": layers})
	return r
}

func (r *fakeRegistry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	w.Header().Set("Docker-Distribution-API-Version", "registry/2.0")
	var body []byte
	switch {
	case req.URL.Path == "/v2/":
		body = []byte("{}")
	case strings.Contains(req.URL.Path, "/manifests/") && (path.Base(req.URL.Path) == r.tag || path.Base(req.URL.Path) == digestOf(r.manifest)):
		body = r.manifest
		w.Header().Set("Content-Type", "application/vnd.docker.distribution.manifest.v2+json")
		w.Header().Set("Docker-Content-Digest", digestOf(body))
	case strings.Contains(req.URL.Path, "/blobs/") && r.blobs[path.Base(req.URL.Path)] != nil:
		body = r.blobs[path.Base(req.URL.Path)]
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Docker-Content-Digest", path.Base(req.URL.Path))
	default:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	if req.Method != http.MethodHead {
		w.Write(body)
	}
}

// engineClient is a bare engine for the image functions: a client, no
// binary.
func engineClient(t *testing.T) *engine {
	t.Helper()
	testenv.RequireDocker(t)
	cli, err := dockerclient.NewClientWithOpts(dockerclient.FromEnv, dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return &engine{cli: cli}
}

// TestImageProgressFromEngine: a real pull by the engine, from a registry
// of the test's own, reports its progress (driver.Options.Progress): the
// first report at once, the layers and their bytes as they come, the
// last one Done with every layer in place and every byte the registry
// served; a tag the registry lacks fails with ErrImage naming it.
func TestImageProgressFromEngine(t *testing.T) {
	t.Parallel()
	eng := engineClient(t)
	tag := "t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	reg := newFakeRegistry(t, tag)
	srv := httptest.NewServer(reg)
	t.Cleanup(srv.Close)
	ref := strings.TrimPrefix(srv.URL, "http://") + "/outpost/pulltest:" + tag
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		eng.cli.ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})

	p := &Provider{opts: Options{Image: ref, Pull: PullMissing}}
	var got []driver.Progress
	facts, err := p.image(t.Context(), eng, func(pr driver.Progress) { got = append(got, pr) })
	if err != nil {
		t.Fatalf("pulling %s from the test's registry: %v", ref, err)
	}
	if facts.ref != ref || len(facts.env) == 0 {
		t.Errorf("facts %+v", facts)
	}
	if len(got) < 2 {
		t.Fatalf("reports %+v: want the first and the last at least", got)
	}
	first, last := got[0], got[len(got)-1]
	if first != (driver.Progress{Step: driver.ProgressPull, Image: ref}) {
		t.Errorf("first report %+v", first)
	}
	if want := (driver.Progress{Step: driver.ProgressPull, Image: ref, Layers: 2, LayersDone: 2, Bytes: reg.layers, Total: reg.layers, Done: true}); last != want {
		t.Errorf("last report %+v, want %+v (all reports: %+v)", last, want, got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Bytes < got[i-1].Bytes || got[i].LayersDone < got[i-1].LayersDone {
			t.Errorf("report %d went back: %+v after %+v", i, got[i], got[i-1])
		}
	}

	// Present now: no pull, no report.
	got = nil
	if _, err := (&Provider{opts: p.opts}).image(t.Context(), eng, func(pr driver.Progress) { got = append(got, pr) }); err != nil || len(got) != 0 {
		t.Errorf("a present image: %v, reports %+v", err, got)
	}

	missing := strings.TrimPrefix(srv.URL, "http://") + "/outpost/pulltest:nosuchtag"
	_, err = (&Provider{opts: Options{Image: missing}}).image(t.Context(), eng, nil)
	if !errors.Is(err, ErrImage) || !strings.Contains(err.Error(), missing) {
		t.Errorf("a tag the registry lacks: %v, want ErrImage naming it", err)
	}
}

// TestImageProgressBuildStream: the engine's stream of a real build (a
// Dockerfile FROM scratch: no registry) is read to its end, Done, with no
// layer; a failing build's error is follow's.
func TestImageProgressBuildStream(t *testing.T) {
	t.Parallel()
	eng := engineClient(t)
	tag := "outpost/buildtest:t" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		eng.cli.ImageRemove(ctx, tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	buildWith := func(dockerfile string) ([]driver.Progress, error) {
		t.Helper()
		ctxTar := tarOf(t, map[string][]byte{"Dockerfile": []byte(dockerfile), "hello": []byte("hello\n")}, "Dockerfile", "hello")
		resp, err := eng.cli.ImageBuild(t.Context(), bytes.NewReader(ctxTar), build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
		if err != nil {
			t.Fatalf("build: %v", err)
		}
		defer resp.Body.Close()
		var got []driver.Progress
		err = newImageProgress(driver.ProgressBuild, tag, func(p driver.Progress) { got = append(got, p) }).follow(resp.Body)
		return got, err
	}
	got, err := buildWith("FROM scratch\nCOPY hello /hello\n")
	if err != nil || len(got) != 2 || got[0].Done || !got[1].Done || got[1].Layers != 0 {
		t.Errorf("build: %v, reports %+v: want a first and a Done one", err, got)
	}
	got, err = buildWith("FROM scratch\nCOPY missing /missing\n")
	if err == nil || !strings.Contains(err.Error(), "missing") || got[len(got)-1].Done {
		t.Errorf("failing build: %v, reports %+v: want its error, not Done", err, got)
	}
}
