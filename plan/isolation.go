package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/egress"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

// LandlockMinABI is the Landlock ABI the landlock isolation needs: TCP
// rules (4) keep the command off the host's network but for the egress
// proxy, and signal scoping (6) keeps it from signalling the user's other
// processes (kill(-1, SIGKILL) among them), which no namespace separates.
const LandlockMinABI = 6

// IsolationFacts are the host facts the choice of isolation and the
// landlock isolation's rules depend on. Gather collects them only when the
// policy may use the landlock isolation.
type IsolationFacts struct {
	// UsernsProblem says why a sandbox's user namespaces cannot be made
	// here; "" when they can (or were not probed: isolation = "namespaces"
	// or "landlock").
	UsernsProblem string
	// UID and GID are the invoking user's: the landlock isolation's
	// command runs as them.
	UID, GID int
	// Workspace is the workspace carved around its protected and hidden
	// paths; Etc is /etc carved around mounts.EtcMask.
	Workspace, Etc *Carve
	// Tooling are the tooling directories that exist on the host.
	Tooling []string
}

// Carve is a tree as Landlock rules can express "everything but some
// paths": Landlock only grants, and a grant on a directory covers all of
// it, so every directory on the way to a kept path is listed only, and
// each of its other entries is granted on its own.
type Carve struct {
	// Root is the tree.
	Root string `json:"root"`
	// Grant are the entries granted the tree's rights (Root alone when
	// nothing is kept).
	Grant []string `json:"grant"`
	// List are the directories on the way to a kept path: they may be
	// listed, and nothing can be created, removed or renamed in them.
	List []string `json:"list,omitempty"`
	// Protected are the kept paths that exist and stay readable (and
	// executable): the workspace's protected paths.
	Protected []string `json:"protected,omitempty"`
}

// CarveTree carves root around protect (kept readable) and hide (no rule:
// denied), absolute paths beneath root. Symlinks among the entries get no
// rule: what they point to is reached, or denied, by its own path.
func CarveTree(root string, protect, hide []string) (*Carve, error) {
	c := &Carve{Root: root}
	kept := map[string]bool{}
	onWay := map[string]bool{}
	add := func(p string, readable bool) {
		p = filepath.Clean(p)
		if p == root || !strings.HasPrefix(p, root+"/") {
			return
		}
		kept[p] = kept[p] || readable
		for d := filepath.Dir(p); ; d = filepath.Dir(d) {
			onWay[d] = true
			if d == root || d == "/" {
				break
			}
		}
	}
	for _, p := range protect {
		add(p, true)
	}
	for _, p := range hide {
		add(p, false)
	}
	if len(kept) == 0 {
		c.Grant = []string{root}
		return c, nil
	}
	var walk func(dir string) error
	walk = func(dir string) error {
		c.List = append(c.List, dir)
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("landlock isolation: list %s: %w", dir, err)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			if readable, ok := kept[p]; ok {
				if readable {
					c.Protected = append(c.Protected, p)
				}
				continue
			}
			if e.Type()&os.ModeSymlink != 0 {
				continue
			}
			if onWay[p] {
				if e.IsDir() {
					if err := walk(p); err != nil {
						return err
					}
				}
				continue
			}
			c.Grant = append(c.Grant, p)
		}
		return nil
	}
	if err := walk(root); err != nil {
		return nil, err
	}
	return c, nil
}

