package cli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/outposthq/outpost/providers/docker"
	"github.com/outposthq/outpost/providers/kubernetes"
	"github.com/outposthq/outpost/providers/local"
	sshp "github.com/outposthq/outpost/providers/ssh"
	"github.com/outposthq/outpost/sandbox"
	"github.com/outposthq/outpost/sandbox/driver/settings"
)

// TestSettingsMessages: every provider, opened by name as `--set` does,
// answers an unknown key, a misspelt key and a former spelling the same
// way, from the one parser.
func TestSettingsMessages(t *testing.T) {
	for _, c := range []struct {
		provider string
		set      map[string]string
		want     string
	}{
		{"local", map[string]string{"colour": "red"}, `configuration: sandbox: local: unknown setting "colour"; known: isolation, ro, root, rw`},
		{"local", map[string]string{"rooot": "/x"}, `configuration: sandbox: local: unknown setting "rooot" (did you mean root?); known: isolation, ro, root, rw`},
		{"local", map[string]string{"base": "/x"}, `configuration: sandbox: local: setting "base" is now spelt "root"`},
		{"docker", map[string]string{"colour": "red"}, `configuration: sandbox: docker: unknown setting "colour"; known: binary, binary_mode, cpu, host, image, memory, network, pids, pull, readonly, spares, user, workspace`},
		{"docker", map[string]string{"memroy": "1g"}, `configuration: sandbox: docker: unknown setting "memroy" (did you mean memory?); known: binary, binary_mode, cpu, host, image, memory, network, pids, pull, readonly, spares, user, workspace`},
		{"docker", map[string]string{"cpus": "2"}, `configuration: sandbox: docker: setting "cpus" is now spelt "cpu"`},
		{"docker", map[string]string{"binary-mode": "copy"}, `configuration: sandbox: docker: setting "binary-mode" is now spelt "binary_mode"`},
		{"ssh", map[string]string{"insecure": "true"}, `configuration: sandbox: ssh: unknown setting "insecure"; known: agent, binary, bwrap, config, host, identity, isolation, keepalive, known_hosts, port, root, start_timeout, user, workdir, workspace`},
		{"ssh", map[string]string{"identiy": "k"}, `configuration: sandbox: ssh: unknown setting "identiy" (did you mean identity?); known: agent, binary, bwrap, config, host, identity, isolation, keepalive, known_hosts, port, root, start_timeout, user, workdir, workspace`},
		{"ssh", map[string]string{"dial_timeout": "5s"}, `configuration: sandbox: ssh: setting "dial_timeout" is now spelt "start_timeout"`},
		{"kubernetes", map[string]string{"colour": "red"}, `configuration: sandbox: kubernetes: unknown setting "colour"; known: arch, binary, context, cpu, cpu_request, ephemeral_storage, exec_each, image, kubeconfig, lease_duration, max_lifetime, memory, memory_request, namespace, node_cache, node_selector, outpost_image, pull, readonly, service_account, start_timeout, template, user, via, warm_pool`},
		{"kubernetes", map[string]string{"namespce": "x"}, `configuration: sandbox: kubernetes: unknown setting "namespce" (did you mean namespace?); known: arch, binary, context, cpu, cpu_request, ephemeral_storage, exec_each, image, kubeconfig, lease_duration, max_lifetime, memory, memory_request, namespace, node_cache, node_selector, outpost_image, pull, readonly, service_account, start_timeout, template, user, via, warm_pool`},
		{"kubernetes", map[string]string{"outpost-image": "o:1"}, `configuration: sandbox: kubernetes: setting "outpost-image" is now spelt "outpost_image"`},
		{"kubernetes", map[string]string{"pull": "if-not-present"}, `configuration: sandbox: kubernetes: setting pull="if-not-present": if-not-present is now spelt missing`},
		{"kubernetes", map[string]string{"user": "0"}, `configuration: sandbox: kubernetes: setting user="0": must be a non-root uid[:gid]`},
	} {
		t.Run(c.provider, func(t *testing.T) {
			_, err := sandbox.Open(c.provider, c.set)
			if err == nil || err.Error() != c.want {
				t.Errorf("Open(%s, %v):\n got %v\nwant %s", c.provider, c.set, err, c.want)
			}
		})
	}
}

// TestSettingsDocs: the tables of docs/sandboxes are the declarations
// (go test -run TestSettingsDocs -update rewrites them).
func TestSettingsDocs(t *testing.T) {
	sets := []settings.Set{local.Settings, docker.Settings, sshp.Settings, kubernetes.Settings}
	tables := map[string]map[string]string{"settings.md": {"common": settings.CommonTable(sets...)}}
	for _, s := range sets {
		tables[s.Provider+".md"] = map[string]string{s.Provider: s.Table()}
	}
	for file, marks := range tables {
		path := filepath.Join("..", "..", "..", "docs", "sandboxes", file)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := string(b)
		for marker, table := range marks {
			got, ok := settings.Splice(doc, marker, table)
			if !ok {
				t.Errorf("%s has no generated table %q (%s ... %s)", file, marker, settings.Begin(marker), settings.End)
				continue
			}
			doc = got
		}
		if doc == string(b) {
			continue
		}
		if *update {
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Errorf("%s: the settings tables differ from the declarations; run go test ./cmd/outpost/cli -run TestSettingsDocs -update", file)
	}
}
