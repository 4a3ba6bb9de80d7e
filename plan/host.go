package plan

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/caches"
	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/gitrepos"
	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/images"
	"github.com/hutchsandbox/hutch/landlock"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
)

// Host is what Build needs to know of the host, as data. Gather collects it;
// tests write it.
type Host struct {
	// Workspace is the workspace's absolute, symlink-free path
	// (ResolveWorkspace).
	Workspace string
	// FS is the host's file tree as the mount plan reads it; nil means the
	// real one (mounts.OS).
	FS mounts.HostFS
	// Protected are the paths, relative to Workspace, that stay read-only:
	// the policy's and hutch's configuration files found in the workspace.
	Protected []string
	// Hidden are hutch's own directories inside the workspace, relative.
	Hidden []string
	// Repos are the git repositories found in the workspace; Found the
	// paths of theirs that git executes (gitrepos.Scan.ProtectedPaths).
	Repos gitrepos.Scan
	Found []string
	// Protection is what the workspace holds along Protected, Found and
	// Hidden (mounts.InspectProtected).
	Protection *mounts.Protection
	// LandlockABI is the kernel's Landlock ABI, 0 when there is none.
	LandlockABI int
	// Notify: seccomp user notification works here; NotifyUnavailable says
	// why not.
	Notify            bool
	NotifyUnavailable string
	// Cgroup is the cgroup backend this host gives hutch and why.
	Cgroup CgroupFacts
	// Env is the caller's environment, which the policy filters for commands.
	Env []string
	// NoSpawner, when set, says why the spawner is turned off (HUTCH_NO_SPAWNER).
	NoSpawner string
	// Isolation are the facts of the landlock isolation, gathered when the
	// policy may use it.
	Isolation IsolationFacts
	// CacheRoot is the directory of hutch's persistent caches
	// (caches.Root), "" when hutch has none.
	CacheRoot string
	// Tools are the executables of the built-in caches
	// (policy.BuiltinCaches) found in the tooling tree, by name, each with
	// the path it was found at.
	Tools map[string]string
	// Review is the change set's writable layer when filesystem.review
	// is on (package review makes it; Gather does not).
	Review *mounts.Layer
	// Build is the root of an image build's run step (hutch image build
	// sets it; Gather does not, and no policy key does): the parent
	// image's tree overlaid with the step's writable layer
	// (mounts.Spec.Build). HOME is then the image's /root.
	Build *mounts.BuildRoot
	// Image is the stored image of tooling "image:REF" (nil otherwise).
	Image *ImageFacts
}

// ImageFacts are what the plan needs of a stored image.
type ImageFacts struct {
	// Ref as the policy gave it; Digest its manifest's digest.
	Ref, Digest string
	// Root is its root: with Layers, the merged tree's name
	// (images.Store.LayeredRoot, never on the host), else its flattened
	// tree (images.Store.Root).
	Root string
	// Env is its config's environment.
	Env []string
	// Layers, when the image's root is read-only overlays of its layers,
	// are its overlay-native layers, topmost first
	// (images.Store.OverlayLayers); nil when the flattened Root is bound.
	Layers []string
	// Why says why the root is the flattened tree ("" when it is the
	// layers).
	Why string
}

// FS is the image's root as the mount plan reads it, on base (the host's
// tree when nil): the merged layers (mounts.ImageFS) or the flattened
// tree on the host.
func (f *ImageFacts) FS(base mounts.HostFS) mounts.HostFS {
	if f == nil {
		return mounts.TreeFS(base, "", nil)
	}
	return mounts.TreeFS(base, f.Root, f.Layers)
}

// ImageRootEnv, in hutch's environment, chooses an image's root instead of
// the probe (ImageRootForm): "flattened" (a flattened copy of its layers,
// bound read-only) or "overlay" (read-only overlays of its layers).
const ImageRootEnv = "HUTCH_IMAGE_ROOT"

