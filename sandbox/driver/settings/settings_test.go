package settings_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/outposthq/outpost"
	"github.com/outposthq/outpost/sandbox/driver/settings"
)

var set = settings.Set{Provider: "demo", Keys: []settings.Key{
	settings.Image, settings.CPU, settings.Memory, settings.ReadOnly, settings.StartTimeout, settings.Pull,
	{Name: "port", Kind: settings.Int},
	{Name: "pids", Kind: settings.Int, None: true},
	{Name: "node_selector", Kind: settings.Map},
	{Name: "binary_mode", Kind: settings.Enum, Values: []string{"auto", "copy"}},
}}

func TestParse(t *testing.T) {
	v, err := set.Parse(map[string]string{
		"image": "x:1", "cpu": "500m", "memory": "4Gi", "readonly": "true", "start_timeout": "2m", "pull": "never",
		"port": "22", "pids": "none", "node_selector": "a=b, c=d", "binary_mode": "copy",
	})
	if err != nil {
		t.Fatal(err)
	}
	type got struct {
		Image, Pull, Mode string
		CPU               float64
		Memory, Port, Pid int64
		ReadOnly          bool
		Start             time.Duration
		Selector          map[string]string
	}
	want := got{"x:1", "never", "copy", 0.5, 4 << 30, 22, -1, true, 2 * time.Minute, map[string]string{"a": "b", "c": "d"}}
	g := got{v.String("image"), v.String("pull"), v.String("binary_mode"), v.Quantity("cpu"), v.Int("memory"), v.Int("port"),
		v.Int("pids"), v.Bool("readonly"), v.Duration("start_timeout"), v.Map("node_selector")}
	if diff := cmp.Diff(want, g); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

func TestSizes(t *testing.T) {
	for in, want := range map[string]int64{"512m": 512 << 20, "4g": 4 << 30, "4G": 4 << 30, "4Gi": 4 << 30, "64k": 64 << 10, "1048576": 1 << 20, "1.5g": 3 << 29, "2gb": 2 << 30, "1Ti": 1 << 40} {
		v, err := set.Parse(map[string]string{"memory": in})
		if err != nil || v.Int("memory") != want {
			t.Errorf("memory=%s: %d, %v; want %d", in, v.Int("memory"), err, want)
		}
	}
}

func TestErrors(t *testing.T) {
	known := "binary_mode, cpu, image, memory, node_selector, pids, port, pull, readonly, start_timeout"
	for _, c := range []struct {
		settings map[string]string
		want     string
	}{
		{map[string]string{"colour": "red"}, `configuration: sandbox: demo: unknown setting "colour"; known: ` + known},
		{map[string]string{"cpuu": "1"}, `configuration: sandbox: demo: unknown setting "cpuu" (did you mean cpu?); known: ` + known},
		{map[string]string{"memroy": "1g"}, `configuration: sandbox: demo: unknown setting "memroy" (did you mean memory?); known: ` + known},
		{map[string]string{"cpus": "1"}, `configuration: sandbox: demo: setting "cpus" is now spelt "cpu"`},
		{map[string]string{"dial_timeout": "1s"}, `configuration: sandbox: demo: setting "dial_timeout" is now spelt "start_timeout"`},
		{map[string]string{"node-selector": "a=b"}, `configuration: sandbox: demo: setting "node-selector" is now spelt "node_selector"`},
		{map[string]string{"cpu": "lots"}, `configuration: sandbox: demo: setting cpu="lots": not a number such as 1.5 or 500m (none for no limit)`},
		{map[string]string{"cpu": "NaN"}, `configuration: sandbox: demo: setting cpu="NaN": must be positive (none for no limit)`},
		{map[string]string{"memory": "0"}, `configuration: sandbox: demo: setting memory="0": must be positive (none for no limit)`},
		{map[string]string{"port": "none"}, `configuration: sandbox: demo: setting port="none": not a whole number`},
		{map[string]string{"start_timeout": "-1s"}, `configuration: sandbox: demo: setting start_timeout="-1s": must be positive`},
		{map[string]string{"readonly": "perhaps"}, `configuration: sandbox: demo: setting readonly="perhaps": not true or false`},
		{map[string]string{"pull": "sometimes"}, `configuration: sandbox: demo: setting pull="sometimes": not one of missing, never, always`},
		{map[string]string{"pull": "if-not-present"}, `configuration: sandbox: demo: setting pull="if-not-present": if-not-present is now spelt missing`},
		{map[string]string{"node_selector": "novalue"}, `configuration: sandbox: demo: setting node_selector="novalue": "novalue" is not key=value`},
		{map[string]string{"image": ""}, `configuration: sandbox: demo: setting image="": empty`},
	} {
		_, err := set.Parse(c.settings)
		if err == nil || err.Error() != c.want {
			t.Errorf("Parse(%v):\n got %v\nwant %s", c.settings, err, c.want)
		}
		var e *outpost.Error
		if !errors.As(err, &e) || e.Code != outpost.Configuration || e.Details["setting"] == nil {
			t.Errorf("Parse(%v): %#v is not a configuration error naming the setting", c.settings, err)
		}
	}
}

func TestUndeclaredGetterPanics(t *testing.T) {
	v, _ := set.Parse(nil)
	for name, get := range map[string]func(){"undeclared": func() { v.String("host") }, "wrong kind": func() { v.Bool("cpu") }} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			get()
		})
	}
}
