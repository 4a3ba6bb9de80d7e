package plan

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/egress"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

// Request is the command a plan is made for (optional: a session's plan has
// none).
type Request struct {
	Argv []string
	// Cwd is the working directory inside, absolute or relative to the
	// workspace; "" is the workspace, or where HostCwd is in it.
	Cwd string
	// HostCwd is the caller's directory on the host: with Cwd empty, the
	// command starts at the same place in the workspace when it lies there
	// (the cwd follows the caller, as git's does).
	HostCwd string
	// ExtraEnv are --env entries ("K=V" sets, "K" passes K through).
	ExtraEnv []string
}

// Build makes the sandbox that p gives on host h, for req when it is not
// nil. It is pure: the same arguments give the same Sandbox. An error says
// what of the policy this host cannot give (strict enforcement) or what in
// the request or policy is invalid.
func Build(p *policy.Policy, h *Host, req *Request) (*Sandbox, error) {
	if p == nil {
		p = policy.Default()
	}
	strict := p.Enforcement == policy.EnforceStrict
	sb := &Sandbox{
		Enforcement: p.Enforcement,
		Workspace: Workspace{
			Host:      h.Workspace,
			Mount:     p.Filesystem.PathsFor(h.Workspace, "").Mount,
			Protected: slices.Clone(h.Protected),
			Hidden:    slices.Clone(h.Hidden),
		},
		Identity: Identity{
			UID: p.Sandbox.UID, GID: p.Sandbox.GID, User: "sandbox",
			Home: policy.SandboxHome, Hostname: p.Sandbox.Hostname,
		},
		Environment: Environment{Pass: slices.Clone(p.Environment.Pass), Set: p.Environment.Set},
		Lifecycle: Lifecycle{
			Timeout:     p.Resources.Timeout,
			SessionIdle: p.Lifecycle.SessionIdle,
			SessionMax:  p.Lifecycle.SessionMax,
		},
	}
	if h.Build != nil {
		sb.Identity = Identity{UID: 0, GID: 0, User: "root", Home: "/root", Hostname: sb.Identity.Hostname, BuildCaps: true}
	}
	// First: the isolation decides what of the rest applies.
	iso, w, err := decideIsolation(p.Sandbox.Isolation, strict, h.Isolation.UsernsProblem)
	if err != nil {
		return nil, err
	}
	sb.Isolation = iso
	if w != nil {
		sb.Warnings = append(sb.Warnings, *w)
	}
	sb.Workspace.Repos = h.Repos
	if h.Protection != nil {
		sb.Workspace.Missing = slices.Clone(h.Protection.Missing)
		sb.Workspace.Unprotected = slices.Clone(h.Protection.Unprotected)
	}
	for _, u := range sb.Workspace.Unprotected {
		sb.Warnings = append(sb.Warnings, Warning{Subject: "unprotected " + u, Message: "a git repository's file stays writable inside the sandbox: " + u})
	}
	if !h.Repos.Complete {
		sb.Warnings = append(sb.Warnings, Warning{Subject: "repos-incomplete " + h.Workspace,
			Message: fmt.Sprintf("the workspace %s has more directories than hutch looks through for git repositories (%d); repositories deeper than it looked are not protected", h.Workspace, h.Repos.Dirs)})
	}
	if sb.Isolation != policy.IsolationLandlock {
		// Caches are bind mounts: the landlock isolation has none
		// (docs/ISOLATION.md).
		if sb.Caches, err = buildCaches(p, h, sb); err != nil {
			return nil, err
		}
	}
	for _, c := range sb.Caches {
		sb.Environment.Caches = append(sb.Environment.Caches, c.Env...)
	}
	if sb.Mounts, err = buildMounts(p, h, sb); err != nil {
		return nil, err
	}
	sb.Network = buildNetwork(p)
	if len(p.Network.LocalPorts) > 0 {
		sb.Warnings = append(sb.Warnings, Warning{Subject: "obsolete network.local_ports",
			Message: "network.local_ports has no effect: every port on the sandbox's own loopback can be bound and connected to; remove the key"})
	}
	if sb.Network.Proxy != nil {
		sb.Environment.Proxy = egress.Env(sb.Network.Proxy.HTTP, sb.Network.Proxy.SOCKS)
	}
	sb.Landlock = buildLandlock(p, h, sb)
	sb.Seccomp = buildSeccomp(p, h)
	sb.Seccomp.FakeChown = h.Build != nil
	if sb.Resources, err = buildResources(p, h, strict, req == nil); err != nil {
		return nil, err
	}
	if sb.Resources.Cgroup == nil {
		sb.Warnings = append(sb.Warnings, FallbackWarning(sb.Resources.BackendReason))
	}
	if w, ok := sb.Landlock.warning(); ok {
		sb.Warnings = append(sb.Warnings, w)
	}
	sb.Process = buildProcess(h, sb)
	if sb.Isolation == policy.IsolationLandlock {
		if err := planLandlockIsolation(p, h, sb); err != nil {
			if p.Sandbox.Isolation == policy.IsolationAuto {
				return nil, fmt.Errorf("sandbox.isolation = \"auto\": user namespaces cannot be created here (%s), and the landlock isolation cannot be used either: %w", h.Isolation.UsernsProblem, err)
			}
			return nil, err
		}
	}
	if req != nil {
		if sb.Command, err = sb.NewCommand(req.Argv, req.Cwd, req.HostCwd, h.Env, req.ExtraEnv); err != nil {
			return nil, err
		}
	}
	return sb, nil
}

