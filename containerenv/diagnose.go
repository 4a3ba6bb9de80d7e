package containerenv

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Failure is the step of making a sandbox that failed.
type Failure int

const (
	// NoFailure: nothing failed yet (doctor asks what stands in the way).
	NoFailure Failure = iota
	// CreateNamespaces: creating the init's user namespace (and the
	// others with it) was refused.
	CreateNamespaces
	// MountProc: mounting the procfs of the sandbox's pid namespace was
	// refused.
	MountProc
	// SetupRefused: the namespaces were made, and a step of building the
	// sandbox inside them (mapping ids, a mount, pivot_root, the hostname)
	// was refused.
	SetupRefused
)

// Docs is where the fixes are explained at length.
const Docs = "docs/DEPLOY.md"

// Finding is one cause with its fix.
type Finding struct {
	// Cause says what stands in the way, in words, with the fact that
	// shows it.
	Cause string
	// Fix is what to change, for the runtime found.
	Fix string
}

func (f Finding) String() string { return f.Cause + "; fix: " + f.Fix }

// Message joins findings into one line ending with the pointer to Docs;
// "" when there are none.
func Message(fs []Finding) string {
	if len(fs) == 0 {
		return ""
	}
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.String()
	}
	return strings.Join(parts, "; and ") + " (see " + Docs + "); where none of that can be changed, --isolation landlock (or sandbox.isolation = \"auto\") makes a sandbox without namespaces, which gives less (" + IsolationDocs + ")"
}

// IsolationDocs compares the namespace jail with the sandbox without
// namespaces.
const IsolationDocs = "docs/ISOLATION.md"

// Diagnose says what, among the facts, explains the failure (or, with
// NoFailure, what would stop a sandbox), most basic first: a sysctl or
// security module that forbids user namespaces, then the container's
// seccomp filter, its AppArmor profile, and its masked /proc. Each
// finding names its cause and the fix for f.Runtime. errno is the
// failure's errno (0 when unknown or with NoFailure). Diagnose is pure.
func Diagnose(f Facts, what Failure, errno unix.Errno) []Finding {
	var out []Finding
	inContainer := f.Runtime != None
	refused := errno == unix.EPERM || errno == unix.EACCES

	rootNoSetfcap := f.UID == 0 && f.CapEff&(1<<unix.CAP_SETFCAP) == 0 && what != MountProc && what != NoFailure
	if rootNoSetfcap {
		out = append(out, Finding{
			Cause: "hutch runs as root without CAP_SETFCAP: as root it maps uid 0 into the sandbox's user namespace, which the kernel (Linux 5.12 and later) allows only to a process with CAP_SETFCAP, so writing the id map is refused",
			Fix:   rootFix(f.Runtime),
		})
	}
	if what == SetupRefused {
		out = append(out, setupFindings(f, rootNoSetfcap)...)
	} else if what != MountProc {
		if f.MaxUserNamespaces == "0" {
			fix := "sudo sysctl -w user.max_user_namespaces=15000 (and put user.max_user_namespaces = 15000 in /etc/sysctl.d/)"
			if inContainer {
				fix = "the limit is per user namespace: raise it in the one that has it at 0 (the host's or node's, unless the container has a user namespace of its own), e.g. " + fix
			}
			out = append(out, Finding{Cause: "user namespaces are disabled (user.max_user_namespaces = 0)", Fix: fix})
		}
		if f.UID != 0 && f.UnprivilegedUsernsClone == "0" {
			out = append(out, Finding{
				Cause: "unprivileged user namespaces are disabled (kernel.unprivileged_userns_clone = 0)",
				Fix:   "sudo sysctl -w kernel.unprivileged_userns_clone=1 (on the host, also in /etc/sysctl.d/)",
			})
		}
		out = append(out, appArmorUserns(f)...)
		if f.SeccompMode == 2 && (f.UnshareErrno == unix.EPERM || f.SetnsErrno == unix.EPERM) {
			out = append(out, Finding{
				Cause: fmt.Sprintf("a seccomp filter refuses namespace creation (Seccomp: 2 in /proc/self/status, %d filter(s); even unshare(0), which the kernel always allows, returned EPERM): %s",
					f.SeccompFilters, "the default profiles of Docker, Podman and containerd (Kubernetes' RuntimeDefault) refuse clone and unshare with namespace flags, setns, mount, umount2 and pivot_root to a container without CAP_SYS_ADMIN"),
				Fix: seccompFix(f.Runtime),
			})
		} else if what == CreateNamespaces && refused && f.SeccompMode == 2 && len(out) == 0 && !rootNoSetfcap {
			out = append(out, Finding{
				Cause: fmt.Sprintf("a seccomp filter is installed (Seccomp: 2 in /proc/self/status, %d filter(s)) and may refuse clone with namespace flags", f.SeccompFilters),
				Fix:   seccompFix(f.Runtime),
			})
		}
		out = append(out, containerAppArmorFinding(f)...)
	}
	if len(f.ProcSubmounts) > 0 && (what != CreateNamespaces || inContainer || len(out) > 0) {
		out = append(out, Finding{
			Cause: fmt.Sprintf("/proc is partly covered (%s over %s): the kernel refuses a new procfs, which the sandbox's pid namespace needs, to a user namespace when the existing /proc hides some of its paths",
				plural(len(f.ProcSubmounts), "mount", "mounts"), strings.Join(clip(f.ProcSubmounts, 6), ", ")),
			Fix: procFix(f.Runtime),
		})
	}
	if len(out) == 0 && what == CreateNamespaces && refused && inContainer {
		out = append(out, Finding{
			Cause: "creating a user namespace was refused, and neither a sysctl, a seccomp filter nor an AppArmor profile visible here explains it",
			Fix:   "run the container with hutch's seccomp profile, /proc unmasked and, best, in a user namespace of its own: " + seccompFix(f.Runtime),
		})
	}
	if inContainer && len(out) > 0 {
		out[0].Cause = where(f) + out[0].Cause
	}
	return out
}

