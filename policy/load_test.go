package policy

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"
)

const fullFile = `# every key, none at its default
version = 1
enforcement = "strict"

[sandbox]
uid = 1234
gid = 2345
hostname = "box.example"
isolation = "landlock"

[filesystem]
tooling = "rootfs:/srv/rootfs"
workspace = "/home/dev/project"
protected = [".git/hooks", ".git/config", ".env"]
tmp_size = "1GiB"
home_size = 134217728   # bytes
shm_size = "32M"
sys = true
default_caches = false

[[filesystem.read_only]]
source = "/srv/data"
target = "/data"

[[filesystem.read_only]]
source = "/opt/sdk"

[[filesystem.cache]]
name = "go-mod"
scope = "user"

[[filesystem.cache]]
name = "sccache"
target = "/home/sandbox/.cache/sccache"
size = "3GiB"
env = ["SCCACHE_DIR"]

[resources]
cpus = 1.5
memory = "4GiB"
pids = 256
file_size = "512MiB"
open_files = 1024
timeout = "1h30m"

[network]
mode = "proxy"
discover_registries = false
local_ports = [3000, 8080]

[[network.allow]]
host = "registry.example.com"
reason = "package downloads"

[[network.allow]]
host = "*.cdn.example.net"
ports = [443, 8443]
reason = "package tarballs"

[[network.allow]]
host = "192.0.2.10"
ports = [80]
reason = "the team's mirror"

[[network.allow]]
host = "mirror.example.internal"
ports = [8080]
addresses = ["10.20.0.5"]
reason = "internal mirror, pinned"

[[network.publish]]
host_address = "127.0.0.1"
host_port = 18080
sandbox_port = 8080

[[network.publish]]
host_address = "::"
host_port = 9000
sandbox_port = 9000

[lifecycle]
session_idle = "15m"
session_max = "2h"

[environment]
pass = ["PATH", "TERM", "GOFLAGS", "NPM_CONFIG_*"]

[environment.set]
CI = "1"
GOPROXY = "off"

[seccomp]
profile = "/etc/hutch/seccomp.json"
`

func fullPolicy() *Policy {
	return &Policy{
		Version:     1,
		Enforcement: EnforceStrict,
		Sandbox:     Sandbox{UID: 1234, GID: 2345, Hostname: "box.example", Isolation: IsolationLandlock},
		Filesystem: Filesystem{
			Tooling:   "rootfs:/srv/rootfs",
			Workspace: "/home/dev/project",
			Protected: []string{".git/hooks", ".git/config", ".env"},
			ReadOnly:  []Bind{{Source: "/srv/data", Target: "/data"}, {Source: "/opt/sdk"}},
			TmpSize:   GiB,
			HomeSize:  128 * MiB,
			ShmSize:   32 * MiB,
			Sys:       true,
			Cache: []Cache{{Name: "go-mod", Scope: CacheScopeUser},
				{Name: "sccache", Target: "/home/sandbox/.cache/sccache", Size: 3 * GiB, Env: []string{"SCCACHE_DIR"}}},
		},
		Resources: Resources{
			CPUs:      1.5,
			Memory:    4 * GiB,
			Pids:      256,
			FileSize:  512 * MiB,
			OpenFiles: 1024,
			Timeout:   Duration(90 * time.Minute),
		},
		Network: Network{
			Mode:               NetProxy,
			DiscoverRegistries: false,
			LocalPorts:         []int{3000, 8080},
			Allow: []AllowEntry{
				{Host: "registry.example.com", Ports: []int{443}, Reason: "package downloads"},
				{Host: "*.cdn.example.net", Ports: []int{443, 8443}, Reason: "package tarballs"},
				{Host: "192.0.2.10", Ports: []int{80}, Reason: "the team's mirror"},
				{Host: "mirror.example.internal", Ports: []int{8080}, Addresses: []string{"10.20.0.5"}, Reason: "internal mirror, pinned"},
			},
			Publish: []PublishEntry{{HostAddress: "127.0.0.1", HostPort: 18080, SandboxPort: 8080}, {HostAddress: "::", HostPort: 9000, SandboxPort: 9000}},
		},
		Lifecycle: Lifecycle{
			SessionIdle: Duration(15 * time.Minute),
			SessionMax:  Duration(2 * time.Hour),
		},
		Environment: Environment{
			Pass: []string{"PATH", "TERM", "GOFLAGS", "NPM_CONFIG_*"},
			Set:  map[string]string{"CI": "1", "GOPROXY": "off"},
		},
		Seccomp: Seccomp{Profile: "/etc/hutch/seccomp.json", Ptrace: true},
	}
}

