package presets

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/outposthq/outpost/conversation"
	"github.com/outposthq/outpost/engine"
	"github.com/outposthq/outpost/harness"
	"github.com/outposthq/outpost/harness/declarative"
	"github.com/outposthq/outpost/internal/fakeapi/openai"
	"github.com/outposthq/outpost/internal/testenv"
	"github.com/outposthq/outpost/providers/local"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver"
)

// The preset benchmarks (docs/benchmarks.md, "Gemini CLI, Qwen Code and
// OpenCode: paired turns") compare one "Say hello" turn of a real CLI
// against its fake API run three ways, in alternating order within each
// iteration so that a change of the machine's load falls on all three:
//
//   - direct: the command the preset builds (its Request), run with
//     os/exec in one home prepared once (the preset's configuration files,
//     the same HOME, XDG_* and TMPDIR layout a lease has);
//   - outpost: engine.Run of the same turn on a local lease held across
//     the iterations (its home prepared once, as direct's): the engine's
//     steps, the credential gateway, decoding, the capture into a store;
//   - outpost-fresh: engine.Run on the local provider, a new lease (a
//     new private home, the preset's configuration written again) every
//     turn, as a one-off `outpost run` has.
//
// One untimed turn of each comes first, so that neither side pays the
// CLI's first-run set-up (or the host's cold caches) in the figures. The
// reported metrics: for each way, its median turn in ms; for outpost and
// outpost-fresh, the median, smallest and largest of the per-iteration
// ratios to direct; the 1-minute load average before and after. -v logs
// every iteration.

// BenchmarkOpenAICLITurn: Qwen Code and OpenCode against the fake Chat
// Completions API.
//
//	go test ./integration/presets -run '^$' -bench BenchmarkOpenAICLITurn -benchtime 8x -v
func BenchmarkOpenAICLITurn(b *testing.B) {
	for _, c := range []struct {
		name string
		h    *harness.Harness
	}{{"qwen", declarative.Qwen()}, {"opencode", declarative.OpenCode()}} {
		b.Run(c.name, func(b *testing.B) {
			fake := openai.Start(b, openai.Config{})
			benchCLI{h: c.h, bin: testenv.RequireCLI(b, c.name), text: openai.DefaultText,
				vars: map[string]string{"OPENAI_BASE_URL": fake.URL(), "OPENAI_API_KEY": "sk-bench", "OPENAI_MODEL": oaiModel}}.run(b)
		})
	}
}

// benchCLI is one preset's benchmark turn.
type benchCLI struct {
	h     *harness.Harness
	bin   string            // the CLI's executable
	model string            // the turn's model ("": the preset's default)
	vars  map[string]string // the fake's endpoint and key
	text  string            // the fake's answer: the turn's final text
	done  string            // what the direct run's output holds when it succeeded (default text)
}

func (c benchCLI) path() string { return filepath.Dir(c.bin) + ":/usr/local/bin:/usr/bin:/bin" }

// run measures the three ways in alternating order.
func (c benchCLI) run(b *testing.B) {
	wd := b.TempDir()
	held, heldOwn := c.held(b, wd)
	fresh, freshOwn := c.fresh(b, wd)
	benchPairs(b, benchSide{name: "direct", run: c.direct(b, wd)},
		benchSide{name: "outpost", run: held, own: heldOwn}, benchSide{name: "outpost-fresh", run: fresh, own: freshOwn})
}

