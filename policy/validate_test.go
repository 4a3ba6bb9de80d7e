package policy

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDefaultIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatalf("Default().Validate() = %v", err)
	}
}

func TestValidateFillsDefaultPorts(t *testing.T) {
	p := Default()
	p.Network.Allow = []AllowEntry{{Host: "example.com", Reason: "docs"}}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := p.Network.Allow[0].Ports; !reflect.DeepEqual(got, []int{443}) {
		t.Errorf("ports = %v; want [443]", got)
	}
}

// TestValidate changes one thing of Default() per case and asserts the
// exact message.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(p *Policy)
		want   string // "" means valid
	}{
		{"version", func(p *Policy) { p.Version = 2 }, `version: must be 1 (the only policy format so far), not 2`},
		{"enforcement", func(p *Policy) { p.Enforcement = "lax" }, `enforcement: must be "best-effort" or "strict", not "lax"`},
		{"uid 0", func(p *Policy) { p.Sandbox.UID = 0 }, `sandbox.uid: must be between 1 and 65533, not 0: the command must be unprivileged`},
		{"gid nobody", func(p *Policy) { p.Sandbox.GID = 65534 }, `sandbox.gid: must be between 1 and 65533, not 65534`},
		{"uid max", func(p *Policy) { p.Sandbox.UID = 65533 }, ``},
		{"isolation landlock", func(p *Policy) { p.Sandbox.Isolation = IsolationLandlock }, ``},
		{"isolation auto", func(p *Policy) { p.Sandbox.Isolation = IsolationAuto }, ``},
		{"isolation bad", func(p *Policy) { p.Sandbox.Isolation = "gvisor" }, `sandbox.isolation: must be "auto", "namespaces" or "landlock", not "gvisor"`},
		{"hostname dots", func(p *Policy) { p.Sandbox.Hostname = "build-1.ci.example" }, ``},
		{"hostname hyphen", func(p *Policy) { p.Sandbox.Hostname = "-box" }, `sandbox.hostname: "-box" is not a valid hostname: want at most 64 characters of dot-separated labels, each 1 to 63 letters, digits and hyphens, not starting or ending with a hyphen`},
		{"hostname long", func(p *Policy) { p.Sandbox.Hostname = strings.Repeat("a", 30) + "." + strings.Repeat("b", 34) }, `sandbox.hostname: "` + strings.Repeat("a", 30) + "." + strings.Repeat("b", 34) + `" is not a valid hostname: want at most 64 characters of dot-separated labels, each 1 to 63 letters, digits and hyphens, not starting or ending with a hyphen`},
		{"rootfs", func(p *Policy) { p.Filesystem.Tooling = "rootfs:/srv/root" }, ``},
		{"rootfs relative", func(p *Policy) { p.Filesystem.Tooling = "rootfs:srv" }, `filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "rootfs:srv"`},
		{"image empty", func(p *Policy) { p.Filesystem.Tooling = "image:" }, `filesystem.tooling: "image:" must be followed by an image reference (REGISTRY/REPOSITORY:TAG or @sha256:HEX), not "image:"`},
		{"rootfs empty", func(p *Policy) { p.Filesystem.Tooling = "rootfs:" }, `filesystem.tooling: must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not "rootfs:"`},
		{"workspace relative", func(p *Policy) { p.Filesystem.Workspace = "src" }, `filesystem.workspace: must be an absolute path (or empty for the current directory), not "src"`},
		{"protected empty", func(p *Policy) { p.Filesystem.Protected = []string{""} }, `filesystem.protected[0]: "" would protect the whole workspace: want a path inside it, such as ".git/hooks"`},
		{"protected dot", func(p *Policy) { p.Filesystem.Protected = []string{".git", "."} }, `filesystem.protected[1]: "." would protect the whole workspace: want a path inside it, such as ".git/hooks"`},
		{"protected absolute", func(p *Policy) { p.Filesystem.Protected = []string{"/etc"} }, `filesystem.protected[0]: "/etc" must be relative to the workspace, such as ".git/hooks"`},
		{"protected inner ..", func(p *Policy) { p.Filesystem.Protected = []string{"a/../b"} }, `filesystem.protected[0]: "a/../b" must stay inside the workspace: ".." is not allowed`},
		{"protected unclean", func(p *Policy) { p.Filesystem.Protected = []string{"./.git/hooks/"} }, `filesystem.protected[0]: "./.git/hooks/" is not clean: write ".git/hooks"`},
		{"read_only ok", func(p *Policy) {
			p.Filesystem.ReadOnly = []Bind{{Source: "/srv/data"}, {Source: "/x", Target: "/tmp/x"}, {Source: "/y", Target: "/home/sandbox/.cache"}}
		}, ``},
		{"read_only relative", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "data", Target: "/data"}} }, `filesystem.read_only[0].source: must be an absolute host path, not "data"`},
		{"read_only target relative", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/data", Target: "data"}} }, `filesystem.read_only[0].target: must be an absolute path inside the sandbox (or empty for the source's path), not "data"`},
		{"read_only root", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/srv", Target: "/"}} }, `filesystem.read_only[0].target: cannot bind over /: the root is hutch's`},
		{"read_only proc", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/proc/cpuinfo"}} }, `filesystem.read_only[0].source: cannot bind over /proc/cpuinfo: /proc and everything beneath it are hutch's`},
		{"cache ok", func(p *Policy) {
			p.Filesystem.Cache = []Cache{{Name: "go-mod", Scope: CacheScopeUser}, {Name: "sccache", Target: "/home/sandbox/.cache/sccache", Size: GiB, Env: []string{"SCCACHE_DIR"}}, {Name: "data_1", Target: "/cache/data"}}
		}, ``},
		{"cache bad name", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "Go.Build", Target: "/home/sandbox/x"}} }, `filesystem.cache[0].name: "Go.Build" is not a cache name: want 1 to 64 lower-case letters, digits, '-' and '_', starting with a letter or digit`},
		{"cache no name", func(p *Policy) { p.Filesystem.Cache = []Cache{{Target: "/home/sandbox/x"}} }, `filesystem.cache[0].name: required: name the cache (lower-case letters, digits, '-' and '_'), e.g. "sccache"`},
		{"cache twice", func(p *Policy) {
			p.Filesystem.Cache = []Cache{{Name: "x", Target: "/home/sandbox/x"}, {Name: "x", Target: "/home/sandbox/y"}}
		}, `filesystem.cache[1].name: "x" is named twice (filesystem.cache[0] has it too)`},
		{"cache unknown scope", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "npm", Scope: "global"}} }, `filesystem.cache[0].scope: unknown scope "global": want "workspace" (the default: one cache per workspace) or "user" (shared by every workspace of this user)`},
		{"cache relative target", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x", Target: ".cache/x"}} }, `filesystem.cache[0].target: must be an absolute path inside the sandbox, such as "/home/sandbox/.cache/x", not ".cache/x"`},
		{"cache no target", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x"}} }, `filesystem.cache[0].target: required: the absolute path inside where the cache is mounted, e.g. "/home/sandbox/.cache/x" (only the built-in caches go-build, go-mod, npm, yarn, pnpm, pip, uv, cargo-registry, cargo-git, maven, gradle, ccache have a default target)`},
		{"cache in workspace", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x", Target: "/workspace/.cache"}} }, `filesystem.cache[0].target: cannot mount a cache at /workspace/.cache: /workspace and everything beneath it are hutch's or the tooling tree's (read-only)`},
		{"cache in tooling", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x", Target: "/usr/local/cache"}} }, `filesystem.cache[0].target: cannot mount a cache at /usr/local/cache: /usr and everything beneath it are hutch's or the tooling tree's (read-only)`},
		{"cache over home", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x", Target: "/home"}} }, `filesystem.cache[0].target: cannot mount a cache at /home: /home/sandbox is a tmpfs of its own (a cache beneath it is fine, e.g. /home/sandbox/.cache/NAME)`},
		{"cache unclean", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "x", Target: "/home/sandbox/x/"}} }, `filesystem.cache[0].target: "/home/sandbox/x/" is not clean: write "/home/sandbox/x"`},
		{"cache nested", func(p *Policy) {
			p.Filesystem.Cache = []Cache{{Name: "x", Target: "/home/sandbox/.cache"}, {Name: "go-build"}}
		}, `filesystem.cache[1].target: /home/sandbox/.cache/go-build overlaps /home/sandbox/.cache, the target of filesystem.cache[0]: caches may not be nested`},
		{"cache over read_only", func(p *Policy) {
			p.Filesystem.ReadOnly = []Bind{{Source: "/srv/d", Target: "/home/sandbox/.m2/repository/org"}}
			p.Filesystem.Cache = []Cache{{Name: "maven"}}
		}, `filesystem.cache[0].target: /home/sandbox/.m2/repository overlaps /home/sandbox/.m2/repository/org, the target of filesystem.read_only[0]`},
		{"cache small", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "pip", Size: 1000}} }, `filesystem.cache[0].size: must be at least 1MiB (or 0 for the default), not 1000B`},
		{"cache env", func(p *Policy) { p.Filesystem.Cache = []Cache{{Name: "pip", Env: []string{"HOME", "9X"}}} }, `filesystem.cache[0].env[0]: hutch sets HOME itself (to /home/sandbox)` + "\n" + `filesystem.cache[0].env[1]: "9X" is not a variable name: want letters, digits and underscores, not starting with a digit`},
		{"read_only workspace", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/a", Target: "/workspace/vendor"}} }, `filesystem.read_only[0].target: cannot bind over /workspace/vendor: /workspace and everything beneath it are hutch's`},
		{"read_only dev via ..", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/a", Target: "/x/../dev"}} }, `filesystem.read_only[0].target: cannot bind over /x/../dev: /dev and everything beneath it are hutch's`},
		{"read_only tmp", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/a", Target: "/tmp"}} }, `filesystem.read_only[0].target: cannot bind over /tmp: /tmp is a tmpfs of its own (binds beneath it are fine)`},
		{"read_only home parent", func(p *Policy) { p.Filesystem.ReadOnly = []Bind{{Source: "/a", Target: "/home"}} }, `filesystem.read_only[0].target: cannot bind over /home: /home/sandbox is a tmpfs of its own (binds beneath it are fine)`},
		{"tmp size", func(p *Policy) { p.Filesystem.TmpSize = 512 * KiB }, `filesystem.tmp_size: must be at least 1MiB, not 512KiB`},
		{"shm size", func(p *Policy) { p.Filesystem.ShmSize = 0 }, `filesystem.shm_size: must be at least 1MiB, not 0B`},
		{"cpus 0", func(p *Policy) { p.Resources.CPUs = 0 }, `resources.cpus: must be more than 0 and at most 1024, not 0`},
		{"cpus many", func(p *Policy) { p.Resources.CPUs = 2048 }, `resources.cpus: must be more than 0 and at most 1024, not 2048`},
		{"cpus half", func(p *Policy) { p.Resources.CPUs = 0.5 }, ``},
		{"memory", func(p *Policy) { p.Resources.Memory = 8 * MiB }, `resources.memory: must be at least 16MiB, not 8MiB`},
		{"pids", func(p *Policy) { p.Resources.Pids = 0 }, `resources.pids: must be between 1 and 4194304, not 0`},
		{"file size", func(p *Policy) { p.Resources.FileSize = 1000 }, `resources.file_size: must be at least 1MiB, not 1000B`},
		{"open files", func(p *Policy) { p.Resources.OpenFiles = 8 }, `resources.open_files: must be between 16 and 1048576, not 8`},
		{"timeout", func(p *Policy) { p.Resources.Timeout = 0 }, `resources.timeout: must be at least 1ms, e.g. 30s or 10m, not 0s`},
		{"timeout below 1ms", func(p *Policy) { p.Resources.Timeout = Duration(999 * time.Microsecond) }, `resources.timeout: must be at least 1ms, e.g. 30s or 10m, not 999µs`},
		{"network mode", func(p *Policy) { p.Network.Mode = "host" }, `network.mode: must be "proxy" or "none", not "host"`},
		{"allow good", func(p *Policy) {
			p.Network.Allow = []AllowEntry{
				{Host: "example.com", Reason: "r"},
				{Host: "*.example.com", Reason: "r"},
				{Host: "localhost", Reason: "r"},
				{Host: "10.0.0.1", Reason: "r"},
				{Host: "2001:db8::1", Ports: []int{1, 65535}, Reason: "r"},
			}
		}, ``},
		{"allow no host", func(p *Policy) { p.Network.Allow = []AllowEntry{{Reason: "r"}} }, `network.allow[0].host: required: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"allow wildcard tld", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "*.com", Reason: "r"}} }, `network.allow[0].host: "*.com" is not a valid wildcard: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"allow inner wildcard", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "a*.example.com", Reason: "r"}} }, `network.allow[0].host: "a*.example.com" is not a valid host: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"allow host:port", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "example.com:8080", Reason: "r"}} }, `network.allow[0].host: "example.com:8080": put the port in ports, not in host`},
		{"allow brackets", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "[::1]", Reason: "r"}} }, `network.allow[0].host: "[::1]": write IPv6 addresses without brackets`},
		{"allow cidr", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "10.0.0.0/8", Reason: "r"}} }, `network.allow[0].host: "10.0.0.0/8": address ranges are not supported; want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"allow numeric tld", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "10.1", Reason: "r"}} }, `network.allow[0].host: "10.1" is not a valid host: want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`},
		{"allow port 0", func(p *Policy) { p.Network.Allow = []AllowEntry{{Host: "example.com", Ports: []int{0}, Reason: "r"}} }, `network.allow[0].ports[0]: must be between 1 and 65535, not 0`},
		{"allow no reason", func(p *Policy) {
			p.Network.Allow = []AllowEntry{{Host: "a.example.com", Reason: "r"}, {Host: "example.com", Ports: []int{443}}}
		}, `network.allow[1].reason: required: say why the sandbox needs example.com`},
		{"local ports", func(p *Policy) { p.Network.LocalPorts = []int{8080, 70000} }, `network.local_ports[1]: must be between 1 and 65535, not 70000`},
		{"idle", func(p *Policy) { p.Lifecycle.SessionIdle = 0 }, `lifecycle.session_idle: must be more than 0, not 0s`},
		{"max", func(p *Policy) { p.Lifecycle.SessionMax = Duration(-time.Minute) }, `lifecycle.session_max: must be more than 0, not -1m`},
		{"idle > max", func(p *Policy) { p.Lifecycle.SessionIdle = Duration(9 * time.Hour) }, `lifecycle.session_idle: 9h is longer than session_max (8h)`},
		{"idle = max", func(p *Policy) { p.Lifecycle.SessionIdle = p.Lifecycle.SessionMax }, ``},
		{"pass star", func(p *Policy) { p.Environment.Pass = []string{"*"} }, `environment.pass[0]: "*" is not a variable name: want letters, digits and underscores, not starting with a digit, optionally ending in "*" to pass every variable with that prefix`},
		{"pass digit", func(p *Policy) { p.Environment.Pass = []string{"PATH", "9LIVES"} }, `environment.pass[1]: "9LIVES" is not a variable name: want letters, digits and underscores, not starting with a digit, optionally ending in "*" to pass every variable with that prefix`},
		{"pass prefix", func(p *Policy) { p.Environment.Pass = []string{"_X", "npm_config_*"} }, ``},
		{"set star", func(p *Policy) { p.Environment.Set = map[string]string{"A*": "1"} }, `environment.set."A*": "A*" is not a variable name: want letters, digits and underscores, not starting with a digit`},
		{"set nul", func(p *Policy) { p.Environment.Set = map[string]string{"A": "x\x00y"} }, `environment.set.A: the value contains a NUL byte`},
		{"set HOME", func(p *Policy) { p.Environment.Set = map[string]string{"HOME": "/tmp", "CI": "1"} }, `environment.set.HOME: hutch sets HOME itself (to /home/sandbox), after environment.set; --env HOME=... overrides it for one run`},
		{"seccomp default", func(p *Policy) { p.Seccomp.Profile = "default" }, ``},
		{"seccomp relative", func(p *Policy) { p.Seccomp.Profile = "profile.json" }, `seccomp.profile: must be "default" (hutch's built-in profile) or the absolute path of a seccomp profile, not "profile.json"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Default()
			tc.change(p)
			err := p.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tc.want {
				t.Errorf("Validate:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestValidateReportsAll(t *testing.T) {
	p := Default()
	p.Version = 0
	p.Resources.Pids = 0
	p.Network.Mode = ""
	err := p.Validate()
	if err == nil {
		t.Fatal("Validate = nil")
	}
	var list interface{ Unwrap() []error }
	if !errors.As(err, &list) || len(list.Unwrap()) != 3 {
		t.Fatalf("Validate = %v; want 3 joined errors", err)
	}
	for i, key := range []string{"version", "resources.pids", "network.mode"} {
		var e *Error
		if !errors.As(list.Unwrap()[i], &e) || e.Key != key || e.File != "" || e.Line != 0 {
			t.Errorf("error %d = %#v; want an *Error about %s", i, list.Unwrap()[i], key)
		}
	}
}
