package seccompprofiles

import (
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const (
	retAllow       = 0x7fff0000
	retNotify      = 0x7fc00000
	retKillProcess = 0x80000000
	retKillThread  = 0x00000000
)

func retErrno(e unix.Errno) uint32 { return 0x00050000 | uint32(e) }

// nativeAudit is the AUDIT_ARCH_* value of the running architecture.
func nativeAudit(t *testing.T) uint32 {
	a, ok := nativeAuditArch()
	if !ok {
		t.Skipf("no AUDIT_ARCH value known for %s", runtime.GOARCH)
	}
	return a
}

func nr(t *testing.T, name string) int32 {
	t.Helper()
	n, _, ok := resolveSyscall(name)
	if !ok || n < 0 {
		t.Fatalf("no native syscall %q", name)
	}
	return n
}

type verdictCase struct {
	name string
	args [6]uint64
	want uint32
}

func checkVerdicts(t *testing.T, f *Filter, cases []verdictCase) {
	t.Helper()
	arch := nativeAudit(t)
	for _, c := range cases {
		got := runBPF(t, f.BPF, seccompData{nr: nr(t, c.name), arch: arch, args: c.args})
		if got != c.want {
			t.Errorf("%s%#x: verdict %#x, want %#x", c.name, c.args[:2], got, c.want)
		}
	}
}

func compileDefault(t *testing.T, notify bool) *Filter {
	t.Helper()
	f, err := Compile(Default(), Options{Notify: notify})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.BPF) == 0 || len(f.BPF)%8 != 0 {
		t.Fatalf("BPF is %d bytes, want a non-empty multiple of 8", len(f.BPF))
	}
	if f.Instructions() > bpfMaxInsns {
		t.Fatalf("%d instructions", f.Instructions())
	}
	if len(f.Warnings) != 0 {
		t.Errorf("warnings: %q", f.Warnings)
	}
	if len(f.ProfileHash) != 64 {
		t.Errorf("ProfileHash = %q", f.ProfileHash)
	}
	return f
}

const (
	cloneNewUser = 0x10000000
	sigchld      = 17
	tiocsti      = 0x5412
	tioclinux    = 0x541C
	tcgets       = 0x5401
)

// requiredDenials are the syscalls the default profile must refuse with
// EPERM whatever their arguments.
var requiredDenials = []string{
	"mount", "umount2", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree",
	"mount_setattr", "pivot_root", "chroot", "setns", "ptrace", "process_vm_readv",
	"process_vm_writev", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
	"userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
	"open_by_handle_at", "name_to_handle_at", "kexec_load", "kexec_file_load",
	"init_module", "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct",
	"settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname",
	"setdomainname", "quotactl", "quotactl_fd", "lookup_dcookie",
}

// requiredAllows is a sample of what ordinary development needs.
var requiredAllows = []string{
	"read", "write", "openat", "close", "execve", "mmap", "mprotect", "munmap", "brk",
	"futex", "wait4", "waitid", "pipe2", "dup3", "fcntl", "getdents64", "newfstatat", "statx",
	"epoll_create1", "epoll_ctl", "epoll_pwait", "eventfd2", "timerfd_create", "signalfd4",
	"inotify_init1", "inotify_add_watch", "memfd_create", "rt_sigaction", "rt_sigreturn",
	"sigaltstack", "clock_nanosleep", "getrandom", "rseq", "set_robust_list", "prlimit64",
	"sched_getaffinity", "socket", "connect", "bind", "listen", "accept4", "sendmsg",
	"recvmsg", "seccomp", "landlock_create_ruleset", "landlock_add_rule",
	"landlock_restrict_self", "prctl", "madvise", "getcwd", "renameat2", "unlinkat",
	"fchmodat", "utimensat", "copy_file_range", "faccessat2", "close_range", "pidfd_open",
	"vfork", "ioctl",
}

