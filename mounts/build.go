package mounts

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Spec is what the plan builder needs to know, resolved on the host.
type Spec struct {
	// Tooling is "host" or "rootfs:DIR".
	Tooling string
	// Workspace is the absolute, symlink-free host path of the workspace.
	Workspace string
	// WorkspaceMount is where it appears inside (e.g. /workspace).
	WorkspaceMount string
	// Protected are the protected paths, resolved by PrepareProtected.
	Protected *Protection
	// ReadOnly lists extra read-only binds (host source, inside target).
	ReadOnly [][2]string
	// Home is the sandbox user's home directory inside.
	Home                       string
	TmpSize, HomeSize, ShmSize int64
	Sys                        bool
	// Identity, for the synthesized /etc files.
	UID, GID int
	User     string
	Hostname string
}

// HostToolingDirs are the host directories that make up tooling mode "host".
// Where the host has merged-/usr symlinks (/bin -> usr/bin), the sandbox gets
// the same symlinks.
var HostToolingDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// HostEtc is the curated part of the host's /etc that tooling mode "host"
// exposes: what dynamic linking, TLS, time zones, shells and interpreters
// need, and nothing of the host's users, secrets or services.
var HostEtc = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d",
	"ssl", "ca-certificates", "ca-certificates.conf", "pki",
	"alternatives", "localtime", "timezone",
	"os-release", "debian_version", "lsb-release",
	"protocols", "services", "mime.types", "magic", "magic.mime",
	"bash.bashrc", "inputrc", "profile", "environment.d",
	"perl", "gai.conf", "host.conf", "locale.alias", "locale.gen",
	"manpath.config", "gitattributes",
}

// HostEtcGlobs are patterns in the host's /etc exposed as well.
var HostEtcGlobs = []string{"python3*", "gcc*"}

// synthesized are the /etc names hutch writes itself.
var synthesized = map[string]bool{
	"passwd": true, "group": true, "hostname": true, "hosts": true,
	"resolv.conf": true, "nsswitch.conf": true, "mtab": true,
	"shadow": true, "gshadow": true, "subuid": true, "subgid": true,
}

// rootfsSkip are top-level names of a rootfs directory that hutch provides
// itself rather than binding.
var rootfsSkip = map[string]bool{
	"proc": true, "dev": true, "sys": true, "tmp": true, "run": true,
	"home": true, "root": true, "etc": true, "workspace": true,
	"mnt": true, "media": true, "lost+found": true, "boot": true, "var": true,
}

