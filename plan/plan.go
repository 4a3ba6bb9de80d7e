// Package plan turns a policy and the facts of one host into a Sandbox:
// everything one hutch sandbox gets, as data. Build is pure: it reads
// nothing and changes nothing, so the same policy and host facts always give
// the same sandbox, and `hutch plan` can show a jail without making it.
// Gather collects the host facts (it reads the host and changes nothing in
// the workspace); the root package hutch executes a Sandbox (nsjail builds
// it, seccompprofiles compiles its filter, limits applies its resources,
// egress serves its network).
//
// Data flows one way: policy -> plan -> execution. Nothing downstream reads
// the policy again.
package plan

import (
	"time"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/gitrepos"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
)

// Loopback ports, inside the sandbox's own network namespace, where the
// supervisor serves the egress proxy and the DNS refuser. The namespace is
// private to one sandbox, so fixed ports are safe and easy to document; the
// init binds them before any command runs, so nothing can squat them.
const (
	ProxyHTTPPort  = 3128
	ProxySOCKSPort = 1080
	DNSPort        = 53
)

// hutch's own processes count against a pids limit: the init and each
// running command's reaper; in a session also its spawner, the reaper made
// ahead of the next command and, for a moment, the helper that makes the
// commands' user namespace. The margins below are added for them, so that
// the limit a user sets is what the command gets: exactly in a one-off
// sandbox (hutch run), and shared by a session's commands, each running one
// taking one more (its reaper) beyond the first. On the rlimit backend the
// count is RLIMIT_NPROC's, per user namespace: a command's own reaper, and a
// session's spawner and reaper made ahead (not the init, which is outside).
const (
	PidsMarginRun      = 2
	PidsMarginSession  = 5
	NprocMarginRun     = 1
	NprocMarginSession = 3
)

// How often the rlimit backend's watchdog (Resources.Watchdog) looks at the
// sandbox's processes: WatchInterval while a command runs, the most a fast
// allocation can run ahead of it; WatchIdleInterval while none does (only
// hutch's own processes are left then, or a session's background ones).
const (
	WatchInterval     = 50 * time.Millisecond
	WatchIdleInterval = time.Second
)

// Sandbox is everything one sandbox gets. Its zero value is not useful; Build
// makes one. It is read-only once built: sessions share it between commands.
type Sandbox struct {
	// Enforcement is policy.EnforceBestEffort or policy.EnforceStrict.
	Enforcement string `json:"enforcement"`
	// Isolation is how the sandbox is made: policy.IsolationNamespaces or
	// policy.IsolationLandlock (policy "auto" decided for this host).
	Isolation string `json:"isolation"`
	// Differences are what this isolation does not give that namespaces
	// do, in words (LandlockDifferences); empty for namespaces.
	Differences []string `json:"differences,omitempty"`
	// Workspace is the host directory mounted read-write, and what of it
	// stays read-only inside.
	Workspace Workspace `json:"workspace"`
	// Identity is who the command is inside.
	Identity Identity `json:"identity"`
	// Image is the image the root is made of (tooling "image:REF").
	Image *Image `json:"image,omitempty"`
	// Mounts builds the root filesystem (nsjail's init executes it).
	Mounts *mounts.Plan `json:"mounts"`
	// Caches are the persistent caches bound into it (their Bind steps
	// are in Mounts).
	Caches []Cache `json:"caches,omitempty"`
	// Landlock is the ruleset every command runs under.
	Landlock Landlock `json:"landlock"`
	// Seccomp is the syscall filter every command runs under.
	Seccomp Seccomp `json:"seccomp"`
	// Resources are the limits and how this host enforces them.
	Resources Resources `json:"resources"`
	// Network is the network mode, the egress proxy and its allowlist.
	Network Network `json:"network"`
	// Environment decides each command's environment (CommandEnv).
	Environment Environment `json:"environment"`
	// Process is the process model's choices for this host.
	Process Process `json:"process"`
	// Lifecycle is how long a command and a session may live.
	Lifecycle Lifecycle `json:"lifecycle"`
	// Command is the command the plan was made for, when one was given.
	Command *Command `json:"command,omitempty"`
	// Warnings say what this host cannot enforce of the policy, in best
	// effort (strict enforcement refuses to build instead).
	Warnings []Warning `json:"warnings,omitempty"`
}