// setupFindings explains a refused step inside the new namespaces: the
// namespaces were made, so it is no sysctl; a security module or seccomp
// filter refuses what the user namespace should have allowed. explained:
// another finding already accounts for the refusal (no seccomp guess).
func setupFindings(f Facts, explained bool) []Finding {
	out := appArmorUserns(f)
	out = append(out, containerAppArmorFinding(f)...)
	if f.SeccompMode == 2 && !explained {
		out = append(out, Finding{
			Cause: fmt.Sprintf("a seccomp filter is installed (Seccomp: 2 in /proc/self/status, %d filter(s)) and may refuse what the sandbox's init needs (mount, umount2, pivot_root, mount_setattr, sethostname, setns)", f.SeccompFilters),
			Fix:   seccompFix(f.Runtime),
		})
	}
	return out
}

// appArmorUserns is Ubuntu's restriction of unprivileged user namespaces.
func appArmorUserns(f Facts) []Finding {
	if f.AppArmorRestrictUserns != "1" || f.HasCapSysAdminInInitUser {
		return nil
	}
	return []Finding{{
		Cause: "AppArmor restricts unprivileged user namespaces (kernel.apparmor_restrict_unprivileged_userns = 1, as on Ubuntu 23.10 and later): a process without an AppArmor profile that allows \"userns\" gets a user namespace without capabilities in it",
		Fix:   "install an AppArmor profile for hutch's path that grants userns (deploy/apparmor/hutch: sudo install -m 0644 deploy/apparmor/hutch /etc/apparmor.d/hutch && sudo apparmor_parser -r /etc/apparmor.d/hutch), or lift the restriction for the whole host: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
	}}
}

// containerAppArmorFinding is a container runtime's AppArmor profile,
// which denies mount.
func containerAppArmorFinding(f Facts) []Finding {
	if !containerAppArmor(f.AppArmorLabel) {
		return nil
	}
	return []Finding{{
		Cause: "this container is confined by the AppArmor profile " + f.AppArmorLabel + ", which denies mount (and so every mount the sandbox's root filesystem needs)",
		Fix:   appArmorFix(f.Runtime),
	}}
}

// where says in which container hutch runs, as a sentence's start.
func where(f Facts) string {
	if f.Runtime == None {
		return ""
	}
	return fmt.Sprintf("hutch runs in %s (%s): ", RuntimeName(f.Runtime), f.Evidence)
}

// RuntimeName is r in words.
func RuntimeName(r Runtime) string {
	switch r {
	case Docker:
		return "a Docker container"
	case Podman:
		return "a Podman container"
	case Kubernetes:
		return "a Kubernetes pod"
	case Containerd:
		return "a containerd container"
	case LXC:
		return "an LXC container"
	case Nspawn:
		return "a systemd-nspawn container"
	case OCI:
		return "an OCI container (runc or crun; the engine left no marker)"
	}
	return "no container"
}