// buildMounts is the root filesystem: today's mount plan (package mounts)
// with the workspace's protection.
func buildMounts(p *policy.Policy, h *Host, sb *Sandbox) (*mounts.Plan, error) {
	tooling := p.Filesystem.Tooling
	if ref, ok := p.Filesystem.ImageRef(); ok {
		if h.Image == nil || h.Image.Ref != ref {
			return nil, fmt.Errorf("filesystem.tooling %q: the image was not looked up in the store (plan.Gather does)", p.Filesystem.Tooling)
		}
		tooling = policy.ToolingRootfs + h.Image.Root
		sb.Image = &Image{Ref: ref, Digest: h.Image.Digest, Root: h.Image.Root, Layers: len(h.Image.Layers), Flattened: h.Image.Why}
		sb.Environment.Image = slices.Clone(h.Image.Env)
	}
	spec := &mounts.Spec{
		Tooling:        tooling,
		Workspace:      h.Workspace,
		WorkspaceMount: sb.Workspace.Mount,
		Protected:      h.Protection,
		Home:           sb.Identity.Home,
		TmpSize:        int64(p.Filesystem.TmpSize),
		HomeSize:       int64(p.Filesystem.HomeSize),
		ShmSize:        int64(p.Filesystem.ShmSize),
		Sys:            p.Filesystem.Sys,
		UID:            sb.Identity.UID,
		GID:            sb.Identity.GID,
		User:           sb.Identity.User,
		Hostname:       sb.Identity.Hostname,
		FS:             h.FS,
		Review:         h.Review,
		Build:          h.Build,
	}
	if h.Image != nil && tooling == policy.ToolingRootfs+h.Image.Root {
		spec.ImageLayers = h.Image.Layers
	}
	if p.Filesystem.Review && spec.Review == nil {
		// The change set is made when the sandbox is (package review);
		// a plan that is only shown or checked names none.
		spec.Review = &mounts.Layer{Upper: "(change set)/upper", Work: "(change set)/work"}
	}
	fsys := h.FS
	if fsys == nil {
		fsys = mounts.OS
	}
	for i, b := range p.Filesystem.ReadOnly {
		if _, err := fsys.Lstat(b.Source); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("filesystem.read_only[%d]: source %s does not exist on this host (bind an existing file or directory, or remove the entry): %w", i, b.Source, err)
		} else if err != nil {
			return nil, fmt.Errorf("filesystem.read_only[%d]: source %s: %w", i, b.Source, err)
		}
		t := b.Target
		if t == "" {
			t = b.Source
		}
		if m := sb.Workspace.Mount; t == m || strings.HasPrefix(t, m+"/") {
			return nil, fmt.Errorf("filesystem.read_only[%d]: target %s is in the workspace, which is mounted at %s; choose a target outside it", i, t, m)
		}
		spec.ReadOnly = append(spec.ReadOnly, [2]string{b.Source, t})
	}
	for _, c := range sb.Caches {
		spec.Caches = append(spec.Caches, mounts.CacheBind{Source: c.Dir, Target: c.Target, Why: c.Why})
	}
	m, err := mounts.Build(spec)
	var we *mounts.WorkspaceError
	if errors.As(err, &we) {
		return nil, fmt.Errorf("filesystem.workspace_at %q: %w; set workspace_at = %q (or --workspace-at %s), or use another workspace",
			p.Filesystem.WorkspaceAt, err, policy.WorkspaceAtFixed, policy.WorkspaceAtFixed)
	}
	return m, err
}

