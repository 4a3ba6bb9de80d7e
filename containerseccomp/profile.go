// Package containerseccomp makes the seccomp profile a container needs for
// hutch to build its sandboxes inside it: Docker's default profile plus
// exactly the syscalls hutch's supervisor and init make that the default
// refuses (namespace creation and the mounts of the sandbox's root).
//
// The profile is written in the OCI runtime spec's form (the
// linux.seccomp of config.json, fully resolved: no Docker "includes" or
// "excludes"), which docker and podman (--security-opt seccomp=FILE),
// containerd and CRI-O (Kubernetes' Localhost profiles) and runc all read.
//
// Provenance of Docker's default: the rules of moby's
// profiles/seccomp/default.json (moby 28, 2025), transcribed here as data,
// resolved as Docker resolves them for a container with Docker's default
// capabilities (only CAP_SYS_CHROOT among the capabilities the profile
// tests) on a kernel >= 4.8. TestDockerDefaultShape pins the rules hutch
// relies on: what the default refuses and hutch adds.
package containerseccomp

import (
	"fmt"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// dockerAllowed is the default profile's unconditional allow rule.
const dockerAllowed = `accept accept4 access adjtimex alarm bind brk capget capset chdir chmod chown chown32
clock_adjtime clock_adjtime64 clock_getres clock_getres_time64 clock_gettime clock_gettime64
clock_nanosleep clock_nanosleep_time64 close close_range connect copy_file_range creat dup dup2 dup3
epoll_create epoll_create1 epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait epoll_wait_old
eventfd eventfd2 execve execveat exit exit_group faccessat faccessat2 fadvise64 fadvise64_64 fallocate
fanotify_mark fchdir fchmod fchmodat fchown fchown32 fchownat fcntl fcntl64 fdatasync fgetxattr
flistxattr flock fork fremovexattr fsetxattr fstat fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate
ftruncate64 futex futex_time64 futex_waitv futimesat getcpu getcwd getdents getdents64 getegid getegid32
geteuid geteuid32 getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid getpgrp getpid
getppid getpriority getrandom getresgid getresgid32 getresuid getresuid32 getrlimit get_robust_list
getrusage getsid getsockname getsockopt get_thread_area gettid gettimeofday getuid getuid32 getxattr
inotify_add_watch inotify_init inotify_init1 inotify_rm_watch io_cancel ioctl io_destroy io_getevents
io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup io_submit io_uring_enter
io_uring_register io_uring_setup ipc kill landlock_add_rule landlock_create_ruleset
landlock_restrict_self lchown lchown32 lgetxattr link linkat listen listxattr llistxattr _llseek
lremovexattr lseek lsetxattr lstat lstat64 madvise membarrier memfd_create memfd_secret mincore mkdir
mkdirat mknod mknodat mlock mlock2 mlockall mmap mmap2 mprotect mq_getsetattr mq_notify mq_open
mq_timedreceive mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap msgctl msgget
msgrcv msgsnd msync munlock munlockall munmap name_to_handle_at nanosleep newfstatat _newselect open
openat openat2 pause pidfd_open pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll
ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64 process_mrelease pselect6 pselect6_time64
pwrite64 pwritev pwritev2 read readahead readlink readlinkat readv recv recvfrom recvmmsg
recvmmsg_time64 recvmsg remap_file_pages removexattr rename renameat renameat2 restart_syscall rmdir
rseq rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn rt_sigsuspend
rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo sched_getaffinity sched_getattr
sched_getparam sched_get_priority_max sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_rr_get_interval_time64 sched_setaffinity sched_setattr sched_setparam sched_setscheduler
sched_yield seccomp select semctl semget semop semtimedop semtimedop_time64 send sendfile sendfile64
sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid setgid32 setgroups setgroups32
setitimer setpgid setpriority setregid setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area set_tid_address setuid setuid32
setxattr shmat shmctl shmdt shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn
socketcall socketpair splice stat stat64 statfs statfs64 statx symlink symlinkat sync sync_file_range
syncfs sysinfo tee tgkill time timer_create timer_delete timer_getoverrun timer_gettime
timer_gettime64 timer_settime timer_settime64 timerfd_create timerfd_gettime timerfd_gettime64
timerfd_settime timerfd_settime64 times tkill truncate truncate64 ugetrlimit umask uname unlink
unlinkat utime utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid write writev`

// The default's conditional rules, resolved for Docker's default
// capabilities on a kernel >= 4.8.
const (
	// includes minKernel 4.8
	dockerPtrace = "process_vm_readv process_vm_writev ptrace"
	// includes caps CAP_SYS_CHROOT (a default capability)
	dockerChroot = "chroot"
	// socket unless the family is AF_VSOCK (40)
	afVsock = 40
	// clone without any namespace flag (excludes CAP_SYS_ADMIN): the flags
	// CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET, masked,
	// must be 0.
	cloneNamespaceFlags = 0x7E020000
	// clone3 answers ENOSYS (its flags are out of seccomp's reach), so
	// that libc falls back to clone (excludes CAP_SYS_ADMIN).
	enosys = 38
)

// dockerPersonality: personality is allowed for these arguments only
// (PER_LINUX, UNAME26, PER_LINUX32, UNAME26|PER_LINUX32, the query).
var dockerPersonality = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// arches: the seccomp architectures of a Go GOARCH and the names its
// includes.arches rules allow there.
var arches = map[string]struct {
	archs []specs.Arch
	names string
}{
	"amd64": {[]specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}, "arch_prctl modify_ldt"},
	"arm64": {[]specs.Arch{specs.ArchAARCH64, specs.ArchARM}, "arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls"},
}