const profileCmd = "hutch doctor --container-seccomp > hutch-seccomp.json"

const kubeContext = "in the pod spec: hostUsers: false, and in the container's securityContext: seccompProfile: {type: Localhost, localhostProfile: hutch.json} (the file `hutch doctor --container-seccomp` prints, copied into the kubelet's seccomp directory, /var/lib/kubelet/seccomp/, on every node) and procMount: Unmasked (deploy/kubernetes/hutch.yaml has it all)"

func seccompFix(r Runtime) string {
	switch r {
	case Docker:
		return profileCmd + ", then docker run --security-opt seccomp=hutch-seccomp.json --security-opt systempaths=unconfined --user 1000 ... (Docker's default profile plus what hutch needs)"
	case Podman:
		return profileCmd + ", then podman run --security-opt seccomp=hutch-seccomp.json --security-opt unmask=ALL ..."
	case Kubernetes:
		return kubeContext
	case Containerd:
		return profileCmd + ", then nerdctl run --security-opt seccomp=hutch-seccomp.json --security-opt systempaths=unconfined ... (or, under Kubernetes: " + kubeContext + ")"
	case LXC:
		return "LXD/Incus: lxc config set NAME security.nesting=true; plain LXC: lxc.include = /usr/share/lxc/config/nesting.conf in the container's config"
	case Nspawn:
		return "systemd-nspawn --system-call-filter='@mount unshare setns pivot_root sethostname' ..."
	}
	return profileCmd + ", then give the container that profile: docker/podman/nerdctl run --security-opt seccomp=hutch-seccomp.json, or in Kubernetes " + kubeContext
}

// cli is the command line tool of runtime r.
func cli(r Runtime) string {
	if r == Containerd {
		return "nerdctl"
	}
	return string(r)
}

func rootFix(r Runtime) string {
	switch r {
	case Kubernetes:
		return "run hutch as a non-root user (securityContext: runAsUser: 1000, runAsNonRoot: true), or keep the capability (capabilities: add: [SETFCAP])"
	case Docker, Podman, Containerd:
		return "run hutch as a non-root user (" + cli(r) + " run --user 1000, or USER 1000 in the image), or keep the capability (--cap-add SETFCAP)"
	}
	return "run hutch as a non-root user, or give it CAP_SETFCAP"
}

func procFix(r Runtime) string {
	switch r {
	case Docker:
		return "docker run --security-opt systempaths=unconfined (with a non-root --user, or a user-namespaced daemon: unmasked /proc/sys is writable by a container's real root)"
	case Podman:
		return "podman run --security-opt unmask=ALL"
	case Kubernetes:
		return "procMount: Unmasked in the container's securityContext, which needs hostUsers: false in the pod spec"
	case Containerd:
		return "nerdctl run --security-opt systempaths=unconfined, or in Kubernetes procMount: Unmasked with hostUsers: false"
	case LXC:
		return "LXD/Incus: lxc config set NAME security.nesting=true (it mounts a fully visible procfs beside the covered one)"
	}
	return "run the container without masked /proc paths: docker run --security-opt systempaths=unconfined, podman run --security-opt unmask=ALL, or in Kubernetes procMount: Unmasked with hostUsers: false; a bare OCI bundle: empty linux.maskedPaths and linux.readonlyPaths in config.json"
}

func containerAppArmor(label string) bool {
	for _, p := range []string{"docker-default", "cri-containerd.apparmor.d", "containers-default", "lxc-container-default"} {
		if strings.HasPrefix(label, p) && !strings.Contains(label, "nesting") {
			return true
		}
	}
	return false
}

func appArmorFix(r Runtime) string {
	switch r {
	case Kubernetes:
		return "in the container's securityContext: appArmorProfile: {type: Localhost, localhostProfile: hutch} with a profile that allows mount, or {type: Unconfined}"
	case LXC:
		return "LXD/Incus: lxc config set NAME security.nesting=true (its profile then allows nested mounts); plain LXC: lxc.apparmor.profile = lxc-container-default-with-nesting"
	case Podman:
		return "podman run --security-opt apparmor=unconfined (or a profile of your own that allows mount)"
	}
	return "docker run --security-opt apparmor=unconfined (or a profile of your own that allows mount)"
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

func clip(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string(nil), s[:n]...), fmt.Sprintf("and %d more", len(s)-n))
}