func buildNetwork(p *policy.Policy) Network {
	n := Network{
		Mode:               p.Network.Mode,
		Allow:              slices.Clone(p.Network.Allow),
		DiscoverRegistries: p.Network.DiscoverRegistries && p.Network.Mode == policy.NetProxy,
	}
	if p.Network.Mode == policy.NetProxy {
		n.Proxy = &Proxy{HTTP: ProxyHTTPPort, SOCKS: ProxySOCKSPort, DNS: DNSPort}
	}
	for _, e := range p.Network.Publish {
		addr := e.HostAddress
		if addr == "" {
			addr = policy.DefaultPublishAddress
		}
		n.Publish = append(n.Publish, Publish{HostAddress: addr, HostPort: e.HostPort, SandboxPort: e.SandboxPort})
	}
	return n
}

// buildLandlock derives the ruleset from the mount plan: read+execute on
// the tooling tree and extra read-only binds, read on /etc, /proc and /dev,
// read-write on the workspace and the scratch mounts and the device nodes;
// TCP left to the network namespace; abstract unix sockets and signals
// scoped to the sandbox's own commands.
func buildLandlock(p *policy.Policy, h *Host, sb *Sandbox) Landlock {
	r := landlock.Rules{
		ReadOnly:          []string{"/etc", "/proc", "/dev"},
		ListOnly:          []string{"/"},
		ReadWrite:         []string{sb.Workspace.Mount, "/tmp", sb.Identity.Home, "/dev/shm"},
		ReadWriteFiles:    append(slices.Clone(mounts.Devices), "/dev/ptmx", "/dev/pts"),
		ScopeAbstractUnix: true,
		ScopeSignal:       true,
	}
	if p.Filesystem.Sys {
		r.ReadOnly = append(r.ReadOnly, "/sys")
	}
	// Caches beneath HOME or /tmp have those rules; others their own.
	for _, c := range sb.Caches {
		if !underAny(c.Target, []string{sb.Identity.Home, "/tmp"}) {
			r.ReadWrite = append(r.ReadWrite, c.Target)
		}
	}
	for _, s := range sb.Mounts.Steps {
		if s.Kind == mounts.Overlay && h.Build != nil && s.Target != sb.Workspace.Mount {
			r.ReadWrite = append(r.ReadWrite, s.Target) // an image build step writes its image
		}
		// A read-only tree: a read-only bind, or a read-only overlay (an
		// image's layers: mounts.Spec.ImageLayers).
		roTree := s.Kind == mounts.Bind && s.ReadOnly || s.Kind == mounts.Overlay && s.Upper == ""
		if roTree && s.Target != "/etc" && !strings.HasPrefix(s.Target, "/etc/") {
			r.ReadExec = append(r.ReadExec, s.Target)
		}
	}
	// A synthesized file where an /etc symlink leads into hutch's own root
	// (/run/systemd/resolve/stub-resolv.conf) is readable there.
	for _, f := range sb.Mounts.Synthesized {
		if !strings.HasPrefix(f, "/etc/") && !underAny(f, r.ReadExec) {
			r.ReadOnly = append(r.ReadOnly, f)
		}
	}
	// TCP is left to the network namespace: the sandbox has its own
	// loopback, whose every port is its own (test servers bind ephemeral
	// ports), and no route out but the egress proxy. (r.TCP restricts TCP
	// where a sandbox shares the host's network.)
	_, notEnforced := landlock.Gaps(h.LandlockABI, r)
	return Landlock{Rules: r, ABI: h.LandlockABI, Strict: p.Enforcement == policy.EnforceStrict, NotEnforced: notEnforced}
}

// underAny reports whether p is one of dirs or lies beneath one.
func underAny(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, strings.TrimSuffix(d, "/")+"/") {
			return true
		}
	}
	return false
}

// warning is the best-effort warning of a kernel whose Landlock ABI
// lacks what hutch's rules use, or "" when nothing is missing.
func (l Landlock) warning() (Warning, bool) {
	var abiGaps []string
	for _, g := range l.NotEnforced {
		if strings.Contains(g, "needs Landlock ABI") || strings.Contains(g, "not available") {
			abiGaps = append(abiGaps, g)
		}
	}
	if len(abiGaps) == 0 {
		return Warning{}, false
	}
	return Warning{Subject: fmt.Sprintf("landlock-abi-%d", l.ABI),
		Message: "Landlock on this kernel cannot apply all of hutch's rules: " + strings.Join(abiGaps, "; ")}, true
}

