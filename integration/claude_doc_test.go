package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outposthq/outpost/bootstrap"
	"github.com/outposthq/outpost/internal/testenv"
)

// TestClaudeDocTryIt runs the block of docs/presets/claude.md's "Try it
// against the fake API" as a new user would, read from the doc itself: a
// clean HOME and OUTPOST_HOME, a PATH without the agent CLIs, and only the
// variables the block exports. `go run ./PKG` is that package built;
// the fake's -addr becomes a free port and each `mkdir -p` directory a
// temporary one, everywhere in the block. Each `# →` line is checked
// against the command above it (docShell.check). The pinned CLI comes
// from the machine's bootstrap cache ($OUTPOST_CACHE/bootstrap, shared
// with TestBootstrapRealClaudeDocker), downloaded into it first when it is
// not there.
func TestClaudeDocTryIt(t *testing.T) {
	t.Parallel()
	claudePreset(t)
	doc, err := os.ReadFile("../docs/presets/claude.md")
	if err != nil {
		t.Fatal(err)
	}
	const heading = "## Try it against the fake API"
	_, section, ok := strings.Cut(string(doc), "\n"+heading)
	_, rest, ok2 := strings.Cut(section, "```sh\n")
	block, _, ok3 := strings.Cut(rest, "```\n")
	if !ok || !ok2 || !ok3 {
		t.Fatalf("docs/presets/claude.md has no %q section with a sh block", heading)
	}
	first := strings.Count(string(doc[:len(doc)-len(rest)]), "\n") + 1
	steps, err := parseDocBlock(block, first)
	if err != nil {
		t.Fatalf("docs/presets/claude.md: %v", err)
	}
	cache := sharedClaudeCache(t)
	sh := &docShell{t: t, env: map[string]string{
		"HOME":          t.TempDir(),
		"OUTPOST_HOME":  t.TempDir(),
		"PATH":          pathWithoutCLIs(),
		"TMPDIR":        t.TempDir(),
		"OUTPOST_CACHE": cache,
	}, dirs: map[string]string{}}
	// What points the bootstrap at the cache's source, as for the prefetch.
	for _, v := range []string{bootstrap.PinsVariable, bootstrap.RegistryVariable, "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"} {
		if val, ok := os.LookupEnv(v); ok {
			sh.env[v] = val
		}
	}
	for _, s := range steps {
		sh.run(s)
	}
	if sh.turns == 0 {
		t.Fatal("the block ran no outpost turn")
	}
}

// docStep is one command of a doc's sh block: its line in the doc, its
// text (continuation lines joined), whether it ends with &, and the `# →`
// lines under it.
type docStep struct {
	line       int
	text       string
	background bool
	expect     string
}

// parseDocBlock splits a sh block, whose first line is the doc's line
// first, into commands; comment lines other than `# →` are prose.
func parseDocBlock(block string, first int) ([]docStep, error) {
	var steps []docStep
	lines := strings.Split(block, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		switch {
		case l == "":
		case strings.HasPrefix(l, "# →"):
			if len(steps) == 0 {
				return nil, fmt.Errorf("line %d: %q follows no command", first+i, l)
			}
			e := strings.TrimSpace(strings.TrimPrefix(l, "# →"))
			steps[len(steps)-1].expect = strings.TrimSpace(steps[len(steps)-1].expect + " " + e)
		case strings.HasPrefix(l, "#"):
		default:
			s := docStep{line: first + i}
			for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
				i++
				l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
			}
			if cmd, ok := strings.CutSuffix(l, " &"); ok {
				l, s.background = cmd, true
			}
			s.text = l
			steps = append(steps, s)
		}
	}
	return steps, nil
}

// docShell runs a block's commands: export, mkdir -p and go run, nothing
// else, so a step the test does not know (an install script, say) fails
// the test rather than run.
type docShell struct {
	t     *testing.T
	env   map[string]string
	dirs  map[string]string // the block's directories → temporary ones
	addr  [2]string         // the fake's address in the doc, and the real one
	turns int
}

