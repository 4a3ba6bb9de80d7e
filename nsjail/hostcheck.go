package nsjail

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/containerenv"
	"github.com/hutchsandbox/hutch/internal/kernel"
	"github.com/hutchsandbox/hutch/store"
)

// HostProblem is a reason this host cannot make a sandbox, with the fix.
type HostProblem struct {
	Cause string
	Fix   string
}

func (h *HostProblem) Error() string { return h.Cause + "; " + h.Fix }

func readSysctl(path string) (string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

// CheckUserNamespaces reports why unprivileged user namespaces would fail
// here, or nil when nothing known stands in the way.
func CheckUserNamespaces() *HostProblem {
	if v, ok := readSysctl("/proc/sys/user/max_user_namespaces"); ok && v == "0" {
		return &HostProblem{
			Cause: "user namespaces are disabled (user.max_user_namespaces = 0)",
			Fix:   "enable them: sudo sysctl -w user.max_user_namespaces=15000",
		}
	}
	if os.Getuid() != 0 {
		if v, ok := readSysctl("/proc/sys/kernel/unprivileged_userns_clone"); ok && v == "0" {
			return &HostProblem{
				Cause: "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)",
				Fix:   "enable them: sudo sysctl -w kernel.unprivileged_userns_clone=1",
			}
		}
		if v, ok := readSysctl("/proc/sys/kernel/apparmor_restrict_unprivileged_userns"); ok && v == "1" {
			return &HostProblem{
				Cause: "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1)",
				Fix:   "allow hutch with an AppArmor profile granting \"userns,\" for its path, or: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
			}
		}
	}
	return nil
}

// diagnoseClone explains a failure to create the init's namespaces.
func diagnoseClone(err error) error {
	if p := foreignProc(); p != "" {
		return fmt.Errorf("%s: %w", p, err)
	}
	// The sysctls, security modules and container runtimes that refuse
	// user namespaces, each with its fix (package containerenv).
	var errno unix.Errno
	errors.As(err, &errno)
	if msg := containerenv.Message(containerenv.Diagnose(containerenv.Probe(), containerenv.CreateNamespaces, errno)); msg != "" {
		return fmt.Errorf("%s: %w", msg, err)
	}
	switch {
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%s: %w", namespaceLimitAdvice(), err)
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("the kernel refused to create user namespaces (a security module or container runtime may forbid it; run `hutch doctor`): %w", err)
	}
	return err
}

// foreignProc says, when /proc is not the procfs of this process's pid
// namespace (hutch started in a pid namespace that kept the parent's
// /proc), why launching the init fails: the new user namespace's id maps
// are written to /proc/PID/uid_map with the child's pid as this namespace
// numbers it, which names another process, or none, in that /proc. It
// returns "" when /proc is this namespace's own.
func foreignProc() string {
	const fix = "mount a procfs for this pid namespace before starting hutch (e.g. unshare --pid --fork --mount-proc, or mount -t proc proc /proc in a mount namespace of its own)"
	self, err := os.Readlink("/proc/self")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "/proc belongs to a pid namespace in which this process has no pid, so the sandbox's user namespace cannot be mapped through it; " + fix
	case err != nil:
		return ""
	case self != strconv.Itoa(os.Getpid()):
		return fmt.Sprintf("/proc belongs to another pid namespace (it shows this process as pid %s; here it is pid %d), so the sandbox's user namespace cannot be mapped through it; %s", self, os.Getpid(), fix)
	}
	return ""
}

// namespaceLimitAdvice explains an ENOSPC from creating namespaces: the
// user.max_*_namespaces limits that are zero here (that kind of namespace
// is disabled), or, none being zero, that one of them is reached.
func namespaceLimitAdvice() string {
	var zero []string
	for _, kind := range []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"} {
		name := "user.max_" + kind + "_namespaces"
		if v, ok := readSysctl("/proc/sys/user/max_" + kind + "_namespaces"); ok && v == "0" {
			zero = append(zero, name)
		}
	}
	if len(zero) > 0 {
		return fmt.Sprintf("%s = 0 here, which forbids creating that kind of namespace; hutch needs all seven kinds: raise it, e.g. sudo sysctl -w %s=10000",
			strings.Join(zero, ", "), zero[0])
	}
	return "a namespace limit is reached (user.max_user_namespaces or max_mnt, max_pid, max_net, max_ipc, max_uts, max_cgroup_namespaces under /proc/sys/user); raise it, or end other sandboxes"
}