func TestParseFullFile(t *testing.T) {
	got, err := Parse([]byte(fullFile), "policy.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if want := fullPolicy(); !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseKeepsDefaults(t *testing.T) {
	got, err := Parse([]byte(`
[resources]
memory = "8GiB"

[environment.set]
CI = "true"
`), "policy.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Default()
	want.Resources.Memory = 8 * GiB
	want.Environment.Set = map[string]string{"CI": "true"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Parse =\n%+v\nwant\n%+v", got, want)
	}
	// Spot-check concrete defaults, so that a change to Default shows here.
	if got.Resources.Pids != 512 || got.Resources.Timeout.D() != 10*time.Minute ||
		got.Filesystem.TmpSize != 512*MiB || got.Network.Mode != NetProxy ||
		!reflect.DeepEqual(got.Filesystem.Protected, []string{".git/hooks", ".git/config"}) ||
		!reflect.DeepEqual(got.Environment.Pass, []string{"PATH", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ"}) {
		t.Errorf("defaults not kept: %+v", got)
	}

	empty, err := Parse(nil, "empty.toml")
	if err != nil || !reflect.DeepEqual(empty, Default()) {
		t.Errorf("Parse(empty) = %+v, %v; want Default()", empty, err)
	}
}

func TestParseListsReplaceDefaults(t *testing.T) {
	got, err := Parse([]byte("[filesystem]\nprotected = []\n[environment]\npass = [\"PATH\"]\n"), "p.toml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(got.Filesystem.Protected) != 0 || !reflect.DeepEqual(got.Environment.Pass, []string{"PATH"}) {
		t.Errorf("protected = %q, pass = %q; want [], [PATH]", got.Filesystem.Protected, got.Environment.Pass)
	}
}

func TestLoadResolvesRelativePaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "hutch.toml")
	data := `
[filesystem]
tooling = "rootfs:images/alpine"
workspace = "."
[[filesystem.read_only]]
source = "../shared/data/"
target = "/data"
[seccomp]
profile = "seccomp.json"
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := Load(path)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	fs := got.Filesystem
	if fs.Tooling != "rootfs:"+filepath.Join(dir, "images/alpine") ||
		fs.Workspace != dir ||
		fs.ReadOnly[0].Source != filepath.Join(filepath.Dir(dir), "shared/data") ||
		fs.ReadOnly[0].Target != "/data" ||
		got.Seccomp.Profile != filepath.Join(dir, "seccomp.json") {
		t.Errorf("paths not resolved against %s: %+v, seccomp %q", dir, fs, got.Seccomp.Profile)
	}

	_, err = Load(filepath.Join(dir, "missing.toml"))
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "missing.toml") {
		t.Errorf("Load(missing) error = %v; want one naming the file, wrapping ErrNotExist", err)
	}
}

func TestResolvePaths(t *testing.T) {
	p := Default()
	p.Filesystem.Workspace = "proj/"
	p.Filesystem.Tooling = "rootfs:../img"
	p.Filesystem.ReadOnly = []Bind{{Source: "data", Target: "/data"}, {Source: "/abs/./x"}}
	p.Seccomp.Profile = "default"
	if err := p.ResolvePaths("/home/dev"); err != nil {
		t.Fatal(err)
	}
	if p.Filesystem.Workspace != "/home/dev/proj" || p.Filesystem.Tooling != "rootfs:/home/img" ||
		p.Filesystem.ReadOnly[0] != (Bind{Source: "/home/dev/data", Target: "/data"}) ||
		p.Filesystem.ReadOnly[1] != (Bind{Source: "/abs/x"}) || p.Seccomp.Profile != "default" {
		t.Errorf("ResolvePaths: %+v, seccomp %q", p.Filesystem, p.Seccomp.Profile)
	}
	if err := p.Validate(); err != nil {
		t.Errorf("Validate after ResolvePaths: %v", err)
	}

	p = Default()
	p.Seccomp.Profile = "~/seccomp.json"
	err := p.ResolvePaths("/home/dev")
	want := `seccomp.profile: "~/seccomp.json": "~" is not expanded: write the path out in full`
	if err == nil || err.Error() != want {
		t.Errorf("ResolvePaths(~) = %v; want %s", err, want)
	}
}

// TestParseErrors asserts the exact error text: file, line, key and what
// would be valid.
func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{
			"unknown key",
			"version = 1\n\n[filesystem]\ntooling = \"host\"\n\n# size of /tmp\ntmpsize = \"1GiB\"\n",
			`policy.toml:7: unknown key "filesystem.tmpsize" (valid keys in [filesystem]: tooling, workspace, workspace_at, protected, read_only, tmp_size, home_size, shm_size, sys, default_caches, cache, review)`,
		},
		{
			"unknown table",
			"[filesystm]\ntmp_size = \"1GiB\"\n",
			`policy.toml:1: unknown key "filesystm" (valid top-level keys: version, enforcement, sandbox, filesystem, resources, network, lifecycle, environment, seccomp)`,
		},
		{
			"unknown key in an array of tables",
			"[[network.allow]]\nhost = \"a.example.com\"\nreason = \"a\"\n\n[[network.allow]]\nhots = \"b.example.com\"\n",
			`policy.toml:6: unknown key "network.allow[1].hots" (valid keys in [[network.allow]]: host, ports, addresses, reason)`,
		},
		{
			"unknown key in an inline table",
			"[network]\nallow = [{host = \"a.example.com\", reason = \"a\"}, {host = \"b.example.com\", why = \"b\"}]\n",
			`policy.toml:2: unknown key "network.allow[1].why" (valid keys in [[network.allow]]: host, ports, addresses, reason)`,
		},
		{
			"unknown nested table",
			"[sandbox.extra.deep]\nz = 1\n",
			`policy.toml:1: unknown key "sandbox.extra" (valid keys in [sandbox]: uid, gid, hostname, isolation)`,
		},
		{
			"dotted key past a value",
			"sandbox.uid.x = 1\n",
			`policy.toml:1: sandbox.uid: want an integer, found a table`,
		},
		{
			"bad size",
			"[resources]\ncpus = 2\n\n\n\n\n\n\n\n\n\nmemory = \"12XB\"\n",
			`policy.toml:12: resources.memory: bad size "12XB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)`,
		},
		{
			"float size",
			"[filesystem]\nshm_size = 1.5\n",
			`policy.toml:2: filesystem.shm_size: want a size such as "512MiB" (or a whole number of bytes), found a float 1.5`,
		},
		{
			"integer duration",
			"[resources]\ntimeout = 600\n",
			`policy.toml:2: resources.timeout: want a duration string such as "30s", "10m" or "1h30m", found an integer 600`,
		},
		{
			"bad duration",
			"[lifecycle]\nsession_max = \"forever\"\n",
			`policy.toml:2: lifecycle.session_max: bad duration "forever": want a number with a unit ms, s, m or h (e.g. 30s, 10m, 1h30m)`,
		},
		{
			"wrong type",
			"[filesystem]\nsys = \"yes\"\n",
			`policy.toml:2: filesystem.sys: want true or false, found a string`,
		},
		{
			"missing reason",
			"[[network.allow]]\nhost = \"a.example.com\"\nreason = \"a\"\n\n[[network.allow]]\nhost = \"b.example.com\"\n\n[[network.allow]]\nhost = \"example.com\"\nports = [443]\nreason = \"  \"\n",
			`policy.toml:5: network.allow[1].reason: required: say why the sandbox needs b.example.com` + "\n" +
				`policy.toml:11: network.allow[2].reason: required: say why the sandbox needs example.com`,
		},
		{
			"bad port",
			"[[network.allow]]\nhost = \"example.com\"\nports = [443, 70000]\nreason = \"x\"\n",
			`policy.toml:3: network.allow[0].ports[1]: must be between 1 and 65535, not 70000`,
		},
		{
			"bad tooling",
			"[filesystem]\ntooling = \"docker\"\n",
			`policy.toml:2: filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "docker"`,
		},
		{
			"relative protected with ..",
			"[filesystem]\nprotected = [\".git/hooks\", \"../secrets\"]\n",
			`policy.toml:2: filesystem.protected[1]: "../secrets" must stay inside the workspace: ".." is not allowed`,
		},
		{
			"tilde",
			"[filesystem]\nworkspace = \"~/src\"\n",
			`policy.toml:2: filesystem.workspace: "~/src": "~" is not expanded: write the path out in full`,
		},
		{
			"key set twice",
			"version = 1\nversion = 1\n",
			`policy.toml:2: version: set twice: a key may appear only once`,
		},
		{
			"syntax error",
			"[filesystem\n",
			`policy.toml:1: expected ']' to close table name`,
		},
		{
			"problems in file order, defaults last",
			"[lifecycle]\nsession_idle = \"10h\"\n[sandbox]\nuid = 0\n",
			`policy.toml:2: lifecycle.session_idle: 10h is longer than session_max (8h)` + "\n" +
				`policy.toml:4: sandbox.uid: must be between 1 and 65533, not 0: the command must be unprivileged`,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.doc), "policy.toml")
			if err == nil {
				t.Fatalf("Parse succeeded (%+v); want error %s", p, tc.want)
			}
			if p != nil {
				t.Errorf("Parse returned a policy with its error")
			}
			if err.Error() != tc.want {
				t.Errorf("Parse error:\n%s\nwant:\n%s", err, tc.want)
			}
		})
	}
}

