package main_test

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/harness/echo"
	"github.com/outposthq/outpost/internal/testenv"
)

// Figures from this benchmark are in docs/benchmarks.md ("Process
// start"):
//
//	COUNT=10 BENCHTIME=200x PKGS=./cmd/outpost-sandbox scripts/bench.sh BenchmarkFirstByte

// BenchmarkFirstByte: the in-sandbox binary started until the first byte
// of its output, as every process of a docker, kubernetes or ssh sandbox
// starts it: its `version` (the bootstrap check; nothing but the start)
// and the echo agent's turn (its answer is written at the end: the first
// byte is the whole turn). "direct" is /bin/echo, the smallest process
// that prints; "empty-go" a Go program that only prints, the floor of any
// Go binary on the machine.
func BenchmarkFirstByte(b *testing.B) {
	bin := testenv.SandboxBinary(b)
	home := b.TempDir()
	empty := emptyGo(b)
	for _, bc := range []struct {
		name string
		argv []string
	}{
		{"direct", []string{"/bin/echo", "hello"}},
		{"empty-go", []string{empty}},
		{"version", []string{bin, "version"}},
		{"echo-agent", []string{bin, echo.Subcommand, "--", "hello"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 1)
			for i := 0; i < b.N; i++ {
				cmd := exec.Command(bc.argv[0], bc.argv[1:]...)
				cmd.Env = []string{"HOME=" + home, "PATH=/usr/bin:/bin"}
				out, err := cmd.StdoutPipe()
				if err != nil {
					b.Fatal(err)
				}
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(out, buf); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				_, _ = io.Copy(io.Discard, out)
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}

// emptyGo builds a Go program whose main only writes one line.
func emptyGo(b *testing.B) string {
	dir := b.TempDir()
	src := "package main\n\nimport \"os\"\n\nfunc main() { os.Stdout.Write([]byte(\"hello\\n\")) }\n"
	for name, content := range map[string]string{"go.mod": "module empty\n\ngo 1.24\n", "main.go": src} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	out := filepath.Join(dir, "empty")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	if msg, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("building the empty program: %v\n%s", err, msg)
	}
	return out
}
