package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// Limits Validate enforces.
const (
	MinUID       = 1
	MaxUID       = 65533 // 65534 is nobody, 65535 is (uid_t)-1 in 16 bits
	MaxHostname  = 64
	MinTmpfsSize = 1 * MiB // tmp_size, home_size, shm_size
	MinMemory    = 16 * MiB
	MinFileSize  = 1 * MiB
	MaxCPUs      = 1024
	MaxPids      = 4194304 // the kernel's PID_MAX_LIMIT
	MinOpenFiles = 16
	MaxOpenFiles = 1048576 // the kernel's default fs.nr_open
)

// Validate checks every value of p and returns all problems it finds, each
// an *Error naming its key, joined with errors.Join; nil when p is valid.
//
// Validate also normalizes: an allow entry without ports gets
// [DefaultPort], a publish entry without a host address
// DefaultPublishAddress.
//
// Host paths must be absolute here; Parse has already resolved the relative
// paths of a policy file against its directory, and the CLI resolves its
// flags against the current directory.
func (p *Policy) Validate() error {
	return join(p.problems())
}

func (p *Policy) problems() []*Error {
	var v validator
	v.policy(p)
	return v.errs
}

type validator struct{ errs []*Error }

func (v *validator) bad(key, format string, args ...any) {
	v.errs = append(v.errs, &Error{Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) policy(p *Policy) {
	if p.Version != 1 {
		v.bad("version", "must be 1 (the only policy format so far), not %d", p.Version)
	}
	if p.Enforcement != EnforceBestEffort && p.Enforcement != EnforceStrict {
		v.bad("enforcement", "must be %q or %q, not %q", EnforceBestEffort, EnforceStrict, p.Enforcement)
	}
	v.sandbox(&p.Sandbox)
	v.filesystem(&p.Filesystem)
	v.resources(&p.Resources)
	v.network(&p.Network)
	v.lifecycle(&p.Lifecycle)
	v.environment(&p.Environment)
	v.seccomp(&p.Seccomp)
}

func (v *validator) sandbox(s *Sandbox) {
	for _, id := range []struct {
		key string
		n   int
	}{{"sandbox.uid", s.UID}, {"sandbox.gid", s.GID}} {
		switch {
		case id.n == 0:
			v.bad(id.key, "must be between %d and %d, not 0: the command must be unprivileged", MinUID, MaxUID)
		case id.n < MinUID || id.n > MaxUID:
			v.bad(id.key, "must be between %d and %d, not %d", MinUID, MaxUID, id.n)
		}
	}
	if !validHostname(s.Hostname) {
		v.bad("sandbox.hostname", "%q is not a valid hostname: want at most %d characters of dot-separated labels, each 1 to 63 letters, digits and hyphens, not starting or ending with a hyphen", s.Hostname, MaxHostname)
	}
	switch s.Isolation {
	case "", IsolationNamespaces, IsolationLandlock, IsolationAuto: // "": namespaces
	default:
		v.bad("sandbox.isolation", "must be %q, %q or %q, not %q", IsolationAuto, IsolationNamespaces, IsolationLandlock, s.Isolation)
	}
}

func (v *validator) filesystem(f *Filesystem) {
	if ref, ok := f.ImageRef(); ok {
		if ref == "" || strings.ContainsAny(ref, " \t\n") {
			v.bad("filesystem.tooling", `"image:" must be followed by an image reference (REGISTRY/REPOSITORY:TAG or @sha256:HEX), not %q`, f.Tooling)
		}
	} else if f.Tooling != ToolingHost {
		dir, ok := f.RootfsDir()
		if !ok || !filepath.IsAbs(dir) {
			v.bad("filesystem.tooling", `must be "host", "rootfs:" followed by an absolute directory, or "image:" followed by an image reference, not %q`, f.Tooling)
		}
	}
	if f.Workspace != "" && !filepath.IsAbs(f.Workspace) {
		v.bad("filesystem.workspace", "must be an absolute path (or empty for the current directory), not %q", f.Workspace)
	}
	switch f.WorkspaceAt {
	case "", WorkspaceAtFixed, WorkspaceAtHost:
	default:
		v.bad("filesystem.workspace_at", "must be %q (the workspace at %s inside), %q (at its own host path) or empty (the entry point's default), not %q",
			WorkspaceAtFixed, WorkspaceMount, WorkspaceAtHost, f.WorkspaceAt)
	}
	for i, path := range f.Protected {
		key := fmt.Sprintf("filesystem.protected[%d]", i)
		switch {
		case path == "" || path == ".":
			v.bad(key, "%q would protect the whole workspace: want a path inside it, such as \".git/hooks\"", path)
		case filepath.IsAbs(path):
			v.bad(key, "%q must be relative to the workspace, such as \".git/hooks\"", path)
		case hasDotDot(path):
			v.bad(key, "%q must stay inside the workspace: \"..\" is not allowed", path)
		case filepath.Clean(path) != path:
			v.bad(key, "%q is not clean: write %q", path, filepath.Clean(path))
		}
	}
	for i, b := range f.ReadOnly {
		key := fmt.Sprintf("filesystem.read_only[%d]", i)
		if !filepath.IsAbs(b.Source) {
			v.bad(key+".source", "must be an absolute host path, not %q", b.Source)
		}
		target := b.Target
		if target == "" {
			target = b.Source
		}
		if b.Target != "" && !filepath.IsAbs(b.Target) {
			v.bad(key+".target", "must be an absolute path inside the sandbox (or empty for the source's path), not %q", b.Target)
		} else if filepath.IsAbs(target) {
			if why := reservedTarget(filepath.Clean(target)); why != "" {
				tkey := key + ".target"
				if b.Target == "" {
					tkey = key + ".source"
				}
				v.bad(tkey, "cannot bind over %s: %s", target, why)
			}
		}
	}
	v.caches(f)
	for _, s := range []struct {
		key string
		n   Size
	}{{"filesystem.tmp_size", f.TmpSize}, {"filesystem.home_size", f.HomeSize}, {"filesystem.shm_size", f.ShmSize}} {
		if s.n < MinTmpfsSize {
			v.bad(s.key, "must be at least %s, not %s", MinTmpfsSize, s.n)
		}
	}
}

// reservedTarget says why a read-only bind may not land on target (clean,
// absolute), or "" when it may.
func reservedTarget(target string) string {
	if target == "/" {
		return "the root is hutch's"
	}
	for _, dir := range []string{"/proc", "/dev", WorkspaceMount} {
		if target == dir || strings.HasPrefix(target, dir+"/") {
			return dir + " and everything beneath it are hutch's"
		}
	}
	for _, dir := range []string{"/tmp", SandboxHome} {
		if target == dir || strings.HasPrefix(dir, target+"/") {
			return dir + " is a tmpfs of its own (binds beneath it are fine)"
		}
	}
	return ""
}

func (v *validator) resources(r *Resources) {
	if !(r.CPUs > 0 && r.CPUs <= MaxCPUs) {
		v.bad("resources.cpus", "must be more than 0 and at most %d, not %v", MaxCPUs, r.CPUs)
	}
	if r.Memory < MinMemory {
		v.bad("resources.memory", "must be at least %s, not %s", MinMemory, r.Memory)
	}
	if r.Pids < 1 || r.Pids > MaxPids {
		v.bad("resources.pids", "must be between 1 and %d, not %d", MaxPids, r.Pids)
	}
	if r.FileSize < MinFileSize {
		v.bad("resources.file_size", "must be at least %s, not %s", MinFileSize, r.FileSize)
	}
	if r.OpenFiles < MinOpenFiles || r.OpenFiles > MaxOpenFiles {
		v.bad("resources.open_files", "must be between %d and %d, not %d", MinOpenFiles, MaxOpenFiles, r.OpenFiles)
	}
	if err := CheckTimeout(r.Timeout); err != nil {
		v.bad("resources.timeout", "%v, not %s", err, r.Timeout)
	}
}

func (v *validator) network(n *Network) {
	if n.Mode != NetProxy && n.Mode != NetNone {
		v.bad("network.mode", "must be %q or %q, not %q", NetProxy, NetNone, n.Mode)
	}
	for i, port := range n.LocalPorts {
		if port < 1 || port > 65535 {
			v.bad(fmt.Sprintf("network.local_ports[%d]", i), "must be between 1 and 65535, not %d", port)
		}
	}
	for i := range n.Allow {
		a := &n.Allow[i]
		key := fmt.Sprintf("network.allow[%d]", i)
		if why := checkAllowHost(a.Host); why != "" {
			v.bad(key+".host", "%s", why)
		}
		if len(a.Ports) == 0 {
			a.Ports = []int{DefaultPort}
		}
		for j, port := range a.Ports {
			if port < 1 || port > 65535 {
				v.bad(fmt.Sprintf("%s.ports[%d]", key, j), "must be between 1 and 65535, not %d", port)
			}
		}
		for j, addr := range a.Addresses {
			if _, err := netip.ParseAddr(addr); err != nil || strings.Contains(addr, "%") {
				v.bad(fmt.Sprintf("%s.addresses[%d]", key, j), "want an IPv4 or IPv6 address (no brackets, ports or zones), not %q", addr)
			}
		}
		if len(a.Addresses) > 0 && strings.HasPrefix(a.Host, "*.") {
			v.bad(key+".addresses", "cannot pin a wildcard host %q to addresses; name the host exactly", a.Host)
		}
		if strings.TrimSpace(a.Reason) == "" {
			what := "this destination"
			if a.Host != "" {
				what = a.Host
			}
			v.bad(key+".reason", "required: say why the sandbox needs %s", what)
		}
	}
	v.publish(n.Publish, n.Mode == NetProxy)
}

// ProxySandboxPorts are the loopback ports inside the sandbox where hutch
// serves the egress proxy (HTTP, SOCKS5) and its DNS refuser in proxy
// mode (package plan's ProxyHTTPPort, ProxySOCKSPort and DNSPort): no
// publish entry may name them.
var ProxySandboxPorts = [3]int{3128, 1080, 53}

// publish checks the publish entries: ports, addresses, and that no two
// listen on the same host address and port.
func (v *validator) publish(list []PublishEntry, proxy bool) {
	seen := map[netip.AddrPort]int{}
	for i := range list {
		e := &list[i]
		key := fmt.Sprintf("network.publish[%d]", i)
		if e.HostAddress == "" {
			e.HostAddress = DefaultPublishAddress
		}
		addr, err := netip.ParseAddr(e.HostAddress)
		if err != nil || addr.Zone() != "" {
			v.bad(key+".host_address", "want an IPv4 or IPv6 address of the host to listen on (no brackets, ports, zones or names), such as %q or \"0.0.0.0\", not %q", DefaultPublishAddress, e.HostAddress)
		}
		okHost := e.HostPort >= 1 && e.HostPort <= 65535
		if !okHost {
			v.bad(key+".host_port", "must be between 1 and 65535, not %d", e.HostPort)
		}
		if e.SandboxPort < 1 || e.SandboxPort > 65535 {
			v.bad(key+".sandbox_port", "must be between 1 and 65535, not %d", e.SandboxPort)
		} else if proxy && slices.Contains(ProxySandboxPorts[:], e.SandboxPort) {
			v.bad(key+".sandbox_port", "%d is where hutch's egress proxy listens inside the sandbox (ports %d, %d and %d are hutch's in proxy mode); publish another port", e.SandboxPort, ProxySandboxPorts[0], ProxySandboxPorts[1], ProxySandboxPorts[2])
		}
		if err != nil || !okHost {
			continue
		}
		ap := netip.AddrPortFrom(addr.Unmap(), uint16(e.HostPort))
		if j, dup := seen[ap]; dup {
			v.bad(key+".host_port", "%s is published twice (network.publish[%d] listens there too)", ap, j)
			continue
		}
		seen[ap] = i
	}
}

// checkAllowHost says what is wrong with an allow entry's host, or "".
func checkAllowHost(host string) string {
	const want = `want an exact name ("example.com"), "*." and a name with a dot ("*.example.com"), or an IP address`
	switch {
	case host == "":
		return "required: " + want
	case strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]"):
		return fmt.Sprintf("%q: write IPv6 addresses without brackets", host)
	case strings.Contains(host, "/"):
		return fmt.Sprintf("%q: address ranges are not supported; %s", host, want)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		if addr.Zone() != "" {
			return fmt.Sprintf("%q: an IP address with a zone is not supported", host)
		}
		return ""
	}
	if strings.Count(host, ":") == 1 {
		return fmt.Sprintf("%q: put the port in ports, not in host", host)
	}
	if suffix, ok := strings.CutPrefix(host, "*."); ok {
		if validDNSName(suffix) && strings.Contains(suffix, ".") {
			return ""
		}
		return fmt.Sprintf("%q is not a valid wildcard: %s", host, want)
	}
	if validDNSName(host) {
		return ""
	}
	return fmt.Sprintf("%q is not a valid host: %s", host, want)
}

func (v *validator) lifecycle(l *Lifecycle) {
	if l.SessionIdle <= 0 {
		v.bad("lifecycle.session_idle", "must be more than 0, not %s", l.SessionIdle)
	}
	if l.SessionMax <= 0 {
		v.bad("lifecycle.session_max", "must be more than 0, not %s", l.SessionMax)
	}
	if l.SessionIdle > 0 && l.SessionMax > 0 && l.SessionIdle > l.SessionMax {
		v.bad("lifecycle.session_idle", "%s is longer than session_max (%s)", l.SessionIdle, l.SessionMax)
	}
}

func (v *validator) environment(e *Environment) {
	for i, name := range e.Pass {
		if !validEnvName(strings.TrimSuffix(name, "*")) {
			v.bad(fmt.Sprintf("environment.pass[%d]", i), `%q is not a variable name: want letters, digits and underscores, not starting with a digit, optionally ending in "*" to pass every variable with that prefix`, name)
		}
	}
	for _, name := range sortedKeys(e.Set) {
		key := joinKey("environment.set", name)
		if !validEnvName(name) {
			v.bad(key, "%q is not a variable name: want letters, digits and underscores, not starting with a digit", name)
		}
		if value, fixed := fixedEnv[name]; fixed {
			v.bad(key, "hutch sets %s itself (to %s), after environment.set; --env %s=... overrides it for one run", name, value, name)
		}
		if strings.IndexByte(e.Set[name], 0) >= 0 {
			v.bad(key, "the value contains a NUL byte")
		}
	}
}

// fixedEnv are the variables hutch always sets inside (see CommandEnv).
var fixedEnv = map[string]string{
	"HOME":    SandboxHome,
	"USER":    "sandbox",
	"LOGNAME": "sandbox",
	"SHELL":   "/bin/sh",
}

func (v *validator) seccomp(s *Seccomp) {
	if s.Profile != "" && s.Profile != SeccompDefault && !filepath.IsAbs(s.Profile) {
		v.bad("seccomp.profile", "must be %q (hutch's built-in profile) or the absolute path of a seccomp profile, not %q", SeccompDefault, s.Profile)
	}
}

func hasDotDot(path string) bool {
	for _, part := range strings.Split(path, "/") {
		if part == ".." {
			return true
		}
	}
	return false
}

// validLabel reports whether s is an RFC 1123 label: 1 to 63 letters, digits
// and hyphens, not starting or ending with a hyphen.
func validLabel(s string) bool {
	if len(s) < 1 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validLabels(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for _, l := range strings.Split(s, ".") {
		if !validLabel(l) {
			return false
		}
	}
	return true
}

func validHostname(s string) bool { return validLabels(s, MaxHostname) }

// validDNSName reports whether s is a DNS name written without the trailing
// dot, whose last label is not all digits (so it cannot pass for an IPv4
// address).
func validDNSName(s string) bool {
	if !validLabels(s, 253) {
		return false
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	return strings.Trim(last, "0123456789") != ""
}

func validEnvName(s string) bool {
	if s == "" || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
