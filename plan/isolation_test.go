package plan

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/policy"
)

// auto's decision over the probe's result: namespaces where they can be
// made, else landlock with a warning in best effort and a refusal in
// strict enforcement; the explicit choices ignore the probe.
func TestDecideIsolation(t *testing.T) {
	const why = "the kernel refused to create user namespaces"
	for _, c := range []struct {
		want, problem string
		strict        bool
		got, err      string
		warn          bool
	}{
		{want: "", got: policy.IsolationNamespaces},
		{want: policy.IsolationNamespaces, problem: why, got: policy.IsolationNamespaces},
		{want: policy.IsolationLandlock, got: policy.IsolationLandlock},
		{want: policy.IsolationLandlock, strict: true, got: policy.IsolationLandlock},
		{want: policy.IsolationAuto, got: policy.IsolationNamespaces},
		{want: policy.IsolationAuto, strict: true, got: policy.IsolationNamespaces},
		{want: policy.IsolationAuto, problem: why, got: policy.IsolationLandlock, warn: true},
		{want: policy.IsolationAuto, problem: why, strict: true, err: `sandbox.isolation = "auto" with enforcement = "strict": user namespaces cannot be created here (` + why + `)`},
	} {
		got, w, err := decideIsolation(c.want, c.strict, c.problem)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v: error %v, want %q", c, err, c.err)
			}
			continue
		}
		if err != nil || got != c.got || (w != nil) != c.warn {
			t.Errorf("%+v: got %q, warning %v, error %v", c, got, w, err)
		}
		if w != nil && !strings.Contains(w.Message, why) {
			t.Errorf("the warning does not say why: %q", w.Message)
		}
	}
}

