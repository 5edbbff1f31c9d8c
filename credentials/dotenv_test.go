package credentials

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/harness"
)

// writeDotEnv writes content as <dir>/.outpost/.env and returns dir.
func writeDotEnv(t *testing.T, content string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".outpost"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".outpost", ".env"), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolve(t *testing.T) {
	environ := []string{
		"PATH=/usr/bin",
		"SHARED=from-env",
		"EMPTY=",
		"WITH_EQUALS=a=b",
		"NOEQUALS",
		"=C:=weird",
		"DUP=first",
		"DUP=second",
	}
	tests := []struct {
		name     string
		dotenv   *string
		wantVars harness.Vars
		wantFrom map[string]bool
	}{
		{
			name:   "no file",
			dotenv: nil,
			wantVars: harness.Vars{
				"PATH": "/usr/bin", "SHARED": "from-env", "EMPTY": "", "WITH_EQUALS": "a=b", "DUP": "second",
			},
			wantFrom: map[string]bool{},
		},
		{
			name:   "file over environment",
			dotenv: ptr("# comment\nSHARED=from-file\nexport ONLY_FILE='x y'\nQUOTED=\"a\\nb\"\nREF=${ONLY_FILE}-z\nYAML: v\n"),
			wantVars: harness.Vars{
				"PATH": "/usr/bin", "SHARED": "from-file", "EMPTY": "", "WITH_EQUALS": "a=b", "DUP": "second",
				"ONLY_FILE": "x y", "QUOTED": "a\nb", "REF": "x y-z", "YAML": "v",
			},
			wantFrom: map[string]bool{"SHARED": true, "ONLY_FILE": true, "QUOTED": true, "REF": true, "YAML": true},
		},
		{
			name:     "byte order mark and CRLF",
			dotenv:   ptr("\ufeffA=1\r\nB=2\r\n"),
			wantVars: harness.Vars{"PATH": "/usr/bin", "SHARED": "from-env", "EMPTY": "", "WITH_EQUALS": "a=b", "DUP": "second", "A": "1", "B": "2"},
			wantFrom: map[string]bool{"A": true, "B": true},
		},
		{
			name:     "empty file",
			dotenv:   ptr(""),
			wantVars: harness.Vars{"PATH": "/usr/bin", "SHARED": "from-env", "EMPTY": "", "WITH_EQUALS": "a=b", "DUP": "second"},
			wantFrom: map[string]bool{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.dotenv != nil {
				dir = writeDotEnv(t, *tt.dotenv)
			}
			got, err := Resolve(environ, dir)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.wantVars, got.Vars); d != "" {
				t.Errorf("Vars (-want +got):\n%s", d)
			}
			if d := cmp.Diff(tt.wantFrom, got.FromDotEnv); d != "" {
				t.Errorf("FromDotEnv (-want +got):\n%s", d)
			}
			if want := filepath.Join(dir, ".outpost", ".env"); got.DotEnvPath != want {
				t.Errorf("DotEnvPath = %q, want %q", got.DotEnvPath, want)
			}
		})
	}
}

func TestDotEnvMissing(t *testing.T) {
	dir := t.TempDir()
	vars, path, err := DotEnv(dir)
	if err != nil || vars != nil {
		t.Fatalf("DotEnv = %v, %v; want nil, nil", vars, err)
	}
	if want := filepath.Join(dir, ".outpost", ".env"); path != want {
		t.Errorf("path = %q, want %q", path, want)
	}
}

func TestDotEnvBroken(t *testing.T) {
	// Every value is distinctive, so its absence from the message can be
	// checked.
	const secret = "zq-SECRET-7731"
	tests := []struct {
		name     string
		content  string
		wantLine int
		wantWhy  string
	}{
		{"unterminated double quote", "A=1\n# c\nTOKEN=\"" + secret + "\nB=2\n", 3, "unterminated quoted value"},
		{"unterminated single quote", "TOKEN='" + secret + "\n", 1, "unterminated quoted value"},
		{"unterminated after escaped quote", "X=\"ok\"\nTOKEN=\"" + secret + `\"` + "\n", 2, "unterminated quoted value"},
		{"unterminated with CRLF", "A=1\r\nB=2\r\nTOKEN=\"" + secret + "\r\n", 3, "unterminated quoted value"},
		{"line without equals", "A=1\n" + secret + "\nB=2\n", 2, "expected NAME=value"},
		{"dash in name", "A=1\n\n-" + secret + "=v\n", 3, "expected NAME=value"},
		{"comment after bare word", "A=1\n" + secret + " # note\n", 2, "expected NAME=value"},
		{"final line without equals", "A=1\nB=2\n" + strings.ReplaceAll(secret, "-", "_"), 3, "expected NAME=value"},
		{"empty name", "A=1\n=" + secret + "\n", 2, "expected NAME=value"},
		{"dotted name", "A=1\nsome.name=" + secret + "\n", 2, "valid variable name"},
		{"digit first", "9LIVES=" + secret + "\n", 1, "valid variable name"},
		{"space in name", "MY TOKEN=" + secret + "\n", 1, "valid variable name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := writeDotEnv(t, tt.content)
			_, err := Resolve([]string{"OTHER=" + secret + "-env"}, dir)
			if err == nil {
				t.Fatal("Resolve succeeded")
			}
			var oe *outpost.Error
			if !errors.As(err, &oe) || oe.Code != outpost.Configuration || oe.Op != "env" {
				t.Fatalf("error = %#v, want *outpost.Error code configuration op env", err)
			}
			var de *DotEnvError
			if !errors.As(err, &de) {
				t.Fatalf("error %v does not wrap *DotEnvError", err)
			}
			if de.Line != tt.wantLine {
				t.Errorf("Line = %d, want %d (%v)", de.Line, tt.wantLine, err)
			}
			msg := err.Error()
			path := filepath.Join(dir, ".outpost", ".env")
			if !strings.Contains(msg, path) {
				t.Errorf("message %q does not name %s", msg, path)
			}
			if !strings.Contains(msg, tt.wantWhy) {
				t.Errorf("message %q does not say %q", msg, tt.wantWhy)
			}
			// The path is left out: its temporary directory's random digits
			// can hold "7731" (a full run's did).
			rest := strings.ReplaceAll(msg, path, "")
			for _, leak := range []string{"7731", "SECRET", "zq", "TOKEN", "some.name", "LIVES"} {
				if strings.Contains(rest, leak) {
					t.Errorf("message %q contains %q from the file", msg, leak)
				}
			}
		})
	}
}

func TestDotEnvUnreadable(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, ".outpost", ".env"), 0o700); err != nil {
		t.Fatal(err)
	}
	_, _, err := DotEnv(dir)
	if outpost.CodeOf(err) != outpost.Configuration {
		t.Fatalf("error = %v, want code configuration", err)
	}
}

func TestDotEnvTooLarge(t *testing.T) {
	dir := writeDotEnv(t, "A="+strings.Repeat("x", maxDotEnvSize)+"\n")
	_, _, err := DotEnv(dir)
	if outpost.CodeOf(err) != outpost.Configuration || strings.Contains(err.Error(), "xxxx") {
		t.Fatalf("error = %.200v, want a configuration error without content", err)
	}
}

func ptr[T any](v T) *T { return &v }