func TestParseErrorDetails(t *testing.T) {
	_, err := Parse([]byte("[resources]\n  pids = 0\n"), "dir/p.toml")
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not an *Error", err, err)
	}
	want := Error{File: "dir/p.toml", Line: 2, Column: 3, Key: "resources.pids", Msg: "must be between 1 and 4194304, not 0"}
	if *e != want {
		t.Errorf("error = %+v; want %+v", *e, want)
	}
}

// Load records the file it read, absolute; the format never carries it.
func TestLoadRecordsTheFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "p.toml")
	if err := os.WriteFile(path, []byte("version = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(dir)
	p, err := Load("p.toml")
	if err != nil {
		t.Fatal(err)
	}
	if p.File != path {
		t.Errorf("File = %q, want %q", p.File, path)
	}
	out, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), path) {
		t.Errorf("Marshal writes the file's path:\n%s", out)
	}
	if q, err := Parse(out, "again"); err != nil || q.File != "" {
		t.Errorf("Parse: File %q, err %v", q.File, err)
	}
	if _, err := Parse([]byte("- = 1\n"), "dash.toml"); err == nil {
		t.Error(`the key "-" was accepted`)
	}
}

// Load reads at most MaxFileSize bytes and only from a regular file:
// /dev/zero or a FIFO would otherwise be read forever (or block), and a
// huge file would take the memory of the machine.
func TestLoadRefusesSpecialAndLargeFiles(t *testing.T) {
	dir := t.TempDir()
	big := filepath.Join(dir, "big.toml")
	if err := os.WriteFile(big, []byte("# "+strings.Repeat("x", MaxFileSize)+"\nversion = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo.toml")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, want string }{
		{big, "policy file " + big + " is larger than 1MiB, the most hutch reads"},
		{fifo, "policy file " + fifo + " is a FIFO, not a regular file: pass a file of at most 1MiB"},
		{"/dev/zero", "policy file /dev/zero is a character device, not a regular file: pass a file of at most 1MiB"},
	} {
		done := make(chan error, 1)
		go func() { _, err := Load(tc.path); done <- err }()
		select {
		case err := <-done:
			if err == nil || err.Error() != tc.want {
				t.Errorf("Load(%s) error = %v; want %s", tc.path, err, tc.want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Load(%s) did not return within 10s", tc.path)
		}
	}
}

// Parse lists every problem it finds in one pass, not only the first the
// TOML decoder stops at.
func TestParseListsEveryProblem(t *testing.T) {
	doc := `version = 1
[sandbox]
uid = "1000"
bogus = 1

[filesystem]
sys = "yes"
tmp_size = 1.5

[resources]
memory = "12XB"
timeout = 600
pids = [1]

[[network.allow]]
host = "a.example.com"
reason = "a"
prot = 443

[network]
local_ports = [80, "x"]
`
	want := `policy.toml:3: sandbox.uid: want an integer, found a string
policy.toml:4: unknown key "sandbox.bogus" (valid keys in [sandbox]: uid, gid, hostname, isolation)
policy.toml:7: filesystem.sys: want true or false, found a string
policy.toml:8: filesystem.tmp_size: want a size such as "512MiB" (or a whole number of bytes), found a float 1.5
policy.toml:11: resources.memory: bad size "12XB": want a number with a unit B, KiB, MiB, GiB or TiB (e.g. 512MiB)
policy.toml:12: resources.timeout: want a duration string such as "30s", "10m" or "1h30m", found an integer 600
policy.toml:13: resources.pids: want an integer, found an array
policy.toml:18: unknown key "network.allow[0].prot" (valid keys in [[network.allow]]: host, ports, addresses, reason)
policy.toml:21: network.local_ports[1]: want an integer, found a string`
	_, err := Parse([]byte(doc), "policy.toml")
	if err == nil || err.Error() != want {
		t.Errorf("Parse error:\n%v\nwant:\n%s", err, want)
	}
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) || len(list.Unwrap()) != 9 {
		t.Errorf("error is not a list of 9 *Error: %T", err)
	}
}

func TestParseErrorsOfShape(t *testing.T) {
	for _, tc := range []struct{ name, doc, want string }{
		{"non-ASCII bare key", "ключ = 1\n",
			`policy.toml:1: invalid character at start of key: U+043A 'к': a bare key has only ASCII letters, digits, "_" and "-"; quote any other: "ключ" = ...`},
		{"duration overflow", "[resources]\ntimeout = \"9999999999h\"\n",
			`policy.toml:2: resources.timeout: bad duration "9999999999h": too large: durations go up to 2562047h (about 292 years)`},
		{"table for an array of tables", "[network.allow]\nhost = \"a.example.com\"\n",
			`policy.toml:1: network.allow: want an array of tables, found a table: write [[network.allow]] for each entry`},
		{"array of tables for a table", "[[sandbox]]\nuid = 5\n",
			`policy.toml:1: sandbox: want a table, found an array of tables`},
		{"table for a value", "[resources.cpus]\nx = 1\n",
			`policy.toml:1: resources.cpus: want a number, found a table`},
		{"inline table element", "[network]\nallow = [\"a.example.com\"]\n",
			`policy.toml:2: network.allow[0]: want a table, found a string`},
		{"environment.set value", "[environment.set]\nA = 1\n",
			`policy.toml:2: environment.set.A: want a string, found an integer`},
		{"the key -", "- = 1\n",
			`policy.toml:1: unknown key "-" (valid top-level keys: version, enforcement, sandbox, filesystem, resources, network, lifecycle, environment, seccomp)`},
		{"table defined twice", "[sandbox]\nuid = 5\n[sandbox]\ngid = 5\n",
			`policy.toml:3: sandbox: set twice: a key may appear only once`},
		{"problems before a syntax error", "[sandbox]\nuid = \"x\"\n[filesystem\n",
			"policy.toml:2: sandbox.uid: want an integer, found a string\npolicy.toml:3: expected ']' to close table name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.doc), "policy.toml")
			if err == nil || err.Error() != tc.want {
				t.Errorf("Parse error:\n%v\nwant:\n%s", err, tc.want)
			}
		})
	}
}

