package seccompprofiles

import (
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"
)

// Actions of the Docker/OCI profile format.
const (
	ActAllow       = "SCMP_ACT_ALLOW"
	ActErrno       = "SCMP_ACT_ERRNO"
	ActKill        = "SCMP_ACT_KILL"
	ActKillProcess = "SCMP_ACT_KILL_PROCESS"
	ActKillThread  = "SCMP_ACT_KILL_THREAD"
	ActTrap        = "SCMP_ACT_TRAP"
	ActLog         = "SCMP_ACT_LOG"
	ActTrace       = "SCMP_ACT_TRACE"
	ActNotify      = "SCMP_ACT_NOTIFY"
)

// validActions lists the actions in the order error messages show them.
var validActions = []string{
	ActAllow, ActErrno, ActKill, ActKillProcess, ActKillThread,
	ActTrap, ActLog, ActTrace, ActNotify,
}

// Argument comparison operators of the Docker/OCI profile format.
const (
	OpNotEqual     = "SCMP_CMP_NE"
	OpLessThan     = "SCMP_CMP_LT"
	OpLessEqual    = "SCMP_CMP_LE"
	OpEqualTo      = "SCMP_CMP_EQ"
	OpGreaterEqual = "SCMP_CMP_GE"
	OpGreaterThan  = "SCMP_CMP_GT"
	OpMaskedEqual  = "SCMP_CMP_MASKED_EQ"
)

var validOps = []string{
	OpNotEqual, OpLessThan, OpLessEqual, OpEqualTo,
	OpGreaterEqual, OpGreaterThan, OpMaskedEqual,
}

var opToScmp = map[string]seccomp.ScmpCompareOp{
	OpNotEqual:     seccomp.CompareNotEqual,
	OpLessThan:     seccomp.CompareLess,
	OpLessEqual:    seccomp.CompareLessOrEqual,
	OpEqualTo:      seccomp.CompareEqual,
	OpGreaterEqual: seccomp.CompareGreaterEqual,
	OpGreaterThan:  seccomp.CompareGreater,
	OpMaskedEqual:  seccomp.CompareMaskedEqual,
}

// validArchitectures are the values of "architectures", "archMap[].architecture"
// and "archMap[].subArchitectures".
var validArchitectures = []string{
	"SCMP_ARCH_X86", "SCMP_ARCH_X86_64", "SCMP_ARCH_X32",
	"SCMP_ARCH_ARM", "SCMP_ARCH_AARCH64",
	"SCMP_ARCH_MIPS", "SCMP_ARCH_MIPS64", "SCMP_ARCH_MIPS64N32",
	"SCMP_ARCH_MIPSEL", "SCMP_ARCH_MIPSEL64", "SCMP_ARCH_MIPSEL64N32",
	"SCMP_ARCH_PPC", "SCMP_ARCH_PPC64", "SCMP_ARCH_PPC64LE",
	"SCMP_ARCH_S390", "SCMP_ARCH_S390X",
	"SCMP_ARCH_PARISC", "SCMP_ARCH_PARISC64",
	"SCMP_ARCH_RISCV64", "SCMP_ARCH_LOONGARCH64",
	"SCMP_ARCH_M68K", "SCMP_ARCH_SH", "SCMP_ARCH_SHEB",
}

// selectorArchNames are the values accepted in includes/excludes "arches":
// Docker writes Go-style names ("amd64", "arm64", "x32", "s390x", ...); the
// libseccomp names are accepted too.
var selectorArchNames = []string{
	"386", "amd64", "arm", "arm64", "loong64", "mips", "mipsle", "mips64",
	"mips64le", "mips64n32", "mipsel64n32", "ppc", "ppc64", "ppc64le",
	"riscv64", "s390", "s390x", "parisc", "parisc64", "m68k", "sh", "sheb",
	"x86", "x86_64", "x32", "aarch64", "i386", "loongarch64", "mipsel", "mipsel64",
}