// direct returns one direct turn in a home prepared once.
func (c benchCLI) direct(b *testing.B, wd string) func() {
	home := b.TempDir()
	env := []string{"PATH=" + c.path(), "LANG=C.UTF-8"}
	for k, v := range driver.HomeEnv(home, filepath.Join(home, "tmp")) {
		env = append(env, k+"="+v)
	}
	for _, vars := range []map[string]string{c.vars, c.h.Variables} {
		for k, v := range vars {
			env = append(env, k+"="+v)
		}
	}
	conf, err := c.h.Configuration(harness.Vars(c.vars))
	if err != nil {
		b.Fatal(err)
	}
	for _, f := range conf.Files {
		p := filepath.Join(home, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, f.Content, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(home, "tmp"), 0o700); err != nil {
		b.Fatal(err)
	}
	return func() {
		cmd, err := c.h.Request(harness.Input{Prompt: "Say hello", Model: c.model, Workdir: wd, Home: home})
		if err != nil {
			b.Fatal(err)
		}
		x := exec.Command(c.bin, cmd.Args...)
		x.Dir, x.Stdin = wd, bytes.NewReader(cmd.Stdin)
		x.Env = slices.Clone(env)
		for k, v := range cmd.Env {
			x.Env = append(x.Env, k+"="+v)
		}
		out, _ := x.StdoutPipe()
		if err := x.Start(); err != nil {
			b.Fatal(err)
		}
		got, _ := io.ReadAll(out)
		done := c.done
		if done == "" {
			done = c.text
		}
		if err := x.Wait(); err != nil || !strings.Contains(string(got), done) {
			b.Fatalf("%v\n%s", err, got)
		}
	}
}

// turn is engine.Run of the benchmark's turn with o.
func (c benchCLI) turn(b *testing.B, wd string, o *engine.RunOptions) {
	res, err := engine.Run(context.Background(), engine.Turn{Agent: harness.Agent{Kind: harness.KindCLI, Harness: c.h, Model: c.model},
		Prompt: "Say hello", Workdir: wd}, o)
	if err != nil || res.Text != c.text {
		b.Fatalf("%v %+v", err, res)
	}
}

// options returns the turn's provider and options, the options recording
// the turn's spans, and a function returning outpost's own time in the
// last turn.
func (c benchCLI) options(b *testing.B) (*local.Provider, *engine.RunOptions, func() float64) {
	prov := local.New(&local.Options{BaseDir: b.TempDir(), Environ: []string{"PATH=" + c.path(), "LANG=C.UTF-8"}})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	o := &engine.RunOptions{Store: conversation.NewFS(b.TempDir()), TracerProvider: tp}
	for k, v := range c.vars {
		o.Environ = append(o.Environ, k+"="+v)
	}
	return prov, o, func() float64 { return ownTime(b, rec) }
}

// ownTime is outpost's own time in the turn rec recorded last, in ms: the
// turn's span less its "run" step's (the step that starts the CLI's
// process and reads its events until it exits). It does not vary with the
// CLI's own time, which varies by up to 1.4× between runs.
func ownTime(b *testing.B, rec *tracetest.SpanRecorder) float64 {
	defer rec.Reset()
	var turn, run time.Duration
	for _, s := range rec.Ended() {
		switch s.Name() {
		case "outpost.turn":
			turn = s.EndTime().Sub(s.StartTime())
		case "run":
			run = s.EndTime().Sub(s.StartTime())
		}
	}
	if turn == 0 || run == 0 {
		b.Fatalf("the turn's spans lack outpost.turn or run: %d spans", len(rec.Ended()))
	}
	return float64(turn-run) / float64(time.Millisecond)
}

// held returns one turn through outpost on a lease held across turns, and
// outpost's own time in the last one.
func (c benchCLI) held(b *testing.B, wd string) (func(), func() float64) {
	prov, o, own := c.options(b)
	l, err := sandbox.Acquire(context.Background(), prov, driver.Options{Workdir: wd})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close(context.Background()) })
	o.Lease = l
	return func() { c.turn(b, wd, o) }, own
}

// fresh returns one turn through outpost on a new lease, and outpost's
// own time in the last one.
func (c benchCLI) fresh(b *testing.B, wd string) (func(), func() float64) {
	prov, o, own := c.options(b)
	o.Provider = prov
	return func() { c.turn(b, wd, o) }, own
}

// benchSide is one way of running a benchmark's turn.
type benchSide struct {
	name string
	run  func()
	own  func() float64 // outpost's own time in the last run, ms (nil: not outpost)
}

// benchPairs runs one untimed turn of each side, then, per iteration, one
// timed turn of each, the first side of each iteration rotating; the
// ratios are each side's turn over the first side's in the same
// iteration.
func benchPairs(b *testing.B, sides ...benchSide) {
	for _, s := range sides {
		s.run()
		if s.own != nil {
			s.own()
		}
	}
	load0 := loadAverage(b)
	ms := make([][]float64, len(sides))
	own := make([][]float64, len(sides))
	ratios := make([][]float64, len(sides))
	for i := 0; b.Loop(); i++ {
		d := make([]float64, len(sides))
		for k := range sides {
			j := (i + k) % len(sides)
			start := time.Now()
			sides[j].run()
			d[j] = float64(time.Since(start)) / float64(time.Millisecond)
			if sides[j].own != nil {
				own[j] = append(own[j], sides[j].own())
			}
		}
		line := fmt.Sprintf("iteration %d, load %.1f:", i+1, loadAverage(b))
		for j, s := range sides {
			ms[j] = append(ms[j], d[j])
			line += fmt.Sprintf(" %s %.0f ms", s.name, d[j])
			if j > 0 {
				ratios[j] = append(ratios[j], d[j]/d[0])
				line += fmt.Sprintf(" (%.3f×)", d[j]/d[0])
			}
			if s.own != nil {
				line += fmt.Sprintf(" [own %.0f ms]", own[j][len(own[j])-1])
			}
		}
		b.Log(line)
	}
	for j, s := range sides {
		b.ReportMetric(testenv.Median(ms[j]), s.name+"-ms")
		if j > 0 && len(ratios[j]) > 0 {
			b.ReportMetric(testenv.Median(ratios[j]), s.name+"-ratio")
			b.ReportMetric(slices.Min(ratios[j]), s.name+"-ratio-min")
			b.ReportMetric(slices.Max(ratios[j]), s.name+"-ratio-max")
		}
		if len(own[j]) > 0 {
			// The ratio outpost's own work alone makes: the direct turn's
			// median plus outpost's own median, over the direct turn's.
			b.ReportMetric(testenv.Median(own[j]), s.name+"-own-ms")
			b.ReportMetric((testenv.Median(ms[0])+testenv.Median(own[j]))/testenv.Median(ms[0]), s.name+"-own-ratio")
		}
	}
	b.ReportMetric(load0, "load-before")
	b.ReportMetric(loadAverage(b), "load-after")
}

// loadAverage is the machine's 1-minute load average.
func loadAverage(b *testing.B) float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
	if err != nil {
		b.Fatal(err)
	}
	return f
}