// Build turns a spec into a plan. It reads the host (which tooling dirs
// exist, which /etc entries) but changes nothing.
func Build(s *Spec) (*Plan, error) {
	p := &Plan{RootSize: 4 << 20}
	etcSrc := "/etc"
	switch {
	case s.Tooling == "host" || s.Tooling == "":
		for _, d := range HostToolingDirs {
			if err := addHostEntry(p, d, d, "tooling"); err != nil {
				return nil, err
			}
		}
	case strings.HasPrefix(s.Tooling, "rootfs:"):
		dir := strings.TrimPrefix(s.Tooling, "rootfs:")
		ents, err := os.ReadDir(dir)
		if err != nil {
			return nil, fmt.Errorf("tooling rootfs %s: %w", dir, err)
		}
		for _, e := range ents {
			if rootfsSkip[e.Name()] {
				continue
			}
			if err := addHostEntry(p, filepath.Join(dir, e.Name()), "/"+e.Name(), "tooling rootfs"); err != nil {
				return nil, err
			}
		}
		etcSrc = filepath.Join(dir, "etc")
		p.Add(Step{Kind: Mkdir, Target: "/var", Mode: 0o755})
	default:
		return nil, fmt.Errorf("tooling %q: want \"host\" or \"rootfs:DIR\"", s.Tooling)
	}
	if err := addEtc(p, s, etcSrc); err != nil {
		return nil, err
	}

	// /proc: the sandbox's own, with the entries that reveal or control the
	// host kernel masked or read-only.
	p.Add(Step{Kind: Proc, Target: "/proc", Why: "procfs of the sandbox's pid namespace"})
	for _, f := range []string{"kcore", "keys", "timer_list", "timer_stats", "sched_debug", "latency_stats", "kallsyms", "kmsg", "config.gz", "vmallocinfo", "pagetypeinfo"} {
		p.Add(Step{Kind: MaskFile, Target: "/proc/" + f, Why: "masked host kernel information"})
	}
	for _, d := range []string{"acpi", "asound", "scsi", "firmware", "driver"} {
		p.Add(Step{Kind: MaskDir, Target: "/proc/" + d, Why: "masked host hardware information"})
	}
	for _, d := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		p.Add(Step{Kind: ReadOnly, Target: "/proc/" + d, Why: "host kernel controls, read-only"})
	}

	// /dev: a tmpfs with the harmless character devices bound from the host
	// (mknod is impossible in a user namespace), a private devpts and shm.
	p.Add(Step{Kind: Tmpfs, Target: "/dev", Mode: 0o755, Size: 1 << 20, Why: "minimal /dev"})
	for _, d := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		p.Add(Step{Kind: Bind, Source: "/dev/" + d, Target: "/dev/" + d, Why: "device node"})
	}
	p.Add(Step{Kind: Devpts, Target: "/dev/pts", Why: "private pseudo-terminals"})
	p.Add(Step{Kind: Symlink, Target: "/dev/ptmx", Data: "pts/ptmx"})
	p.Add(Step{Kind: Tmpfs, Target: "/dev/shm", Mode: 0o1777, Size: s.ShmSize, Why: "/dev/shm"})
	for _, l := range [][2]string{{"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"}, {"stderr", "/proc/self/fd/2"}} {
		p.Add(Step{Kind: Symlink, Target: "/dev/" + l[0], Data: l[1]})
	}
	p.Add(Step{Kind: Seal, Target: "/dev", Why: "/dev read-only after setup"})

	if s.Sys {
		p.Add(Step{Kind: Sysfs, Target: "/sys", Why: "read-only sysfs (filesystem.sys)"})
	}
	// A marker for tools that want to know they are sandboxed (like
	// /.dockerenv). It exists but, being outside every Landlock grant, is
	// not readable: a visible file that Landlock alone keeps closed.
	p.Add(Step{Kind: File, Target: "/.hutchenv", Mode: 0o444, Data: "hutch\n"})
	p.Add(Step{Kind: Tmpfs, Target: "/tmp", Mode: 0o1777, Size: s.TmpSize, Why: "scratch /tmp"})
	p.Add(Step{Kind: Symlink, Target: "/var/tmp", Data: "/tmp"})
	p.Add(Step{Kind: Mkdir, Target: "/run", Mode: 0o755})
	p.Add(Step{Kind: Tmpfs, Target: s.Home, Mode: 0o755, Size: s.HomeSize, Why: "sandbox HOME"})

	p.Add(Step{Kind: Bind, Source: s.Workspace, Target: s.WorkspaceMount, Why: "workspace (read-write)"})
	if s.Protected != nil {
		p.Add(s.Protected.Steps...)
	}
	for _, b := range s.ReadOnly {
		p.Add(Step{Kind: Bind, Source: b[0], Target: b[1], ReadOnly: true, Why: "extra read-only bind"})
	}
	stage, err := pickStage(p)
	if err != nil {
		return nil, err
	}
	p.Stage = stage
	return p, nil
}

// stageCandidates are host directories the new root may be built on.
var stageCandidates = []string{"/tmp", "/mnt", "/media", "/srv", "/boot", "/var/tmp", "/run", "/var", "/home"}

// pickStage returns the first candidate that is a real directory and that
// no bind source contains (a source that is the candidate or one of its
// parent directories, such as a workspace at /tmp, would see the half-built
// root through its recursive bind). Directories are compared by device and
// inode, so symlinks and other bind mounts of the same directory count; one
// stat per source instead of resolving every source's path.
func pickStage(p *Plan) (string, error) {
	type dirID struct{ dev, ino uint64 }
	sources := map[dirID]bool{}
	for _, s := range p.Steps {
		var st unix.Stat_t
		if s.Kind == Bind && unix.Stat(s.Source, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			sources[dirID{uint64(st.Dev), st.Ino}] = true // (a missing or non-directory source contains nothing)
		}
	}
next:
	for _, c := range stageCandidates {
		var st unix.Stat_t
		if unix.Lstat(c, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		for d := c; ; d = filepath.Dir(d) {
			if unix.Stat(d, &st) == nil && sources[dirID{uint64(st.Dev), st.Ino}] {
				continue next
			}
			if d == "/" {
				break
			}
		}
		return c, nil
	}
	return "", fmt.Errorf("no directory to build the sandbox's root on: every one of %v is missing or inside a bind source; choose a workspace elsewhere", stageCandidates)
}

// addHostEntry binds a host directory or file read-only, or recreates a
// symlink, at target. Missing entries are skipped.
func addHostEntry(p *Plan, src, target, why string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", why, src, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		to, err := os.Readlink(src)
		if err != nil {
			return fmt.Errorf("%s %s: %w", why, src, err)
		}
		p.Add(Step{Kind: Symlink, Target: target, Data: to})
		return nil
	}
	if !fi.IsDir() && !fi.Mode().IsRegular() {
		return nil
	}
	p.Add(Step{Kind: Bind, Source: src, Target: target, ReadOnly: true, Optional: true, Why: why})
	return nil
}