// Addition is one syscall group hutch needs beyond Docker's default.
type Addition struct {
	Names []string
	// Why says which part of hutch makes the call.
	Why string
}

// HutchAdditions are the syscalls hutch makes that Docker's default
// refuses, from what hutch calls (nsjail's init and exec stage, its Go
// supervisor) and `strace -f hutch run -- true`. The sandbox's own seccomp
// filter refuses all of them to the sandboxed command.
var HutchAdditions = []Addition{
	{[]string{"clone"}, "with namespace flags: the supervisor starts the sandbox's init in new user, mount, pid, net, ipc, uts and cgroup namespaces (Docker allows clone only without them)"},
	{[]string{"clone3"}, "a sandbox placed in a delegated cgroup v2 is cloned straight into it (CLONE_INTO_CGROUP), which only clone3 does; elsewhere Docker's ENOSYS would do (hutch falls back to clone). clone3's flags are out of seccomp's reach, but clone is allowed every flag here anyway"},
	{[]string{"unshare", "setns"}, "the init and the exec stage make the nested user namespace of the sandboxed uid, and join the sandbox's namespaces"},
	{[]string{"mount", "umount2", "pivot_root", "mount_setattr"}, "the init builds the sandbox's root filesystem: binds, tmpfs, procfs, devpts, read-only attributes, pivot_root to it and detach the old root"},
	{[]string{"sethostname"}, "the sandbox's hostname in its uts namespace"},
}

func fields(s string) []string { return strings.Fields(s) }

// DockerDefault is Docker's default profile for goarch ("amd64" or
// "arm64"), resolved (see the package documentation).
func DockerDefault(goarch string) (*specs.LinuxSeccomp, error) {
	a, ok := arches[goarch]
	if !ok {
		return nil, fmt.Errorf("container seccomp profile: architecture %q is not known; known: amd64, arm64", goarch)
	}
	errnoPerm := uint(1)
	allow := append(fields(dockerAllowed), fields(dockerPtrace)...)
	allow = append(allow, fields(dockerChroot)...)
	allow = append(allow, fields(a.names)...)
	sort.Strings(allow)
	p := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &errnoPerm,
		Architectures:   a.archs,
		Syscalls: []specs.LinuxSyscall{
			{Names: allow, Action: specs.ActAllow},
			{Names: []string{"socket"}, Action: specs.ActAllow, Args: []specs.LinuxSeccompArg{{Index: 0, Value: afVsock, Op: specs.OpNotEqual}}},
		},
	}
	for _, v := range dockerPersonality {
		p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: []string{"personality"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: v, Op: specs.OpEqualTo}}})
	}
	enosysRet := uint(enosys)
	p.Syscalls = append(p.Syscalls,
		specs.LinuxSyscall{Names: []string{"clone"}, Action: specs.ActAllow,
			Args: []specs.LinuxSeccompArg{{Index: 0, Value: cloneNamespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}}},
		specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosysRet},
	)
	return p, nil
}

// Hutch is DockerDefault for goarch with HutchAdditions: the clone and
// clone3 rules replaced by unconditional allows, the rest added.
func Hutch(goarch string) (*specs.LinuxSeccomp, error) {
	p, err := DockerDefault(goarch)
	if err != nil {
		return nil, err
	}
	kept := p.Syscalls[:0]
	for _, s := range p.Syscalls {
		if len(s.Names) == 1 && (s.Names[0] == "clone" || s.Names[0] == "clone3") {
			continue
		}
		kept = append(kept, s)
	}
	p.Syscalls = kept
	var add []string
	for _, a := range HutchAdditions {
		add = append(add, a.Names...)
	}
	sort.Strings(add)
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: add, Action: specs.ActAllow})
	return p, nil
}

// Usage is how to give a container the profile, for the stderr of
// `hutch doctor --container-seccomp`.
const Usage = `# hutch's container seccomp profile: Docker's default plus what hutch needs
# (the last rule of syscalls). Save it and give it to the container:
#   hutch doctor --container-seccomp > hutch-seccomp.json
#   docker run --security-opt seccomp=hutch-seccomp.json --security-opt systempaths=unconfined --user 1000 IMAGE ...
#   podman run --security-opt seccomp=hutch-seccomp.json --security-opt unmask=ALL IMAGE ...
# Kubernetes: copy it to /var/lib/kubelet/seccomp/hutch.json on every node, and
#   spec.hostUsers: false
#   securityContext: {seccompProfile: {type: Localhost, localhostProfile: hutch.json}, procMount: Unmasked}
# (deploy/kubernetes/hutch.yaml, docs/DEPLOY.md). The masked /proc paths must go too:
# the kernel refuses the sandbox's procfs while /proc is partly covered.
# AppArmor hosts and nodes: the runtimes' default AppArmor profiles deny mount
#   (docker run --security-opt apparmor=unconfined, or a profile of your own; Kubernetes:
#   appArmorProfile {type: Localhost} with a profile that allows mount).
# Ubuntu 23.10+ outside a container (kernel.apparmor_restrict_unprivileged_userns = 1):
#   sudo install -m 0644 deploy/apparmor/hutch /etc/apparmor.d/hutch && sudo apparmor_parser -r /etc/apparmor.d/hutch
#   or: sudo sysctl -w kernel.apparmor_restrict_unprivileged_userns=0
`