func buildSeccomp(p *policy.Policy, h *Host) Seccomp {
	s := Seccomp{
		Profile:           p.Seccomp.Profile,
		Notify:            h.Notify,
		NotifyUnavailable: h.NotifyUnavailable,
		WatchNetwork:      h.Notify,
		Strict:            p.Enforcement == policy.EnforceStrict,
		Ptrace:            p.Seccomp.Ptrace,
	}
	if s.Profile == "" {
		s.Profile = policy.SeccompDefault
	}
	return s
}

// FallbackWarning says what the rlimit backend gives instead of a cgroup,
// and why there is no cgroup (reason).
func FallbackWarning(reason string) Warning {
	return Warning{Subject: "rlimit-fallback",
		Message: fmt.Sprintf("no cgroup here, so memory is watched (every %s, which a fast allocation can outrun), processes are capped per user namespace (RLIMIT_NPROC) and cpus not at all: %s", policy.Duration(WatchInterval), reason)}
}

// buildResources says how the policy's limits are enforced here: a cgroup
// where the host gives one, else rlimits in the sandbox. With strict
// enforcement, limits that no backend can enforce are an error that names
// them and the fix.
func buildResources(p *policy.Policy, h *Host, strict, session bool) (Resources, error) {
	r := Resources{
		Backend:       h.Cgroup.Backend,
		BackendReason: h.Cgroup.Reason,
		Limits: cgroup.Limits{
			MemoryBytes: int64(p.Resources.Memory),
			Pids:        int64(p.Resources.Pids),
			CPUs:        p.Resources.CPUs,
		},
		// File size and open files are per-process limits on every backend.
		Rlimits: []cgroup.Rlimit{
			{Resource: unix.RLIMIT_NOFILE, Cur: uint64(p.Resources.OpenFiles), Max: uint64(p.Resources.OpenFiles)},
			{Resource: unix.RLIMIT_FSIZE, Cur: uint64(p.Resources.FileSize), Max: uint64(p.Resources.FileSize)},
			{Resource: unix.RLIMIT_CORE, Cur: 0, Max: 0},
		},
		FileSize: p.Resources.FileSize,
		Shared:   session,
	}
	pidsMargin, nprocMargin := PidsMarginRun, NprocMarginRun
	if session {
		pidsMargin, nprocMargin = PidsMarginSession, NprocMarginSession
	}
	for _, rl := range cgroup.Rlimits(r.Limits, 0, 0) {
		if rl.Resource == unix.RLIMIT_NPROC {
			rl.Cur += uint64(nprocMargin)
			rl.Max = rl.Cur
		}
		r.Fallback = append(r.Fallback, rl)
		if rl.Resource == unix.RLIMIT_NPROC {
			r.Watchdog = &Watchdog{Nproc: int64(rl.Cur)}
		}
	}
	if r.Limits.MemoryBytes > 0 {
		if r.Watchdog == nil {
			r.Watchdog = &Watchdog{}
		}
		r.Watchdog.MemoryBytes = r.Limits.MemoryBytes
	}
	if r.Watchdog != nil {
		r.Watchdog.Interval, r.Watchdog.IdleInterval = policy.Duration(WatchInterval), policy.Duration(WatchIdleInterval)
		r.Watchdog.PerNamespace = r.Watchdog.Nproc > 0 && session
	}
	if r.Backend == "" {
		r.Backend = cgroup.BackendRlimit
	}
	if r.Backend == cgroup.BackendRlimit {
		if strict {
			return r, fmt.Errorf("enforcement = \"strict\": resources.memory, resources.pids and resources.cpus cannot be enforced here (there are only per-process rlimits, a sampling memory watchdog and no cpu limit): %w: %s", cgroup.ErrUnavailable, r.BackendReason)
		}
		if r.Limits.Pids > 0 {
			r.PidsMargin = nprocMargin
		}
		return r, nil
	}
	withMargin := r.Limits
	if withMargin.Pids > 0 {
		withMargin.Pids += int64(pidsMargin)
		r.PidsMargin = pidsMargin
	}
	r.Cgroup = &withMargin
	return r, nil
}

