package nsjail

import "github.com/hutchsandbox/hutch/mounts"

// Setup is what the init needs to build a sandbox. It travels from the
// supervisor to the init once, over the control socket.
type Setup struct {
	// Plan builds the root filesystem.
	Plan *mounts.Plan `json:"plan"`
	// Hostname of the sandbox's UTS namespace.
	Hostname string `json:"hostname"`
	// UID and GID of sandboxed commands, inside their user namespace.
	UID int `json:"uid"`
	GID int `json:"gid"`
	// Seccomp is true when a BPF program (memfd) accompanies the setup.
	Seccomp bool `json:"seccomp"`
	// Landlock, when non-nil, is turned into a ruleset after pivot_root.
	Landlock *LandlockSpec `json:"landlock,omitempty"`
	// Rlimits are set on every command (by its exec stage).
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Proxy asks the init to create the egress proxy's sockets inside the
	// sandbox's network namespace and hand them over with Ready.
	Proxy bool `json:"proxy,omitempty"`
	// Timing asks the init to report per-stage timings.
	Timing bool `json:"timing,omitempty"`
}

// Rlimit is one resource limit; ^uint64(0) is RLIM_INFINITY.
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// LandlockSpec lists the paths and ports of the Landlock ruleset, as seen
// inside the sandbox.
type LandlockSpec struct {
	ReadExec          []string `json:"read_exec,omitempty"`
	ReadOnly          []string `json:"read_only,omitempty"`
	ListOnly          []string `json:"list_only,omitempty"`
	ReadWrite         []string `json:"read_write,omitempty"`
	ReadWriteFiles    []string `json:"read_write_files,omitempty"`
	ConnectTCP        []uint16 `json:"connect_tcp,omitempty"`
	BindTCP           []uint16 `json:"bind_tcp,omitempty"`
	ScopeAbstractUnix bool     `json:"scope_abstract_unix,omitempty"`
	ScopeSignal       bool     `json:"scope_signal,omitempty"`
	Strict            bool     `json:"strict,omitempty"`
}

// Loopback ports, inside the sandbox's own network namespace, where the
// supervisor serves the egress proxy and the DNS refuser. The namespace is
// private to one sandbox, so fixed ports are safe and easy to document;
// the init binds them before any command runs, so nothing can squat them.
const (
	ProxyHTTPPort  = 3128
	ProxySOCKSPort = 1080
	DNSPort        = 53
)

// Ready is the init's answer to a successful setup.
type Ready struct {
	// Landlock describes what the kernel could and could not enforce.
	LandlockABI         int      `json:"landlock_abi"`
	LandlockEnforced    []string `json:"landlock_enforced,omitempty"`
	LandlockNotEnforced []string `json:"landlock_not_enforced,omitempty"`
	// PlanHint is what became of a prestarted init's plan hint: "" (none),
	// "used" or "unused" (it differed from the setup's plan, or could not
	// be read or built).
	PlanHint string `json:"plan_hint,omitempty"`
}

// Spawn asks the init to start one command.
type Spawn struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	// Notify: a unix socket (4th fd) receives the seccomp listener.
	Notify bool `json:"notify,omitempty"`
	// ViaSpawner: the session's spawner starts the command (it carries the
	// shared restrictions and the seccomp listener already).
	ViaSpawner bool `json:"via_spawner,omitempty"`
}
