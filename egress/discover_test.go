package egress

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/policy"
)

// fakeHost is a HostConfig over in-memory files and tools.
func fakeHost(env []string, files map[string]string, tools map[string]string) HostConfig {
	return HostConfig{
		Env:  env,
		Home: "/home/u",
		ReadFile: func(p string) ([]byte, error) {
			if s, ok := files[p]; ok {
				return []byte(s), nil
			}
			return nil, fs.ErrNotExist
		},
		ReadDir: func(dir string) ([]string, error) {
			var names []string
			for p := range files {
				if path.Dir(p) == dir {
					names = append(names, path.Base(p))
				}
			}
			if names == nil {
				return nil, fs.ErrNotExist
			}
			return names, nil
		},
		LookPath: func(name string) (string, error) {
			for k := range tools {
				if strings.HasPrefix(k, name+" ") {
					return "/usr/bin/" + name, nil
				}
			}
			return "", errors.New("not found")
		},
		Run: func(ctx context.Context, p string, args ...string) ([]byte, error) {
			key := path.Base(p) + " " + strings.Join(args, " ")
			if out, ok := tools[key]; ok {
				return []byte(out), nil
			}
			return nil, errors.New("unknown tool invocation " + key)
		},
	}
}

func findHost(t *testing.T, got []Discovered, host string) Discovered {
	t.Helper()
	for _, d := range got {
		if d.Entry.Host == host {
			return d
		}
	}
	t.Fatalf("%s not discovered in %+v", host, got)
	return Discovered{}
}

func TestDiscoverNothingConfigured(t *testing.T) {
	if got := Discover(context.Background(), fakeHost(nil, nil, nil)); len(got) != 0 {
		t.Errorf("discovered %+v from nothing", got)
	}
	if got := Discover(context.Background(), HostConfig{}); len(got) != 0 {
		t.Errorf("discovered %+v from a zero HostConfig", got)
	}
}

func TestDiscoverNPM(t *testing.T) {
	files := map[string]string{
		"/home/u/.npmrc": "; comment\nregistry = \"https://npm.example.com/\"\n@corp:registry=https://npm.corp.example:8443/\n//npm.example.com/:_authToken=SECRET\nproxy=http://ignored.example\n",
		"/usr/etc/npmrc": "registry=${NPM_MIRROR}\n",
		"/etc/npmrc":     "registry=http://npm-mirror.example.org\nregistry=${UNSET}/x\n",
	}
	env := []string{"NPM_CONFIG_REGISTRY=https://env-npm.example.com", "NPM_MIRROR=https://mirror.example.net"}
	h := fakeHost(env, files, map[string]string{"node ": "", "npm config get registry": "https://npm.example.com/\n"})
	got := Discover(context.Background(), h)
	var hosts []string
	for _, d := range got {
		hosts = append(hosts, d.Entry.Host)
		if strings.Contains(d.Entry.Reason, "SECRET") || strings.Contains(d.Source, "SECRET") {
			t.Errorf("a token leaked into %+v", d)
		}
	}
	want := []string{"env-npm.example.com", "npm.example.com", "npm.corp.example", "mirror.example.net", "npm-mirror.example.org"}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	d := findHost(t, got, "npm.example.com")
	if d.Entry.Reason != "npm registry configured on this host (~/.npmrc, npm config get registry)" || d.Source != "~/.npmrc, npm config get registry" {
		t.Errorf("npm.example.com: %+v", d)
	}
	if !reflect.DeepEqual(d.Entry.Ports, []int{443}) {
		t.Errorf("ports %v", d.Entry.Ports)
	}
	if d := findHost(t, got, "npm.corp.example"); d.Entry.Ports[0] != 8443 || !strings.Contains(d.Entry.Reason, "npm registry for @corp") {
		t.Errorf("scoped: %+v", d)
	}
	if d := findHost(t, got, "npm-mirror.example.org"); d.Entry.Ports[0] != 80 || d.Source != "/etc/npmrc" {
		t.Errorf("http registry: %+v", d)
	}
	if d := findHost(t, got, "env-npm.example.com"); d.Source != "$npm_config_registry" {
		t.Errorf("env registry: %+v", d)
	}
}