func TestDefaultVerdicts(t *testing.T) {
	f := compileDefault(t, false)
	if f.Notify || f.NotifyUnavailable != "" {
		t.Errorf("Notify=%v NotifyUnavailable=%q without Options.Notify", f.Notify, f.NotifyUnavailable)
	}
	var cases []verdictCase
	for _, n := range requiredDenials {
		cases = append(cases, verdictCase{name: n, want: retErrno(unix.EPERM)})
	}
	for _, n := range requiredAllows {
		cases = append(cases, verdictCase{name: n, want: retAllow})
	}
	cases = append(cases,
		verdictCase{name: "clone3", want: retErrno(unix.ENOSYS)},
		verdictCase{name: "clone", args: [6]uint64{sigchld}, want: retAllow},
		verdictCase{name: "clone", args: [6]uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM | unix.CLONE_SETTLS | unix.CLONE_PARENT_SETTID | unix.CLONE_CHILD_CLEARTID}, want: retAllow},
		verdictCase{name: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: retErrno(unix.EPERM)},
		verdictCase{name: "clone", args: [6]uint64{unix.CLONE_NEWNET}, want: retErrno(unix.EPERM)},
		verdictCase{name: "clone", args: [6]uint64{unix.CLONE_NEWNS}, want: retErrno(unix.EPERM)},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_FILES | unix.CLONE_FS}, want: retAllow},
		verdictCase{name: "unshare", args: [6]uint64{0}, want: retAllow},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_NEWUSER}, want: retErrno(unix.EPERM)},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_NEWTIME}, want: retErrno(unix.EPERM)},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_NEWCGROUP | unix.CLONE_FILES}, want: retErrno(unix.EPERM)},
		verdictCase{name: "ioctl", args: [6]uint64{0, tcgets}, want: retAllow},
		verdictCase{name: "ioctl", args: [6]uint64{0, tiocsti}, want: retErrno(unix.EPERM)},
		// The kernel truncates the command to 32 bits: high bits must not
		// get TIOCSTI through.
		verdictCase{name: "ioctl", args: [6]uint64{0, 1<<32 | tiocsti}, want: retErrno(unix.EPERM)},
		verdictCase{name: "ioctl", args: [6]uint64{0, 0xffffffff_00000000 | tiocsti}, want: retErrno(unix.EPERM)},
		verdictCase{name: "ioctl", args: [6]uint64{0, tioclinux}, want: retErrno(unix.EPERM)},
		verdictCase{name: "ioctl", args: [6]uint64{0, 7<<32 | tioclinux}, want: retErrno(unix.EPERM)},
		verdictCase{name: "personality", args: [6]uint64{0}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{8}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{0x20000}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{0x20008}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{0xffffffff}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{0x0040000}, want: retErrno(unix.EPERM)}, // ADDR_NO_RANDOMIZE
		verdictCase{name: "personality", args: [6]uint64{0x0400000}, want: retErrno(unix.EPERM)}, // READ_IMPLIES_EXEC
		verdictCase{name: "kill", args: [6]uint64{1, 9}, want: retErrno(unix.EPERM)},
		verdictCase{name: "kill", args: [6]uint64{1<<32 | 1, 9}, want: retErrno(unix.EPERM)},
		verdictCase{name: "kill", args: [6]uint64{2, 9}, want: retAllow},
		verdictCase{name: "kill", args: [6]uint64{0xffffffff, 9}, want: retAllow}, // kill(-1): the kernel spares init
		verdictCase{name: "tkill", args: [6]uint64{1, 9}, want: retErrno(unix.EPERM)},
		verdictCase{name: "tgkill", args: [6]uint64{1, 1, 9}, want: retErrno(unix.EPERM)},
		verdictCase{name: "tgkill", args: [6]uint64{5, 5, 9}, want: retAllow},
		verdictCase{name: "rt_sigqueueinfo", args: [6]uint64{1}, want: retErrno(unix.EPERM)},
		verdictCase{name: "rt_tgsigqueueinfo", args: [6]uint64{1}, want: retErrno(unix.EPERM)},
		verdictCase{name: "pidfd_open", args: [6]uint64{1}, want: retErrno(unix.EPERM)},
		verdictCase{name: "pidfd_open", args: [6]uint64{42}, want: retAllow},
		verdictCase{name: "socket", args: [6]uint64{unix.AF_VSOCK, unix.SOCK_STREAM}, want: retErrno(unix.EPERM)},
		verdictCase{name: "socket", args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM}, want: retAllow},
		verdictCase{name: "socket", args: [6]uint64{unix.AF_UNIX, unix.SOCK_STREAM}, want: retAllow},
		// Not in the allowlist: the default, ENOSYS.
		verdictCase{name: "fanotify_init", want: retErrno(unix.ENOSYS)},
		verdictCase{name: "kcmp", want: retErrno(unix.ENOSYS)},
		verdictCase{name: "syslog", want: retErrno(unix.ENOSYS)},
	)
	checkVerdicts(t, f, cases)

	arch := nativeAudit(t)
	if got := runBPF(t, f.BPF, seccompData{nr: 1000, arch: arch}); got != retErrno(unix.ENOSYS) {
		t.Errorf("unknown syscall 1000: %#x, want ENOSYS", got)
	}
	if runtime.GOARCH == "amd64" {
		// i386 syscalls (int 0x80) and x32 syscalls are other ABIs.
		if got := runBPF(t, f.BPF, seccompData{nr: 20, arch: auditArchI386}); got != retKillProcess {
			t.Errorf("i386 getpid: %#x, want KILL_PROCESS", got)
		}
		if got := runBPF(t, f.BPF, seccompData{nr: 39 | x32SyscallBit, arch: auditArchX86_64}); got != retKillProcess {
			t.Errorf("x32 getpid: %#x, want KILL_PROCESS", got)
		}
	}
}

