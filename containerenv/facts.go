// Package containerenv explains why a sandbox cannot be made where hutch
// runs inside a container (Docker, Podman, containerd/Kubernetes, LXC) or
// on a host whose security modules or sysctls restrict user namespaces,
// and prints the fix for that runtime.
//
// It is two parts: Probe collects Facts from this process and /proc (a
// thin layer that only reads, plus two no-op syscalls), and Diagnose is a
// pure function from Facts and what failed to Findings (the cause in
// words, the fix, where the documentation is). Only Probe touches the
// host.
package containerenv

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Runtime names a container runtime (or kind of container) hutch was found in.
type Runtime string

// The runtimes Diagnose gives fixes for.
const (
	None       Runtime = ""           // no container found
	Docker     Runtime = "docker"     // Docker (moby)
	Podman     Runtime = "podman"     // Podman (or buildah)
	Kubernetes Runtime = "kubernetes" // a Kubernetes pod (containerd or CRI-O underneath)
	Containerd Runtime = "containerd" // containerd without Kubernetes (nerdctl, ctr)
	LXC        Runtime = "lxc"        // LXC, LXD or Incus
	Nspawn     Runtime = "systemd-nspawn"
	// OCI is an OCI runtime's container (runc, crun) without a marker that
	// names the engine: seen from its masked /proc paths.
	OCI Runtime = "oci"
)

// Facts is what Probe found; every field is a plain value so that tests
// can write them.
type Facts struct {
	// Runtime is the container found, None when none; Evidence says what
	// showed it (a file, an environment variable, a cgroup path).
	Runtime  Runtime
	Evidence string
	// UID is this process's uid.
	UID int
	// SeccompMode is the "Seccomp:" line of /proc/self/status (0 none, 1
	// strict, 2 filter; -1 unknown); SeccompFilters the number of filters.
	SeccompMode    int
	SeccompFilters int
	// UnshareErrno and SetnsErrno are the errnos of unshare(0) and
	// setns(-1, 0): the kernel never refuses unshare(0) (it succeeds) and
	// answers setns(-1, 0) with EBADF, so EPERM from either is a seccomp
	// filter refusing the syscall itself. 0 means success.
	UnshareErrno unix.Errno
	SetnsErrno   unix.Errno
	// The sysctls, "" when the file is absent.
	MaxUserNamespaces       string // user.max_user_namespaces
	UnprivilegedUsernsClone string // kernel.unprivileged_userns_clone (Debian's older kernels)
	AppArmorRestrictUserns  string // kernel.apparmor_restrict_unprivileged_userns (Ubuntu 23.10+)
	AppArmorLabel           string // this process's AppArmor confinement ("unconfined", "docker-default (enforce)")
	// ProcSubmounts are the mounts below /proc (ProcSubmounts).
	ProcSubmounts []string
	// CapEff is this process's effective capability set.
	CapEff uint64
	// HasCapSysAdminInInitUser: CAP_SYS_ADMIN in the effective set, in
	// the initial user namespace (AppArmor's restriction spares it).
	HasCapSysAdminInInitUser bool
}

// Probe collects the Facts of this process. It reads /proc and a few
// marker files and makes two syscalls that change nothing (unshare(0),
// setns(-1, 0)).
func Probe() Facts {
	f := Facts{UID: os.Getuid(), SeccompMode: -1}
	f.Runtime, f.Evidence = detectRuntime()
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		f.SeccompMode, f.SeccompFilters = parseSeccompStatus(b)
		f.CapEff = capEff(b)
		f.HasCapSysAdminInInitUser = f.CapEff&(1<<unix.CAP_SYS_ADMIN) != 0 && initialUserNS()
	}
	f.UnshareErrno = errnoOf(unix.Unshare(0))
	f.SetnsErrno = errnoOf(unix.Setns(-1, 0))
	f.MaxUserNamespaces = readTrim("/proc/sys/user/max_user_namespaces")
	f.UnprivilegedUsernsClone = readTrim("/proc/sys/kernel/unprivileged_userns_clone")
	f.AppArmorRestrictUserns = readTrim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns")
	f.AppArmorLabel = readTrim("/proc/self/attr/apparmor/current")
	if f.AppArmorLabel == "" {
		f.AppArmorLabel = readTrim("/proc/self/attr/current")
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		f.ProcSubmounts = ProcSubmounts(b)
	}
	if f.Runtime == None && len(maskedOCIPaths(f.ProcSubmounts)) > 0 {
		f.Runtime, f.Evidence = OCI, "/proc has the paths an OCI runtime masks mounted over ("+strings.Join(maskedOCIPaths(f.ProcSubmounts), ", ")+")"
	}
	return f
}

