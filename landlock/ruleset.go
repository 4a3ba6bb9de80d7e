package landlock

import (
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	golandlock "github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// Rules is what the sandboxed command may reach. Paths are absolute and as
// the sandbox sees them. A path grants access to itself and, for a
// directory, to everything beneath it. Grants are a union: a path listed
// twice, or beneath another listed path, gets the rights of both.
type Rules struct {
	// ReadExec trees may be read and executed (the tooling: /usr, /bin, /lib*).
	ReadExec []string
	// ReadOnly trees or files may be read, not executed or changed (/etc, /proc).
	ReadOnly []string
	// ListOnly directories (and the directories beneath them) may be listed
	// and traversed, but their files are not readable through this rule
	// (the sandbox's own root, so that `ls /` works).
	ListOnly []string
	// ReadWrite trees get every filesystem right: read, write, execute,
	// create, remove, rename, truncate, device ioctl (/workspace, /tmp, HOME,
	// /dev/shm).
	ReadWrite []string
	// ReadWriteFiles are files (or trees of them) that may be read, written,
	// truncated and ioctl'd but not created, removed or executed: the device
	// nodes /dev/null, /dev/zero, /dev/tty, /dev/ptmx, and the /dev/pts tree.
	ReadWriteFiles []string
	// TCP restricts TCP connect and bind (Landlock ABI 4) to ConnectTCP and
	// BindTCP. Without it Landlock leaves TCP alone: a sandbox in a network
	// namespace of its own has only its own loopback to reach, where every
	// port is its own (and the egress proxy the only way out).
	TCP bool
	// ConnectTCP lists the TCP ports the command may connect to, with TCP.
	// Empty: no TCP connect at all.
	ConnectTCP []uint16
	// BindTCP lists the TCP ports the command may bind, with TCP. Empty: no
	// TCP bind.
	BindTCP []uint16
	// ScopeAbstractUnix denies connecting to abstract unix sockets created
	// outside the sandbox's Landlock domain.
	ScopeAbstractUnix bool
	// ScopeSignal denies signals to processes outside the domain.
	ScopeSignal bool
}

// Report says, in plain words, what the kernel applies.
type Report struct {
	// ABI is the Landlock ABI the ruleset was built for (the kernel's).
	ABI int
	// Enforced lists the restrictions the ruleset carries.
	Enforced []string
	// NotEnforced lists restrictions that this kernel cannot apply, limits
	// of Landlock itself, and the skipped paths.
	NotEnforced []string
	// Skipped lists the paths that got no rule (they do not exist, or could
	// not be opened), also included in NotEnforced. A skipped path is
	// inaccessible to the sandbox; skipping never widens access.
	Skipped []string
}

// Gap is a restriction the kernel's ABI cannot apply.
type Gap struct {
	// What names the restriction as a verb phrase: "restrict TCP connect and bind".
	What string
	// NeedABI is the first ABI that can apply it.
	NeedABI int
}

// StrictError is returned by Build in strict mode when the kernel cannot
// enforce every restriction the Rules ask for.
type StrictError struct {
	// ABI is the kernel's ABI.
	ABI int
	// Reason says why the ABI is 0, when it is and the reason is known.
	Reason string
	// Missing lists what cannot be enforced.
	Missing []Gap
}

func (e *StrictError) Error() string {
	if e.ABI == 0 {
		why := ""
		if e.Reason != "" {
			why = ": " + e.Reason
		}
		return fmt.Sprintf("landlock: this kernel has no usable Landlock (ABI 0%s), so it cannot restrict filesystem access, TCP or scopes (needs Linux 5.13+ with Landlock enabled); "+
			"set enforcement = \"best-effort\" or enable Landlock (CONFIG_SECURITY_LANDLOCK=y and landlock in the lsm= boot parameter)", why)
	}
	parts := make([]string, len(e.Missing))
	for i, g := range e.Missing {
		parts[i] = fmt.Sprintf("%s (needs ABI %d, Linux %s+)", g.What, g.NeedABI, linuxVersion[g.NeedABI])
	}
	return fmt.Sprintf("landlock: kernel Landlock ABI %d cannot %s; set enforcement = \"best-effort\" or upgrade the kernel",
		e.ABI, strings.Join(parts, ", nor "))
}

// Rights hutch grants by name, beyond those of ABI 1.
const (
	fsTruncate = ll.AccessFSTruncate // ABI 3
	fsIoctlDev = ll.AccessFSIoctlDev // ABI 5

	// fileRights are the only rights a rule on a non-directory may carry.
	fileRights = ll.AccessFSExecute | ll.AccessFSWriteFile | ll.AccessFSReadFile | fsTruncate | fsIoctlDev
)

// rights is the rights computation for one ABI.
type rights struct {
	// handled access and scopes for landlock_create_ruleset.
	fs, net, scoped uint64
	// rights granted per rule type, for a directory. A non-directory gets
	// the same masked with fileRights.
	readExec, readOnly, listOnly, readWrite, readWriteFiles uint64
}

// abiConfig returns go-landlock's configuration for ABI abi (1 to
// MaxKnownABI): every filesystem and network right and every scope that ABI
// knows.
func abiConfig(abi int) golandlock.Config {
	switch abi {
	case 1:
		return golandlock.V1
	case 2:
		return golandlock.V2
	case 3:
		return golandlock.V3
	case 4:
		return golandlock.V4
	case 5:
		return golandlock.V5
	case 6:
		return golandlock.V6
	}
	return golandlock.V7
}

// rightsFor computes the rights for ABI abi (0: none; above MaxKnownABI:
// as MaxKnownABI): it handles every right and scope the ABI knows and
// grants the subsets below.
func rightsFor(abi int) rights {
	var r rights
	if abi < 1 {
		return r
	}
	c := abiConfig(min(abi, MaxKnownABI))
	r.fs, r.net, r.scoped = uint64(c.HandledAccessFS), uint64(c.HandledAccessNet), uint64(c.Scoped)
	r.readExec = r.fs & (ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSExecute)
	r.readOnly = r.fs & (ll.AccessFSReadFile | ll.AccessFSReadDir)
	r.listOnly = r.fs & ll.AccessFSReadDir
	r.readWrite = r.fs
	r.readWriteFiles = r.fs & (ll.AccessFSReadFile | ll.AccessFSWriteFile | ll.AccessFSReadDir | fsTruncate | fsIoctlDev)
	return r
}

// gaps lists what ABI abi cannot enforce of r. required gaps make strict
// mode fail; the others are only reported.
func gaps(abi int, r Rules) (required []Gap, reported []string) {
	v := func(n int) string {
		return fmt.Sprintf("needs Landlock ABI %d (Linux %s+); this kernel has %d", n, linuxVersion[n], abi)
	}
	if abi < 2 {
		reported = append(reported, "moving or hard-linking files between directories is denied everywhere, even in read-write trees (EXDEV): allowing it "+v(2))
	}
	if abi < 3 {
		required = append(required, Gap{What: "restrict file truncation", NeedABI: 3})
		reported = append(reported, "file truncation is not restricted: any file the uid may write can be truncated, even outside the allowed paths; restricting it "+v(3))
	}
	if abi < 4 && r.TCP {
		required = append(required, Gap{What: "restrict TCP connect and bind", NeedABI: 4})
		reported = append(reported, "TCP connect and bind are not restricted by Landlock (only by the network namespace); restricting them "+v(4))
	}
	if abi < 5 {
		// Not required: hutch grants device ioctl on every device node it
		// exposes read-write, so only devices reachable through a read-only
		// or read+exec rule differ, and hutch exposes none there.
		reported = append(reported, "ioctl on device files is not restricted; restricting it "+v(5))
	}
	if abi < 6 {
		if r.ScopeAbstractUnix {
			required = append(required, Gap{What: "scope abstract unix sockets", NeedABI: 6})
			reported = append(reported, "abstract unix sockets outside the sandbox stay reachable; scoping them "+v(6))
		}
		if r.ScopeSignal {
			required = append(required, Gap{What: "scope signals", NeedABI: 6})
			reported = append(reported, "processes outside the sandbox (same uid) can still be signalled; scoping signals "+v(6))
		}
	}
	return required, reported
}

// Build creates a Landlock ruleset for r, for the running kernel, and
// returns its file descriptor (O_CLOEXEC) without restricting the caller.
// See buildForABI.
func Build(r Rules, strict bool) (fd int, rep Report, err error) {
	return BuildBeneath(-1, r, strict)
}

// BuildBeneath is Build with the rules' paths resolved beneath the
// directory root (an O_PATH descriptor of another mount tree, such as a
// sandbox's root before any sandboxed code runs), as if root were "/":
// symlinks and ".." cannot leave it. root -1 means the caller's "/".
func BuildBeneath(root int, r Rules, strict bool) (fd int, rep Report, err error) {
	abi, reason := kernelABI()
	return buildForABI(root, abi, reason, r, strict)
}

// buildForABI builds the ruleset as if the kernel had ABI abi: it handles
// every filesystem right that ABI knows (anything not granted is denied),
// TCP bind and connect from ABI 4, the requested scopes from ABI 6. A kernel
// with a higher ABI accepts such a ruleset, which lets tests exercise the
// best-effort paths of older kernels.
//
// With abi 0 it returns fd -1. In strict mode it returns fd -1 and a
// *StrictError when a required restriction cannot be enforced; otherwise
// the Report lists what is missing. Paths that cannot be opened are skipped
// and listed in Report.Skipped, in both modes.
func buildForABI(root, abi int, reason string, r Rules, strict bool) (int, Report, error) {
	rep := Report{ABI: abi}
	for _, list := range [][]string{r.ReadExec, r.ReadOnly, r.ListOnly, r.ReadWrite, r.ReadWriteFiles} {
		for _, p := range list {
			if !filepath.IsAbs(p) {
				return -1, rep, fmt.Errorf("landlock: path %q is not absolute", p)
			}
		}
	}
	limits := "UDP, raw sockets and connecting to unix sockets by path are not covered by Landlock at any ABI (hutch relies on the network namespace, seccomp and the mount layer)"
	if abi < 1 {
		if reason == "" {
			reason = "no usable Landlock"
		}
		rep.NotEnforced = append(rep.NotEnforced, "Landlock is not available ("+reason+"): no filesystem, TCP or scope restriction is applied by Landlock")
		if strict {
			return -1, rep, &StrictError{ABI: abi, Reason: reason}
		}
		return -1, rep, nil
	}
	required, reported := gaps(abi, r)
	if abi > MaxKnownABI {
		reported = append(reported, fmt.Sprintf("kernel Landlock ABI %d is newer than hutch knows; only ABI %d features are used", abi, MaxKnownABI))
	}
	rep.NotEnforced = append(rep.NotEnforced, reported...)
	rep.NotEnforced = append(rep.NotEnforced, limits)
	if strict && len(required) > 0 {
		return -1, rep, &StrictError{ABI: abi, Missing: required}
	}

	rt := rightsFor(abi)
	if !r.TCP {
		rt.net = 0 // TCP not handled: every port allowed
	}
	// go-landlock passes the whole attribute struct, the fields of newer
	// ABIs included; those are zero here (net before ABI 4, scoped before
	// ABI 6, the quiet masks always), and the kernel accepts a larger
	// struct whose extra bytes are zero (copy_struct_from_user).
	attr := ll.RulesetAttr{HandledAccessFS: rt.fs, HandledAccessNet: rt.net}
	if r.ScopeAbstractUnix {
		attr.Scoped |= rt.scoped & ll.ScopeAbstractUnixSocket
	}
	if r.ScopeSignal {
		attr.Scoped |= rt.scoped & ll.ScopeSignal
	}
	fd, err := ll.LandlockCreateRuleset(&attr, 0)
	if err != nil {
		return -1, rep, fmt.Errorf("landlock: create ruleset (ABI %d): %w", abi, err)
	}
	fail := func(err error) (int, Report, error) {
		unix.Close(fd)
		return -1, rep, err
	}

	groups := []struct {
		name   string
		paths  []string
		access uint64
	}{
		{"read+execute", r.ReadExec, rt.readExec},
		{"read-only", r.ReadOnly, rt.readOnly},
		{"list-only", r.ListOnly, rt.listOnly},
		{"read-write", r.ReadWrite, rt.readWrite},
		{"read-write files (no create/remove/execute)", r.ReadWriteFiles, rt.readWriteFiles},
	}
	rep.Enforced = append(rep.Enforced, fmt.Sprintf("filesystem: access only beneath the listed paths (Landlock ABI %d)", abi))
	for _, g := range groups {
		var added []string
		for _, p := range g.paths {
			ok, skip, err := addPathRule(fd, root, p, g.access)
			if err != nil {
				return fail(err)
			}
			if ok {
				added = append(added, p)
			} else {
				rep.Skipped = append(rep.Skipped, skip)
				rep.NotEnforced = append(rep.NotEnforced, skip)
			}
		}
		if len(added) > 0 {
			rep.Enforced = append(rep.Enforced, g.name+": "+strings.Join(added, ", "))
		}
	}
	if abi >= 2 {
		rep.Enforced = append(rep.Enforced, "moving and linking files between directories: only within read-write trees")
	}
	if abi >= 3 {
		rep.Enforced = append(rep.Enforced, "file truncation: only in read-write trees and read-write files")
	}
	if abi >= 5 {
		rep.Enforced = append(rep.Enforced, "ioctl on device files: only in read-write trees and read-write files")
	}

	if rt.net != 0 {
		ports := map[uint16]uint64{}
		for _, p := range r.ConnectTCP {
			ports[p] |= ll.AccessNetConnectTCP
		}
		for _, p := range r.BindTCP {
			ports[p] |= ll.AccessNetBindTCP
		}
		keys := make([]int, 0, len(ports))
		for p := range ports {
			keys = append(keys, int(p))
		}
		sort.Ints(keys)
		for _, p := range keys {
			if err := addPortRule(fd, uint16(p), ports[uint16(p)]); err != nil {
				return fail(err)
			}
		}
		rep.Enforced = append(rep.Enforced, "TCP connect: "+portList(r.ConnectTCP), "TCP bind: "+portList(r.BindTCP))
	}
	if attr.Scoped&ll.ScopeAbstractUnixSocket != 0 {
		rep.Enforced = append(rep.Enforced, "abstract unix sockets: only those created inside the sandbox can be connected to")
	}
	if attr.Scoped&ll.ScopeSignal != 0 {
		rep.Enforced = append(rep.Enforced, "signals: only processes inside the sandbox can be signalled")
	}
	return fd, rep, nil
}

func portList(ports []uint16) string {
	if len(ports) == 0 {
		return "denied on every port"
	}
	s := make([]string, len(ports))
	for i, p := range ports {
		s[i] = strconv.Itoa(int(p))
	}
	return "allowed only to port(s) " + strings.Join(s, ", ")
}

// addPathRule adds a path-beneath rule. A path that cannot be opened is
// skipped (ok false, skip says why): leaving it out only removes access.
func addPathRule(rulesetFD, root int, path string, access uint64) (ok bool, skip string, err error) {
	pfd, err := openPath(root, path)
	if err != nil {
		if err == unix.ENOENT {
			return false, fmt.Sprintf("path %s does not exist; skipped", path), nil
		}
		return false, fmt.Sprintf("path %s cannot be opened (%v); skipped", path, err), nil
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return false, "", fmt.Errorf("landlock: stat %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= fileRights
	}
	if access == 0 {
		return false, fmt.Sprintf("path %s gets no right this ABI knows; skipped", path), nil
	}
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &ll.PathBeneathAttr{AllowedAccess: access, ParentFd: pfd}, 0); err != nil {
		return false, "", fmt.Errorf("landlock: add rule for %s (access 0x%x): %w", path, access, err)
	}
	return true, "", nil
}

// openPath opens path O_PATH, beneath root when root >= 0.
func openPath(root int, path string) (int, error) {
	if root < 0 {
		return unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	}
	rel := strings.TrimPrefix(filepath.Clean(path), "/")
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
		if err != unix.EAGAIN && err != unix.EINTR {
			return fd, err
		}
	}
}