func (sh *docShell) run(s docStep) {
	t := sh.t
	t.Helper()
	text := s.text
	if sh.addr[0] != "" {
		text = strings.ReplaceAll(text, sh.addr[0], sh.addr[1])
	}
	for doc, tmp := range sh.dirs {
		text = strings.ReplaceAll(text, doc, tmp)
		s.expect = strings.ReplaceAll(s.expect, doc, tmp)
	}
	argv, err := shellWords(text, sh.env)
	if err != nil || len(argv) == 0 {
		t.Fatalf("docs/presets/claude.md:%d %q: %v", s.line, s.text, err)
	}
	switch {
	case argv[0] == "export" && !s.background:
		for _, a := range argv[1:] {
			k, v, ok := strings.Cut(a, "=")
			if !ok || k == "PATH" {
				// PATH stays without the CLIs: the turn installs its own.
				t.Fatalf("docs/presets/claude.md:%d: export %q, which this test does not run", s.line, a)
			}
			sh.env[k] = v
		}
	case len(argv) > 2 && argv[0] == "mkdir" && argv[1] == "-p" && !s.background:
		for _, d := range argv[2:] {
			tmp := t.TempDir()
			sh.dirs[d] = tmp
			t.Logf("docs/presets/claude.md:%d: %s is %s", s.line, d, tmp)
		}
	case len(argv) > 2 && argv[0] == "go" && argv[1] == "run" && strings.HasPrefix(argv[2], "./"):
		bin := testenv.GoBuild(t, "github.com/outposthq/outpost/"+strings.TrimPrefix(argv[2], "./"))
		if argv[2] == "./cmd/outpost" {
			bin = testenv.OutpostBinary(t)
		}
		if s.background {
			sh.startFake(s, bin, argv[3:])
			return
		}
		if s.expect == "" {
			t.Fatalf("docs/presets/claude.md:%d %q: no `# →` says what it prints", s.line, s.text)
		}
		sh.check(s, bin, argv[3:])
	default:
		t.Fatalf("docs/presets/claude.md:%d %q: a command a new user would not need, or one this test does not know", s.line, s.text)
	}
}

// startFake starts the block's background server with a free port in
// place of its -addr and reads the URL it prints; that address replaces
// the doc's in every later command.
func (sh *docShell) startFake(s docStep, bin string, args []string) {
	t := sh.t
	i := slices.Index(args, "-addr")
	if i < 0 || i+1 >= len(args) || s.expect != "" {
		t.Fatalf("docs/presets/claude.md:%d %q: a background command other than the fake with -addr", s.line, s.text)
	}
	sh.addr[0] = args[i+1]
	args = slices.Clone(args)
	args[i+1] = "127.0.0.1:0"
	cmd := exec.Command(bin, args...)
	cmd.Env = sh.environ()
	var errb lockedBuffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("the fake's log:\n%s", errb.String())
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	url := strings.TrimSpace(line)
	host, ok := strings.CutPrefix(url, "http://")
	if err != nil || !ok {
		t.Fatalf("docs/presets/claude.md:%d: the fake printed %q (%v), not its URL\n%s", s.line, line, err, errb.String())
	}
	sh.addr[1] = host
}

