// Package policy defines hutch's sandbox policy: the document that says what
// a sandboxed command may see (FILESYSTEM), use (RESOURCES), reach (NETWORK)
// and how long a sandbox lives (LIFECYCLE). docs/POLICY.md is its prose form;
// Default returns the built-in policy that document describes.
package policy

import (
	"strings"
	"time"
)

// Enforcement modes.
const (
	// EnforceBestEffort applies what the host supports and warns about the rest.
	EnforceBestEffort = "best-effort"
	// EnforceStrict refuses to run when any part of the policy cannot be enforced.
	EnforceStrict = "strict"
)

// Network modes.
const (
	// NetProxy gives the sandbox loopback only, plus hutch's egress proxy.
	NetProxy = "proxy"
	// NetNone gives the sandbox loopback only and no way out at all.
	NetNone = "none"
)

// Tooling modes: filesystem.tooling is ToolingHost, or ToolingRootfs
// followed by a directory.
const (
	// ToolingHost binds the host's /usr, /bin, /sbin, /lib*, /opt and its
	// /etc minus a mask (mounts.EtcMask) read-only.
	ToolingHost = "host"
	// ToolingRootfs, followed by a directory, binds that directory read-only
	// as the sandbox's root.
	ToolingRootfs = "rootfs:"
	// ToolingImage, followed by an image reference, uses that image from
	// hutch's image store (package images) as the read-only root.
	ToolingImage = "image:"
)

// SeccompDefault names hutch's built-in seccomp profile (as does "").
const SeccompDefault = "default"

// DefaultPort is the port of an allow entry that lists none; Validate
// fills it in.
const DefaultPort = 443

// WorkspaceMount is where the workspace appears inside with workspace_at
// "/workspace".
const WorkspaceMount = "/workspace"

// Values of filesystem.workspace_at.
const (
	// WorkspaceAtFixed mounts the workspace at WorkspaceMount.
	WorkspaceAtFixed = WorkspaceMount
	// WorkspaceAtHost mounts the workspace at its own host path, so that
	// paths are the same inside and out.
	WorkspaceAtHost = "host"
)

// SandboxHome is the sandbox user's home directory (a tmpfs).
const SandboxHome = "/home/sandbox"

// Policy is a complete, validated sandbox policy.
type Policy struct {
	// Version of the policy format; 1.
	Version int `toml:"version"`
	// Enforcement is EnforceBestEffort or EnforceStrict.
	Enforcement string      `toml:"enforcement"`
	Sandbox     Sandbox     `toml:"sandbox"`
	Filesystem  Filesystem  `toml:"filesystem"`
	Resources   Resources   `toml:"resources"`
	Network     Network     `toml:"network"`
	Lifecycle   Lifecycle   `toml:"lifecycle"`
	Environment Environment `toml:"environment"`
	Seccomp     Seccomp     `toml:"seccomp"`

	// File is the policy file this policy was loaded from (absolute), or
	// "" (the built-in default, or one parsed from memory). It is not part
	// of the format: a sandbox whose workspace holds the file gets it
	// read-only, so that sandboxed code cannot loosen the next run's policy.
	File string `toml:"-"`
}

// Sandbox holds the identity of the sandboxed command.
type Sandbox struct {
	// UID and GID the command runs as inside (not on the host). 1..65533.
	UID int `toml:"uid"`
	GID int `toml:"gid"`
	// Hostname inside the sandbox's UTS namespace.
	Hostname string `toml:"hostname"`
	// Isolation is how the sandbox is made: IsolationNamespaces,
	// IsolationLandlock or IsolationAuto (docs/ISOLATION.md).
	Isolation string `toml:"isolation"`
}

// Isolation modes (sandbox.isolation).
const (
	// IsolationNamespaces: new user, mount, pid, net, ipc, uts and cgroup
	// namespaces, plus Landlock and seccomp.
	IsolationNamespaces = "namespaces"
	// IsolationLandlock: no namespaces; Landlock, seccomp, rlimits and a
	// subreaper on the host's own filesystem, processes and network, for
	// hosts where user namespaces cannot be created.
	IsolationLandlock = "landlock"
	// IsolationAuto: namespaces where user namespaces can be created, else
	// landlock with a one-time warning (best-effort enforcement) or a
	// refusal (strict).
	IsolationAuto = "auto"
)