func TestDiscoverGo(t *testing.T) {
	// From go env.
	h := fakeHost(nil, nil, map[string]string{"go env GOPROXY GOSUMDB": "https://goproxy.example.com,direct\nsum.example.com+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8\n"})
	got := Discover(context.Background(), h)
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	if got[0].Entry.Host != "goproxy.example.com" || got[0].Entry.Reason != "Go module proxy configured on this host (GOPROXY from go env)" {
		t.Errorf("proxy: %+v", got[0])
	}
	if got[1].Entry.Host != "sum.example.com" || got[1].Entry.Reason != "Go checksum database configured on this host (GOSUMDB from go env)" {
		t.Errorf("sumdb: %+v", got[1])
	}
	// From the environment, without go: schemeless proxies, "|"
	// separators, off, a sumdb with its own URL.
	h = fakeHost([]string{"GOPROXY=goproxy.example.net|http://goproxy2.example.net:8080,off", "GOSUMDB=sum.example.net+key https://sumproxy.example.net/"}, nil, nil)
	got = Discover(context.Background(), h)
	var hosts []string
	for _, d := range got {
		hosts = append(hosts, d.Entry.Host+":"+itoaPorts(d.Entry.Ports))
	}
	want := []string{"goproxy.example.net:443", "goproxy2.example.net:8080", "sumproxy.example.net:443"}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	// GOSUMDB=off, GOPROXY=direct: nothing. The go env file fills what
	// the environment leaves unset.
	h = fakeHost([]string{"GOPROXY=direct", "GOSUMDB=off"}, nil, nil)
	if got := Discover(context.Background(), h); len(got) != 0 {
		t.Errorf("direct/off: %+v", got)
	}
	h = fakeHost(nil, map[string]string{"/home/u/.config/go/env": "GOPROXY=https://goproxy.example.org\n"}, nil)
	got = Discover(context.Background(), h)
	if len(got) != 1 || got[0].Source != "GOPROXY from ~/.config/go/env" {
		t.Errorf("go env file: %+v", got)
	}
}

func itoaPorts(ports []int) string {
	var s []string
	for _, p := range ports {
		s = append(s, strconv.Itoa(p))
	}
	return strings.Join(s, ",")
}

func TestDiscoverPip(t *testing.T) {
	files := map[string]string{
		"/etc/pip.conf":                "[global]\nindex-url = https://pypi.example.com/simple\nextra-index-url =\n    https://extra1.example.com/simple\n    https://extra2.example.com:4443/simple\n",
		"/home/u/.config/pip/pip.conf": "[install]\nindex_url: https://user:pw@pypi.example.com/simple\ntrusted-host = ignored.example\n",
		"/home/u/.pip/pip.conf":        "[global]\nindex-url=file:///srv/wheels\n",
	}
	env := []string{"PIP_INDEX_URL=https://env-pypi.example.org/simple", "PIP_EXTRA_INDEX_URL=https://e1.example.org/ https://e2.example.org/"}
	got := Discover(context.Background(), fakeHost(env, files, nil))
	var hosts []string
	for _, d := range got {
		hosts = append(hosts, d.Entry.Host)
		if strings.Contains(d.Entry.Reason, "pw") {
			t.Errorf("credentials leaked: %+v", d)
		}
	}
	want := []string{"env-pypi.example.org", "e1.example.org", "e2.example.org", "pypi.example.com", "extra1.example.com", "extra2.example.com"}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	d := findHost(t, got, "pypi.example.com")
	if d.Entry.Reason != "pip package index configured on this host (index-url in /etc/pip.conf, index-url in ~/.config/pip/pip.conf)" {
		t.Errorf("merged reason %q", d.Entry.Reason)
	}
	if d := findHost(t, got, "extra2.example.com"); d.Entry.Ports[0] != 4443 {
		t.Errorf("extra2 port %v", d.Entry.Ports)
	}
}

func TestDiscoverCargo(t *testing.T) {
	files := map[string]string{
		"/home/u/.cargo/config.toml": `
[registries.corp]
index = "sparse+https://cargo.corp.example/index/"

[registries.gitreg]
index = "ssh://git@git.example.com/index.git"

[source.crates-io]
replace-with = "mirror"

[source.mirror]
registry = "sparse+https://crates-mirror.example.net/"

[source.vendored]
directory = "vendor"
`,
	}
	env := []string{"CARGO_REGISTRIES_OTHER_INDEX=sparse+https://other.example.org/"}
	got := Discover(context.Background(), fakeHost(env, files, nil))
	var hosts []string
	for _, d := range got {
		hosts = append(hosts, d.Entry.Host)
	}
	want := []string{"other.example.org", "cargo.corp.example", "crates-mirror.example.net"}
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	if d := findHost(t, got, "cargo.corp.example"); d.Entry.Reason != "Cargo registry configured on this host (registries.corp.index in ~/.cargo/config.toml)" {
		t.Errorf("reason %q", d.Entry.Reason)
	}
	// The legacy config wins when it exists, as in Cargo.
	files["/home/u/.cargo/config"] = "[registries.legacy]\nindex = \"https://legacy.example\"\n"
	got = Discover(context.Background(), fakeHost(nil, files, nil))
	if len(got) != 1 || got[0].Entry.Host != "legacy.example" {
		t.Errorf("legacy config: %+v", got)
	}
	// Unparseable TOML is skipped.
	files["/home/u/.cargo/config"] = "[[[ not toml"
	got = Discover(context.Background(), fakeHost(nil, files, nil))
	if len(got) != 0 {
		t.Errorf("bad TOML: %+v", got)
	}
}