// diagnoseInitFailure is the message of a failure the init reported, with
// advice where it has some: an ENOSPC from creating namespaces (a
// prestarted init makes five of them itself, after the clone) is a
// namespace limit; a refused procfs, or any step refused with EPERM, gets
// what package containerenv finds (a covered /proc, AppArmor, a seccomp
// filter).
func diagnoseInitFailure(m *message) string {
	if m.Step == failNamespaces && m.Errno == int(unix.ENOSPC) {
		return m.Error + ": " + namespaceLimitAdvice()
	}
	if strings.Contains(m.Error, readOnlyOverlayFailed) {
		return m.Error + ": " + imageOverlayAdvice
	}
	what := containerenv.SetupRefused
	switch {
	case procMountRefused().MatchString(m.Error):
		what = containerenv.MountProc
	case !strings.HasSuffix(m.Error, ": "+unix.EPERM.Error()):
		return m.Error
	}
	if msg := containerenv.Message(containerenv.Diagnose(containerenv.Probe(), what, unix.EPERM)); msg != "" {
		return m.Error + ": " + msg
	}
	return m.Error
}

// readOnlyOverlayFailed is in the init's report of a refused overlay
// without an upper layer (nsjail/mounts.c), which only an image's root
// mounts (mounts.imageEntry); imageOverlayAdvice is the way out.
const (
	readOnlyOverlayFailed = "mount overlayfs (upper none): "
	imageOverlayAdvice    = "an image's root is read-only overlays of its layers where hutch's probe finds that overlayfs mounts here (docs/IMAGES.md); HUTCH_IMAGE_ROOT=flattened runs the image from a flattened copy of its layers instead"
)

// procMountRefused matches the init's report of a refused procfs mount
// (the mount plan's proc step, nsjail/mounts.c: "proc TARGET (WHY): ERROR").
// It is compiled when a failure is diagnosed, not at every process's start.
func procMountRefused() *regexp.Regexp {
	return regexp.MustCompile(`(^|: )proc /\S* \(.*\): operation not permitted$`)
}

// ProbeUserNamespaces says why a sandbox's namespaces cannot be made here,
// or "" when they can: it starts a probe of hutch's binary (probe.c) in the
// seven namespaces an init gets, with the same one-id maps, which makes its
// mounts private and mounts a procfs, what a container's seccomp profile,
// its masked /proc or an AppArmor restriction of user namespaces refuses.
// It costs a process start (a few milliseconds); sandbox.isolation =
// "auto" runs it through ProbeUserNamespacesOnce.
func ProbeUserNamespaces() string {
	return runProbe("the namespace probe", probeMagic)
}

// ProbeUserNamespacesOnce is ProbeUserNamespaces whose success st keeps
// for the rest of the boot (store.Probes, a marker named by the boot id
// and the caller's namespaces and seccomp mode: kernel.ProbeContext):
// where a sandbox's namespaces can be made, only the first sandbox.isolation
// = "auto" of a boot pays the probe. A failure is not kept, so that a host
// fixed meanwhile (a sysctl raised, a profile changed) is seen by the next
// sandbox. Nil st, or a boot id that cannot be read: every call probes.
func ProbeUserNamespacesOnce(st *store.Store) func() string {
	return probeOnce(st, "userns", ProbeUserNamespaces, kernel.ProbeContext)
}

// probeOnce is probe with its success kept in st for the context where
// returns (kernel.ProbeContext; "": unknown, nothing kept), under a key
// named by what.
func probeOnce(st *store.Store, what string, probe func() string, where func() string) func() string {
	return func() string {
		key := ""
		if id := where(); id != "" && st != nil {
			key = what + "-" + id
			if _, _, err := st.Get(store.Probes, key); err == nil {
				return ""
			}
		}
		why := probe()
		if why == "" && key != "" {
			st.Put(store.Probes, key, []byte("ok\n")) // (not kept: the next sandbox probes again)
		}
		return why
	}
}

// ProbeOverlay says why a sandbox cannot have overlayfs mounts of
// directories like lower1 and lower2 as its image root, or "" when it
// can: it starts a probe of hutch's binary (probe.c) in the seven
// namespaces an init gets, with the same one-id maps, which mounts
// overlayfs read-only from lower1 (upper) and lower2 onto lower1, with the
// options of the init's read-only image overlay (userxattr, index=off),
// and checks that the file probe the caller put in lower2 shows at
// lower1/probe. That proves that this kernel mounts overlayfs in a user
// namespace with the directories' filesystem (the image store's) as
// lower layers. It costs a process start (a few milliseconds); the image
// store keeps its verdict for the boot (images.Store.OverlayUsable).
func ProbeOverlay(lower1, lower2 string) string {
	return runProbe("the overlay probe", probeMagic, "overlay", lower1, lower2)
}

// runProbe runs hutch's binary with args (args[0] is probeMagic) in an
// init's namespaces: "" when it exits 0, else what it wrote to stderr
// (or, failing that, what went wrong, naming what).
func runProbe(what string, args ...string) string {
	var stderr strings.Builder
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        args,
		Env:         []string{},
		Stderr:      &stderr,
		SysProcAttr: initNamespaces(),
	}
	if err := cmd.Start(); err != nil {
		return diagnoseClone(err).Error()
	}
	if err := cmd.Wait(); err != nil {
		if msg := strings.TrimSpace(stderr.String()); msg != "" {
			return msg
		}
		return fmt.Sprintf("%s failed: %v", what, err)
	}
	return ""
}