func addPortRule(rulesetFD int, port uint16, access uint64) error {
	if err := ll.LandlockAddNetPortRule(rulesetFD, &ll.NetPortAttr{AllowedAccess: access, Port: uint64(port)}, 0); err != nil {
		return fmt.Errorf("landlock: add rule for TCP port %d (access 0x%x): %w", port, access, err)
	}
	return nil
}

// AddOpenFileRule grants, in the ruleset rulesetFD, the access the open
// file fd was opened with (reading; writing and truncating) to the file
// behind it, wherever it lies: a caller's standard stream that a command
// may reopen through /dev/stdin, /dev/stdout or /dev/stderr. The kernel
// reopens /proc/self/fd/N by the file's own path, which Landlock checks
// like any other, so a file outside the sandbox's trees (the caller's
// `> /tmp/out`) is otherwise refused, though the command holds it open.
// The rule gives no more than the descriptor does. Only regular files and
// named pipes get one (anonymous pipes and sockets are not checked by
// path; terminals and devices are the sandbox's own); ok is false for
// anything else, or when this kernel has no Landlock.
func AddOpenFileRule(rulesetFD, fd int) (ok bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("landlock: stat descriptor %d: %w", fd, err)
	}
	if t := st.Mode & unix.S_IFMT; t != unix.S_IFREG && t != unix.S_IFIFO {
		return false, nil
	}
	fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return false, fmt.Errorf("landlock: descriptor %d's mode: %w", fd, err)
	}
	abi, _ := kernelABI()
	var want uint64
	switch fl & unix.O_ACCMODE {
	case unix.O_RDONLY:
		want = ll.AccessFSReadFile
	case unix.O_WRONLY:
		want = ll.AccessFSWriteFile | fsTruncate
	case unix.O_RDWR:
		want = ll.AccessFSReadFile | ll.AccessFSWriteFile | fsTruncate
	}
	access := rightsFor(abi).fs & fileRights & want
	if access == 0 {
		return false, nil
	}
	if err := ll.LandlockAddPathBeneathRule(rulesetFD, &ll.PathBeneathAttr{AllowedAccess: access, ParentFd: fd}, 0); err != nil {
		if err == unix.EBADFD {
			return false, nil // on a file system Landlock does not take rules on
		}
		return false, fmt.Errorf("landlock: add rule for descriptor %d (access 0x%x): %w", fd, access, err)
	}
	return true, nil
}
