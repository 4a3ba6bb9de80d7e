// Package landlock builds hutch's Landlock ruleset.
//
// The sandbox init (pid 1, after pivot_root) calls Build with paths as the
// sandbox sees them. Build returns a ruleset file descriptor and does not
// restrict the caller. The exec stage receives that descriptor and calls
// prctl(PR_SET_NO_NEW_PRIVS, 1) and landlock_restrict_self(fd, 0) right
// before execve of the command, so that the command and everything it
// starts run inside the Landlock domain. docs/LANDLOCK.md describes the
// rules and what each kernel ABI can enforce.
//
// The raw system calls, the access-right and scope constants and the
// ruleset and rule structs are go-landlock's landlock/syscall package, and
// the rights each ABI handles are go-landlock's ABI configurations
// (landlock.V1 to V7). hutch builds its own rules beneath the sandbox's root
// (BuildBeneath), and keeps its own table of what each ABI means for a
// sandbox, its reports and its messages. It knows Landlock ABIs 1 to 7 and
// uses only ABI 7 features on newer kernels.
package landlock

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// MaxKnownABI is the newest Landlock ABI this package knows. A newer kernel
// is used as if it had this ABI.
const MaxKnownABI = 7

// linuxVersion is the first Linux release with each ABI.
var linuxVersion = map[int]string{
	1: "5.13",
	2: "5.19",
	3: "6.2",
	4: "6.7",
	5: "6.10",
	6: "6.12",
	7: "6.15",
}

// LinuxVersion returns the first Linux release that has Landlock ABI abi,
// such as "6.7", or "" for an ABI this package does not know.
func LinuxVersion(abi int) string { return linuxVersion[abi] }

// ABI returns the Landlock ABI version of the running kernel, or 0 when
// Landlock is not built in, not enabled at boot, or blocked.
func ABI() int {
	abi, _ := kernelABI()
	return abi
}

// kernelABI returns the ABI and, when it is 0, why.
func kernelABI() (int, string) {
	v, err := ll.LandlockGetABIVersion()
	if err != nil {
		return 0, unavailableReason(err)
	}
	if v < 1 {
		return 0, fmt.Sprintf("kernel reported Landlock ABI %d", v)
	}
	return v, ""
}

func unavailableReason(err error) string {
	var e syscall.Errno
	if !errors.As(err, &e) {
		return fmt.Sprintf("landlock_create_ruleset(VERSION) failed: %v", err)
	}
	switch e {
	case unix.ENOSYS:
		return "the kernel has no Landlock (older than Linux 5.13, or built without CONFIG_SECURITY_LANDLOCK)"
	case unix.EOPNOTSUPP:
		return "Landlock is built in but not enabled at boot (add landlock to the lsm= kernel parameter)"
	case unix.EPERM:
		return "the Landlock system calls are blocked (a seccomp filter of the surrounding container?)"
	default:
		return fmt.Sprintf("landlock_create_ruleset(VERSION) failed: %v", e)
	}
}

// Feature is one Landlock capability as hutch uses it.
type Feature struct {
	// ABI is the first Landlock ABI with this feature.
	ABI int
	// Linux is the first Linux release with that ABI.
	Linux string
	// Name is a short name ("filesystem", "refer", "truncate", ...).
	Name string
	// Meaning says what the feature does for a hutch sandbox, and what is
	// lost without it.
	Meaning string
	// Available is true when the running kernel has it.
	Available bool
}

// features lists what each ABI brings, for hutch.
var features = []Feature{
	{ABI: 1, Name: "filesystem",
		Meaning: "read, write, execute, create and remove are allowed only beneath the paths hutch lists; everything else is denied (EACCES)"},
	{ABI: 2, Name: "refer",
		Meaning: "moving and hard-linking files between directories is allowed inside read-write trees; without it (ABI 1) every such rename or link fails with EXDEV"},
	{ABI: 3, Name: "truncate",
		Meaning: "truncate(2), ftruncate(2) and O_TRUNC are restricted like writes; without it any file the uid may write can be truncated, even outside the allowed paths"},
	{ABI: 4, Name: "tcp",
		Meaning: "TCP connect is allowed only to the egress proxy's ports and TCP bind is denied; without it Landlock does not restrict TCP (the network namespace still does)"},
	{ABI: 5, Name: "ioctl-dev",
		Meaning: "ioctl on device files is allowed only on the /dev nodes hutch exposes and in read-write trees; without it ioctl on any device the sandbox can open is allowed"},
	{ABI: 6, Name: "scope",
		Meaning: "the sandbox cannot connect to abstract unix sockets or send signals to processes outside its Landlock domain (hutch's init, the supervisor)"},
	{ABI: 7, Name: "logging",
		Meaning: "landlock_restrict_self takes audit logging flags; hutch passes 0, so the sandboxed command's own denials are not written to the audit log"},
}

// Status is what `hutch doctor` shows about Landlock.
type Status struct {
	// ABI is the kernel's Landlock ABI; 0 when Landlock is unusable.
	ABI int
	// Reason says why ABI is 0; empty otherwise.
	Reason string
	// Errata is the kernel's bitmask of fixed Landlock errata
	// (LANDLOCK_CREATE_RULESET_ERRATA), when ErrataKnown.
	Errata      uint64
	ErrataKnown bool
	// Features lists every feature this package knows, with Available set
	// for the running kernel.
	Features []Feature
}

// Probe reports the kernel's Landlock support.
func Probe() Status {
	return probeABI(kernelABI())
}

func probeABI(abi int, reason string) Status {
	s := Status{ABI: abi, Reason: reason}
	if abi > 0 {
		if v, err := ll.LandlockGetErrata(); err == nil {
			s.Errata, s.ErrataKnown = uint64(v), true
		}
	}
	for _, f := range features {
		f.Linux = linuxVersion[f.ABI]
		f.Available = abi >= f.ABI
		s.Features = append(s.Features, f)
	}
	return s
}

// String renders the status as lines for `hutch doctor`.
func (s Status) String() string {
	var b strings.Builder
	if s.ABI == 0 {
		fmt.Fprintf(&b, "landlock: not available: %s\n", s.Reason)
	} else {
		fmt.Fprintf(&b, "landlock: ABI %d", s.ABI)
		if s.ABI > MaxKnownABI {
			fmt.Fprintf(&b, " (hutch uses ABI %d features)", MaxKnownABI)
		}
		if s.ErrataKnown {
			fmt.Fprintf(&b, ", errata 0x%x", s.Errata)
		}
		b.WriteString("\n")
	}
	for _, f := range s.Features {
		mark := "no "
		if f.Available {
			mark = "yes"
		}
		fmt.Fprintf(&b, "  [%s] ABI %d (Linux %s+) %s: %s\n", mark, f.ABI, f.Linux, f.Name, f.Meaning)
	}
	return b.String()
}
