package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
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
	// Caches are the persistent caches, bound read-write.
	Caches []CacheBind
	// Home is the sandbox user's home directory inside.
	Home                       string
	TmpSize, HomeSize, ShmSize int64
	Sys                        bool
	// Identity, for the synthesized /etc files.
	UID, GID int
	User     string
	Hostname string
	// FS is the host's file tree as Build reads it; nil means OS.
	FS HostFS
	// Review, when set, is the writable layer the workspace's writes land
	// in: the workspace is then the lower layer of an overlay mounted at
	// WorkspaceMount instead of a read-write bind (package review).
	Review *Layer
	// Build, when set, is the root of an image build's run step (hutch
	// image build; never from a policy): Tooling is ignored, and every
	// top-level directory of Build.Root except those hutch provides
	// (buildSkip) is the lower layer of an overlay (with Build.Layers, the
	// parent's layers' directories that make it are) whose writable layer
	// is Build.Upper/NAME and Build.Work/NAME (which the caller makes,
	// BuildRoot.Dirs), so that the step's writes anywhere in the image
	// land in Build.Upper, which becomes the step's layer. The image's
	// /etc, /var, /home and /root are overlays like the rest: no mask, no
	// synthesized files, no HOME tmpfs (HOME is the image's /root).
	Build *BuildRoot
	// ImageLayers, with Tooling "rootfs:DIR", make DIR an image's root
	// read from its overlay-native layers, topmost first
	// (images.Store.OverlayLayers): DIR then names the merged tree
	// (images.Store.LayeredRoot, never on the host) that an ImageFS shows
	// the plan, and each top-level directory, /etc and /var/lib is a
	// read-only overlay of the layers that make it, or a bind of the one
	// layer that does (imageEntry). Without them DIR is a directory on the
	// host (a rootfs, or an image's flattened tree) and its entries are
	// bound.
	ImageLayers []string
}

// BuildRoot is an image build step's root: the parent image's tree
// (Root, read-only) and the writable layer its writes go to, one upper and
// work directory per top-level directory (host paths; Upper and Work on
// one file system).
//
// Root is either a directory on the host (the parent's flattened tree,
// images.Store.Root), or, when Layers is set, the name of the merged tree
// of the parent's overlay-native layers (images.Store.LayeredRoot, never
// on the host), which is read through an ImageFS.
type BuildRoot struct {
	Root  string `json:"root"`
	Upper string `json:"upper"`
	Work  string `json:"work"`
	// Layers are the parent image's layers in overlayfs's form, topmost
	// first (images.Store.OverlayLayers); none: Root is a host directory.
	Layers []string `json:"layers,omitempty"`
}

// buildSkip are the top-level names of an image hutch provides itself in
// a build step's root (its own /proc, /dev, /sys, scratch /tmp and /run,
// and the workspace): not overlaid, not captured.
var buildSkip = map[string]bool{
	"proc": true, "dev": true, "sys": true, "tmp": true, "run": true,
	"workspace": true, "lost+found": true,
}

// FS is the file tree b.Root is read from (TreeFS).
func (b *BuildRoot) FS(base HostFS) HostFS { return TreeFS(base, b.Root, b.Layers) }

// entries are the top-level entries of Root that a build step's root
// takes (all but buildSkip), sorted by name, each with its lstat through
// fsys (b.FS's tree).
func (b *BuildRoot) entries(fsys HostFS) ([]fs.FileInfo, error) {
	names, err := fsys.ReadDirNames(b.Root)
	if err != nil {
		return nil, fmt.Errorf("build root %s: %w", b.Root, err)
	}
	sort.Strings(names)
	var out []fs.FileInfo
	for _, n := range names {
		if buildSkip[n] {
			continue
		}
		src := filepath.Join(b.Root, n)
		fi, err := fsys.Lstat(src)
		if err != nil {
			return nil, fmt.Errorf("build root %s: %w", src, err)
		}
		out = append(out, fi) // (an lstat's Name is n)
	}
	return out, nil
}