// ImageRootForm says whether a sandbox's root on an image of st is
// read-only overlays of the image's layers (true) or its flattened tree
// (false, with why): what ImageRootEnv in env says, else whether overlayfs
// mounts in a user namespace on the store's file system here, which probe
// (nsjail.ProbeOverlay) finds once per boot (images.Store.OverlayUsable).
// A nil probe means the flattened tree.
func ImageRootForm(st *images.Store, env []string, probe func(lower1, lower2 string) string) (overlay bool, why string, err error) {
	for _, kv := range slices.Backward(env) {
		v, ok := strings.CutPrefix(kv, ImageRootEnv+"=")
		if !ok {
			continue
		}
		switch v {
		case "overlay":
			return true, "", nil
		case "flattened":
			return false, ImageRootEnv + "=flattened is set", nil
		case "":
		default:
			return false, "", fmt.Errorf("%s=%q: want \"overlay\" or \"flattened\" (or unset it: hutch then probes whether overlayfs mounts here)", ImageRootEnv, v)
		}
		break
	}
	if probe == nil {
		return false, "overlayfs was not probed", nil
	}
	ok, why := st.OverlayUsable(probe)
	return ok, why, nil
}

// ImageRoot is img's root as a sandbox on it gets it: overlays of its
// layers where ImageRootForm says so and every layer has overlayfs's form
// (images.Store.OverlayLayers) — then root names the merged tree
// (images.Store.LayeredRoot) and layers are its layers, topmost first —,
// else its flattened tree, built when it is missing (the first sandbox
// after a pull where overlays are not used, or after a prune), with why.
// hutch run and an image build's steps choose alike.
func ImageRoot(st *images.Store, img *images.Image, env []string, probe func(lower1, lower2 string) string) (root string, layers []string, why string, err error) {
	overlay, why, err := ImageRootForm(st, env, probe)
	if err != nil {
		return "", nil, "", err
	}
	if overlay {
		layers, lerr := st.OverlayLayers(img)
		if lerr == nil {
			return st.LayeredRoot(img), layers, "", nil
		}
		why = lerr.Error()
	}
	if root, err = st.Root(img); err != nil {
		return "", nil, "", err
	}
	return root, nil, why, nil
}

// gatherImage finds ref in hutch's image store and its root (ImageRoot).
func gatherImage(ref string, env []string, probe func(lower1, lower2 string) string) (*ImageFacts, error) {
	st, img, err := images.LookupDefault(ref)
	if err == nil {
		f := &ImageFacts{Ref: ref, Digest: img.Digest.String(), Env: slices.Clone(img.Config.Config.Env)}
		if f.Root, f.Layers, f.Why, err = ImageRoot(st, img, env, probe); err == nil {
			return f, nil
		}
	}
	return nil, fmt.Errorf("filesystem.tooling %q: %w", policy.ToolingImage+ref, err)
}

// CgroupFacts is what cgroup.Probe found that planning needs.
type CgroupFacts struct {
	// Backend is one of cgroup.Backend*.
	Backend string
	// Reason says why that backend.
	Reason string
}

// GatherOptions are what Gather needs besides the policy.
type GatherOptions struct {
	// Env is the caller's environment (os.Environ() for the CLI).
	Env []string
	// SecurityLog is the security log's path; kept read-only when it lies
	// in the workspace (hutch appends to it during the run).
	SecurityLog string
	// ProbeUserns, for sandbox.isolation = "auto", says why a sandbox's
	// user namespaces cannot be made here ("" when they can): the root
	// package passes nsjail.ProbeUserNamespaces.
	ProbeUserns func() string
	// ProbeOverlay, for an image's root, says why an overlayfs of two
	// lower directories cannot be mounted in a sandbox's user namespace
	// ("" when it can): the root package passes nsjail.ProbeOverlay.
	// Nil: an image's root is its flattened tree.
	ProbeOverlay func(lower1, lower2 string) string
}