func TestDefaultVerdictsNotify(t *testing.T) {
	f := compileDefault(t, true)
	if why := notifyUnavailable(); why != "" {
		if f.Notify || f.NotifyUnavailable != why {
			t.Fatalf("notification unavailable (%s), but Notify=%v NotifyUnavailable=%q", why, f.Notify, f.NotifyUnavailable)
		}
		t.Skipf("seccomp user notification unavailable here: %s", why)
	}
	if !f.Notify || f.NotifyUnavailable != "" {
		t.Fatalf("Notify=%v NotifyUnavailable=%q", f.Notify, f.NotifyUnavailable)
	}
	var cases []verdictCase
	for _, n := range requiredDenials {
		cases = append(cases, verdictCase{name: n, want: retNotify})
	}
	for _, n := range requiredAllows {
		cases = append(cases, verdictCase{name: n, want: retAllow})
	}
	cases = append(cases,
		// The quiet fallback stays a plain errno.
		verdictCase{name: "clone3", want: retErrno(unix.ENOSYS)},
		verdictCase{name: "clone", args: [6]uint64{sigchld}, want: retAllow},
		verdictCase{name: "clone", args: [6]uint64{cloneNewUser | sigchld}, want: retNotify},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_FILES}, want: retAllow},
		verdictCase{name: "unshare", args: [6]uint64{unix.CLONE_NEWUSER}, want: retNotify},
		verdictCase{name: "ioctl", args: [6]uint64{0, tcgets}, want: retAllow},
		verdictCase{name: "ioctl", args: [6]uint64{0, 1<<32 | tiocsti}, want: retNotify},
		verdictCase{name: "personality", args: [6]uint64{0xffffffff}, want: retAllow},
		verdictCase{name: "personality", args: [6]uint64{0x0040000}, want: retNotify},
		verdictCase{name: "kill", args: [6]uint64{1, 9}, want: retNotify},
		verdictCase{name: "kill", args: [6]uint64{3, 9}, want: retAllow},
		verdictCase{name: "fanotify_init", want: retNotify},
	)
	checkVerdicts(t, f, cases)
	if got := runBPF(t, f.BPF, seccompData{nr: 1000, arch: nativeAudit(t)}); got != retNotify {
		t.Errorf("unknown syscall 1000: %#x, want NOTIFY", got)
	}

	// What the supervisor answers.
	lookups := []struct {
		name    string
		args    [6]uint64
		errno   unix.Errno
		reason  string
		isDflt  bool
		quietOK bool
	}{
		{"keyctl", [6]uint64{}, unix.EPERM, "The kernel keyring is shared kernel state", false, false},
		{"mount", [6]uint64{}, unix.EPERM, "Mounting, unmounting", false, false},
		{"ioctl", [6]uint64{0, 1<<32 | tiocsti}, unix.EPERM, "ioctl TIOCSTI", false, false},
		{"ioctl", [6]uint64{0, tioclinux}, unix.EPERM, "ioctl TIOCLINUX", false, false},
		{"personality", [6]uint64{0x0040000}, unix.EPERM, "Other execution domains", false, false},
		{"unshare", [6]uint64{unix.CLONE_NEWUSER}, unix.EPERM, "Creating or entering namespaces", false, false},
		{"clone", [6]uint64{unix.CLONE_NEWUSER}, unix.EPERM, "clone with a namespace flag", false, false},
		{"kill", [6]uint64{1, 9}, unix.EPERM, "Signals to pid 1", false, false},
		{"fanotify_init", [6]uint64{}, unix.ENOSYS, "not allowed by the profile", true, false},
	}
	for _, l := range lookups {
		d := f.Lookup(uint32(nr(t, l.name)), l.args)
		if d.Name != l.name || d.Errno != int(l.errno) || !strings.HasPrefix(d.Reason, l.reason) || d.Default != l.isDflt {
			t.Errorf("Lookup(%s, %#x) = %+v, want %s errno %d reason %q default %v", l.name, l.args[:2], d, l.name, l.errno, l.reason, l.isDflt)
		}
	}
	if d := f.Lookup(1000, [6]uint64{}); d.Errno != int(unix.ENOSYS) || !d.Default {
		t.Errorf("Lookup(1000) = %+v", d)
	}
	if d, ok := f.Denials[uint32(nr(t, "clone3"))]; !ok || !d.Quiet || d.Errno != int(unix.ENOSYS) {
		t.Errorf("Denials[clone3] = %+v, %v; want a quiet ENOSYS", d, ok)
	}
	if d, ok := f.Denials[uint32(nr(t, "keyctl"))]; !ok || d.Quiet || d.Errno != int(unix.EPERM) || d.Name != "keyctl" {
		t.Errorf("Denials[keyctl] = %+v, %v", d, ok)
	}
}