func addEtc(p *Plan, s *Spec, etcSrc string) error {
	p.Add(Step{Kind: Mkdir, Target: "/etc", Mode: 0o755})
	var names []string
	if etcSrc == "/etc" {
		names = append(names, HostEtc...)
		// One directory read for every glob (filepath.Glob reads it per
		// pattern), of the names only.
		var ents []string
		if d, err := os.Open(etcSrc); err == nil {
			ents, _ = d.Readdirnames(-1)
			d.Close()
		}
		for _, e := range ents {
			for _, g := range HostEtcGlobs {
				if ok, _ := filepath.Match(g, e); ok {
					names = append(names, e)
					break
				}
			}
		}
	} else {
		ents, err := os.ReadDir(etcSrc)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("tooling rootfs /etc: %w", err)
		}
		for _, e := range ents {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	for _, n := range names {
		if synthesized[n] {
			continue
		}
		if err := addHostEntry(p, filepath.Join(etcSrc, n), "/etc/"+n, "tooling /etc"); err != nil {
			return err
		}
	}
	user := s.User
	p.Add(
		Step{Kind: File, Target: "/etc/passwd", Data: fmt.Sprintf(
			"root:x:0:0:root:/root:/usr/sbin/nologin\n%s:x:%d:%d:hutch sandbox user:%s:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
			user, s.UID, s.GID, s.Home)},
		Step{Kind: File, Target: "/etc/group", Data: fmt.Sprintf(
			"root:x:0:\n%s:x:%d:\nnogroup:x:65534:\n", user, s.GID)},
		Step{Kind: File, Target: "/etc/hostname", Data: s.Hostname + "\n"},
		Step{Kind: File, Target: "/etc/hosts", Data: fmt.Sprintf(
			"127.0.0.1\tlocalhost %s\n::1\tlocalhost ip6-localhost ip6-loopback\n", s.Hostname)},
		// The supervisor answers DNS on the sandbox's loopback (and refuses).
		Step{Kind: File, Target: "/etc/resolv.conf", Data: "nameserver 127.0.0.1\noptions attempts:1 timeout:1\n"},
		Step{Kind: File, Target: "/etc/nsswitch.conf", Data: "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n"},
		Step{Kind: Symlink, Target: "/etc/mtab", Data: "../proc/self/mounts"},
	)
	return nil
}

// Protection is the result of preparing the workspace's protected paths.
type Protection struct {
	// Steps pin and protect the paths inside the sandbox.
	Steps []Step
	// Placeholders are the host paths hutch created as mount points for
	// protected paths that did not exist; Cleanup removes them.
	Placeholders []string
}

// PrepareProtected inspects the workspace on the host and returns the steps
// that keep each protected path read-only inside and each hidden path
// covered by an empty read-only directory (hutch's own directories, see
// package hostdirs). A missing protected path gets an empty placeholder
// directory on the host (the only way to have a mount point there), covered
// read-only inside so it cannot be created; a symlink anywhere along a
// protected or hidden path is refused, since sandboxed code could retarget
// it. Every existing directory on the way is pinned (made a mount point) so
// that it cannot be renamed away and recreated.
func PrepareProtected(workspace, mountAt string, protected, hidden []string) (*Protection, error) {
	w := &protectWalk{workspace: workspace, mountAt: mountAt, pinned: map[string]bool{}, done: map[string]bool{}, pr: &Protection{}}
	for _, rel := range protected {
		if err := w.walk(rel, Protect, "protected path "+rel, "placeholder for missing protected path "+rel); err != nil {
			return w.pr, err
		}
	}
	for _, rel := range hidden {
		if err := w.walk(rel, Hide, "hutch's own directory, hidden", "hutch's own directory, hidden"); err != nil {
			return w.pr, err
		}
	}
	// Pins first (shallow to deep), then the leaves: a recursive self-bind
	// made later would copy the read-only mounts beneath it.
	sort.SliceStable(w.pins, func(a, b int) bool { return len(w.pins[a].Target) < len(w.pins[b].Target) })
	w.pr.Steps = append(w.pins, w.leaves...)
	return w.pr, nil
}

// protectWalk is PrepareProtected's state.
type protectWalk struct {
	workspace, mountAt string
	pr                 *Protection
	pinned             map[string]bool
	done               map[string]bool // paths walked already
	placed             []string
	pins, leaves       []Step
}

// walk resolves rel component by component without following symlinks,
// pinning existing directories and ending with a leaf step of kind.
func (w *protectWalk) walk(rel string, kind Kind, why, whyPlaceholder string) error {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") {
		return fmt.Errorf("protected path %q: want a path relative to the workspace", rel)
	}
	if coveredBy(clean, w.placed) || w.done[clean] {
		return nil // a placeholder above it already makes it uncreatable, or listed twice
	}
	w.done[clean] = true
	comps := strings.Split(clean, "/")
	dirfd, err := unix.Open(w.workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", w.workspace, err)
	}
	defer func() { unix.Close(dirfd) }()
	cur := ""
	for i, c := range comps {
		cur = filepath.Join(cur, c)
		inside := filepath.Join(w.mountAt, cur)
		var st unix.Stat_t
		err := unix.Fstatat(dirfd, c, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dirfd, c, 0o755); err != nil {
				return fmt.Errorf("protected path %s: create placeholder %s: %w", rel, cur, err)
			}
			w.pr.Placeholders = append(w.pr.Placeholders, filepath.Join(w.workspace, cur))
			w.placed = append(w.placed, cur)
			w.leaves = append(w.leaves, Step{Kind: kind, Target: inside, NoSymlinks: true, Why: whyPlaceholder})
			return nil
		}
		if err != nil {
			return fmt.Errorf("protected path %s: stat %s: %w", rel, cur, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK && kind == Hide {
			return fmt.Errorf("hutch's own directory %s in the workspace: %s is a symlink, which sandboxed code could retarget; use a workspace that does not contain hutch's directories (XDG_CACHE_HOME, XDG_STATE_HOME, XDG_RUNTIME_DIR)", rel, cur)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return fmt.Errorf("protected path %s: %s is a symlink, which hutch cannot protect; replace it with a real file or directory, or remove %q from filesystem.protected", rel, cur, rel)
		}
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		if i == len(comps)-1 || !isDir {
			if kind == Hide && !isDir {
				return fmt.Errorf("hutch's own directory %s in the workspace: %s is not a directory", rel, cur)
			}
			w.leaves = append(w.leaves, Step{Kind: kind, Target: inside, NoSymlinks: true, Why: why})
			return nil
		}
		if !w.pinned[cur] {
			w.pinned[cur] = true
			w.pins = append(w.pins, Step{Kind: Pin, Target: inside, NoSymlinks: true, Why: "pin parent of " + why})
		}
		next, err := unix.Openat(dirfd, c, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("protected path %s: open %s: %w", rel, cur, err)
		}
		unix.Close(dirfd)
		dirfd = next
	}
	return nil
}

func coveredBy(rel string, placed []string) bool {
	for _, p := range placed {
		if rel == p || strings.HasPrefix(rel, p+"/") {
			return true
		}
	}
	return false
}

// Cleanup removes the placeholders PrepareProtected created, if they are
// still empty directories. It reports what it could not remove and keeps
// those, so a later call can try again.
func (pr *Protection) Cleanup() error {
	var errs []error
	var left []string
	for i := len(pr.Placeholders) - 1; i >= 0; i-- {
		p := pr.Placeholders[i]
		if err := unix.Rmdir(p); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("remove protected-path placeholder %s: %w", p, err))
			left = append([]string{p}, left...)
		}
	}
	pr.Placeholders = left
	return errors.Join(errs...)
}