// buildProcess decides the process model's options. The spawner is used
// only where it changes nothing a command can observe or do: with the
// built-in seccomp profile (which allows everything the spawner's forks
// need, so a strict custom profile never turns them into denials), and a
// kernel whose Landlock scopes signals (ABI 6), so that no command can
// signal the spawner or another command.
func buildProcess(h *Host, sb *Sandbox) Process {
	switch {
	case h.NoSpawner != "":
		return Process{NoSpawner: h.NoSpawner}
	case sb.Seccomp.Profile != policy.SeccompDefault:
		return Process{NoSpawner: "a custom seccomp profile might deny the spawner's own calls"}
	case h.LandlockABI < 6 || !sb.Landlock.Rules.ScopeSignal:
		return Process{NoSpawner: "Landlock does not scope signals here (ABI 6 needed), so commands could signal the spawner"}
	}
	return Process{Spawner: true}
}

// NewCommand is argv as it would start in this sandbox: its working
// directory (relative to the workspace, which it may not leave) and its
// environment made from the caller's env and extra.
func (sb *Sandbox) NewCommand(argv []string, cwd, hostCwd string, env, extra []string) (*Command, error) {
	if len(argv) == 0 {
		return nil, fmt.Errorf("no command given")
	}
	dir, err := sb.Cwd(cwd, hostCwd)
	if err != nil {
		return nil, err
	}
	e, err := sb.CommandEnv(env, extra)
	if err != nil {
		return nil, err
	}
	return &Command{Argv: slices.Clone(argv), Cwd: dir, Env: e}, nil
}

// Cwd is the working directory inside for c: absolute (inside, or the
// workspace's host path), or relative to the workspace; "" is where the
// caller's host directory hostCwd lies in the workspace, else the
// workspace. One outside the workspace is refused (policy.WorkspacePaths:
// commands run in the workspace).
func (sb *Sandbox) Cwd(c, hostCwd string) (string, error) {
	w := sb.Workspace.Paths()
	if m := sb.Workspace.moved; m != "" && m != w.Mount {
		// The landlock isolation's workspace is at its host path: a
		// directory given under the mount the policy named is there.
		if c == m {
			c = w.Mount
		} else if rest, ok := strings.CutPrefix(c, m+"/"); ok {
			c = w.Mount + "/" + rest
		}
	}
	if c == "" && hostCwd != "" {
		return w.HostCwd(hostCwd), nil
	}
	return w.Cwd(c)
}

// Paths are the workspace's host path and mount.
func (w Workspace) Paths() policy.WorkspacePaths {
	return policy.WorkspacePaths{Host: w.Host, Mount: w.Mount}
}

// CommandEnv is a command's environment: the policy's filter of the
// caller's environment host and extra (--env entries), pointed at the
// egress proxy when there is one. See policy.Environment.CommandEnv.
func (sb *Sandbox) CommandEnv(host, extra []string) ([]string, error) {
	vars := sb.Environment.Set
	if sb.Image != nil {
		// The image's variables (its PATH above all) replace the caller's;
		// the policy's own still win. The caller's PATH means nothing in
		// an image that sets none.
		vars = map[string]string{"PATH": policy.DefaultPath}
		for _, kv := range sb.Environment.Image {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				vars[k] = v
			}
		}
		for k, v := range sb.Environment.Set {
			vars[k] = v
		}
	}
	env, err := policy.Environment{Pass: sb.Environment.Pass, Set: vars}.CommandEnv(host, extra)
	if err != nil {
		return nil, err
	}
	if len(sb.Environment.Proxy) == 0 && len(sb.Environment.Scratch) == 0 && len(sb.Environment.Caches) == 0 {
		return env, nil
	}
	out := slices.Clone(env)
	seen := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		seen[k] = i
	}
	set := func(kv string) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
		} else {
			seen[k] = len(out)
			out = append(out, kv)
		}
	}
	// A cache's variable gives way to one the user sets on purpose
	// (environment.set, --env), not to one passed through from the host,
	// which would name the host's own cache.
	chosen := map[string]bool{}
	for k := range sb.Environment.Set {
		chosen[k] = true
	}
	for _, e := range extra {
		k, _, _ := strings.Cut(e, "=")
		chosen[k] = true
	}
	for _, kv := range sb.Environment.Caches {
		if k, _, _ := strings.Cut(kv, "="); !chosen[k] {
			set(kv)
		}
	}
	for _, kv := range slices.Concat(sb.Environment.Proxy, sb.Environment.Scratch) {
		set(kv)
	}
	slices.Sort(out)
	return out, nil
}