// Image is a stored image used as the sandbox's root.
type Image struct {
	// Ref is the reference the policy gave; Digest the manifest digest
	// it named in the store when the plan was made.
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// Root is the image's root: the merged tree of its layers when
	// Layers is set (a name, never on the host), else its flattened tree
	// on the host, bound read-only.
	Root string `json:"root"`
	// Layers is how many of the image's layers its root's overlays stack
	// (0: the flattened tree is bound).
	Layers int `json:"layers,omitempty"`
	// Flattened says why the root is the flattened tree ("" when it is the
	// layers).
	Flattened string `json:"flattened,omitempty"`
}

// Workspace is the workspace and its protection.
type Workspace struct {
	// Host is the workspace's absolute, symlink-free host path.
	Host string `json:"host"`
	// Mount is where it appears inside.
	Mount string `json:"mount"`
	// Protected are the paths, relative to the workspace, that stay
	// read-only inside: the policy's, and hutch's own configuration files
	// that lie in the workspace.
	Protected []string `json:"protected"`
	// Hidden are hutch's own directories that lie in the workspace,
	// relative to it, covered inside by an empty read-only directory.
	Hidden []string `json:"hidden,omitempty"`
	// Repos are the git repositories found in the workspace: their .git
	// files and the configuration and hooks of their git directories stay
	// read-only inside.
	Repos gitrepos.Scan `json:"repos"`
	// Missing are the protected paths that did not exist (nothing is made
	// on the host to protect them): after each command, one that exists is
	// reported, as is a repository the command created.
	Missing []string `json:"missing,omitempty"`
	// Unprotected are the repositories' paths that could not be protected,
	// with why.
	Unprotected []string `json:"unprotected,omitempty"`
	// moved is the mount the policy named, where the landlock isolation
	// has the workspace at its host path instead (Sandbox.Cwd maps it).
	moved string
}

// Cache is one persistent cache of the sandbox: a directory of hutch's
// (package caches) bound read-write at Target.
type Cache struct {
	// Name is the cache's name, Scope its scope (policy.CacheScope*).
	Name  string `json:"name"`
	Scope string `json:"scope"`
	// Key is the scope's directory under the caches' root, Dir the
	// cache's own (the bind source).
	Key string `json:"key"`
	Dir string `json:"dir"`
	// Target is where it is mounted inside.
	Target string `json:"target"`
	// Cap is its size cap in bytes.
	Cap int64 `json:"cap"`
	// Env are the variables that point the tool at it, as K=V.
	Env []string `json:"env,omitempty"`
	// Units are the patterns of directories pruned whole.
	Units []string `json:"units,omitempty"`
	// Builtin: one of policy.BuiltinCaches (maybe changed by the policy).
	Builtin bool `json:"builtin,omitempty"`
	// Why says why the sandbox has it.
	Why string `json:"why"`
}

// Identity is the command's identity inside the sandbox.
type Identity struct {
	UID      int    `json:"uid"`
	GID      int    `json:"gid"`
	User     string `json:"user"`
	Home     string `json:"home"`
	Hostname string `json:"hostname"`
	// BuildCaps: an image build's run step (Host.Build): the command is
	// uid 0 in its own user namespace (which maps only 0, to the invoking
	// user) and keeps CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER there
	// (nsjail's HUTCH_BUILD_CAPS): root's power over files apt and dpkg
	// need, over the files of the step's own overlay. Every other
	// protection holds (no_new_privs, seccomp, Landlock, the network).
	BuildCaps bool `json:"build_caps,omitempty"`
}

// Landlock is the Landlock ruleset, as the sandbox sees its paths.
type Landlock struct {
	// Rules are the paths and ports commands may reach.
	Rules landlock.Rules `json:"rules"`
	// ABI is the kernel's Landlock ABI (0: none).
	ABI int `json:"abi"`
	// Strict refuses a sandbox whose kernel cannot enforce every rule.
	Strict bool `json:"strict,omitempty"`
	// NotEnforced lists what this kernel's ABI cannot enforce of Rules.
	NotEnforced []string `json:"not_enforced,omitempty"`
}