func TestQuietFallbacksOfDefault(t *testing.T) {
	f := compileDefault(t, true)
	if !f.Notify {
		t.Skipf("seccomp user notification unavailable here: %s", f.NotifyUnavailable)
	}
	var quiet []string
	for _, d := range f.Denials {
		if d.Quiet {
			quiet = append(quiet, d.Name)
		}
	}
	if strings.Join(quiet, ",") != "clone3" {
		t.Errorf("quiet fallbacks = %v, want [clone3]", quiet)
	}
}

// A conditional rule next to an unconditional one for the same syscall:
// libseccomp 2.5 silently drops the conditional rule, so Compile evaluates
// it in a prelude program first. Both orders of the two rules.
func TestConditionalRulesTakePrecedence(t *testing.T) {
	for _, order := range []string{"allow-first", "deny-first"} {
		t.Run(order, func(t *testing.T) {
			allow := `{"names": ["ioctl", "getpid", "exit_group"], "action": "SCMP_ACT_ALLOW"}`
			deny := `{"names": ["ioctl"], "action": "SCMP_ACT_ERRNO", "errnoRet": 13,
				"args": [{"index": 1, "value": 4294967295, "valueTwo": 21522, "op": "SCMP_CMP_MASKED_EQ"}]}`
			rules := allow + "," + deny
			if order == "deny-first" {
				rules = deny + "," + allow
			}
			p, err := Parse([]byte(`{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [`+rules+`,
				{"names": ["uname"], "action": "SCMP_ACT_ALLOW", "args": [{"index": 0, "value": 7, "op": "SCMP_CMP_EQ"}]},
				{"names": ["uname"], "action": "SCMP_ACT_KILL_PROCESS"}]}`), order)
			if err != nil {
				t.Fatal(err)
			}
			for _, notify := range []bool{false, true} {
				f, err := compileUnchecked(p, Options{Notify: notify}) // a few rules, not a profile to run under
				if err != nil {
					t.Fatal(err)
				}
				deny := retErrno(unix.EACCES)
				if f.Notify {
					deny = retNotify
				}
				checkVerdicts(t, f, []verdictCase{
					{name: "ioctl", args: [6]uint64{0, tcgets}, want: retAllow},
					{name: "ioctl", args: [6]uint64{0, 1<<32 | tiocsti}, want: deny},
					{name: "getpid", want: retAllow},
					{name: "uname", args: [6]uint64{7}, want: retAllow},
					{name: "uname", args: [6]uint64{8}, want: retKillProcess},
				})
				if d := f.Lookup(uint32(nr(t, "ioctl")), [6]uint64{0, tiocsti}); d.Errno != int(unix.EACCES) {
					t.Errorf("Lookup(ioctl TIOCSTI) = %+v", d)
				}
			}
		})
	}
}