// Filesystem is the FILESYSTEM area.
type Filesystem struct {
	// Tooling is "host" (the host's /usr, /bin, /lib*, /opt and /etc minus
	// a mask, read-only), "rootfs:DIR" (DIR as the read-only root) or
	// "image:REF" (an image of hutch's store as the read-only root).
	Tooling string `toml:"tooling"`
	// Workspace is the host directory mounted read-write inside (at
	// WorkspaceAt). Empty means the current directory of the invoking
	// process.
	Workspace string `toml:"workspace"`
	// WorkspaceAt is where the workspace appears inside: WorkspaceAtFixed
	// ("/workspace") or WorkspaceAtHost ("host": its own host path). Empty
	// means the entry point's default: "/workspace" for hutch run, exec and
	// session; "host" for hutch mcp and the Go API, whose callers are
	// host-side agents that send host paths.
	WorkspaceAt string `toml:"workspace_at"`
	// Protected lists paths relative to the workspace that stay read-only
	// inside, and cannot be created when absent.
	Protected []string `toml:"protected"`
	// ReadOnly lists extra host paths bound read-only.
	ReadOnly []Bind `toml:"read_only"`
	// TmpSize caps the /tmp tmpfs.
	TmpSize Size `toml:"tmp_size"`
	// HomeSize caps the HOME tmpfs.
	HomeSize Size `toml:"home_size"`
	// ShmSize caps /dev/shm.
	ShmSize Size `toml:"shm_size"`
	// Sys mounts a read-only sysfs at /sys when true.
	Sys bool `toml:"sys"`
	// DefaultCaches turns on the built-in caches (BuiltinCaches) of the
	// toolchains found in the tooling tree.
	DefaultCaches bool `toml:"default_caches"`
	// Cache lists persistent caches: directories of hutch's own that
	// outlive sandboxes, bound read-write inside (docs/CACHES.md). An
	// entry named as a built-in cache replaces it.
	Cache []Cache `toml:"cache"`
	// Review, when true, keeps the workspace's writes in a change set
	// (an overlay's upper layer in hutch's state directory) for the user
	// to review and apply (docs/REVIEW.md) instead of writing the user's
	// files.
	Review bool `toml:"review"`
}

// Cache is one persistent cache: a directory kept in hutch's cache
// directory, per scope, bound read-write at Target in every sandbox of that
// scope.
type Cache struct {
	// Name identifies the cache in its scope: lower-case letters, digits,
	// '-' and '_'. A built-in name (BuiltinCaches) takes that cache's
	// target, variables and pruning where the entry leaves them out.
	Name string `toml:"name"`
	// Target is the absolute path inside; empty only for a built-in name.
	Target string `toml:"target"`
	// Scope is CacheScopeWorkspace (the default, "") or CacheScopeUser.
	Scope string `toml:"scope"`
	// Size caps the cache; pruning (hutch cache prune, and once a day at
	// the end of a run) removes the least recently used files beyond it.
	// 0: the built-in cache's cap, else DefaultCacheSize.
	Size Size `toml:"size"`
	// Env names variables set to Target in every command (for a built-in
	// name: added to its own).
	Env []string `toml:"env"`
}

// Bind is an extra read-only bind mount.
type Bind struct {
	// Source is an absolute host path.
	Source string `toml:"source"`
	// Target is the absolute path inside; empty means the same as Source.
	Target string `toml:"target"`
}

// Resources is the RESOURCES area.
type Resources struct {
	// CPUs is the number of cores the sandbox may use (cpu.max), > 0.
	CPUs float64 `toml:"cpus"`
	// Memory caps the sandbox's memory (memory.max; swap 0).
	Memory Size `toml:"memory"`
	// Pids caps the number of processes and threads.
	Pids int `toml:"pids"`
	// FileSize caps a single file the sandbox writes (RLIMIT_FSIZE).
	FileSize Size `toml:"file_size"`
	// OpenFiles caps open descriptors per process (RLIMIT_NOFILE).
	OpenFiles int `toml:"open_files"`
	// Timeout is the wall-clock limit of one execution.
	Timeout Duration `toml:"timeout"`
}

// Network is the NETWORK area.
type Network struct {
	// Mode is NetProxy or NetNone.
	Mode string `toml:"mode"`
	// DiscoverRegistries adds the package registries the host's own tools
	// are configured to use to the allowlist, each with a generated reason.
	DiscoverRegistries bool `toml:"discover_registries"`
	// Allow is the allowlist; every entry carries its reason.
	Allow []AllowEntry `toml:"allow"`
	// LocalPorts is obsolete and has no effect: every port on the
	// sandbox's own loopback can be bound and connected to. It is still
	// accepted so that older policies load; the plan warns about it.
	LocalPorts []int `toml:"local_ports"`
	// Publish forwards ports of the host to loopback ports inside the
	// sandbox, so that a server there (a dev server) is reachable from
	// the host.
	Publish []PublishEntry `toml:"publish"`
}