// Seccomp is the syscall filter.
type Seccomp struct {
	// Profile is "default" (hutch's built-in allowlist) or the absolute
	// path of a Docker/OCI-format profile.
	Profile string `json:"profile"`
	// Notify: denials reach the supervisor through user notification, so
	// they can be reported; false where the kernel or libseccomp cannot.
	Notify bool `json:"notify"`
	// NotifyUnavailable says why Notify is false.
	NotifyUnavailable string `json:"notify_unavailable,omitempty"`
	// WatchNetwork: connect and sendto notify too, so that a direct
	// connection around the proxy is seen and reported.
	WatchNetwork bool `json:"watch_network"`
	// Strict refuses a profile with problems that best effort only warns
	// about.
	Strict bool `json:"strict,omitempty"`
	// Ptrace allows ptrace and process_vm_* (policy seccomp.ptrace).
	Ptrace bool `json:"ptrace,omitempty"`
	// FakeChown: the chown calls succeed without effect
	// (seccompprofiles.FakeChown), in an image build's run step only.
	FakeChown bool `json:"fake_chown,omitempty"`
}

// Resources are the sandbox's limits and how this host enforces them.
type Resources struct {
	// Backend is the cgroup backend the host gives (cgroup.Backend*), or
	// cgroup.BackendRlimit when only per-process rlimits (and the Watchdog)
	// are available.
	Backend string `json:"backend"`
	// BackendReason says why that backend.
	BackendReason string `json:"backend_reason,omitempty"`
	// Limits are the policy's memory, pids and cpus.
	Limits cgroup.Limits `json:"limits"`
	// Cgroup are the limits the sandbox's cgroup gets (Limits with
	// PidsMargin for hutch's own processes); nil on the rlimit backend.
	Cgroup *cgroup.Limits `json:"cgroup,omitempty"`
	// PidsMargin is what the cgroup's pids limit (or RLIMIT_NPROC in
	// Fallback) adds to the policy's for hutch's own processes.
	PidsMargin int `json:"pids_margin,omitempty"`
	// Shared: a session's commands share the limits (one-off: one command).
	Shared bool `json:"shared"`
	// Rlimits are set on every command, on every backend: open files, file
	// size, no core dumps.
	Rlimits []cgroup.Rlimit `json:"rlimits"`
	// Fallback are the rlimits that stand in for the cgroup when none can be
	// made (the rlimit backend, or a cgroup that fails to come up).
	Fallback []cgroup.Rlimit `json:"fallback,omitempty"`
	// Watchdog stands in, with Fallback, for the cgroup's memory limit and
	// its record of the pids limit; nil when neither is set.
	Watchdog *Watchdog `json:"watchdog,omitempty"`
	// FileSize is the policy's file size limit (for messages).
	FileSize policy.Size `json:"file_size"`
	// UserTasks, in the landlock isolation without a cgroup, is what
	// RLIMIT_NPROC allows beyond the host user's tasks at launch
	// (Sandbox.WithUserTasks); 0: not set (root, whom it does not bind).
	UserTasks int64 `json:"user_tasks,omitempty"`
}

// Watchdog is what package limits watches on the rlimit backend, where no
// per-process rlimit can stand for memory (see cgroup.Rlimits): it looks at
// the sandbox's processes every Interval while a command runs (every
// IdleInterval while none does; less often when one look costs more than
// 2% of the time between two), kills the largest when their memory exceeds
// MemoryBytes, as the OOM killer does in a cgroup, and reports the process
// limit when it finds it reached. It sees only what is there when it
// looks: a fast allocation gets ahead of it by what it allocates in an
// interval, and a fork bomb that gives up within one may go unreported.
type Watchdog struct {
	// MemoryBytes is resources.memory, for the proportional set size of
	// the sandbox's anonymous and shared memory and of its swap (each page
	// counted once, however many processes share it); 0: not watched.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
	// Nproc is RLIMIT_NPROC as Fallback sets it: a user namespace of the
	// sandbox whose processes and threads reach it is reported as having
	// reached the process limit (fork fails there); 0: not watched.
	Nproc int64 `json:"nproc,omitempty"`
	// PerNamespace: the commands have more than one user namespace (a
	// session's first command has its own, the later ones share the
	// spawner's), each with its own RLIMIT_NPROC count; else one holds
	// every process but the init.
	PerNamespace bool `json:"per_namespace,omitempty"`
	// Interval and IdleInterval are WatchInterval and WatchIdleInterval.
	Interval     policy.Duration `json:"interval"`
	IdleInterval policy.Duration `json:"idle_interval"`
}

