package credentials

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
)

func TestEnvironmentPrecedence(t *testing.T) {
	// Each layer sets its own name and every name of the layers below it,
	// so the winner of each name shows the order.
	layers := []string{"defaults", "dotenv", "configuration", "plan", "harness", "command", "explicit"}
	s := Sources{Fixed: map[string]string{"HOME": "/home/agent", "XDG_CONFIG_HOME": "/home/agent/.config"}}
	fields := []*map[string]string{&s.Defaults, &s.DotEnv, &s.Configuration, &s.Plan, &s.Harness, &s.Command, &s.Explicit}
	for i, f := range fields {
		*f = map[string]string{}
		for _, name := range layers[:i+1] {
			(*f)[strings.ToUpper(name)] = layers[i]
		}
	}
	got, err := Environment(s)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"HOME":            "/home/agent",
		"XDG_CONFIG_HOME": "/home/agent/.config",
		"DEFAULTS":        "explicit",
		"DOTENV":          "explicit",
		"CONFIGURATION":   "explicit",
		"PLAN":            "explicit",
		"HARNESS":         "explicit",
		"COMMAND":         "explicit",
		"EXPLICIT":        "explicit",
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("all layers (-want +got):\n%s", d)
	}

	tests := []struct {
		name string
		s    Sources
		want map[string]string
	}{
		{".outpost/.env over defaults", Sources{Defaults: map[string]string{"PATH": "/bin", "LANG": "C"}, DotEnv: map[string]string{"LANG": "en_US.UTF-8", "FOO_SETTING": "abc"}}, map[string]string{"PATH": "/bin", "LANG": "en_US.UTF-8", "FOO_SETTING": "abc"}},
		{"configuration over .outpost/.env", Sources{DotEnv: map[string]string{"K": "d"}, Configuration: map[string]string{"K": "c"}}, map[string]string{"K": "c"}},
		// A secret of .outpost/.env (by name or by value) comes only
		// through the plan.
		{".outpost/.env secrets left out", Sources{DotEnv: map[string]string{"FOO_SETTING": "abc", "DBPASS": "hunter22", "OTHER": testOpenAIKey}}, map[string]string{"FOO_SETTING": "abc"}},
		{".outpost/.env secret through the plan", Sources{DotEnv: map[string]string{"DBPASS": "hunter22"}, Plan: map[string]string{"DBPASS": "hunter22"}}, map[string]string{"DBPASS": "hunter22"}},
		{"configuration over defaults", Sources{Defaults: map[string]string{"PATH": "/bin", "LANG": "C"}, Configuration: map[string]string{"PATH": "/opt/bin"}}, map[string]string{"PATH": "/opt/bin", "LANG": "C"}},
		{"plan over configuration", Sources{Configuration: map[string]string{"K": "c"}, Plan: map[string]string{"K": "p"}}, map[string]string{"K": "p"}},
		{"harness over plan", Sources{Plan: map[string]string{"K": "p"}, Harness: map[string]string{"K": "h"}}, map[string]string{"K": "h"}},
		{"command over harness", Sources{Harness: map[string]string{"K": "h"}, Command: map[string]string{"K": "c"}}, map[string]string{"K": "c"}},
		{"explicit over command", Sources{Command: map[string]string{"K": "c"}, Explicit: map[string]string{"K": "e"}}, map[string]string{"K": "e"}},
		{"defaults may repeat fixed names", Sources{Fixed: map[string]string{"HOME": "/h"}, Defaults: map[string]string{"HOME": "/other"}}, map[string]string{"HOME": "/h"}},
		{"empty", Sources{}, map[string]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Environment(tt.s)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestEnvironmentErrors(t *testing.T) {
	const secret = "sk-env-3131"
	fixed := map[string]string{"HOME": "/home/agent", "TMPDIR": "/tmp/x"}
	tests := []struct {
		name      string
		s         Sources
		want      []string
		wantNames []string
	}{
		{
			name:      "clashes from every layer",
			s:         Sources{Fixed: fixed, Configuration: map[string]string{"HOME": secret}, Harness: map[string]string{"TMPDIR": secret}, Explicit: map[string]string{"HOME": secret, "OK": "1"}},
			want:      []string{"HOME (set by the configuration plan)", "TMPDIR (set by the harness Variables)", "HOME (set by explicit values (--env))", "cannot be overridden"},
			wantNames: []string{"HOME", "TMPDIR"},
		},
		{
			name: ".outpost/.env clash", s: Sources{Fixed: fixed, DotEnv: map[string]string{"TMPDIR": "/elsewhere"}},
			want: []string{"TMPDIR (set by .outpost/.env)"}, wantNames: []string{"TMPDIR"},
		},
		{
			name: "plan and command clash",
			s:    Sources{Fixed: fixed, Plan: map[string]string{"HOME": secret}, Command: map[string]string{"TMPDIR": secret}},
			want: []string{"HOME (set by the credential plan)", "TMPDIR (set by the command)"}, wantNames: []string{"HOME", "TMPDIR"},
		},
		{
			name: "invalid name",
			s:    Sources{Explicit: map[string]string{"BAD-NAME": secret}},
			want: []string{`"BAD-NAME" (explicit values (--env))`, "invalid variable names"},
		},
		{
			name: "NUL in value",
			s:    Sources{Plan: map[string]string{"TOKEN": secret + "\x00"}},
			want: []string{"TOKEN (the credential plan)", "NUL"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := Environment(tt.s)
			if env != nil {
				t.Errorf("env = %v, want nil", env)
			}
			wantCode(t, err, outpost.Configuration, tt.want...)
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error %q contains a value", err)
			}
			var oe *outpost.Error
			errors.As(err, &oe)
			if oe.Op != "variables" {
				t.Errorf("Op = %q", oe.Op)
			}
			if tt.wantNames != nil {
				if d := cmp.Diff(tt.wantNames, oe.Details["names"]); d != "" {
					t.Errorf("names (-want +got):\n%s", d)
				}
			}
		})
	}
}

func TestEnvironmentDoesNotModifyInputs(t *testing.T) {
	defaults := map[string]string{"PATH": "/bin"}
	explicit := map[string]string{"PATH": "/x"}
	if _, err := Environment(Sources{Defaults: defaults, Explicit: explicit}); err != nil {
		t.Fatal(err)
	}
	if defaults["PATH"] != "/bin" || explicit["PATH"] != "/x" || len(defaults) != 1 {
		t.Error("inputs modified")
	}
}