// A tree carved around kept paths: the directories on the way are listed
// only, their other entries granted one by one, protected paths readable,
// hidden ones and symlinks without a rule.
func TestCarveTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"src/pkg", ".git/hooks", ".git/objects", ".hutch"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"README", ".git/config", ".git/HEAD"} {
		if err := os.WriteFile(filepath.Join(root, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("/etc", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	j := func(rel ...string) []string {
		var out []string
		for _, r := range rel {
			out = append(out, filepath.Join(root, r))
		}
		return out
	}
	c, err := CarveTree(root, j(".git/hooks", ".git/config", ".git/info/attributes"), j(".hutch"))
	if err != nil {
		t.Fatal(err)
	}
	sortAll := func(l []string) []string { l = slices.Clone(l); slices.Sort(l); return l }
	if got, want := sortAll(c.Grant), sortAll(j("README", "src", ".git/HEAD", ".git/objects")); !slices.Equal(got, want) {
		t.Errorf("Grant = %v, want %v", got, want)
	}
	if got, want := sortAll(c.List), sortAll(j(".", ".git")); !slices.Equal(got, want) {
		t.Errorf("List = %v, want %v", got, want)
	}
	if got, want := sortAll(c.Protected), sortAll(j(".git/config", ".git/hooks")); !slices.Equal(got, want) {
		t.Errorf("Protected = %v, want %v", got, want)
	}
	whole, err := CarveTree(root, nil, nil)
	if err != nil || !slices.Equal(whole.Grant, []string{root}) || len(whole.List) != 0 {
		t.Errorf("nothing kept: %+v, %v", whole, err)
	}
}

func landlockHost() *Host {
	h := host()
	h.Isolation = IsolationFacts{UID: 1234, GID: 1234, Tooling: []string{"/usr"},
		Workspace: &Carve{Root: h.Workspace, Grant: []string{h.Workspace + "/main.go"}, List: []string{h.Workspace}},
		Etc:       &Carve{Root: "/etc", Grant: []string{"/etc/passwd"}, List: []string{"/etc"}}}
	return h
}

// The landlock isolation's plan: host paths, TCP restricted, no spawner,
// no RLIMIT_NPROC; and what it refuses, in words naming the key.
func TestBuildLandlockIsolation(t *testing.T) {
	p := policy.Default()
	p.Sandbox.Isolation = policy.IsolationLandlock
	p.Filesystem.WorkspaceAt = policy.WorkspaceAtFixed
	sb, err := Build(p, landlockHost(), &Request{Argv: []string{"true"}, Cwd: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Isolation != policy.IsolationLandlock || len(sb.Differences) == 0 {
		t.Errorf("isolation %q, differences %v", sb.Isolation, sb.Differences)
	}
	if sb.Workspace.Mount != "/home/u/proj" || sb.Command.Cwd != "/home/u/proj" {
		t.Errorf("workspace at %q, cwd %q: want the host path", sb.Workspace.Mount, sb.Command.Cwd)
	}
	r := sb.Landlock.Rules
	if !r.TCP || len(r.BindTCP) != 0 || !r.ScopeSignal || !r.ScopeAbstractUnix {
		t.Errorf("rules %+v: want TCP restricted (no bind), both scopes", r)
	}
	if slices.Contains(r.ReadWrite, "/tmp") || slices.Contains(r.ReadWriteFiles, "/dev/pts") || slices.Contains(r.ListOnly, "/") {
		t.Errorf("rules grant the host's /tmp, devpts or root: %+v", r)
	}
	if !slices.Contains(r.ReadWrite, "/home/u/proj/main.go") || !slices.Contains(r.ListOnly, "/home/u/proj") {
		t.Errorf("the workspace's carve is not in the rules: %+v", r)
	}
	if sb.Process.Spawner || sb.Resources.Watchdog != nil {
		t.Errorf("spawner %v, watchdog %+v", sb.Process.Spawner, sb.Resources.Watchdog)
	}
	for _, rl := range sb.Resources.Fallback {
		if rl.Resource == 6 { // RLIMIT_NPROC
			t.Errorf("RLIMIT_NPROC in the fallback: it would count every process of the host user")
		}
	}
	if want := int64(512 + NprocMarginRun); sb.Resources.UserTasks != want {
		t.Errorf("UserTasks = %d, want resources.pids and the margin, %d", sb.Resources.UserTasks, want)
	}
	rls := sb.WithUserTasks(40).Resources.Rlimits
	if last := rls[len(rls)-1]; last.Resource != 6 || last.Cur != uint64(40+512+NprocMarginRun) || len(sb.Resources.Rlimits) != len(rls)-1 {
		t.Errorf("WithUserTasks(40): rlimits %+v (the plan's: %+v)", rls, sb.Resources.Rlimits)
	}
	if sb.Network.Proxy == nil || sb.Network.Proxy.HTTP != 0 || len(sb.Environment.Proxy) != 0 {
		t.Errorf("proxy %+v, env %v: ports are chosen at launch", sb.Network.Proxy, sb.Environment.Proxy)
	}
	l := sb.WithScratch("/run/user/1234/hutch/scratch/s").WithProxy(40001, 40002, 40003)
	env, err := l.CommandEnv(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"HOME=/run/user/1234/hutch/scratch/s/home", "TMPDIR=/run/user/1234/hutch/scratch/s/tmp", "HTTPS_PROXY=http://127.0.0.1:40001", "ALL_PROXY=socks5h://127.0.0.1:40002"} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %q: %v", want, env)
		}
	}
	if !slices.Contains(l.Landlock.Rules.ReadWrite, "/run/user/1234/hutch/scratch/s") || slices.Contains(sb.Landlock.Rules.ReadWrite, "/run/user/1234/hutch/scratch/s") {
		t.Error("WithScratch: the scratch directory is not granted, or the plan was changed")
	}

	for _, c := range []struct {
		name   string
		change func(p *policy.Policy, h *Host)
		want   string
	}{
		{"old kernel", func(p *policy.Policy, h *Host) { h.LandlockABI = 5 }, "needs Landlock ABI 6"},
		{"auto, old kernel", func(p *policy.Policy, h *Host) {
			p.Sandbox.Isolation, h.LandlockABI, h.Isolation.UsernsProblem = policy.IsolationAuto, 5, "no user namespaces"
		}, `sandbox.isolation = "auto": user namespaces cannot be created here (no user namespaces), and the landlock isolation cannot be used either: sandbox.isolation = "landlock" needs Landlock ABI 6`},
		{"rootfs", func(p *policy.Policy, h *Host) { p.Filesystem.Tooling = "rootfs:/srv/rootfs" }, `filesystem.tooling = "rootfs:/srv/rootfs"`},
		{"publish", func(p *policy.Policy, h *Host) {
			p.Network.Publish = []policy.PublishEntry{{HostPort: 8080, SandboxPort: 8080}}
		}, "network.publish"},
		{"review", func(p *policy.Policy, h *Host) { p.Filesystem.Review = true }, "filesystem.review (--review)"},
		{"moved bind", func(p *policy.Policy, h *Host) {
			p.Filesystem.ReadOnly = []policy.Bind{{Source: "/opt", Target: "/data"}}
		}, "filesystem.read_only[0]: target /data differs from source /opt"},
	} {
		p := policy.Default()
		p.Sandbox.Isolation = policy.IsolationLandlock
		h := landlockHost()
		c.change(p, h)
		if _, err := Build(p, h, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.name, err, c.want)
		}
	}
}