// PublishEntry forwards one TCP port of the host into the sandbox: every
// connection accepted on HostAddress:HostPort is connected to
// 127.0.0.1:SandboxPort inside the sandbox's network namespace.
type PublishEntry struct {
	// HostAddress is the host's IP address to listen on; "" is
	// 127.0.0.1, the host's loopback (Validate fills it in). Any other
	// address, such as 0.0.0.0, exposes the sandbox's server beyond this
	// host, and must be written out.
	HostAddress string `toml:"host_address"`
	// HostPort is the host's port, 1..65535.
	HostPort int `toml:"host_port"`
	// SandboxPort is the loopback port inside the sandbox, 1..65535.
	SandboxPort int `toml:"sandbox_port"`
}

// DefaultPublishAddress is the host address a publish entry listens on
// when it names none: the host's loopback.
const DefaultPublishAddress = "127.0.0.1"

// AllowEntry lets the sandbox reach one destination through the egress proxy.
type AllowEntry struct {
	// Host is an exact name, "*.suffix", or an IP address.
	Host string `toml:"host"`
	// Ports defaults to [443].
	Ports []int `toml:"ports"`
	// Addresses, when set, pins Host to these IP addresses: the proxy
	// connects to them without resolving the name, and they may be
	// internal (loopback, private), since the entry names them explicitly.
	Addresses []string `toml:"addresses"`
	// Reason says why the sandbox needs this destination. Required.
	Reason string `toml:"reason"`
}

// Lifecycle is the LIFECYCLE area.
type Lifecycle struct {
	// SessionIdle tears a session down after this long without an exec.
	SessionIdle Duration `toml:"session_idle"`
	// SessionMax tears a session down after this long, busy or not.
	SessionMax Duration `toml:"session_max"`
}

// Environment controls what the command's environment holds. Everything else
// of the caller's environment is dropped.
type Environment struct {
	// Pass names variables passed through from the caller when set there.
	// Entries ending in "*" are prefixes (e.g. "LC_*").
	Pass []string `toml:"pass"`
	// Set assigns variables inside.
	Set map[string]string `toml:"set"`
}

// Seccomp selects the syscall filter.
type Seccomp struct {
	// Profile is "" or "default" for hutch's built-in allowlist, or the path
	// of a Docker/OCI-format seccomp profile.
	Profile string `toml:"profile"`
	// Ptrace (default true) lets debuggers and tracers (gdb, strace,
	// py-spy, LeakSanitizer) work among a command's own processes: ptrace,
	// process_vm_readv and process_vm_writev are allowed, whatever the
	// profile says. Landlock and the dumpable flag still keep hutch's
	// processes and a session's other commands out of reach. False leaves
	// them to the profile (the built-in one denies them).
	Ptrace bool `toml:"ptrace"`
}

// ImageRef returns REF when Tooling is "image:REF".
func (f Filesystem) ImageRef() (ref string, ok bool) {
	return strings.CutPrefix(f.Tooling, ToolingImage)
}

// RootfsDir returns DIR when Tooling is "rootfs:DIR".
func (f Filesystem) RootfsDir() (dir string, ok bool) {
	return strings.CutPrefix(f.Tooling, ToolingRootfs)
}

// Size is a byte count written as "512MiB", "1GiB", "64M" or a bare integer.
type Size int64

// Duration is a time.Duration written as "30s", "10m", "1h30m".
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Size units.
const (
	KiB Size = 1 << 10
	MiB Size = 1 << 20
	GiB Size = 1 << 30
)

// Default returns the built-in policy, the one docs/POLICY.md describes.
func Default() *Policy {
	return &Policy{
		Version:     1,
		Enforcement: EnforceBestEffort,
		Sandbox:     Sandbox{UID: 1000, GID: 1000, Hostname: "hutch", Isolation: IsolationNamespaces},
		Filesystem: Filesystem{
			Tooling:   ToolingHost,
			Protected: []string{".git/hooks", ".git/config"},
			TmpSize:   512 * MiB,
			HomeSize:  256 * MiB,
			ShmSize:   64 * MiB,
			// The caches of the toolchains found (docs/CACHES.md).
			DefaultCaches: true,
		},
		Resources: Resources{
			CPUs:      2,
			Memory:    2 * GiB,
			Pids:      512,
			FileSize:  1 * GiB,
			OpenFiles: 4096,
			Timeout:   Duration(10 * time.Minute),
		},
		Network: Network{
			Mode:               NetProxy,
			DiscoverRegistries: true,
		},
		Lifecycle: Lifecycle{
			SessionIdle: Duration(30 * time.Minute),
			SessionMax:  Duration(8 * time.Hour),
		},
		Environment: Environment{
			Pass: []string{"PATH", "TERM", "LANG", "LANGUAGE", "LC_*", "TZ"},
			Set:  map[string]string{},
		},
		// Debuggers and LeakSanitizer work, among a command's own
		// processes (docs/POLICY.md, "Debuggers").
		Seccomp: Seccomp{Ptrace: true},
	}
}