func errnoOf(err error) unix.Errno {
	var e unix.Errno
	if errors.As(err, &e) {
		return e
	}
	return 0
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// detectRuntime looks for the markers container engines leave: files they
// create, the environment they set, the cgroup paths they use.
func detectRuntime() (Runtime, string) {
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return Kubernetes, "KUBERNETES_SERVICE_HOST is set"
	}
	if _, err := os.Stat("/var/run/secrets/kubernetes.io"); err == nil {
		return Kubernetes, "/var/run/secrets/kubernetes.io exists"
	}
	cg, _ := os.ReadFile("/proc/self/cgroup")
	if r, ev := RuntimeFromCgroup(cg); r == Kubernetes {
		return r, ev
	}
	if _, err := os.Stat("/run/.containerenv"); err == nil {
		return Podman, "/run/.containerenv exists"
	}
	if _, err := os.Stat("/.dockerenv"); err == nil {
		return Docker, "/.dockerenv exists"
	}
	// systemd writes the container manager it was started by here; the
	// container= variable is what LXC and nspawn give PID 1 (its environ
	// may be unreadable, then this process's own is tried).
	if v := readTrim("/run/systemd/container"); v != "" {
		if r := runtimeFromContainerVar(v); r != None {
			return r, "/run/systemd/container says " + v
		}
	}
	if env, err := os.ReadFile("/proc/1/environ"); err == nil {
		for _, kv := range bytes.Split(env, []byte{0}) {
			if v, ok := strings.CutPrefix(string(kv), "container="); ok {
				if r := runtimeFromContainerVar(v); r != None {
					return r, "PID 1 has container=" + v
				}
			}
		}
	}
	if v := os.Getenv("container"); v != "" {
		if r := runtimeFromContainerVar(v); r != None {
			return r, "container=" + v + " is set"
		}
	}
	if r, ev := RuntimeFromCgroup(cg); r != None {
		return r, ev
	}
	return None, ""
}

func runtimeFromContainerVar(v string) Runtime {
	switch {
	case strings.HasPrefix(v, "lxc"), v == "incus":
		return LXC
	case v == "docker":
		return Docker
	case v == "podman", v == "oci":
		return Podman
	case v == "systemd-nspawn":
		return Nspawn
	}
	return None
}

// RuntimeFromCgroup names the runtime a /proc/self/cgroup file's paths
// show (cgroup v1 lines and the v2 line), None when they show none.
func RuntimeFromCgroup(cgroup []byte) (Runtime, string) {
	sc := bufio.NewScanner(bytes.NewReader(cgroup))
	var found Runtime
	var ev string
	for sc.Scan() {
		line := sc.Text()
		_, path, ok := strings.Cut(line, "::")
		if !ok {
			parts := strings.SplitN(line, ":", 3)
			if len(parts) != 3 {
				continue
			}
			path = parts[2]
		}
		switch {
		case strings.Contains(path, "kubepods"):
			return Kubernetes, "the cgroup path " + path + " is a Kubernetes pod's"
		case found == None && (strings.Contains(path, "/docker/") || strings.Contains(path, "/docker-")):
			found, ev = Docker, "the cgroup path "+path+" is Docker's"
		case found == None && strings.Contains(path, "libpod"):
			found, ev = Podman, "the cgroup path "+path+" is Podman's"
		case found == None && strings.Contains(path, "containerd"):
			found, ev = Containerd, "the cgroup path "+path+" is containerd's"
		case found == None && strings.Contains(path, "/lxc"):
			found, ev = LXC, "the cgroup path "+path+" is LXC's"
		}
	}
	return found, ev
}

// parseSeccompStatus reads the Seccomp and Seccomp_filters lines of a
// /proc/PID/status file; -1 when there is no Seccomp line.
func parseSeccompStatus(status []byte) (mode, filters int) {
	mode = -1
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "Seccomp":
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				mode = n
			}
		case "Seccomp_filters":
			filters, _ = strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return mode, filters
}

// capEff is the CapEff line of a /proc/PID/status file (0 when absent).
func capEff(status []byte) uint64 {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			n, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return n
		}
	}
	return 0
}

// initialUserNS says whether this process is in the initial user
// namespace (its uid_map is the identity over the whole range).
func initialUserNS() bool {
	m := strings.Fields(readTrim("/proc/self/uid_map"))
	return len(m) == 3 && m[0] == "0" && m[1] == "0" && m[2] == "4294967295"
}

// ProcSubmounts lists the mount points strictly below /proc in a
// /proc/self/mountinfo file, except those the kernel ignores when it
// decides whether a new procfs would reveal more than is visible (mounts
// on permanently empty directories: binfmt_misc under /proc/sys/fs).
func ProcSubmounts(mountinfo []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if !strings.HasPrefix(mp, "/proc/") || mp == "/proc/sys/fs/binfmt_misc" {
			continue
		}
		out = append(out, mp)
	}
	return out
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// maskedOCIPaths are the submounts among subs that OCI runtimes' default
// masked paths put there (runc's spec, Docker's, containerd's and CRI-O's
// defaults all mask these).
func maskedOCIPaths(subs []string) []string {
	var out []string
	for _, p := range subs {
		switch p {
		case "/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug", "/proc/latency_stats", "/proc/acpi", "/proc/scsi":
			out = append(out, p)
		}
	}
	return out
}