// Network is the network mode and the egress proxy.
type Network struct {
	// Mode is policy.NetProxy or policy.NetNone.
	Mode string `json:"mode"`
	// Proxy is set in proxy mode: the loopback ports the proxy listens on
	// inside the sandbox.
	Proxy *Proxy `json:"proxy,omitempty"`
	// Allow is the policy's allowlist.
	Allow []policy.AllowEntry `json:"allow,omitempty"`
	// DiscoverRegistries adds the registries the host's tools use to Allow
	// when the first connection reaches the proxy.
	DiscoverRegistries bool `json:"discover_registries"`
	// Publish are the host's ports forwarded into the sandbox: the
	// supervisor listens on each and connects every connection to the
	// sandbox's loopback.
	Publish []Publish `json:"publish,omitempty"`
}

// Publish is one published port: connections accepted on the host at
// HostAddress:HostPort are relayed to SandboxPort on the sandbox's
// loopback.
type Publish struct {
	HostAddress string `json:"host_address"`
	HostPort    int    `json:"host_port"`
	SandboxPort int    `json:"sandbox_port"`
}

// Proxy are the egress proxy's loopback ports inside the sandbox.
type Proxy struct {
	HTTP  int `json:"http"`
	SOCKS int `json:"socks"`
	DNS   int `json:"dns"`
}

// Environment is how each command's environment is made from the caller's.
type Environment struct {
	// Pass and Set are the policy's environment section.
	Pass []string          `json:"pass"`
	Set  map[string]string `json:"set,omitempty"`
	// Image are the image's variables (its config's Env), set over the
	// caller's that Pass lets through and under Set.
	Image []string `json:"image,omitempty"`
	// Proxy are the variables that point tools at the egress proxy, set
	// over whatever the caller's environment held.
	Proxy []string `json:"proxy,omitempty"`
	// Scratch are HOME and TMPDIR (TMP, TEMP) in the landlock isolation's
	// scratch directory (Sandbox.WithScratch), set like Proxy.
	Scratch []string `json:"scratch,omitempty"`
	// Caches are the variables that point tools at the persistent caches,
	// set over the caller's environment unless environment.set or --env
	// names them.
	Caches []string `json:"caches,omitempty"`
}

// Process is how the process model runs on this host.
type Process struct {
	// Spawner: a session's commands after its first start from a spawner
	// that applies their shared restrictions once (see package nsjail).
	Spawner bool `json:"spawner"`
	// NoSpawner says why Spawner is false.
	NoSpawner string `json:"no_spawner,omitempty"`
}

// Lifecycle bounds commands and sessions in time.
type Lifecycle struct {
	// Timeout is the wall-clock limit of one command.
	Timeout policy.Duration `json:"timeout"`
	// SessionIdle and SessionMax end a session.
	SessionIdle policy.Duration `json:"session_idle"`
	SessionMax  policy.Duration `json:"session_max"`
}

// Command is one command as it would start.
type Command struct {
	Argv []string `json:"argv"`
	// Cwd is the working directory inside.
	Cwd string `json:"cwd"`
	// Env is the command's whole environment.
	Env []string `json:"env"`
}

// Warning is something the policy asks that this host does not give, in
// best-effort enforcement. Subject keys it (each is shown once per user and
// host); Message says it in words.
type Warning struct {
	Subject string `json:"subject"`
	Message string `json:"message"`
}