// gatherIsolation fills h.Isolation for p's isolation: the probe (auto
// only) and the carved trees (whenever landlock may be used).
func gatherIsolation(p *policy.Policy, h *Host, probe func() string) error {
	iso := p.Sandbox.Isolation
	if iso == "" || iso == policy.IsolationNamespaces {
		return nil
	}
	f := IsolationFacts{UID: os.Getuid(), GID: os.Getgid()}
	if iso == policy.IsolationAuto && probe != nil {
		if f.UsernsProblem = probe(); f.UsernsProblem == "" {
			h.Isolation = f
			return nil // namespaces: nothing of the rest is needed
		}
	}
	mountAt := p.Filesystem.PathsFor(h.Workspace, "").Mount
	var protect, hide []string
	if pr := h.Protection; pr != nil {
		for _, s := range pr.Steps {
			rel, ok := strings.CutPrefix(s.Target, mountAt+"/")
			if !ok {
				continue
			}
			switch s.Kind {
			case mounts.Protect:
				protect = append(protect, filepath.Join(h.Workspace, rel))
			case mounts.Hide:
				hide = append(hide, filepath.Join(h.Workspace, rel))
			}
		}
		for _, m := range pr.Missing {
			protect = append(protect, filepath.Join(h.Workspace, m))
		}
	}
	var err error
	if f.Workspace, err = CarveTree(h.Workspace, protect, hide); err != nil {
		return err
	}
	var masked []string
	for _, m := range mounts.EtcMask {
		g, _ := filepath.Glob("/etc/" + m.Path)
		masked = append(masked, g...)
	}
	if f.Etc, err = CarveTree("/etc", nil, masked); err != nil {
		return err
	}
	for _, d := range []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"} {
		if _, err := os.Lstat(d); err == nil {
			f.Tooling = append(f.Tooling, d)
		}
	}
	h.Isolation = f
	return nil
}

// decideIsolation is the isolation a sandbox gets: the policy's, or for
// "auto" namespaces where user namespaces can be made and landlock where
// they cannot, with a warning in best effort and a refusal in strict
// enforcement (usernsProblem says why they cannot).
func decideIsolation(want string, strict bool, usernsProblem string) (string, *Warning, error) {
	switch want {
	case "", policy.IsolationNamespaces:
		return policy.IsolationNamespaces, nil, nil
	case policy.IsolationLandlock:
		return policy.IsolationLandlock, nil, nil
	}
	if usernsProblem == "" {
		return policy.IsolationNamespaces, nil, nil
	}
	if strict {
		return "", nil, fmt.Errorf("sandbox.isolation = \"auto\" with enforcement = \"strict\": user namespaces cannot be created here (%s), and the landlock isolation that would replace them gives less (docs/ISOLATION.md); fix the host, or set sandbox.isolation = \"landlock\" (or --isolation landlock) to accept it", usernsProblem)
	}
	return policy.IsolationLandlock, &Warning{Subject: "isolation-landlock",
		Message: "user namespaces cannot be created here (" + usernsProblem + "), so the sandbox is made with Landlock, seccomp and rlimits only: host files are denied rather than hidden, the user's other processes are visible, there is no private network, pid or IPC namespace (docs/ISOLATION.md; set sandbox.isolation to silence this)"}, nil
}

// LandlockDifferences are what the landlock isolation does not give that
// the namespaces isolation does, in words: doctor, --json and the MCP
// results list them.
var LandlockDifferences = []string{
	"host files are denied (EACCES) rather than hidden: paths outside the workspace, the tooling and the scratch directories exist and their names can be probed",
	"other processes of the same host user are visible in /proc and ps (their command lines too); Landlock denies ptrace, /proc/PID/environ, mem and fd of processes outside the sandbox, and signals to them",
	"no private network namespace: the host's network identity (interfaces, addresses) is visible; TCP connect is allowed only to the egress proxy's ports on the host's loopback, TCP bind not at all (a test server cannot listen), UDP, raw and packet sockets are refused",
	"unix sockets cannot be created (socket(AF_UNIX) is refused; socketpair works): Landlock cannot restrict connecting to the host's pathname sockets (D-Bus, ssh-agent, docker.sock), so none can be made",
	"no pid namespace: the command is not pid 1's child and sees host pids; everything it starts is still killed at its end (a child subreaper walks and kills its descendants)",
	"no mount namespace: the workspace is at its host path, /tmp is not private and not writable (TMPDIR and HOME are a private scratch directory), /dev/shm is not available, and /etc is the host's (minus the masked credentials, denied)",
	"protected paths are kept read-only by Landlock alone: nothing can be created, removed or renamed directly in a directory on the way to one (the workspace root when .git is protected); create files in subdirectories",
	"no IPC or UTS namespace: System V IPC and the hostname are the host's",
	"the command runs as the invoking host user (without capabilities), not as the sandbox uid; without a delegated cgroup resources.memory is not enforced and resources.pids only through RLIMIT_NPROC, which counts all of the host user's processes",
}