// manyEntries is a policy with n [[network.allow]] and n
// [[filesystem.read_only]] entries; every allow entry lacks its reason
// when bad, so that each one is an error to locate.
func manyEntries(n int, bad bool) []byte {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "[[network.allow]]\nhost = \"h%d.example.com\"\n", i)
		if !bad {
			b.WriteString("reason = \"r\"\n")
		}
		fmt.Fprintf(&b, "\n[[filesystem.read_only]]\nsource = \"/srv/d%d\"\n\n", i)
	}
	return []byte(b.String())
}

// The walk turns offsets into lines in one pass over the document, however
// many keys and errors it has: a position costs no rescan from the start
// (go-toml's Parser.Shape does that; 20,000 entries took 24 s).
func TestParseLinear(t *testing.T) {
	for _, bad := range []bool{false, true} {
		data := manyEntries(20000, bad)
		d := scan(data, "policy.toml")
		if d.lines.scanned > len(data) {
			t.Errorf("bad=%v: the walk examined %d bytes of a %d-byte document: positions are not found in one pass", bad, d.lines.scanned, len(data))
		}
		p, err := Parse(data, "policy.toml")
		if bad {
			var list interface{ Unwrap() []error }
			if !errors.As(err, &list) || len(list.Unwrap()) != 20000 {
				t.Fatalf("bad: want 20000 errors, got %T", err)
			}
			if first := list.Unwrap()[0].Error(); first != "policy.toml:1: network.allow[0].reason: required: say why the sandbox needs h0.example.com" {
				t.Errorf("first error = %s", first)
			}
		} else if err != nil || len(p.Network.Allow) != 20000 || len(p.Filesystem.ReadOnly) != 20000 {
			t.Fatalf("Parse: %v", err)
		}
	}
}

func BenchmarkParseManyEntries(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		data := manyEntries(n, false)
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for b.Loop() {
				if _, err := Parse(data, "policy.toml"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
