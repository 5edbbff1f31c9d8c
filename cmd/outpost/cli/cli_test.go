package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/rogpeppe/go-internal/testscript"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/cmd/outpost/cli"
	"github.com/outposthq/outpost/harness/echo"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) {
	echo.MaybeRun()
	testscript.Main(m, map[string]func(){
		"outpost": func() { os.Exit(cli.Run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir: "testdata/script",
		Setup: func(env *testscript.Env) error {
			env.Setenv("OUTPOST_HOME", filepath.Join(env.WorkDir, ".outpost-home"))
			// The test binary is also the echo agent (echo.MaybeRun), for
			// --command and preset files; XDG_CONFIG_HOME holds the user's
			// preset files.
			self, err := os.Executable()
			if err != nil {
				return err
			}
			env.Setenv("ECHO_BIN", self)
			env.Setenv("XDG_CONFIG_HOME", filepath.Join(env.WorkDir, "config"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			// result VAR FIELD: set $VAR to FIELD of the last stdout's result line.
			"result": func(ts *testscript.TestScript, neg bool, args []string) {
				if len(args) != 2 {
					ts.Fatalf("usage: result VAR FIELD")
				}
				var last map[string]any
				for _, l := range strings.Split(ts.ReadFile("stdout"), "\n") {
					var m map[string]any
					if json.Unmarshal([]byte(l), &m) == nil && m["type"] == "result" {
						last = m
					}
				}
				if last == nil {
					ts.Fatalf("no result line in stdout")
				}
				ts.Setenv(args[0], fmt.Sprint(last[args[1]]))
			},
		},
	})
}

// run runs the CLI in-process in a fresh OUTPOST_HOME and workdir.
func run(t *testing.T, home, workdir string, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("OUTPOST_HOME", home)
	var out, errb bytes.Buffer
	all := append([]string{}, args...)
	if len(args) > 0 && args[0] == "run" {
		all = append([]string{"run", "--workdir", workdir}, args[1:]...)
	}
	code := cli.Run(context.Background(), all, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestExitStatusPerCode(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	_, out, _ := run(t, home, wd, "run", "--json", "seed")
	id := resultOf(t, out)["conversation"].(string)
	cases := []struct {
		args []string
		code outpost.Code
		exit int
	}{
		{[]string{"run", "--json", "hello"}, "", 0},
		{[]string{"run", "--json", "#quota"}, outpost.Quota, 9},
		{[]string{"run", "--json", "#outage"}, outpost.Process, 8},
		{[]string{"run", "--json", "#crash"}, outpost.Process, 8},
		{[]string{"run", "--json", "#nofinish"}, outpost.Process, 8},
		{[]string{"run", "--json", "--timeout", "300ms", "#slow"}, outpost.Timeout, 124},
		{[]string{"run", "--json", "--agent", "nope", "x"}, outpost.Configuration, 3},
		{[]string{"run", "--json", "--resume", "cnothere", "x"}, outpost.Conversation, 7},
		{[]string{"run", "--json", "--sandbox", "nope", "x"}, outpost.Configuration, 3},
		{[]string{"run", "--json", "--resume", id, "--fork", id, "x"}, "", 2},
		{[]string{"run", "--no-such-flag", "x"}, "", 2},
	}
	seen := map[int]outpost.Code{}
	for _, c := range cases {
		t.Run(strings.Join(c.args[2:], " "), func(t *testing.T) {
			exit, out, errOut := run(t, home, wd, c.args...)
			if exit != c.exit {
				t.Fatalf("exit = %d, want %d\nstdout: %s\nstderr: %s", exit, c.exit, out, errOut)
			}
			if c.exit == 2 {
				return
			}
			r := resultOf(t, out)
			if c.code == "" {
				if r["error"] != nil {
					t.Errorf("error = %v", r["error"])
				}
				return
			}
			e, _ := r["error"].(map[string]any)
			if e == nil || e["code"] != string(c.code) {
				t.Errorf("error = %v, want code %s", r["error"], c.code)
			}
			if r["exit_code"] != float64(c.exit) {
				t.Errorf("exit_code = %v", r["exit_code"])
			}
		})
		if prev, ok := seen[c.exit]; ok && prev != c.code {
			t.Errorf("exit %d used by %q and %q", c.exit, prev, c.code)
		}
		seen[c.exit] = c.code
	}
	// Every code has its own exit status.
	statuses := map[int]outpost.Code{}
	for _, code := range outpost.Codes {
		s := outpost.ExitCode(&outpost.Error{Code: code})
		if other, dup := statuses[s]; dup || s <= 2 {
			t.Errorf("code %s: exit %d (shared with %q)", code, s, other)
		}
		statuses[s] = code
	}
}

func resultOf(t *testing.T, out string) map[string]any {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &m); err != nil || m["type"] != "result" {
		t.Fatalf("last line is not a result: %q", lines[len(lines)-1])
	}
	return m
}

var (
	timeRE = regexp.MustCompile(`"(time|started_at|completed_at)":"[^"]+"`)
	msRE   = regexp.MustCompile(`"duration_ms":[0-9]+`)
	uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	// Checkpoint commits hash their time.
	commitRE = regexp.MustCompile(`\b[0-9a-f]{40}\b|checkpoint [0-9a-f]{12}\b`)
)

// TestJSONWireContract pins the field names of `outpost run --json`.
func TestJSONWireContract(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	// On the host (isolation=none): the same fields wherever bwrap works
	// or not.
	code, out, errOut := run(t, home, wd, "run", "--json", "--set", "isolation=none", "#tool #retry hello")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	id := resultOf(t, out)["conversation"].(string)
	norm := strings.ReplaceAll(out, id, "CONVERSATION")
	norm = timeRE.ReplaceAllString(norm, `"$1":"TIME"`)
	norm = msRE.ReplaceAllString(norm, `"duration_ms":MS`)
	norm = uuidRE.ReplaceAllString(norm, "SESSION")
	norm = commitRE.ReplaceAllString(norm, "COMMIT")
	golden := filepath.Join("testdata", "run-json.golden")
	if *update {
		os.WriteFile(golden, []byte(norm), 0o644)
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), norm); diff != "" {
		t.Errorf("--json output changed (-want +got); if intended, run go test -update and document it in docs/events.md:\n%s", diff)
	}
}

// TestKeylessFlags: --secrets, --egress and --egress-allow reach the
// engine: bad values are configuration errors (exit 3), the result line
// says which modes the turn ran with, and the summary too.
func TestKeylessFlags(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	for _, tt := range []struct {
		args            []string
		exit            int
		secrets, egress string
	}{
		{[]string{"--secrets", "vault"}, 3, "", ""},
		{[]string{"--egress", "closed"}, 3, "", ""},
		{[]string{"--egress", "open", "--egress-allow", "x.example"}, 3, "", ""},
		{[]string{"--egress-allow", "http://x.example/"}, 3, "", ""},
		{[]string{"--secrets", "env"}, 0, "none", "open"},
		{[]string{"--egress", "gateway", "--egress-allow", "docs.example.com,*.example.org:443"}, 0, "none", "unenforced"},
		// An IP literal, IPv6 in brackets (docs/security.md).
		{[]string{"--egress", "gateway", "--egress-allow", "[::1]:8080,[::1],10.0.0.7:80"}, 0, "none", "unenforced"},
		{[]string{"--egress-allow", "[::1"}, 3, "", ""},
		// A rule with spaces is one entry: its methods' comma does not split it.
		{[]string{"--egress-allow", "git.example GET,POST /org/repo.git/info/refs /org/repo.git/git-upload-pack", "--egress-allow", "a.example,b.example"}, 0, "none", "unenforced"},
		{[]string{"--egress-allow", "git.example get /x"}, 3, "", ""},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			// On the host (isolation=none): egress gateway is unenforced
			// there (in namespaces it is enforced: providers/local's tests).
			args := append(append([]string{"run", "--json", "--set", "isolation=none"}, tt.args...), "hello")
			exit, out, errOut := run(t, home, wd, args...)
			if exit != tt.exit {
				t.Fatalf("exit = %d, want %d\nstdout: %s\nstderr: %s", exit, tt.exit, out, errOut)
			}
			r := resultOf(t, out)
			if got, _ := r["secrets"].(string); got != tt.secrets {
				t.Errorf("secrets %q, want %q", got, tt.secrets)
			}
			if got, _ := r["egress"].(string); got != tt.egress {
				t.Errorf("egress %q, want %q", got, tt.egress)
			}
		})
	}
	_, _, errOut := run(t, home, wd, "run", "--set", "isolation=none", "hello")
	if !strings.Contains(errOut, "· secrets none · egress open") {
		t.Errorf("the summary does not say the modes:\n%s", errOut)
	}
}

// TestMistypes: an unknown command, subcommand or flag is a usage error
// (exit status 2, docs/errors.md) that suggests what was meant; a command
// that only groups others prints its help when given none.
func TestMistypes(t *testing.T) {
	home, wd := t.TempDir(), t.TempDir()
	for _, tt := range []struct {
		args   []string
		exit   int
		stderr []string // substrings of standard error
		stdout string   // a substring of standard output
	}{
		{[]string{"conversations", "list"}, 2, []string{`unknown command "list" for "outpost conversations"`, "Did you mean this?\n\tls"}, ""},
		{[]string{"conversations", "lsit", "--json"}, 2, []string{`unknown command "lsit" for "outpost conversations"`, "\tls"}, ""},
		{[]string{"conversations", "delete", "c1"}, 2, []string{`unknown command "delete"`, "\trm"}, ""},
		{[]string{"conversations", "frobnicate"}, 2, []string{`unknown command "frobnicate" for "outpost conversations" (see "outpost conversations --help")`}, ""},
		{[]string{"conversation", "ls"}, 2, []string{`unknown command "conversation" for "outpost"`, "\tconversations"}, ""},
		{[]string{"serve", "tokn", "add", "ci"}, 2, []string{`unknown command "tokn" for "outpost serve"`, "\ttoken"}, ""},
		{[]string{"serve", "token", "ad", "ci"}, 2, []string{`unknown command "ad" for "outpost serve token"`, "\tadd"}, ""},
		{[]string{"completion", "bsh"}, 2, []string{`unknown command "bsh"`, "\tbash"}, ""},
		{[]string{"run", "--agnt", "echo", "x"}, 2, []string{"unknown flag: --agnt", "Did you mean this?\n\t--agent"}, ""},
		{[]string{"run", "--jsno", "x"}, 2, []string{"unknown flag: --jsno", "\t--json"}, ""},
		{[]string{"conversations", "ls", "--jsn"}, 2, []string{"unknown flag: --jsn", "\t--json"}, ""},
		{[]string{"run", "--zzzzzzzz", "x"}, 2, []string{"unknown flag: --zzzzzzzz"}, ""},
		{[]string{"conversations"}, 0, nil, "Available Commands:"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			exit, out, errOut := run(t, home, wd, tt.args...)
			if exit != tt.exit {
				t.Fatalf("exit = %d, want %d\nstdout: %s\nstderr: %s", exit, tt.exit, out, errOut)
			}
			for _, s := range tt.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr lacks %q:\n%s", s, errOut)
				}
			}
			if !strings.Contains(out, tt.stdout) {
				t.Errorf("stdout lacks %q:\n%s", tt.stdout, out)
			}
			if tt.exit != 0 && strings.Contains(out, "Usage:") {
				t.Errorf("a mistype printed the help on stdout:\n%s", out)
			}
		})
	}
}

// TestMCPStdio: `outpost mcp` logs under its own name, and input that is
// not MCP is the client's mistake (configuration, exit status 3), not the
// sandbox's.
func TestMCPStdio(t *testing.T) {
	for _, tt := range []struct {
		name, stdin string
		exit        int
		stderr      string
	}{
		{"end of input", "", 0, `"msg":"outpost mcp: draining"`},
		{"not JSON-RPC", "this is not JSON\n", 3, "outpost: configuration: mcp: the client's messages on standard input: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("OUTPOST_HOME", t.TempDir())
			var out, errb bytes.Buffer
			exit := cli.Run(context.Background(), []string{"mcp", "--workdir", t.TempDir()}, strings.NewReader(tt.stdin), &out, &errb)
			if exit != tt.exit {
				t.Fatalf("exit = %d, want %d\nstdout: %s\nstderr: %s", exit, tt.exit, out.String(), errb.String())
			}
			if !strings.Contains(errb.String(), tt.stderr) {
				t.Errorf("stderr lacks %q:\n%s", tt.stderr, errb.String())
			}
			if strings.Contains(errb.String(), "outpost serve") {
				t.Errorf("outpost mcp logs as outpost serve:\n%s", errb.String())
			}
		})
	}
}