// planLandlockIsolation turns sb, planned for namespaces, into the
// landlock isolation's plan: the workspace at its host path, Landlock rules
// on host paths, the egress proxy on host loopback ports chosen at launch
// (WithProxy), the scratch directory made at launch (WithScratch).
func planLandlockIsolation(p *policy.Policy, h *Host, sb *Sandbox) error {
	f := h.Isolation
	if f.Workspace == nil || f.Etc == nil {
		return fmt.Errorf("sandbox.isolation = %q: the host facts for it were not gathered", policy.IsolationLandlock)
	}
	if h.LandlockABI < LandlockMinABI {
		return fmt.Errorf("sandbox.isolation = %q needs Landlock ABI %d (Linux %s+) for its network rules and signal scoping; this kernel has ABI %d: use isolation = \"namespaces\" on this host",
			policy.IsolationLandlock, LandlockMinABI, landlock.LinuxVersion(LandlockMinABI), h.LandlockABI)
	}
	if len(sb.Network.Publish) > 0 {
		return fmt.Errorf("network.publish (--publish): the landlock isolation has no loopback of its own to forward to, and a command may not bind TCP ports; remove it or use isolation = \"namespaces\"")
	}
	if p.Filesystem.Review {
		return fmt.Errorf("filesystem.review (--review): the landlock isolation has no mounts, so no overlay can keep the workspace's writes apart; remove it or use isolation = \"namespaces\"")
	}
	if p.Filesystem.Tooling != policy.ToolingHost {
		return fmt.Errorf("filesystem.tooling = %q: the landlock isolation has no mounts, so its tooling is the host's: set tooling = %q or isolation = \"namespaces\"", p.Filesystem.Tooling, policy.ToolingHost)
	}
	r := landlock.Rules{
		ReadExec: slices.Clone(f.Tooling),
		ReadOnly: []string{"/proc"},
		// Not /dev/pts nor /dev/ptmx: the host's devpts holds the user's
		// other terminals. A command's own terminal comes as its stdio.
		ReadWriteFiles:    slices.Clone(mounts.Devices),
		TCP:               true,
		ScopeAbstractUnix: true,
		ScopeSignal:       true,
	}
	for i, b := range p.Filesystem.ReadOnly {
		if b.Target != "" && b.Target != b.Source {
			return fmt.Errorf("filesystem.read_only[%d]: target %s differs from source %s: the landlock isolation has no mounts, so a path is granted where it is; drop the target or use isolation = \"namespaces\"", i, b.Target, b.Source)
		}
		r.ReadExec = append(r.ReadExec, b.Source)
	}
	if p.Filesystem.Sys {
		r.ReadOnly = append(r.ReadOnly, "/sys")
	}
	r.ReadOnly = append(r.ReadOnly, f.Etc.Grant...)
	r.ListOnly = append(r.ListOnly, f.Etc.List...)
	r.ReadWrite = append(r.ReadWrite, f.Workspace.Grant...)
	r.ListOnly = append(r.ListOnly, f.Workspace.List...)
	r.ReadExec = append(r.ReadExec, f.Workspace.Protected...)
	_, notEnforced := landlock.Gaps(h.LandlockABI, r)
	sb.Landlock = Landlock{Rules: r, ABI: h.LandlockABI, Strict: p.Enforcement == policy.EnforceStrict, NotEnforced: notEnforced}

	sb.Isolation = policy.IsolationLandlock
	sb.Differences = slices.Clone(LandlockDifferences)
	sb.Workspace.moved, sb.Workspace.Mount = sb.Workspace.Mount, sb.Workspace.Host
	sb.Identity.UID, sb.Identity.GID = f.UID, f.GID
	sb.Identity.Home = "" // WithScratch
	sb.Environment.Scratch = []string{"HOME=" + ScratchPlaceholder + "/home", "TMPDIR=" + ScratchPlaceholder + "/tmp"}
	sb.Mounts = &mounts.Plan{}
	if sb.Network.Proxy != nil {
		sb.Network.Proxy = &Proxy{} // ports chosen at launch: WithProxy
		sb.Environment.Proxy = nil
	}
	sb.Process = Process{NoSpawner: "the landlock isolation starts every command from the init"}
	// Without a user namespace RLIMIT_NPROC counts every process of the
	// host user, and the watchdog's procfs would be the host's: neither
	// stands for the sandbox's own.
	sb.Resources.Watchdog = nil
	rl := sb.Resources.Fallback[:0:0]
	for _, x := range sb.Resources.Fallback {
		if x.Resource != unix.RLIMIT_NPROC {
			rl = append(rl, x)
		} else if f.UID != 0 && sb.Resources.Cgroup == nil {
			// At launch: the user's task count then, plus this (WithUserTasks).
			sb.Resources.UserTasks = int64(x.Cur)
		}
	}
	sb.Resources.Fallback = rl
	if sb.Resources.Cgroup == nil {
		sb.Warnings = slices.DeleteFunc(sb.Warnings, func(w Warning) bool { return w.Subject == "rlimit-fallback" })
		procs := "processes are capped only by RLIMIT_NPROC, which counts all of the host user's processes: the sandbox may fork while the user has fewer than at its start plus resources.pids (a fork bomb stops there, unreported; the user's other programs starting many processes meanwhile leave the sandbox fewer)"
		if f.UID == 0 {
			procs = "processes are not capped (RLIMIT_NPROC does not apply to root)"
		}
		sb.Warnings = append(sb.Warnings, Warning{Subject: "landlock-isolation-limits",
			Message: "without a delegated cgroup the landlock isolation does not limit memory (the watchdog would see the host's processes) and " + procs + "; per-process rlimits apply"})
	}
	return nil
}