func TestCompileDockerProfile(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test profile's archMap and includes are written for amd64; running on " + runtime.GOARCH)
	}
	p, err := LoadFile("testdata/docker-small.json")
	if err != nil {
		t.Fatal(err)
	}
	f, err := compileUnchecked(p, Options{}) // Compile refuses it: too small to run a command under
	if err != nil {
		t.Fatal(err)
	}
	checkVerdicts(t, f, []verdictCase{
		{name: "read", want: retAllow},
		{name: "close", want: retAllow},
		{name: "personality", args: [6]uint64{0}, want: retAllow},
		{name: "personality", args: [6]uint64{8}, want: retAllow},
		{name: "personality", args: [6]uint64{3}, want: retErrno(unix.EPERM)},
		{name: "clone", args: [6]uint64{sigchld}, want: retAllow},
		{name: "clone", args: [6]uint64{cloneNewUser}, want: retErrno(unix.EPERM)},
		{name: "mount", want: retErrno(unix.EPERM)},
		{name: "arch_prctl", want: retAllow},
		{name: "getppid", want: retAllow},
		{name: "gettid", want: retErrno(unix.EPERM)},
		{name: "keyctl", want: retErrno(unix.EACCES)},
		{name: "uname", want: retKillProcess},
	})
	// archMap gave the filter the i386 and x32 ABIs: their getpid is
	// allowed, their other syscalls get the default action.
	if got := runBPF(t, f.BPF, seccompData{nr: 20, arch: auditArchI386}); got != retAllow {
		t.Errorf("i386 getpid: %#x, want ALLOW", got)
	}
	if got := runBPF(t, f.BPF, seccompData{nr: 39 | x32SyscallBit, arch: auditArchX86_64}); got != retAllow {
		t.Errorf("x32 getpid: %#x, want ALLOW", got)
	}
	if got := runBPF(t, f.BPF, seccompData{nr: 21, arch: auditArchI386}); got != retErrno(unix.EPERM) {
		t.Errorf("i386 mount: %#x, want EPERM", got)
	}
	if got := runBPF(t, f.BPF, seccompData{nr: 1, arch: 0xc00000b7}); got != retKillProcess {
		t.Errorf("aarch64 syscall on an x86 filter: %#x, want KILL_PROCESS", got)
	}
}

// Without notification support a user profile's SCMP_ACT_NOTIFY becomes a
// plain errno; with it, it is notified and answered with its errnoRet.
func TestNotifyActionInProfile(t *testing.T) {
	p, err := Parse([]byte(`{"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [
		{"names": ["keyctl"], "action": "SCMP_ACT_NOTIFY", "errnoRet": 13},
		{"names": ["bpf"], "action": "SCMP_ACT_ERRNO"},
		{"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38}]}`), "blocklist")
	if err != nil {
		t.Fatal(err)
	}
	f, err := Compile(p, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if f.Notify {
		t.Error("Notify without Options.Notify")
	}
	checkVerdicts(t, f, []verdictCase{
		{name: "keyctl", want: retErrno(unix.EACCES)},
		{name: "bpf", want: retErrno(unix.EPERM)},
		{name: "clone3", want: retErrno(unix.ENOSYS)},
		{name: "getpid", want: retAllow},
	})
	f, err = Compile(p, Options{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Notify {
		t.Skipf("seccomp user notification unavailable here: %s", f.NotifyUnavailable)
	}
	checkVerdicts(t, f, []verdictCase{
		{name: "keyctl", want: retNotify},
		{name: "bpf", want: retNotify},
		{name: "clone3", want: retErrno(unix.ENOSYS)},
		{name: "getpid", want: retAllow},
	})
	if d := f.Lookup(uint32(nr(t, "keyctl")), [6]uint64{}); d.Errno != int(unix.EACCES) {
		t.Errorf("Lookup(keyctl) = %+v", d)
	}
}

func TestCompileIsDeterministic(t *testing.T) {
	a := compileDefault(t, false)
	b := compileDefault(t, false)
	if string(a.BPF) != string(b.BPF) || a.ProfileHash != b.ProfileHash {
		t.Error("two compilations of the default profile differ")
	}
	c := compileDefault(t, true)
	if c.Notify && string(a.BPF) == string(c.BPF) {
		t.Error("the notify filter equals the errno filter")
	}
}

// hutch's exec stage sends the listener with sendmsg after loading the
// filter: a notifying filter that denied it would block the stage forever,
// so Compile falls back to plain errno actions, and says why.
func TestNotifyNeedsSendmsg(t *testing.T) {
	if why := notifyUnavailable(); why != "" {
		t.Skipf("seccomp user notification unavailable here: %s", why)
	}
	var names []string
	for _, c := range execStageNeeds {
		names = append(names, c.names[0])
	}
	p := stageProfile(t, names, ActErrno)
	f, err := Compile(p, Options{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	if f.Notify || !strings.Contains(f.NotifyUnavailable, "sendmsg") {
		t.Errorf("Notify=%v NotifyUnavailable=%q", f.Notify, f.NotifyUnavailable)
	}
	if got := runBPF(t, f.BPF, seccompData{nr: nr(t, "keyctl"), arch: nativeAudit(t)}); got != retErrno(unix.EPERM) {
		t.Errorf("keyctl: %#x, want EPERM", got)
	}

	p.Syscalls[0].Names = append(p.Syscalls[0].Names, "sendmsg")
	f, err = Compile(p, Options{Notify: true})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Notify || f.NotifyUnavailable != "" || len(f.Warnings) != 0 {
		t.Errorf("Notify=%v NotifyUnavailable=%q Warnings=%q", f.Notify, f.NotifyUnavailable, f.Warnings)
	}
}
