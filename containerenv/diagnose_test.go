package containerenv

import (
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// dockerDefault is what Probe finds in a container Docker makes by
// default: its marker, its seccomp filter refusing unshare, masked /proc.
func dockerDefault() Facts {
	return Facts{
		Runtime: Docker, Evidence: "/.dockerenv exists", UID: 1000,
		SeccompMode: 2, SeccompFilters: 1, UnshareErrno: unix.EPERM, SetnsErrno: unix.EPERM,
		MaxUserNamespaces: "96365",
		ProcSubmounts:     []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger", "/proc/asound", "/proc/acpi", "/proc/kcore", "/proc/keys"},
		AppArmorLabel:     "unconfined",
	}
}

func TestDiagnose(t *testing.T) {
	host := Facts{UID: 1000, MaxUserNamespaces: "15000", SeccompMode: 0, UnshareErrno: 0, SetnsErrno: unix.EBADF}
	with := func(f Facts, edit func(*Facts)) Facts { edit(&f); return f }
	type want struct {
		causes []string // each must appear in its finding's cause, in order
		fixes  []string // each must appear in its finding's fix, in order
	}
	tests := []struct {
		name  string
		facts Facts
		what  Failure
		errno unix.Errno
		want  want
	}{
		{"plain host, nothing in the way", host, NoFailure, 0, want{}},
		{"plain host, refused for no visible reason: no guess", host, CreateNamespaces, unix.EPERM, want{}},
		{"user.max_user_namespaces = 0", with(host, func(f *Facts) { f.MaxUserNamespaces = "0" }), CreateNamespaces, unix.ENOSPC,
			want{[]string{"user.max_user_namespaces = 0"}, []string{"sysctl -w user.max_user_namespaces="}}},
		{"Debian's unprivileged_userns_clone = 0", with(host, func(f *Facts) { f.UnprivilegedUsernsClone = "0" }), CreateNamespaces, unix.EPERM,
			want{[]string{"kernel.unprivileged_userns_clone = 0"}, []string{"kernel.unprivileged_userns_clone=1"}}},
		{"unprivileged_userns_clone = 0 does not bind root", with(host, func(f *Facts) { f.UnprivilegedUsernsClone = "0"; f.UID = 0; f.CapEff = 0x1ffffffffff }), CreateNamespaces, unix.EPERM, want{}},
		{"Ubuntu's AppArmor restriction", with(host, func(f *Facts) { f.AppArmorRestrictUserns = "1" }), CreateNamespaces, unix.EPERM,
			want{[]string{"apparmor_restrict_unprivileged_userns = 1"}, []string{"deploy/apparmor/hutch"}}},
		{"AppArmor restriction, but CAP_SYS_ADMIN in the initial namespace", with(host, func(f *Facts) { f.AppArmorRestrictUserns = "1"; f.HasCapSysAdminInInitUser = true }), CreateNamespaces, unix.EPERM, want{}},
		{"Docker's defaults: seccomp first, then the masked /proc", dockerDefault(), CreateNamespaces, unix.EPERM,
			want{[]string{"Docker container (/.dockerenv exists)", "/proc is partly covered (9 mounts over /proc/bus"},
				[]string{"docker run --security-opt seccomp=hutch-seccomp.json", "systempaths=unconfined"}}},
		{"doctor in Docker's defaults says the same", dockerDefault(), NoFailure, 0,
			want{[]string{"seccomp filter refuses namespace creation", "/proc is partly covered"}, []string{"hutch doctor --container-seccomp", "systempaths=unconfined"}}},
		{"Docker with seccomp unconfined: the proc mount fails", with(dockerDefault(), func(f *Facts) { f.SeccompMode = 0; f.UnshareErrno = 0; f.SetnsErrno = unix.EBADF }), MountProc, unix.EPERM,
			want{[]string{"/proc is partly covered"}, []string{"--security-opt systempaths=unconfined"}}},
		{"the proc mount failure names no seccomp cause even with a filter", dockerDefault(), MountProc, unix.EPERM,
			want{[]string{"/proc is partly covered"}, []string{"systempaths=unconfined"}}},
		{"Podman", with(dockerDefault(), func(f *Facts) { f.Runtime, f.Evidence = Podman, "/run/.containerenv exists" }), CreateNamespaces, unix.EPERM,
			want{[]string{"Podman container", "/proc is partly covered"}, []string{"podman run --security-opt seccomp=hutch-seccomp.json", "unmask=ALL"}}},
		{"Kubernetes RuntimeDefault", with(dockerDefault(), func(f *Facts) { f.Runtime, f.Evidence = Kubernetes, "KUBERNETES_SERVICE_HOST is set" }), CreateNamespaces, unix.EPERM,
			want{[]string{"Kubernetes pod", "/proc is partly covered"}, []string{"hostUsers: false", "procMount: Unmasked"}}},
		{"a filter that lets unshare(0) through but refuses the clone", with(dockerDefault(), func(f *Facts) { f.UnshareErrno = 0; f.SetnsErrno = unix.EBADF; f.ProcSubmounts = nil }), CreateNamespaces, unix.EPERM,
			want{[]string{"may refuse clone with namespace flags"}, []string{"seccomp=hutch-seccomp.json"}}},
		{"an OCI container seen from its masked paths", with(dockerDefault(), func(f *Facts) { f.Runtime, f.Evidence = OCI, "masked" }), CreateNamespaces, unix.EPERM,
			want{[]string{"OCI container", "/proc is partly covered"}, []string{"hutch doctor --container-seccomp", "linux.maskedPaths"}}},
		{"LXC", with(host, func(f *Facts) {
			f.Runtime, f.Evidence = LXC, "PID 1 has container=lxc"
			f.AppArmorLabel = "lxc-container-default-cgns (enforce)"
		}), CreateNamespaces, unix.EPERM,
			want{[]string{"AppArmor profile lxc-container-default-cgns"}, []string{"security.nesting=true"}}},
		{"Docker's AppArmor profile", with(dockerDefault(), func(f *Facts) { f.AppArmorLabel = "docker-default (enforce)"; f.ProcSubmounts = nil }), CreateNamespaces, unix.EPERM,
			want{[]string{"seccomp filter refuses", "AppArmor profile docker-default (enforce)"}, []string{"seccomp=", "apparmor=unconfined"}}},
		{"a container with nothing visible in the way still says what to give it", with(host, func(f *Facts) { f.Runtime, f.Evidence = Kubernetes, "KUBERNETES_SERVICE_HOST is set" }), CreateNamespaces, unix.EPERM,
			want{[]string{"neither a sysctl, a seccomp filter nor an AppArmor profile"}, []string{"hostUsers: false"}}},
		{"Ubuntu: the namespaces are made, the init's mount refused", with(host, func(f *Facts) { f.AppArmorRestrictUserns = "1" }), SetupRefused, unix.EPERM,
			want{[]string{"apparmor_restrict_unprivileged_userns = 1"}, []string{"apparmor_parser -r /etc/apparmor.d/hutch"}}},
		{"a runtime's profile that lets the clone through and refuses mount", with(dockerDefault(), func(f *Facts) { f.UnshareErrno = 0; f.SetnsErrno = unix.EBADF }), SetupRefused, unix.EPERM,
			want{[]string{"Docker container (/.dockerenv exists): a seccomp filter is installed", "/proc is partly covered"}, []string{"seccomp=hutch-seccomp.json", "systempaths=unconfined"}}},
		{"a refused setup step on a plain host: no guess", host, SetupRefused, unix.EPERM, want{}},
		{"root with every capability dropped (Kubernetes' drop ALL): the id map", with(dockerDefault(), func(f *Facts) {
			f.UID, f.CapEff, f.UnshareErrno, f.SetnsErrno, f.ProcSubmounts = 0, 0, 0, unix.EBADF, nil
			f.Runtime, f.Evidence = Kubernetes, "KUBERNETES_SERVICE_HOST is set"
		}), SetupRefused, unix.EPERM,
			want{[]string{"Kubernetes pod (KUBERNETES_SERVICE_HOST is set): hutch runs as root without CAP_SETFCAP"}, []string{"runAsUser: 1000"}}},
		{"root without CAP_SETFCAP, the clone refused", with(host, func(f *Facts) { f.UID, f.Runtime, f.Evidence = 0, Docker, "/.dockerenv exists" }), CreateNamespaces, unix.EPERM,
			want{[]string{"without CAP_SETFCAP"}, []string{"docker run --user 1000"}}},
		{"root with CAP_SETFCAP: no such finding", with(host, func(f *Facts) { f.UID, f.CapEff = 0, 1<<unix.CAP_SETFCAP }), SetupRefused, unix.EPERM, want{}},
		{"a refused setup step names no sysctl", with(host, func(f *Facts) { f.MaxUserNamespaces = "0" }), SetupRefused, unix.EPERM, want{}},
		{"a masked /proc on a host that is no container is no cause of a clone failure", with(host, func(f *Facts) { f.ProcSubmounts = []string{"/proc/kcore"} }), CreateNamespaces, unix.EPERM, want{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Diagnose(tc.facts, tc.what, tc.errno)
			if len(got) != len(tc.want.causes) {
				t.Fatalf("Diagnose = %d findings, want %d: %v", len(got), len(tc.want.causes), got)
			}
			for i, f := range got {
				if !strings.Contains(f.Cause, tc.want.causes[i]) {
					t.Errorf("finding %d cause = %q, want it to contain %q", i, f.Cause, tc.want.causes[i])
				}
				if !strings.Contains(f.Fix, tc.want.fixes[i]) {
					t.Errorf("finding %d fix = %q, want it to contain %q", i, f.Fix, tc.want.fixes[i])
				}
			}
			if msg := Message(got); len(got) > 0 && (!strings.Contains(msg, "(see docs/DEPLOY.md)") || !strings.HasSuffix(msg, "--isolation landlock (or sandbox.isolation = \"auto\") makes a sandbox without namespaces, which gives less (docs/ISOLATION.md)")) {
				t.Errorf("Message = %q, want the pointer to docs/DEPLOY.md and the way to a sandbox without namespaces", msg)
			}
		})
	}
}

func TestProcSubmounts(t *testing.T) {
	mi := `22 1 0:20 / / rw,relatime - overlay overlay rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
24 23 0:22 / /proc/sys/fs/binfmt_misc rw,relatime - binfmt_misc binfmt_misc rw
25 23 0:21 /bus /proc/bus ro,nosuid,nodev,noexec,relatime - proc proc rw
26 23 0:23 /null /proc/kcore rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
27 22 0:24 / /proc2 rw - tmpfs tmpfs rw
28 23 0:25 / /proc/a\040b rw - tmpfs tmpfs rw
`
	got := ProcSubmounts([]byte(mi))
	want := []string{"/proc/bus", "/proc/kcore", "/proc/a b"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("ProcSubmounts = %q, want %q", got, want)
	}
	if got := maskedOCIPaths(got); !reflect.DeepEqual(got, []string{"/proc/kcore"}) {
		t.Errorf("maskedOCIPaths = %q, want [/proc/kcore]", got)
	}
}

func TestRuntimeFromCgroup(t *testing.T) {
	tests := []struct {
		cgroup string
		want   Runtime
	}{
		{"0::/\n", None},
		{"0::/user.slice/user-1000.slice/session-2.scope\n", None},
		{"12:pids:/docker/0123abcd\n0::/docker/0123abcd\n", Docker},
		{"0::/system.slice/docker-0123abcd.scope\n", Docker},
		{"0::/machine.slice/libpod-0123.scope/container\n", Podman},
		{"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/cri-containerd-34.scope\n", Kubernetes},
		{"5:memory:/docker/x\n3:cpu:/kubepods/burstable/pod1/abc\n", Kubernetes},
		{"0::/system.slice/containerd.service/default/x\n", Containerd},
		{"0::/lxc.payload.c1\n", LXC},
	}
	for _, tc := range tests {
		if got, _ := RuntimeFromCgroup([]byte(tc.cgroup)); got != tc.want {
			t.Errorf("RuntimeFromCgroup(%q) = %q, want %q", tc.cgroup, got, tc.want)
		}
	}
}

func TestParseSeccompStatus(t *testing.T) {
	mode, n := parseSeccompStatus([]byte("Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t3\n"))
	if mode != 2 || n != 3 {
		t.Errorf("parseSeccompStatus = %d, %d; want 2, 3", mode, n)
	}
	if mode, _ := parseSeccompStatus([]byte("Name:\tx\n")); mode != -1 {
		t.Errorf("parseSeccompStatus without the line = %d, want -1", mode)
	}
}

// TestProbeHere runs the probe on this machine: no container marker is
// invented where the facts show none, and the two no-op syscalls answer
// as the kernel does without a filter (the test process has none).
func TestProbeHere(t *testing.T) {
	f := Probe()
	if f.SeccompMode == 0 && (f.UnshareErrno != 0 || f.SetnsErrno != unix.EBADF) {
		t.Errorf("without a seccomp filter unshare(0) = %v and setns(-1, 0) = %v, want success and EBADF", f.UnshareErrno, f.SetnsErrno)
	}
	t.Logf("facts: %+v", f)
}