// Gather reads the host facts Build needs for p. It changes nothing in the
// workspace (placeholders for missing protected paths are made when the
// sandbox is set up); it creates hutch's own directories that lie inside
// the workspace, so that hutch, not the sandbox, owns them.
func Gather(p *policy.Policy, o GatherOptions) (*Host, error) {
	h := &Host{Env: o.Env}
	var err error
	if h.Workspace, err = ResolveWorkspace(p.Filesystem.Workspace); err != nil {
		return nil, err
	}
	if h.Hidden, err = hostdirs.InWorkspace(h.Workspace, hostdirs.Own()); err != nil {
		return nil, err
	}
	// Files hutch reads or appends to again, when they lie in the
	// workspace: read-only inside.
	files := []string{p.File}
	if prof := p.Seccomp.Profile; prof != "" && prof != policy.SeccompDefault {
		files = append(files, prof)
	}
	if o.SecurityLog != "" {
		files = append(files, o.SecurityLog)
	}
	h.Protected = slices.Clone(p.Filesystem.Protected)
	rels, err := hostdirs.ConfigInWorkspace(h.Workspace, files)
	if err != nil {
		return nil, err
	}
	h.Protected = append(h.Protected, rels...)
	h.Repos = gitrepos.Find(h.Workspace, gitrepos.DefaultBudget)
	existing, missing := h.Repos.ProtectedPaths(h.Workspace)
	h.Found = append(existing, missing...)
	if h.Protection, err = mounts.InspectProtected(h.Workspace, p.Filesystem.PathsFor(h.Workspace, "").Mount, h.Protected, h.Found, h.Hidden); err != nil {
		return nil, err
	}
	if ref, ok := p.Filesystem.ImageRef(); ok {
		if h.Image, err = gatherImage(ref, o.Env, o.ProbeOverlay); err != nil {
			return nil, err
		}
	}
	h.LandlockABI = landlock.ABI()
	h.Notify, h.NotifyUnavailable = seccompprofiles.NotifyAvailable()
	cg := cgroup.Probe()
	h.Cgroup = CgroupFacts{Backend: cg.Backend, Reason: cg.Reason}
	if v := os.Getenv("HUTCH_NO_SPAWNER"); v != "" && v != "0" {
		h.NoSpawner = "HUTCH_NO_SPAWNER is set"
	}
	if err := gatherIsolation(p, h, o.ProbeUserns); err != nil {
		return nil, err
	}
	h.CacheRoot = caches.Root()
	if p.Filesystem.DefaultCaches {
		h.Tools = FindTools(p, h.Env, h.Image, h.FS)
	}
	return h, nil
}

// FindTools looks for the executables of the built-in caches in the
// tooling tree (image's root when image is not nil, read on base: the
// host's tree when nil): in the directories of the PATH a command gets
// from env under p (those inside the tooling tree), and in
// policy.ToolchainDirs. It
// returns where each found one is, by name. A tool outside the tooling tree
// (in the caller's home, say) is not visible inside and not found.
func FindTools(p *policy.Policy, env []string, image *ImageFacts, base mounts.HostFS) map[string]string {
	path := policy.DefaultPath
	if e, err := p.Environment.CommandEnv(env, nil); err == nil {
		for _, kv := range e {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = v
			}
		}
	}
	rootfs, isRootfs := p.Filesystem.RootfsDir()
	if image != nil {
		// The tools are the image's, on the PATH its commands get: the
		// image's own unless the policy sets one (Sandbox.CommandEnv).
		rootfs, isRootfs, path = image.Root, true, policy.DefaultPath
		for _, kv := range image.Env {
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				path = v
			}
		}
		if v, ok := p.Environment.Set["PATH"]; ok {
			path = v
		}
	}
	fsys := image.FS(base)
	dirs := append(filepath.SplitList(path), policy.ToolchainDirs...)
	found := map[string]string{}
	for _, b := range policy.BuiltinCaches {
		for _, tool := range b.Tools {
			if _, done := found[tool]; done {
				continue
			}
			for _, d := range dirs {
				if !filepath.IsAbs(d) {
					continue
				}
				d = filepath.Clean(d)
				host := filepath.Join(d, tool)
				if isRootfs {
					host = filepath.Join(rootfs, d, tool)
				} else if !inTooling(d) {
					continue
				}
				fi, err := os.Stat(host)
				if isRootfs {
					// Its symlinks lead where they do inside.
					fi, err = mounts.StatIn(fsys, rootfs, filepath.Join(d, tool))
				}
				if err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
					found[tool] = filepath.Join(d, tool)
					break
				}
			}
		}
	}
	return found
}