// check runs one command and checks its `# →` line, a list of claims
// separated by "; " and ending in "(exit status N)" when not 0:
//
//   - `events as JSON lines`: every stdout line is an event object, the
//     last a result without error;
//   - `PATH holds "TEXT"`: the file holds TEXT (and a newline);
//   - a text with … : a line of the output (stdout or stderr) matches it,
//     … standing for anything;
//   - another text: stdout is that line.
func (sh *docShell) check(s docStep, bin string, args []string) {
	t := sh.t
	t.Helper()
	want, status := s.expect, 0
	if m := regexp.MustCompile(`\s*\(exit status (\d+)\)$`).FindStringSubmatchIndex(want); m != nil {
		status, _ = strconv.Atoi(want[m[2]:m[3]])
		want = want[:m[0]]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = sh.env["HOME"]
	cmd.Env = sh.environ()
	cmd.Stdin = strings.NewReader("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	if ee := (*exec.ExitError)(nil); err != nil && !errors.As(err, &ee) {
		t.Fatalf("docs/presets/claude.md:%d: %v", s.line, err)
	}
	t.Logf("docs/presets/claude.md:%d: exit %d in %v", s.line, cmd.ProcessState.ExitCode(), time.Since(start).Round(time.Millisecond))
	fail := func(format string, a ...any) {
		t.Helper()
		t.Errorf("docs/presets/claude.md:%d %q\n  promises %q\n  but %s\nstdout:\n%s\nstderr:\n%s", s.line, s.text, s.expect, fmt.Sprintf(format, a...), out.String(), errb.String())
	}
	if args[0] == "run" {
		// The turns run the pinned CLI through the bootstrap, as the
		// paragraph above the block says: the PATH holds no claude (see
		// above), and a CLI taken from the bootstrap cache prints no line
		// (a downloaded one does), so the answer is the proof.
		sh.turns++
	}
	if code := cmd.ProcessState.ExitCode(); code != status {
		fail("it exited with status %d", code)
	}
	holds := regexp.MustCompile(`^(\S+) holds "(.*)"$`)
	for _, claim := range strings.Split(want, "; ") {
		claim = strings.TrimSpace(claim)
		switch m := holds.FindStringSubmatch(claim); {
		case claim == "events as JSON lines":
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			for _, l := range lines {
				var ev struct{ Type string }
				if json.Unmarshal([]byte(l), &ev) != nil || ev.Type == "" {
					fail("stdout has a line that is not an event: %q", l)
				}
			}
			var res struct {
				Type  string
				Error any
			}
			if json.Unmarshal([]byte(lines[len(lines)-1]), &res); res.Type != "result" || res.Error != nil {
				fail("its last line is not a result without error")
			}
		case m != nil:
			b, err := os.ReadFile(m[1])
			if err != nil || string(b) != m[2]+"\n" {
				fail("%s holds %q (%v)", m[1], b, err)
			}
		case strings.Contains(claim, "…"):
			var pieces []string
			for _, p := range strings.Split(claim, "…") {
				pieces = append(pieces, regexp.QuoteMeta(p))
			}
			re := regexp.MustCompile(`(?m)^` + strings.Join(pieces, `.*`) + `$`)
			if !re.MatchString(out.String()) && !re.MatchString(errb.String()) {
				fail("no line of its output matches %s", re)
			}
		default:
			if got := strings.TrimSuffix(out.String(), "\n"); got != claim {
				fail("stdout is %q", got)
			}
		}
	}
}

// environ is the shell's variables as an environment.
func (sh *docShell) environ() []string {
	var env []string
	for k, v := range sh.env {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}

// shellWords splits a command line as sh would for the simple commands of
// the docs: words, '…' and "…" quoting, backslash escapes, $NAME and
// ${NAME} from env, # comments. Anything else sh would treat specially (pipes,
// redirections, ;, &&, command substitution, globs) is an error.
func shellWords(line string, env map[string]string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	expand := func(s string, i int) (int, error) {
		// s[i] == '$'
		j := i + 1
		var name string
		if j < len(s) && s[j] == '{' {
			end := strings.IndexByte(s[j:], '}')
			if end < 0 {
				return 0, fmt.Errorf("unclosed ${ in %q", s)
			}
			name, j = s[j+1:j+end], j+end+1
		} else {
			for j < len(s) && (s[j] == '_' || s[j] >= 'a' && s[j] <= 'z' || s[j] >= 'A' && s[j] <= 'Z' || s[j] >= '0' && s[j] <= '9') {
				j++
			}
			name = s[i+1 : j]
		}
		if name == "" {
			return 0, fmt.Errorf("a $ this test does not expand in %q", s)
		}
		w.WriteString(env[name])
		return j, nil
	}
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
			i++
		case c == '\'':
			end := strings.IndexByte(line[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", line)
			}
			w.WriteString(line[i+1 : i+1+end])
			inWord, i = true, i+end+2
		case c == '"':
			inWord = true
			i++
			for {
				if i >= len(line) {
					return nil, fmt.Errorf("unclosed \" in %q", line)
				}
				c := line[i]
				if c == '"' {
					i++
					break
				}
				switch {
				case c == '\\' && i+1 < len(line) && strings.IndexByte("\"\\$`", line[i+1]) >= 0:
					w.WriteByte(line[i+1])
					i += 2
				case c == '$':
					j, err := expand(line, i)
					if err != nil {
						return nil, err
					}
					i = j
				case c == '`':
					return nil, fmt.Errorf("command substitution in %q", line)
				default:
					w.WriteByte(c)
					i++
				}
			}
		case c == '\\' && i+1 < len(line):
			w.WriteByte(line[i+1])
			inWord, i = true, i+2
		case c == '$':
			j, err := expand(line, i)
			if err != nil {
				return nil, err
			}
			inWord, i = true, j
		case c == '#' && !inWord:
			i = len(line) // a comment
		case strings.IndexByte("|&;<>()`*?[#~", c) >= 0:
			return nil, fmt.Errorf("shell syntax %q this test does not run, in %q", c, line)
		default:
			w.WriteByte(c)
			inWord, i = true, i+1
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

// pathWithoutCLIs is this process's PATH less every directory holding one
// of the pinned agent CLIs, so that a turn must bootstrap its own.
func pathWithoutCLIs() string {
	var keep []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		has := false
		for _, name := range testenv.CLIs() {
			if fi, err := os.Stat(filepath.Join(d, testenv.CLIProgram(name))); err == nil && !fi.IsDir() {
				has = true
			}
		}
		if !has && d != "" {
			keep = append(keep, d)
		}
	}
	return strings.Join(keep, string(filepath.ListSeparator))
}

// sharedClaudeCache is the machine's outpost cache directory (the parent
// of the bootstrap cache, what $OUTPOST_CACHE names) holding the pinned
// Claude Code for this host, which it downloads from npm into that cache
// when it is not there yet: once per machine, as for a user and for
// TestBootstrapRealClaudeDocker, which uses the same cache. Without
// network access to the registry the test fails under CI and skips loudly
// elsewhere.
func sharedClaudeCache(t *testing.T) string {
	t.Helper()
	dir, err := bootstrap.DefaultCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	got, err := (&bootstrap.Installer{}).Prefetch(ctx, "claude", bootstrap.HostPlatform(), nil)
	switch {
	case errors.Is(err, bootstrap.ErrDownload):
		testenv.Missing(t, "the pinned Claude Code from the npm registry ("+err.Error()+")",
			"network access to registry.npmjs.org, or $"+bootstrap.RegistryVariable+" naming a mirror")
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("claude %s: %s (%s)", got.Version, got.Path, got.Source)
	return filepath.Dir(dir)
}