func TestDiscoverApt(t *testing.T) {
	files := map[string]string{
		"/etc/apt/sources.list":               "# comment\ndeb http://deb.example.org/debian bookworm main\ndeb-src [arch=amd64 signed-by=/k.gpg] http://deb.example.org/debian bookworm main\ndeb [ trusted=yes ] https://apt.example.com:8443/repo stable main # trailing\ndeb cdrom:[Disc]/ x main\n",
		"/etc/apt/sources.list.d/extra.list":  "deb mirror+http://mirrors.example.net/list.txt bookworm main\n",
		"/etc/apt/sources.list.d/deb.sources": "Types: deb\nURIs: http://deb.example.org/debian\n  https://security.example.org/debian-security\nSuites: bookworm\n\nTypes: deb\nEnabled: no\nURIs: https://disabled.example.org/\n",
		"/etc/apt/sources.list.d/ignored.txt": "deb https://ignored.example.org/ x main\n",
	}
	got := Discover(context.Background(), fakeHost(nil, files, nil))
	var hosts []string
	for _, d := range got {
		hosts = append(hosts, d.Entry.Host+":"+itoaPorts(d.Entry.Ports))
	}
	want := []string{"deb.example.org:80", "apt.example.com:8443", "security.example.org:443", "mirrors.example.net:80"}
	slices.Sort(want)
	slices.Sort(hosts)
	if !reflect.DeepEqual(hosts, want) {
		t.Errorf("hosts %q, want %q", hosts, want)
	}
	if d := findHost(t, got, "deb.example.org"); d.Source != "/etc/apt/sources.list, /etc/apt/sources.list.d/deb.sources" {
		t.Errorf("source %q", d.Source)
	}
}

func TestDiscoverMergesPortsAndSkipsInternal(t *testing.T) {
	env := []string{
		"PIP_INDEX_URL=https://pkgs.example.com/pypi/simple",
		"npm_config_registry=http://pkgs.example.com/npm/",
		"GOPROXY=https://PKGS.example.com./go,http://127.0.0.1:3000,http://localhost:4873,https://10.1.2.3/,https://192.0.2.7:8443/",
	}
	got := Discover(context.Background(), fakeHost(env, nil, nil))
	if len(got) != 2 {
		t.Fatalf("got %+v", got)
	}
	d := got[0]
	if d.Entry.Host != "pkgs.example.com" || !reflect.DeepEqual(d.Entry.Ports, []int{80, 443}) {
		t.Errorf("merged: %+v", d)
	}
	if n := strings.Count(d.Entry.Reason, "; "); n != 2 {
		t.Errorf("reason %q", d.Entry.Reason)
	}
	if got[1].Entry.Host != "192.0.2.7" || got[1].Entry.Ports[0] != 8443 {
		t.Errorf("public address: %+v", got[1])
	}
	// Discovered entries compile.
	for _, e := range got {
		if _, err := CompileAllowlist([]policy.AllowEntry{e.Entry}); err != nil {
			t.Errorf("entry %+v does not compile: %v", e.Entry, err)
		}
	}
}

func TestSystemHostUntrusted(t *testing.T) {
	dir := t.TempDir()
	h := SystemHost(dir)
	if _, err := h.ReadFile(dir + "/x"); err == nil || !strings.Contains(err.Error(), "untrusted") {
		t.Errorf("read inside the untrusted directory: %v", err)
	}
	if _, err := h.ReadDir(dir); err == nil {
		t.Error("listed the untrusted directory")
	}
	// Home inside the untrusted directory: no tool runs at all.
	h = SystemHost("/")
	if h.Run != nil || h.LookPath != nil {
		t.Error("tools enabled although home is untrusted")
	}
}
