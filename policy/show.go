package policy

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// header opens every file Marshal writes.
const header = `# hutch sandbox policy (docs/POLICY.md explains every key).
#
# The file is TOML, decoded strictly: an unknown key or a value of the wrong
# type is an error. Keys a file leaves out keep their built-in defaults.
# Sizes take a unit (B, KiB, MiB, GiB, TiB); durations are strings such as
# "30s", "10m" or "1h30m". Relative host paths are resolved against the
# directory holding the file.
`

// Marshal writes p as a complete, commented policy file: every key, in the
// order docs/POLICY.md describes them. Parse reads the result back to a
// policy equal to p (once p has been validated: Validate fills in default
// ports). hutch policy show prints it.
func (p *Policy) Marshal() ([]byte, error) {
	var b bytes.Buffer
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	q := tomlQuote

	b.WriteString(header)
	w("\n# Policy format version.\nversion = %d\n", p.Version)
	w("# %q applies what the host supports and warns about the rest;\n", EnforceBestEffort)
	w("# %q refuses to run unless every part of the policy is enforced.\n", EnforceStrict)
	w("enforcement = %s\n", q(p.Enforcement))

	s := &p.Sandbox
	w("\n# Identity of the command inside the sandbox (not on the host).\n[sandbox]\n")
	w("# User and group id, %d..%d: the command is never root.\n", MinUID, MaxUID)
	w("uid = %d\ngid = %d\n", s.UID, s.GID)
	w("hostname = %s\n", q(s.Hostname))
	w("# %q, %q (no namespaces: Landlock, seccomp and rlimits only; docs/ISOLATION.md)\n", IsolationNamespaces, IsolationLandlock)
	w("# or %q (namespaces where user namespaces can be made, else landlock).\n", IsolationAuto)
	w("isolation = %s\n", q(s.Isolation))

	f := &p.Filesystem
	w("\n# FILESYSTEM: what the command sees.\n[filesystem]\n")
	w("# %q: the host's /usr, /bin, /sbin, /lib*, /opt and its /etc minus the mask, read-only.\n", ToolingHost)
	w("# %q: DIR read-only as the root.\n", ToolingRootfs+"DIR")
	w("# %q: an image of hutch's store read-only as the root (docs/IMAGES.md).\n", ToolingImage+"REF")
	w("tooling = %s\n", q(f.Tooling))
	w("# Host directory mounted read-write inside; \"\" is the current directory.\n")
	w("workspace = %s\n", q(f.Workspace))
	w("# Where it appears inside: %q, or %q (its own host path, so paths are the same\n", WorkspaceAtFixed, WorkspaceAtHost)
	w("# inside and out); \"\": hutch run, exec, session %q, hutch mcp and the Go API %q.\n", WorkspaceAtFixed, WorkspaceAtHost)
	w("workspace_at = %s\n", q(f.WorkspaceAt))
	w("# Paths in the workspace kept read-only inside, even when missing.\n")
	w("protected = %s\n", stringArray(f.Protected))
	w("# Sizes of the /tmp, %s (HOME) and /dev/shm tmpfs.\n", SandboxHome)
	w("tmp_size = %s\nhome_size = %s\nshm_size = %s\n", sizeValue(f.TmpSize), sizeValue(f.HomeSize), sizeValue(f.ShmSize))
	w("# Mount a read-only /sys.\nsys = %t\n", f.Sys)
	w("# Persistent caches (docs/CACHES.md), in hutch's cache directory, never the host's:\n")
	w("# the built-in ones of the toolchains found in the tooling tree (Go, npm, pip, ...).\n")
	w("default_caches = %t\n", f.DefaultCaches)
	w("# Review mode: writes to the workspace land in a change set (hutch diff, apply, discard).\nreview = %t\n", f.Review)
	if len(f.ReadOnly) == 0 {
		w("# Extra read-only binds, any number of:\n")
		w("# [[filesystem.read_only]]\n# source = \"/srv/data\"   # host path\n# target = \"/data\"       # inside; \"\" means the same as source\n")
	}
	for _, ro := range f.ReadOnly {
		w("\n# Extra read-only bind.\n[[filesystem.read_only]]\nsource = %s\ntarget = %s\n", q(ro.Source), q(ro.Target))
	}
	if len(f.Cache) == 0 {
		w("# Caches of your own, or a built-in one changed (same name), any number of:\n")
		w("# [[filesystem.cache]]\n# name = \"sccache\"                        # lower-case letters, digits, - and _\n")
		w("# target = \"/home/sandbox/.cache/sccache\"  # inside; \"\" for a built-in name\n")
		w("# scope = \"workspace\"                     # one per workspace (the default), or \"user\": shared\n")
		w("# size = \"1GiB\"                           # cap, pruned least recently used first\n")
		w("# env = [\"SCCACHE_DIR\"]                   # variables set to the target\n")
	}
	for _, c := range f.Cache {
		w("\n# A persistent cache.\n[[filesystem.cache]]\nname = %s\ntarget = %s\nscope = %s\nsize = %s\n", q(c.Name), q(c.Target), q(c.Scope), sizeValue(c.Size))
		if len(c.Env) > 0 {
			w("env = %s\n", stringArray(c.Env))
		}
	}

	r := &p.Resources
	w("\n# RESOURCES: what the command may use.\n[resources]\n")
	w("# CPU cores (fractions allowed).\ncpus = %s\n", formatFloat(r.CPUs))
	w("# Memory of the whole sandbox; no swap.\nmemory = %s\n", sizeValue(r.Memory))
	w("# Processes and threads of the whole sandbox.\npids = %d\n", r.Pids)
	w("# Largest file a process may write.\nfile_size = %s\n", sizeValue(r.FileSize))
	w("# Open file descriptors per process.\nopen_files = %d\n", r.OpenFiles)
	w("# Wall-clock limit of one execution; then everything is killed (exit 124).\ntimeout = %s\n", q(r.Timeout.String()))

	n := &p.Network
	w("\n# NETWORK: what the command may reach. Default deny.\n[network]\n")
	w("# %q: only through hutch's egress proxy, to the allowlist; %q: nothing.\n", NetProxy, NetNone)
	w("mode = %s\n", q(n.Mode))
	w("# Allow the package registries the host's tools are configured to use.\n")
	w("discover_registries = %t\n", n.DiscoverRegistries)
	w("# Every port on the sandbox's own loopback can be bound and connected to\n")
	w("# (a dev server and its tests, ephemeral ports included).\n")
	if len(n.LocalPorts) > 0 {
		w("# obsolete, no effect:\nlocal_ports = %s\n", intArray(n.LocalPorts))
	}
	if len(n.Allow) == 0 {
		w("# Allowlist entries, any number of:\n")
		w("# [[network.allow]]\n# host = \"registry.example.com\"   # or \"*.example.com\", or an IP address\n")
		w("# ports = [443]                    # the default\n# addresses = [\"10.0.0.5\"]        # optional: pin the name to these addresses (may be internal)\n")
		w("# reason = \"why the sandbox needs it\"   # required\n")
	}
	for _, a := range n.Allow {
		w("\n[[network.allow]]\nhost = %s\n", q(a.Host))
		if len(a.Ports) > 0 {
			w("ports = %s\n", intArray(a.Ports))
		}
		if len(a.Addresses) > 0 {
			w("addresses = %s\n", stringArray(a.Addresses))
		}
		w("reason = %s\n", q(a.Reason))
	}
	if len(n.Publish) == 0 {
		w("# Ports of the host forwarded into the sandbox, any number of:\n")
		w("# [[network.publish]]\n# host_address = \"127.0.0.1\"   # the default: the host's loopback only\n")
		w("# host_port = 18080                # where host clients connect\n# sandbox_port = 8080              # the server's loopback port inside\n")
	}
	for _, e := range n.Publish {
		w("\n[[network.publish]]\nhost_address = %s\nhost_port = %d\nsandbox_port = %d\n", q(e.HostAddress), e.HostPort, e.SandboxPort)
	}

	l := &p.Lifecycle
	w("\n# LIFECYCLE: how long a session lives (hutch run makes a fresh sandbox per execution).\n[lifecycle]\n")
	w("# A session ends after this long without an execution...\nsession_idle = %s\n", q(l.SessionIdle.String()))
	w("# ...and after this long in any case.\nsession_max = %s\n", q(l.SessionMax.String()))

	e := &p.Environment
	w("\n# The command's environment. Everything else of the caller's is dropped.\n[environment]\n")
	w("# Variables passed through when set; \"NAME*\" passes every NAME... variable.\n")
	w("pass = %s\n", stringArray(e.Pass))
	w("\n# Variables set inside (HOME, USER, LOGNAME and SHELL are always set).\n[environment.set]\n")
	for _, k := range sortedKeys(e.Set) {
		w("%s = %s\n", joinKey("", k), q(e.Set[k]))
	}

	w("\n# The syscall filter.\n[seccomp]\n")
	w("# %q (or \"\") for hutch's built-in profile, or the path of a Docker/OCI-format profile.\n", SeccompDefault)
	w("profile = %s\n", q(p.Seccomp.Profile))
	w("# Let debuggers (gdb, strace) trace a command's own processes (ptrace, process_vm_*).\n")
	w("ptrace = %t\n", p.Seccomp.Ptrace)
	return b.Bytes(), nil
}

// sizeValue writes s as a string with a unit, or, when negative (which
// ParseSize refuses), as a TOML integer.
func sizeValue(s Size) string {
	if s < 0 {
		return strconv.FormatInt(int64(s), 10)
	}
	return tomlQuote(s.String())
}

func stringArray(list []string) string {
	quoted := make([]string, len(list))
	for i, s := range list {
		quoted[i] = tomlQuote(s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

func intArray(list []int) string {
	s := make([]string, len(list))
	for i, n := range list {
		s[i] = strconv.Itoa(n)
	}
	return "[" + strings.Join(s, ", ") + "]"
}

// formatFloat writes f as a TOML number.
func formatFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}
