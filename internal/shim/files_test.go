package shim

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost/internal/tarsafe"
)

func TestTarModes(t *testing.T) {
	dir := t.TempDir()
	var in bytes.Buffer
	if err := tarsafe.Write(&in, []tarsafe.File{{Name: "a.txt", Data: []byte("A"), Mode: 0o4755}, {Name: "d/b.txt", Data: []byte("B")}}); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "x", "y")
	var stderr bytes.Buffer
	if code := Main([]string{"untar", dst}, &in, io.Discard, &stderr); code != 0 {
		t.Fatalf("untar: exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(filepath.Join(dst, "a.txt")); err != nil || fi.Mode().Perm() != 0o755 || fi.Mode()&os.ModeSetuid != 0 {
		t.Errorf("a.txt: %v %v", fi.Mode(), err)
	}
	var out bytes.Buffer
	if code := Main([]string{"tar", dst}, nil, &out, &stderr); code != 0 {
		t.Fatalf("tar: exit %d: %s", code, stderr.String())
	}
	files, err := tarsafe.Read(&out, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if !cmp.Equal(names, []string{"y", "y/a.txt", "y/d", "y/d/b.txt"}) {
		t.Errorf("tar entries %v", names)
	}
	// --skip leaves a path out unread: a directory the user may not list
	// (the read-only mount over a bind workspace's .outpost).
	private := filepath.Join(dst, ".outpost")
	if err := os.Mkdir(private, 0); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(private, 0o700)
	for _, args := range [][]string{TarArgs("x", dst, private)[2:], WholeTarArgs("x", dst, private)[2:]} {
		out.Reset()
		if code := Main(args, nil, &out, &stderr); code != 0 {
			t.Fatalf("%q: exit %d: %s", args, code, stderr.String())
		}
		if files, err := tarsafe.Read(&out, 1<<20); err != nil || len(files) != len(names) {
			t.Errorf("%q: %d entries, %v; want the %d without .outpost", args, len(files), err, len(names))
		}
	}
	if code := Main([]string{"tar", SkipFlag, "rel", dst}, nil, io.Discard, &stderr); code != 2 {
		t.Errorf("tar --skip with a relative path: exit %d, want the usage error", code)
	}
	if code := Main([]string{"tar", filepath.Join(dir, "missing")}, nil, &out, &stderr); code != ExitMissing {
		t.Errorf("tar of a missing path: exit %d", code)
	}
	// --whole: the same archive when all of it can be, else nothing at all.
	var whole bytes.Buffer
	if code := Main([]string{"tar", WholeFlag, dst}, nil, &whole, &stderr); code != 0 || whole.Len() == 0 {
		t.Fatalf("tar --whole: exit %d, %d bytes: %s", code, whole.Len(), stderr.String())
	}
	if err := syscall.Mkfifo(filepath.Join(dst, "d", "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	whole.Reset()
	stderr.Reset()
	if code := Main([]string{"tar", WholeFlag, dst}, nil, &whole, &stderr); code != ExitPartial || whole.Len() != 0 || !strings.Contains(stderr.String(), "fifo") {
		t.Errorf("tar --whole of a tree with a fifo: exit %d, %d bytes, stderr %q", code, whole.Len(), stderr.String())
	}
	if code := Main([]string{"tar", WholeFlag, filepath.Join(dir, "missing")}, nil, &whole, &stderr); code != ExitMissing {
		t.Errorf("tar --whole of a missing path: exit %d", code)
	}
	var evil bytes.Buffer
	evil.Write(mustTar(t))
	if code := Main([]string{"untar", filepath.Join(dir, "evil")}, &evil, io.Discard, &stderr); code != ExitUnsafe {
		t.Errorf("untar of an escaping archive: exit %d (%s)", code, stderr.String())
	}
	self := filepath.Join(dir, "bin", "outpost")
	if code := Main([]string{"install", self, filepath.Join(dir, "home", ".config")}, nil, io.Discard, &stderr); code != 0 {
		t.Fatalf("install: exit %d: %s", code, stderr.String())
	}
	if fi, err := os.Stat(self); err != nil || fi.Mode().Perm() != 0o555 {
		t.Errorf("installed binary: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "home", ".config")); err != nil || !fi.IsDir() {
		t.Errorf("install made no directory: %v", err)
	}
}

// mustTar is an archive with an entry escaping its directory.
func mustTar(t *testing.T) []byte {
	var b bytes.Buffer
	tw := newRawTar(&b)
	tw("../escape", "x")
	return b.Bytes()
}

func newRawTar(w io.Writer) func(name, data string) {
	return func(name, data string) {
		hdr := make([]byte, 512)
		copy(hdr, name)
		copy(hdr[100:], "0000644\x00")
		copy(hdr[108:], "0000000\x00")
		copy(hdr[116:], "0000000\x00")
		copy(hdr[124:], []byte(strings.Repeat("0", 11-len(octal(len(data))))+octal(len(data))+"\x00"))
		copy(hdr[136:], "00000000000\x00")
		hdr[156] = '0'
		copy(hdr[257:], "ustar\x0000")
		copy(hdr[148:], "        ")
		sum := 0
		for _, c := range hdr {
			sum += int(c)
		}
		s := octal(sum)
		copy(hdr[148:], strings.Repeat("0", 6-len(s))+s+"\x00 ")
		w.Write(hdr)
		body := make([]byte, (len(data)+511)/512*512)
		copy(body, data)
		w.Write(body)
		w.Write(make([]byte, 1024))
	}
}

func octal(n int) string {
	if n == 0 {
		return "0"
	}
	s := ""
	for n > 0 {
		s = string(rune('0'+n%8)) + s
		n /= 8
	}
	return s
}
