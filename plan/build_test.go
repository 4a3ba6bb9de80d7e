package plan

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/gitrepos"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

// debianFS is a merged-/usr host's tree as the planner reads it.
var debianFS = mounts.MemFS{
	"/usr/bin/sh":                {File: true},
	"/bin":                       {Link: "usr/bin"},
	"/lib":                       {Link: "usr/lib"},
	"/lib64":                     {Link: "usr/lib64"},
	"/sbin":                      {Link: "usr/sbin"},
	"/opt":                       {},
	"/etc/ld.so.cache":           {File: true},
	"/etc/ssl/certs/ca.pem":      {File: true},
	"/etc/passwd":                {File: true},
	"/etc/shadow":                {File: true},
	"/etc/python3.11/site.py":    {File: true},
	"/etc/ssh/sshd_config":       {File: true},
	"/tmp":                       {},
	"/dev/null":                  {File: true},
	"/home/u/proj/main.go":       {File: true},
	"/srv/rootfs/usr/bin/sh":     {File: true},
	"/srv/rootfs/etc/os-release": {File: true},
	"/srv/rootfs/proc":           {},
}

func host() *Host {
	return &Host{
		Workspace:   "/home/u/proj",
		FS:          debianFS,
		Protected:   []string{".git/hooks", ".git/config"},
		Protection:  &mounts.Protection{Steps: []mounts.Step{{Kind: mounts.Protect, Target: "/workspace/.git/config", NoSymlinks: true}}, Missing: []string{".git/hooks"}},
		Repos:       gitrepos.Scan{Repos: []gitrepos.Repo{{Dot: ".git", GitDir: ".git"}}, Dirs: 3, Complete: true},
		LandlockABI: 7,
		Notify:      true,
		Cgroup:      CgroupFacts{Backend: cgroup.BackendRlimit, Reason: "no delegated cgroup v2 subtree"},
		Env:         []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8", "AWS_SECRET_ACCESS_KEY=x", "HOME=/home/u"},
	}
}

func step(sb *Sandbox, kind mounts.Kind, target string) *mounts.Step {
	for i := range sb.Mounts.Steps {
		if s := &sb.Mounts.Steps[i]; s.Kind == kind && s.Target == target {
			return s
		}
	}
	return nil
}

func envOf(env []string, k string) (string, bool) {
	for _, kv := range env {
		if n, v, _ := strings.Cut(kv, "="); n == k {
			return v, true
		}
	}
	return "", false
}