// Dirs are the top-level directories of the root that a build step's
// overlays cover, sorted by name, as b.FS(base) shows them (with Layers,
// the merged directory's mode: the topmost layer's): the caller makes
// Upper/NAME, of that directory's mode, and Work/NAME for each.
func (b *BuildRoot) Dirs(base HostFS) ([]fs.FileInfo, error) {
	ents, err := b.entries(b.FS(base))
	if err != nil {
		return nil, err
	}
	var dirs []fs.FileInfo
	for _, fi := range ents {
		if fi.IsDir() {
			dirs = append(dirs, fi)
		}
	}
	return dirs, nil
}

// addBuildRoot plans a build step's root (Spec.Build): each top-level
// directory an overlay of the root's directory (with Layers, of the
// layers' directories that make it, topmost first) under the step's
// Upper/NAME and Work/NAME; a file a read-only bind (with Layers, of the
// topmost layer's), a symlink made anew.
func addBuildRoot(fsys HostFS, p *Plan, b *BuildRoot) error {
	img := NewImageFS(fsys, b.Root, b.Layers) // nil: Root is a host directory
	if img != nil {
		fsys = img
	}
	ents, err := b.entries(fsys)
	if err != nil {
		return err
	}
	for _, fi := range ents {
		n := fi.Name()
		src := filepath.Join(b.Root, n)
		if !fi.IsDir() {
			if img != nil {
				err = imageEntry(img, p, n, "build root")
			} else {
				err = addHostEntry(fsys, p, src, "/"+n, "build root")
			}
			if err != nil {
				return err
			}
			continue
		}
		lower := []string{src}
		if img != nil {
			// Invariant: every layer that makes the merged directory, so
			// that the overlay shows what the flattened tree would.
			if lower, err = img.Lowers(n, "image build: the image's"); err != nil {
				return err
			}
		}
		p.Add(Step{Kind: Overlay, Lower: lower, Upper: filepath.Join(b.Upper, n), Work: filepath.Join(b.Work, n),
			Target: "/" + n, Why: "image build: the image's /" + n + " (its writes go to the step's layer)"})
	}
	return nil
}

// Layer is an overlay's writable layer: its upper and work directories
// (host paths on one filesystem).
type Layer struct {
	Upper string `json:"upper"`
	Work  string `json:"work"`
}

// CacheBind is a persistent cache's directory (Source, on the host) and
// where it is mounted inside (Target), read-write; Why names it.
type CacheBind struct{ Source, Target, Why string }

// Devices are the host's device nodes a sandbox gets in its /dev: the
// harmless character devices (mknod is impossible in a user namespace, so
// they are bound from the host).
var Devices = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}