// nativeArchAliases are the selector names that denote the running
// architecture.
func nativeArchAliases() []string {
	switch runtime.GOARCH {
	case "amd64":
		return []string{"amd64", "x86_64", "SCMP_ARCH_X86_64"}
	case "386":
		return []string{"386", "x86", "i386", "SCMP_ARCH_X86"}
	case "arm64":
		return []string{"arm64", "aarch64", "SCMP_ARCH_AARCH64"}
	case "arm":
		return []string{"arm", "SCMP_ARCH_ARM"}
	case "loong64":
		return []string{"loong64", "loongarch64", "SCMP_ARCH_LOONGARCH64"}
	case "riscv64":
		return []string{"riscv64", "SCMP_ARCH_RISCV64"}
	case "s390x":
		return []string{"s390x", "SCMP_ARCH_S390X"}
	case "ppc64le":
		return []string{"ppc64le", "SCMP_ARCH_PPC64LE"}
	case "ppc64":
		return []string{"ppc64", "SCMP_ARCH_PPC64"}
	case "mips64le":
		return []string{"mips64le", "mipsel64", "SCMP_ARCH_MIPSEL64"}
	case "mips64":
		return []string{"mips64", "SCMP_ARCH_MIPS64"}
	case "mipsle":
		return []string{"mipsle", "mipsel", "SCMP_ARCH_MIPSEL"}
	case "mips":
		return []string{"mips", "SCMP_ARCH_MIPS"}
	}
	return []string{runtime.GOARCH}
}

func isNativeArchName(name string) bool {
	for _, a := range nativeArchAliases() {
		if a == name {
			return true
		}
	}
	return false
}

// scmpArch converts a SCMP_ARCH_* name to libseccomp's constant.
func scmpArch(name string) (seccomp.ScmpArch, error) {
	return seccomp.GetArchFromString(strings.ToLower(strings.TrimPrefix(name, "SCMP_ARCH_")))
}

// capabilityNames are the Linux capabilities accepted in includes/excludes
// "caps".
var capabilityNames = []string{
	"CAP_AUDIT_CONTROL", "CAP_AUDIT_READ", "CAP_AUDIT_WRITE", "CAP_BLOCK_SUSPEND",
	"CAP_BPF", "CAP_CHECKPOINT_RESTORE", "CAP_CHOWN", "CAP_DAC_OVERRIDE",
	"CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_KILL", "CAP_LEASE", "CAP_LINUX_IMMUTABLE",
	"CAP_MAC_ADMIN", "CAP_MAC_OVERRIDE", "CAP_MKNOD", "CAP_NET_ADMIN",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_RAW", "CAP_PERFMON",
	"CAP_SETFCAP", "CAP_SETGID", "CAP_SETPCAP", "CAP_SETUID", "CAP_SYSLOG",
	"CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_CHROOT", "CAP_SYS_MODULE",
	"CAP_SYS_NICE", "CAP_SYS_PACCT", "CAP_SYS_PTRACE", "CAP_SYS_RAWIO",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_WAKE_ALARM",
}