// WithUserTasks is sb with the landlock isolation's RLIMIT_NPROC: running,
// the host user's tasks at launch, plus Resources.UserTasks (resources.pids
// and hutch's margin). Without a user namespace the limit counts every task
// of the user, so this caps the sandbox's share of them. sb is not changed;
// without UserTasks it is returned as it is.
func (sb *Sandbox) WithUserTasks(running int64) *Sandbox {
	if sb.Resources.UserTasks <= 0 {
		return sb
	}
	c := *sb
	n := uint64(running + sb.Resources.UserTasks)
	c.Resources.Rlimits = append(slices.Clone(sb.Resources.Rlimits), cgroup.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: n, Max: n})
	return &c
}

// ScratchPlaceholder stands, in a plan, for the scratch directory made at
// launch (WithScratch replaces it).
const ScratchPlaceholder = "<scratch>"

// WithScratch is sb with dir, a private directory made for this sandbox,
// as the landlock isolation's HOME (dir/home) and TMPDIR (dir/tmp),
// granted read-write. sb is not changed.
func (sb *Sandbox) WithScratch(dir string) *Sandbox {
	c := *sb
	c.Identity.Home = filepath.Join(dir, "home")
	c.Landlock.Rules.ReadWrite = append(slices.Clone(sb.Landlock.Rules.ReadWrite), dir)
	c.Environment.Scratch = []string{"HOME=" + c.Identity.Home}
	for _, k := range []string{"TMPDIR", "TMP", "TEMP"} {
		c.Environment.Scratch = append(c.Environment.Scratch, k+"="+filepath.Join(dir, "tmp"))
	}
	return &c
}

// WithProxy is sb with the egress proxy's host loopback ports, chosen at
// launch, and the command environment that points at them (the landlock
// isolation). sb is not changed.
func (sb *Sandbox) WithProxy(http, socks, dns int) *Sandbox {
	c := *sb
	if sb.Network.Proxy == nil {
		return &c
	}
	c.Network.Proxy = &Proxy{HTTP: http, SOCKS: socks, DNS: dns}
	c.Environment.Proxy = egress.Env(http, socks)
	return &c
}