// inTooling reports whether dir (clean, absolute) lies in the host's
// tooling tree, which a sandbox of tooling "host" sees.
func inTooling(dir string) bool {
	for _, t := range mounts.HostToolingDirs {
		if dir == t || strings.HasPrefix(dir, t+"/") {
			return true
		}
	}
	return false
}

// ResolveWorkspace returns the absolute, symlink-free path of the
// workspace ("" = the current directory) and checks that it is a directory.
func ResolveWorkspace(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("workspace: current directory: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w (pass an existing directory with --workspace)", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace %s: not a directory (pass a directory with --workspace)", dir)
	}
	if real == "/" {
		return "", fmt.Errorf("workspace %s: refusing to expose the whole host root read-write; pass a project directory with --workspace", dir)
	}
	if why := systemTree(real); why != "" {
		return "", fmt.Errorf("workspace %s: %s cannot be a workspace (it would be read-write inside): %s; pass a project directory with --workspace", dir, real, why)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(real, &st); err != nil {
		return "", fmt.Errorf("workspace %s: statfs: %w", dir, err)
	}
	if name, ok := pseudoFS[int64(st.Type)]; ok {
		return "", fmt.Errorf("workspace %s: %s is on a %s, a view of the host kernel or its devices, not a project; pass a project directory with --workspace", dir, real, name)
	}
	return real, nil
}

// systemTree says why path, a real path, is one of the host's system trees
// that a workspace (read-write inside, and on the host when hutch runs as
// root) must not be: the kernel's views (/proc, /sys), the device tree,
// the host's configuration and boot files, its runtime state (service
// sockets), or the root of the tooling. Project directories beneath /usr
// (/usr/local/src/...), /var or /opt stay allowed.
func systemTree(path string) string {
	for _, t := range []struct{ dir, why string }{
		{"/proc", "the host's processes (procfs)"},
		{"/sys", "the host's kernel and devices (sysfs)"},
		{"/dev", "the host's devices"},
		{"/etc", "the host's configuration"},
		{"/boot", "the host's kernels and boot loader"},
		{"/run", "the host's runtime state and service sockets"},
	} {
		if path == t.dir || strings.HasPrefix(path, t.dir+"/") {
			return t.why
		}
	}
	switch path {
	case "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/var", "/home", "/root":
		return "a top-level system directory"
	}
	return ""
}

// pseudoFS are the file systems that are views of the kernel or of
// devices, by statfs magic, which no workspace may be on: a bind of /proc
// elsewhere is still the host's processes.
var pseudoFS = map[int64]string{
	unix.PROC_SUPER_MAGIC:    "procfs",
	unix.SYSFS_MAGIC:         "sysfs",
	unix.DEVPTS_SUPER_MAGIC:  "devpts",
	unix.CGROUP_SUPER_MAGIC:  "cgroup file system",
	unix.CGROUP2_SUPER_MAGIC: "cgroup2 file system",
	unix.DEBUGFS_MAGIC:       "debugfs",
	unix.TRACEFS_MAGIC:       "tracefs",
	unix.SECURITYFS_MAGIC:    "securityfs",
	unix.BPF_FS_MAGIC:        "bpf file system",
	unix.PSTOREFS_MAGIC:      "pstore",
	unix.EFIVARFS_MAGIC:      "efivarfs",
	unix.SELINUX_MAGIC:       "selinuxfs",
	unix.SMACK_MAGIC:         "smackfs",
	unix.BINFMTFS_MAGIC:      "binfmt_misc",
	0x62656570:               "configfs", // CONFIGFS_MAGIC
	0x65735543:               "fusectl",  // FUSE_CTL_SUPER_MAGIC
	0x19800202:               "mqueue file system",
	unix.NSFS_MAGIC:          "nsfs",
}