func TestBuild(t *testing.T) {
	for _, c := range []struct {
		name   string
		policy func(*policy.Policy)
		host   func(*Host)
		req    *Request
		check  func(t *testing.T, sb *Sandbox)
		err    string
	}{
		{
			name: "default policy, rlimit host",
			req:  &Request{Argv: []string{"go", "test"}, Cwd: "sub"},
			check: func(t *testing.T, sb *Sandbox) {
				if s := step(sb, mounts.Bind, "/usr"); s == nil || !s.ReadOnly {
					t.Errorf("/usr is not a read-only bind: %+v", s)
				}
				if s := step(sb, mounts.Symlink, "/bin"); s == nil || s.Data != "usr/bin" {
					t.Errorf("/bin is not the host's symlink: %+v", s)
				}
				if s := step(sb, mounts.Bind, "/workspace"); s == nil || s.ReadOnly || s.Source != "/home/u/proj" {
					t.Errorf("workspace: %+v", s)
				}
				if s := step(sb, mounts.Bind, "/etc"); s == nil || !s.ReadOnly || s.Source != "/etc" {
					t.Errorf("/etc is not the host's, read-only: %+v", s)
				}
				if step(sb, mounts.MaskFile, "/etc/shadow") == nil || step(sb, mounts.Cover, "/etc/passwd") == nil {
					t.Error("/etc: shadow masked, passwd synthesized over the host's")
				}
				if step(sb, mounts.Protect, "/workspace/.git/config") == nil || !slices.Equal(sb.Workspace.Missing, []string{".git/hooks"}) || len(sb.Workspace.Repos.Repos) != 1 {
					t.Errorf("protection not in the plan: %+v", sb.Workspace)
				}
				if sb.Mounts.Stage != "/tmp" {
					t.Errorf("stage %q", sb.Mounts.Stage)
				}
				r := sb.Landlock.Rules
				if !slices.Contains(r.ReadExec, "/usr") || slices.Contains(r.ReadExec, "/etc/python3.11") {
					t.Errorf("ReadExec %v: the tooling, not /etc", r.ReadExec)
				}
				if !slices.Equal(r.ReadWrite, []string{"/workspace", "/tmp", "/home/sandbox", "/dev/shm"}) {
					t.Errorf("ReadWrite %v", r.ReadWrite)
				}
				if r.TCP || len(r.ConnectTCP) != 0 || len(r.BindTCP) != 0 {
					t.Errorf("TCP restricted in a sandbox with its own network namespace: %v %v %v", r.TCP, r.ConnectTCP, r.BindTCP)
				}
				for _, d := range mounts.Devices {
					if !slices.Contains(r.ReadWriteFiles, d) || step(sb, mounts.Bind, d) == nil {
						t.Errorf("device %s is not both bound and granted", d)
					}
				}
				if sb.Resources.Cgroup != nil || sb.Resources.Backend != cgroup.BackendRlimit {
					t.Errorf("resources on an rlimit host: %+v", sb.Resources)
				}
				var res []int
				for _, rl := range sb.Resources.Fallback {
					res = append(res, rl.Resource)
				}
				if !slices.Equal(res, []int{unix.RLIMIT_NPROC}) {
					t.Errorf("fallback rlimits %v", sb.Resources.Fallback)
				}
				// Memory is the watchdog's: no per-process rlimit fits the runtimes.
				if w := sb.Resources.Watchdog; w == nil || w.MemoryBytes != 2<<30 || w.Nproc != 512+NprocMarginRun ||
					w.PerNamespace || w.Interval.D() != WatchInterval || w.IdleInterval.D() != WatchIdleInterval {
					t.Errorf("watchdog %+v", w)
				}
				if len(sb.Warnings) != 1 || sb.Warnings[0].Subject != "rlimit-fallback" || !strings.Contains(sb.Warnings[0].Message, "no delegated") {
					t.Errorf("warnings %+v", sb.Warnings)
				}
				if !sb.Process.Spawner || !sb.Seccomp.WatchNetwork || sb.Seccomp.Profile != "default" {
					t.Errorf("process %+v seccomp %+v", sb.Process, sb.Seccomp)
				}
				cmd := sb.Command
				if cmd == nil || cmd.Cwd != "/workspace/sub" || !slices.Equal(cmd.Argv, []string{"go", "test"}) {
					t.Fatalf("command %+v", cmd)
				}
				if _, ok := envOf(cmd.Env, "AWS_SECRET_ACCESS_KEY"); ok {
					t.Error("a secret passed into the environment")
				}
				if v, _ := envOf(cmd.Env, "HOME"); v != "/home/sandbox" {
					t.Errorf("HOME=%q", v)
				}
				if v, _ := envOf(cmd.Env, "https_proxy"); v != "http://127.0.0.1:3128" {
					t.Errorf("https_proxy=%q", v)
				}
				if !slices.IsSorted(cmd.Env) {
					t.Error("environment not sorted")
				}
			},
		},
		{
			name:   "no network",
			policy: func(p *policy.Policy) { p.Network.Mode = policy.NetNone },
			req:    &Request{Argv: []string{"true"}},
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Network.Proxy != nil || sb.Network.DiscoverRegistries {
					t.Errorf("network none: %+v, connect %v", sb.Network, sb.Landlock.Rules.ConnectTCP)
				}
				if _, ok := envOf(sb.Command.Env, "HTTPS_PROXY"); ok {
					t.Error("proxy variables without a proxy")
				}
			},
		},
		{
			name: "published ports",
			policy: func(p *policy.Policy) {
				p.Network.Publish = []policy.PublishEntry{{HostPort: 18080, SandboxPort: 8080}, {HostAddress: "0.0.0.0", HostPort: 9000, SandboxPort: 3000}}
			},
			check: func(t *testing.T, sb *Sandbox) {
				want := []Publish{{"127.0.0.1", 18080, 8080}, {"0.0.0.0", 9000, 3000}}
				if !slices.Equal(sb.Network.Publish, want) {
					t.Errorf("publish %+v, want %+v", sb.Network.Publish, want)
				}
				// TCP is the network namespace's: no port rules.
				if r := sb.Landlock.Rules; r.TCP || len(r.BindTCP) != 0 || len(r.ConnectTCP) != 0 {
					t.Errorf("TCP rules %v %v %v", r.TCP, r.ConnectTCP, r.BindTCP)
				}
			},
		},
		{
			name: "delegated cgroup, a session",
			host: func(h *Host) { h.Cgroup = CgroupFacts{Backend: cgroup.BackendV2Delegated, Reason: "delegated"} },
			check: func(t *testing.T, sb *Sandbox) {
				cg := sb.Resources.Cgroup
				if cg == nil || cg.Pids != 512+PidsMarginSession || cg.MemoryBytes != 2<<30 || cg.CPUs != 2 || !sb.Resources.Shared {
					t.Errorf("cgroup limits %+v", cg)
				}
				// Ready for a cgroup that fails to come up: a session's
				// commands have two user namespaces.
				if w := sb.Resources.Watchdog; w == nil || w.Nproc != 512+NprocMarginSession || !w.PerNamespace {
					t.Errorf("fallback watchdog %+v", w)
				}
				if len(sb.Warnings) != 0 {
					t.Errorf("warnings with a cgroup: %+v", sb.Warnings)
				}
			},
		},
		{
			name:   "one command, exact pids",
			policy: func(p *policy.Policy) { p.Resources.Pids = 1 },
			host:   func(h *Host) { h.Cgroup = CgroupFacts{Backend: cgroup.BackendV1Root, Reason: "root"} },
			req:    &Request{Argv: []string{"true"}},
			check: func(t *testing.T, sb *Sandbox) {
				if cg := sb.Resources.Cgroup; cg == nil || cg.Pids != 1+PidsMarginRun || sb.Resources.Shared || sb.Resources.PidsMargin != PidsMarginRun {
					t.Errorf("resources %+v", sb.Resources)
				}
			},
		},
		{
			name:   "no memory or pids limit, nothing to watch",
			policy: func(p *policy.Policy) { p.Resources.Memory, p.Resources.Pids = 0, 0 },
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Resources.Watchdog != nil || len(sb.Resources.Fallback) != 0 {
					t.Errorf("watchdog %+v fallback %v", sb.Resources.Watchdog, sb.Resources.Fallback)
				}
			},
		},
		{
			name:   "rlimit nproc margin",
			policy: func(p *policy.Policy) { p.Resources.Pids = 1 },
			req:    &Request{Argv: []string{"true"}},
			check: func(t *testing.T, sb *Sandbox) {
				for _, rl := range sb.Resources.Fallback {
					if rl.Resource == unix.RLIMIT_NPROC && (rl.Cur != 1+NprocMarginRun || rl.Max != rl.Cur) {
						t.Errorf("RLIMIT_NPROC %+v", rl)
					}
				}
			},
		},
		{
			name:   "strict without a cgroup",
			policy: func(p *policy.Policy) { p.Enforcement = policy.EnforceStrict },
			err:    `enforcement = "strict": resources.memory, resources.pids and resources.cpus cannot be enforced here`,
		},
		{
			name:   "custom seccomp profile",
			policy: func(p *policy.Policy) { p.Seccomp.Profile = "/etc/hutch/profile.json" },
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Process.Spawner || !strings.Contains(sb.Process.NoSpawner, "custom seccomp profile") || sb.Seccomp.Profile != "/etc/hutch/profile.json" {
					t.Errorf("process %+v seccomp %+v", sb.Process, sb.Seccomp)
				}
			},
		},
		{
			name: "old Landlock",
			host: func(h *Host) { h.LandlockABI = 2 },
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Process.Spawner || !strings.Contains(sb.Process.NoSpawner, "ABI 6") {
					t.Errorf("spawner on ABI 2: %+v", sb.Process)
				}
				var w *Warning
				for i := range sb.Warnings {
					if sb.Warnings[i].Subject == "landlock-abi-2" {
						w = &sb.Warnings[i]
					}
				}
				if w == nil || !strings.Contains(w.Message, "truncation") || strings.Contains(w.Message, "TCP") {
					t.Errorf("landlock warning %+v", sb.Warnings)
				}
			},
		},
		{
			name: "no notification",
			host: func(h *Host) { h.Notify, h.NotifyUnavailable = false, "libseccomp API level 3" },
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Seccomp.Notify || sb.Seccomp.WatchNetwork || sb.Seccomp.NotifyUnavailable == "" {
					t.Errorf("seccomp %+v", sb.Seccomp)
				}
			},
		},
		{
			name: "spawner turned off",
			host: func(h *Host) { h.NoSpawner = "HUTCH_NO_SPAWNER is set" },
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Process.Spawner || sb.Process.NoSpawner != "HUTCH_NO_SPAWNER is set" {
					t.Errorf("process %+v", sb.Process)
				}
			},
		},
		{
			name:   "rootfs tooling",
			policy: func(p *policy.Policy) { p.Filesystem.Tooling = "rootfs:/srv/rootfs" },
			check: func(t *testing.T, sb *Sandbox) {
				if s := step(sb, mounts.Bind, "/usr"); s == nil || s.Source != "/srv/rootfs/usr" {
					t.Errorf("/usr from the rootfs: %+v", s)
				}
				if s := step(sb, mounts.Bind, "/etc"); step(sb, mounts.Bind, "/proc") != nil || s == nil || s.Source != "/srv/rootfs/etc" {
					t.Errorf("rootfs: /proc provided by hutch, /etc from the rootfs: %+v", s)
				}
			},
		},
		{
			name: "image tooling",
			policy: func(p *policy.Policy) {
				p.Filesystem.Tooling = "image:example.com/tools:1"
				p.Environment.Set = map[string]string{"GOFLAGS": "-mod=mod"}
			},
			host: func(h *Host) {
				h.Image = &ImageFacts{Ref: "example.com/tools:1", Digest: "sha256:ab", Root: "/srv/rootfs",
					Env: []string{"PATH=/opt/go/bin:/usr/bin", "GOFLAGS=-mod=vendor", "HOME=/root", "TOOL=1"}}
			},
			req: &Request{Argv: []string{"true"}},
			check: func(t *testing.T, sb *Sandbox) {
				if s := step(sb, mounts.Bind, "/usr"); s == nil || s.Source != "/srv/rootfs/usr" || !s.ReadOnly {
					t.Errorf("/usr from the image's root: %+v", s)
				}
				if sb.Image == nil || sb.Image.Digest != "sha256:ab" {
					t.Errorf("image %+v", sb.Image)
				}
				env := strings.Join(sb.Command.Env, " ")
				for _, want := range []string{"PATH=/opt/go/bin:/usr/bin", "GOFLAGS=-mod=mod", "HOME=/home/sandbox", "TOOL=1", "LANG=C.UTF-8"} {
					if !strings.Contains(" "+env+" ", " "+want+" ") {
						t.Errorf("env lacks %s: %s", want, env)
					}
				}
			},
		},
		{
			name:   "image tooling without the image",
			policy: func(p *policy.Policy) { p.Filesystem.Tooling = "image:example.com/tools:1" },
			err:    "was not looked up",
		},
		{
			name:   "missing rootfs",
			policy: func(p *policy.Policy) { p.Filesystem.Tooling = "rootfs:/srv/none" },
			err:    "tooling rootfs /srv/none",
		},
		{
			name: "extra read-only bind",
			policy: func(p *policy.Policy) {
				p.Filesystem.ReadOnly = []policy.Bind{{Source: "/opt", Target: "/mnt/opt"}}
			},
			check: func(t *testing.T, sb *Sandbox) {
				if s := step(sb, mounts.Bind, "/mnt/opt"); s == nil || !s.ReadOnly || !slices.Contains(sb.Landlock.Rules.ReadExec, "/mnt/opt") {
					t.Errorf("extra bind %+v, ReadExec %v", s, sb.Landlock.Rules.ReadExec)
				}
			},
		},
		{
			name: "missing read-only bind source",
			policy: func(p *policy.Policy) {
				p.Filesystem.ReadOnly = []policy.Bind{{Source: "/opt"}, {Source: "/data/none"}}
			},
			err: "filesystem.read_only[1]: source /data/none",
		},
		{
			name: "a huge workspace",
			host: func(h *Host) { h.Repos.Complete = false; h.Repos.Dirs = 5000 },
			check: func(t *testing.T, sb *Sandbox) {
				if len(sb.Warnings) != 2 || !strings.Contains(sb.Warnings[0].Message, "deeper than it looked are not protected") {
					t.Errorf("warnings %+v", sb.Warnings)
				}
			},
		},
		{
			name: "bad --env",
			req:  &Request{Argv: []string{"true"}, ExtraEnv: []string{"1X=2"}},
			err:  "--env",
		},
		{
			name: "timeouts and lifecycle",
			policy: func(p *policy.Policy) {
				p.Resources.Timeout = policy.Duration(time.Minute)
			},
			check: func(t *testing.T, sb *Sandbox) {
				if sb.Lifecycle.Timeout.D() != time.Minute || sb.Lifecycle.SessionIdle.D() != 30*time.Minute {
					t.Errorf("lifecycle %+v", sb.Lifecycle)
				}
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := policy.Default()
			if c.policy != nil {
				c.policy(p)
			}
			h := host()
			if c.host != nil {
				c.host(h)
			}
			sb, err := Build(p, h, c.req)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one containing %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c.check(t, sb)
			// Pure: the same inputs give the same sandbox.
			again, err := Build(p, h, c.req)
			if err != nil || !reflect.DeepEqual(sb, again) {
				t.Error("a second Build of the same inputs differs")
			}
		})
	}
}

func TestStrictErrorWrapsUnavailable(t *testing.T) {
	p := policy.Default()
	p.Enforcement = policy.EnforceStrict
	_, err := Build(p, host(), nil)
	if !errors.Is(err, cgroup.ErrUnavailable) {
		t.Fatalf("err = %v, want one wrapping cgroup.ErrUnavailable", err)
	}
}

// The policy refuses publish entries on the proxy's ports by number: they
// must be the plan's.
func TestProxySandboxPorts(t *testing.T) {
	if policy.ProxySandboxPorts != [3]int{ProxyHTTPPort, ProxySOCKSPort, DNSPort} {
		t.Errorf("policy.ProxySandboxPorts %v, the plan's proxy ports %v", policy.ProxySandboxPorts, [3]int{ProxyHTTPPort, ProxySOCKSPort, DNSPort})
	}
}