// HostToolingDirs are the host directories that make up tooling mode "host".
// Where the host has merged-/usr symlinks (/bin -> usr/bin), the sandbox gets
// the same symlinks.
var HostToolingDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

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
	fsys := s.FS
	if fsys == nil {
		fsys = OS
	}
	p := &Plan{RootSize: 4 << 20}
	etcSrc := "/etc"
	switch {
	case s.Build != nil:
		if err := addBuildRoot(fsys, p, s.Build); err != nil {
			return nil, err
		}
	case s.Tooling == "host" || s.Tooling == "":
		for _, d := range HostToolingDirs {
			if err := addHostEntry(fsys, p, d, d, "tooling"); err != nil {
				return nil, err
			}
		}
	case strings.HasPrefix(s.Tooling, "rootfs:"):
		dir := strings.TrimPrefix(s.Tooling, "rootfs:")
		// entry adds a top-level entry, /etc or /var/lib of the tree.
		entry := func(rel, why string) error { return addHostEntry(fsys, p, filepath.Join(dir, rel), "/"+rel, why) }
		if img := NewImageFS(fsys, dir, s.ImageLayers); img != nil {
			fsys = img
			entry = func(rel, why string) error { return imageEntry(img, p, rel, why) }
		}
		names, err := fsys.ReadDirNames(dir)
		if err != nil {
			return nil, fmt.Errorf("tooling rootfs %s: %w", dir, err)
		}
		sort.Strings(names)
		for _, n := range names {
			if rootfsSkip[n] {
				continue
			}
			if err := entry(n, "tooling rootfs"); err != nil {
				return nil, err
			}
		}
		etcSrc = filepath.Join(dir, "etc")
		if fi, err := fsys.Lstat(etcSrc); err == nil && fi.IsDir() && len(s.ImageLayers) > 0 {
			if err := entry("etc", "tooling /etc"); err != nil {
				return nil, err
			}
			etcSrc = "" // planned
		}
		p.Add(Step{Kind: Mkdir, Target: "/var", Mode: 0o755})
		// Its /var/lib read-only (dpkg's and apt's state, which dpkg-query
		// and apt-cache read: an image's package list); the rest of /var
		// is hutch's.
		if err := entry("var/lib", "tooling rootfs /var/lib"); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("tooling %q: want \"host\" or \"rootfs:DIR\"", s.Tooling)
	}
	if s.Build == nil && etcSrc != "" {
		if err := addEtcTree(fsys, p, etcSrc); err != nil {
			return nil, err
		}
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
	for _, d := range Devices {
		p.Add(Step{Kind: Bind, Source: d, Target: d, Why: "device node"})
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
	p.Add(Step{Kind: Mkdir, Target: "/run", Mode: 0o755})
	if s.Build == nil {
		p.Add(Step{Kind: Symlink, Target: "/var/tmp", Data: "/tmp"})
		p.Add(Step{Kind: Tmpfs, Target: s.Home, Mode: 0o755, Size: s.HomeSize, Why: "sandbox HOME"})
		// The mask and the synthesized files, once the mounts a symlink in
		// /etc may lead into are planned; the workspace and extra binds come
		// after, so that they can tell nothing of /etc's resolution.
		if err := addEtcFiles(fsys, p, s); err != nil {
			return nil, err
		}
	}
	if err := checkWorkspaceMount(fsys, p, s.WorkspaceMount); err != nil {
		return nil, err
	}
	if s.Review != nil {
		p.Add(Step{Kind: Overlay, Lower: []string{s.Workspace}, Upper: s.Review.Upper, Work: s.Review.Work,
			Target: s.WorkspaceMount, Why: "workspace (its writes go to the change set's upper layer)"})
	} else {
		p.Add(Step{Kind: Bind, Source: s.Workspace, Target: s.WorkspaceMount, Why: "workspace (read-write)"})
	}
	if s.Protected != nil {
		p.Add(s.Protected.Steps...)
	}
	for _, b := range s.ReadOnly {
		p.Add(Step{Kind: Bind, Source: b[0], Target: b[1], ReadOnly: true, Why: "extra read-only bind"})
	}
	// The caches last: their mount points are made in HOME's tmpfs (or
	// /tmp's, or the root's), never in a tree bound from the host, whose
	// read-only binds would refuse them.
	for _, c := range s.Caches {
		if err := checkCacheTarget(p, c, s.Home); err != nil {
			return nil, err
		}
		p.Add(Step{Kind: Bind, Source: c.Source, Target: c.Target, Why: c.Why})
	}
	stage, err := pickStage(fsys, p)
	if err != nil {
		return nil, err
	}
	p.Stage = stage
	return p, nil
}

// checkCacheTarget refuses a cache's target that is, lies beneath or
// contains the target of a step already planned, but for the HOME and /tmp
// tmpfs it may lie beneath: its mount point must be made where nothing is
// (in a tmpfs of hutch's), never through a symlink (one in a tree leads
// elsewhere while the root is built), in a tree bound from the host, or
// over one of hutch's mounts.
func checkCacheTarget(p *Plan, c CacheBind, home string) error {
	for _, st := range p.Steps {
		t := st.Target
		switch {
		case st.Kind == Tmpfs && (t == home || t == "/tmp") && strings.HasPrefix(c.Target, t+"/"):
		case c.Target == t || strings.HasPrefix(c.Target, t+"/"):
			return fmt.Errorf("%s: its target %s lies in %s (%s); choose a target in %s or /tmp, or a new directory such as /cache/NAME", c.Why, c.Target, t, kindWhy(st), home)
		case strings.HasPrefix(t, c.Target+"/"):
			return fmt.Errorf("%s: its target %s would cover %s (%s); choose a target in %s or /tmp, or a new directory such as /cache/NAME", c.Why, c.Target, t, kindWhy(st), home)
		}
	}
	return nil
}

// WorkspaceError says why the workspace cannot be mounted where asked.
type WorkspaceError struct{ Msg string }

func (e *WorkspaceError) Error() string { return e.Msg }

// checkWorkspaceMount refuses a workspace mount point that would cover one
// of hutch's own mounts, or that leads elsewhere inside through a symlink
// (/var/tmp is a symlink to /tmp inside): a workspace at its host path must
// be that path inside.
func checkWorkspaceMount(fsys HostFS, p *Plan, mount string) error {
	if !path.IsAbs(mount) || path.Clean(mount) != mount || mount == "/" {
		return &WorkspaceError{fmt.Sprintf("the workspace's mount point %q: want a clean absolute path other than /", mount)}
	}
	for _, s := range p.Steps {
		switch s.Kind {
		case Bind, Tmpfs, Proc, Devpts, Sysfs, Symlink, Overlay:
		default:
			continue
		}
		if s.Target == mount || strings.HasPrefix(s.Target, mount+"/") {
			return &WorkspaceError{fmt.Sprintf("the workspace at %s would cover the sandbox's %s (%s)", mount, s.Target, kindWhy(s))}
		}
	}
	r, err := view{fsys: fsys, p: p}.resolve(mount)
	if err != nil {
		return err
	}
	if r.path != mount {
		return &WorkspaceError{fmt.Sprintf("the workspace at %s: inside the sandbox that path leads to %s (a symlink on the way)", mount, r.path)}
	}
	return nil
}

func kindWhy(s Step) string {
	if s.Why != "" {
		return s.Why
	}
	return string(s.Kind)
}

// stageCandidates are host directories the new root may be built on.
var stageCandidates = []string{"/tmp", "/mnt", "/media", "/srv", "/boot", "/var/tmp", "/run", "/var", "/home"}

// pickStage returns the first candidate that is a real directory and that
// no bind source contains (a source that is the candidate or one of its
// parent directories, such as a workspace at /tmp, would see the half-built
// root through its recursive bind). Directories are compared by device and
// inode, so symlinks and other bind mounts of the same directory count; one
// stat per source instead of resolving every source's path.
func pickStage(fsys HostFS, p *Plan) (string, error) {
	sources := map[DirID]bool{}
	for _, s := range p.Steps {
		for _, src := range s.Sources() {
			if id, ok := fsys.DirID(src); ok {
				sources[id] = true // (a missing or non-directory source contains nothing)
			}
		}
	}
next:
	for _, c := range stageCandidates {
		if fi, err := fsys.Lstat(c); err != nil || !fi.IsDir() {
			continue
		}
		for d := c; ; d = filepath.Dir(d) {
			if id, ok := fsys.DirID(d); ok && sources[id] {
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
func addHostEntry(fsys HostFS, p *Plan, src, target, why string) error {
	fi, err := fsys.Lstat(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", why, src, err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		to, err := fsys.Readlink(src)
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

// Protection is what protecting paths in the workspace takes: the steps
// that pin and protect them inside the sandbox. Nothing is made on the host:
// a protected path that does not exist cannot be a mount point, so it is
// listed in Missing, for the caller to check after the sandbox's commands
// (did one create it?).
type Protection struct {
	// Steps pin and protect the paths inside the sandbox.
	Steps []Step `json:"steps"`
	// Missing are the protected paths, relative to the workspace, that do
	// not exist (their first missing component).
	Missing []string `json:"missing,omitempty"`
	// Unprotected are the found paths (InspectProtected's found) that
	// cannot be protected, with why: a symlink on the way.
	Unprotected []string `json:"unprotected,omitempty"`
}

// InspectProtected inspects the workspace on the host, changing nothing, and
// returns the steps that keep each protected path read-only inside and each
// hidden path covered by an empty read-only directory (hutch's own
// directories, see package hostdirs). A symlink anywhere along a protected or
// hidden path is refused, since sandboxed code could retarget it. Every
// existing directory on the way is pinned (made a mount point) so that it
// cannot be renamed away and recreated. A hidden path must exist (hostdirs
// makes hutch's own directories).
//
// found are protected like protected, but were found rather than asked
// for (the git repositories of the workspace): one that cannot be protected
// is listed in Unprotected instead of refusing the workspace.
func InspectProtected(workspace, mountAt string, protected, found, hidden []string) (*Protection, error) {
	w := &protectWalk{workspace: workspace, mountAt: mountAt, pinned: map[string]bool{}, done: map[string]bool{}, pr: &Protection{}}
	for _, rel := range protected {
		if err := w.walk(rel, Protect, "protected path "+rel); err != nil {
			return nil, err
		}
	}
	for _, rel := range found {
		if err := w.walk(rel, Protect, "git's "+rel); err != nil {
			w.pr.Unprotected = append(w.pr.Unprotected, err.Error())
		}
	}
	for _, rel := range hidden {
		if err := w.walk(rel, Hide, "hutch's own directory, hidden"); err != nil {
			return nil, err
		}
	}
	// Pins first (shallow to deep), then the leaves: a recursive self-bind
	// made later would copy the read-only mounts beneath it.
	sort.SliceStable(w.pins, func(a, b int) bool { return len(w.pins[a].Target) < len(w.pins[b].Target) })
	w.pr.Steps = append(w.pins, w.leaves...)
	return w.pr, nil
}

// protectWalk is InspectProtected's state.
type protectWalk struct {
	workspace, mountAt string
	pr                 *Protection
	pinned             map[string]bool
	done               map[string]bool // paths walked already
	pins, leaves       []Step
}

// walk resolves rel component by component without following symlinks,
// pinning existing directories and ending with a leaf step of kind.
func (w *protectWalk) walk(rel string, kind Kind, why string) error {
	clean := filepath.Clean(rel)
	if filepath.IsAbs(clean) || clean == "." || strings.HasPrefix(clean, "..") {
		return fmt.Errorf("protected path %q: want a path relative to the workspace", rel)
	}
	if coveredBy(clean, w.pr.Missing) || w.done[clean] {
		return nil // missing above it already, or listed twice
	}
	w.done[clean] = true
	comps := strings.Split(clean, "/")
	dirfd, err := unix.Open(w.workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open workspace %s: %w", w.workspace, err)
	}
	defer func() { unix.Close(dirfd) }()
	// The pins on the way are kept only when the leaf is reached: pinning
	// the parents of a missing path would protect nothing and keep the
	// sandbox from removing them.
	var pins []string
	cur := ""
	for i, c := range comps {
		cur = filepath.Join(cur, c)
		inside := filepath.Join(w.mountAt, cur)
		var st unix.Stat_t
		err := unix.Fstatat(dirfd, c, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			if kind == Hide {
				return fmt.Errorf("hutch's own directory %s in the workspace: %s does not exist", rel, cur)
			}
			w.pr.Missing = append(w.pr.Missing, cur)
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
			for _, p := range pins {
				if !w.pinned[p] {
					w.pinned[p] = true
					w.pins = append(w.pins, Step{Kind: Pin, Target: filepath.Join(w.mountAt, p), NoSymlinks: true, Why: "pin parent of " + why})
				}
			}
			return nil
		}
		pins = append(pins, cur)
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