// validFlags are the OCI "flags" values (filter flags for seccomp(2)).
var validFlags = []string{
	"SECCOMP_FILTER_FLAG_TSYNC", "SECCOMP_FILTER_FLAG_LOG",
	"SECCOMP_FILTER_FLAG_SPEC_ALLOW", "SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV",
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// newSyscalls holds syscalls that use the numbers shared by every
// architecture since Linux 5.1 (424 and up), so that a profile can name
// them even where the linked libseccomp is older than the kernel. The numbers
// come from golang.org/x/sys for the architecture being built.
var newSyscalls = map[string]int{
	"pidfd_send_signal":       unix.SYS_PIDFD_SEND_SIGNAL,
	"io_uring_setup":          unix.SYS_IO_URING_SETUP,
	"io_uring_enter":          unix.SYS_IO_URING_ENTER,
	"io_uring_register":       unix.SYS_IO_URING_REGISTER,
	"open_tree":               unix.SYS_OPEN_TREE,
	"move_mount":              unix.SYS_MOVE_MOUNT,
	"fsopen":                  unix.SYS_FSOPEN,
	"fsconfig":                unix.SYS_FSCONFIG,
	"fsmount":                 unix.SYS_FSMOUNT,
	"fspick":                  unix.SYS_FSPICK,
	"pidfd_open":              unix.SYS_PIDFD_OPEN,
	"clone3":                  unix.SYS_CLONE3,
	"close_range":             unix.SYS_CLOSE_RANGE,
	"openat2":                 unix.SYS_OPENAT2,
	"pidfd_getfd":             unix.SYS_PIDFD_GETFD,
	"faccessat2":              unix.SYS_FACCESSAT2,
	"process_madvise":         unix.SYS_PROCESS_MADVISE,
	"epoll_pwait2":            unix.SYS_EPOLL_PWAIT2,
	"mount_setattr":           unix.SYS_MOUNT_SETATTR,
	"quotactl_fd":             unix.SYS_QUOTACTL_FD,
	"landlock_create_ruleset": unix.SYS_LANDLOCK_CREATE_RULESET,
	"landlock_add_rule":       unix.SYS_LANDLOCK_ADD_RULE,
	"landlock_restrict_self":  unix.SYS_LANDLOCK_RESTRICT_SELF,
	"memfd_secret":            unix.SYS_MEMFD_SECRET,
	"process_mrelease":        unix.SYS_PROCESS_MRELEASE,
	"futex_waitv":             unix.SYS_FUTEX_WAITV,
	"set_mempolicy_home_node": unix.SYS_SET_MEMPOLICY_HOME_NODE,
	"cachestat":               unix.SYS_CACHESTAT,
	"fchmodat2":               unix.SYS_FCHMODAT2,
	"map_shadow_stack":        unix.SYS_MAP_SHADOW_STACK,
	"futex_wake":              unix.SYS_FUTEX_WAKE,
	"futex_wait":              unix.SYS_FUTEX_WAIT,
	"futex_requeue":           unix.SYS_FUTEX_REQUEUE,
	"statmount":               unix.SYS_STATMOUNT,
	"listmount":               unix.SYS_LISTMOUNT,
	"lsm_get_self_attr":       unix.SYS_LSM_GET_SELF_ATTR,
	"lsm_set_self_attr":       unix.SYS_LSM_SET_SELF_ATTR,
	"lsm_list_modules":        unix.SYS_LSM_LIST_MODULES,
	"mseal":                   unix.SYS_MSEAL,
	"setxattrat":              unix.SYS_SETXATTRAT,
	"getxattrat":              unix.SYS_GETXATTRAT,
	"listxattrat":             unix.SYS_LISTXATTRAT,
	"removexattrat":           unix.SYS_REMOVEXATTRAT,
	"open_tree_attr":          unix.SYS_OPEN_TREE_ATTR,
	"file_getattr":            unix.SYS_FILE_GETATTR,
	"file_setattr":            unix.SYS_FILE_SETATTR,
}

// resolveSyscall maps a syscall name to the number libseccomp rules take:
// the native number, a negative libseccomp pseudo-number for a syscall that
// exists only on other architectures, or a number from newSyscalls when
// libseccomp does not know the name. fromTable reports the last case.
func resolveSyscall(name string) (nr int32, fromTable, ok bool) {
	s, err := seccomp.GetSyscallFromName(name)
	if err == nil {
		return int32(s), false, true
	}
	if n, found := newSyscalls[name]; found {
		return int32(n), true, true
	}
	return 0, false, false
}

// syscallName names a native syscall number, falling back to newSyscalls and
// then to "syscall_NR".
func syscallName(nr int32) string {
	return syscallNameByArch(nr, seccomp.ArchNative)
}

func syscallNameByArch(nr int32, arch seccomp.ScmpArch) string {
	if name, err := seccomp.ScmpSyscall(nr).GetNameByArch(arch); err == nil && name != "" {
		return name
	}
	if arch == seccomp.ArchNative || arch == nativeArch() {
		for name, n := range newSyscalls {
			if int32(n) == nr {
				return name
			}
		}
	}
	return "syscall_" + strconv.Itoa(int(nr))
}

func nativeArch() seccomp.ScmpArch {
	a, err := seccomp.GetNativeArch()
	if err != nil {
		return seccomp.ArchInvalid
	}
	return a
}

// errnoName returns "EPERM" for 1 and so on; "errno N" when unnamed.
func errnoName(n int) string {
	if n > 0 && n < 4096 {
		if s := unix.ErrnoName(syscall.Errno(n)); s != "" {
			return s
		}
	}
	return "errno " + strconv.Itoa(n)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
