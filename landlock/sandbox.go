package landlock

// Sandbox describes a hutch sandbox as Landlock sees it. Paths are the
// sandbox's view (after pivot_root).
type Sandbox struct {
	// Home is the sandbox user's home directory; "" means /home/sandbox.
	Home string
	// ExtraReadOnly are the targets of the policy's extra read-only binds.
	ExtraReadOnly []string
	// Sys is true when the policy mounts a read-only /sys.
	Sys bool
	// ProxyPorts are the egress proxy's TCP ports on loopback; empty when
	// the network mode is "none".
	ProxyPorts []uint16
}

// Tooling is the read+execute tooling tree hutch exposes; missing entries
// (/lib32 on most hosts) are skipped by Build.
var Tooling = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// Devices are the device nodes (and the devpts tree) hutch exposes
// read-write, with device ioctls so terminals work.
var Devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", "/dev/ptmx", "/dev/pts"}

// SandboxRules returns the rules hutch's init builds for a sandbox: see
// docs/LANDLOCK.md.
func SandboxRules(s Sandbox) Rules {
	home := s.Home
	if home == "" {
		home = "/home/sandbox"
	}
	ro := []string{"/etc", "/proc", "/dev"}
	if s.Sys {
		ro = append(ro, "/sys")
	}
	ro = append(ro, s.ExtraReadOnly...)
	return Rules{
		ReadExec:          append([]string(nil), Tooling...),
		ReadOnly:          ro,
		ReadWrite:         []string{"/workspace", "/tmp", home, "/dev/shm"},
		ReadWriteFiles:    append([]string(nil), Devices...),
		ConnectTCP:        append([]uint16(nil), s.ProxyPorts...),
		ScopeAbstractUnix: true,
		ScopeSignal:       true,
	}
}
