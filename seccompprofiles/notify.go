package seccompprofiles

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/internal/pollwait"
)

// Notification is one notified syscall, as the supervisor received it.
type Notification struct {
	// ID is the kernel's notification id.
	ID uint64
	// Pid is the calling thread's id in the supervisor's pid namespace.
	Pid uint32
	// Arch is the AUDIT_ARCH_* value of the call's ABI.
	Arch uint32
	// Syscall is the syscall number in that ABI.
	Syscall int32
	// InstrPointer is the address of the syscall instruction.
	InstrPointer uint64
	// Args are the raw arguments.
	Args [6]uint64
}

// struct seccomp_notif (80 bytes) and struct seccomp_notif_resp (24 bytes).
type seccompNotif struct {
	id    uint64
	pid   uint32
	flags uint32
	nr    int32
	arch  uint32
	ip    uint64
	args  [6]uint64
}

type seccompNotifResp struct {
	id    uint64
	val   int64
	error int32
	flags uint32
}

var (
	_ [80 - unsafe.Sizeof(seccompNotif{})]byte
	_ [unsafe.Sizeof(seccompNotif{}) - 80]byte
	_ [24 - unsafe.Sizeof(seccompNotifResp{})]byte
	_ [unsafe.Sizeof(seccompNotifResp{}) - 24]byte
)

// Serve answers the notifications of the listener fd of a filter compiled
// from f (loaded with SECCOMP_FILTER_FLAG_NEW_LISTENER): each notified
// syscall fails with the errno f.Lookup gives (never allowed, never
// continued); report is called with the denial and the notification
// before the reply, while the caller (and the processes above it) still
// exist, so it can inspect them; a slow report delays that call and later
// notifications. report may be nil.
//
// Serve returns nil when no process uses the filter any more (the sandbox
// exited), ctx.Err() when ctx is done, and an error when the fd fails. It
// does not close fd. Run one Serve per listener fd; different listeners
// may be served concurrently.
func Serve(ctx context.Context, fd int, f *Filter, report func(Denial, Notification)) error {
	return serve(ctx, fd, f, nil, report)
}

func serve(ctx context.Context, fd int, f *Filter, watch func(Notification, MemReader) Verdict, report func(Denial, Notification)) error {
	if f == nil {
		return errors.New("seccomp notify: nil filter")
	}
	wait, stop, err := listenerWaiter(ctx, fd)
	if err != nil {
		return err
	}
	defer stop()

	native := nativeArch()
	for {
		rev, err := wait()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			return err
		}
		if rev&unix.POLLNVAL != 0 {
			return fmt.Errorf("seccomp notify: listener fd %d is not open", fd)
		}
		if rev&unix.POLLIN == 0 {
			if rev&(unix.POLLHUP|unix.POLLERR) != 0 {
				return nil // every task using the filter has exited
			}
			continue
		}
		var req seccompNotif
		if err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&req)); err != nil {
			switch err {
			case unix.EINTR, unix.ENOENT, unix.EAGAIN:
				// ENOENT: the caller died, or was interrupted by a
				// signal, before we received it. EAGAIN: a kernel that
				// honours the non-blocking listener, and nothing left.
				continue
			}
			return fmt.Errorf("seccomp notify: receive: %w", err)
		}
		n := Notification{ID: req.id, Pid: req.pid, Arch: req.arch, Syscall: req.nr, InstrPointer: req.ip, Args: req.args}
		d := f.lookupNotification(n, native)
		if d.Reason == WatchComment {
			v := Verdict{Errno: int(unix.EACCES)}
			if watch != nil {
				v = watch(n, memReader(fd, n))
			}
			resp := seccompNotifResp{id: req.id}
			if v.Continue {
				resp.flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
			} else {
				if v.Errno == 0 {
					v.Errno = int(unix.EACCES)
				}
				resp.error = -int32(v.Errno)
			}
			if err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)); err != nil && err != unix.ENOENT && err != unix.EINTR {
				return fmt.Errorf("seccomp notify: respond: %w", err)
			}
			continue
		}
		// Reported while the caller waits for the answer: it (and the
		// processes above it) still exist, so the report can look at
		// them (a shared listener attributes the call to a command by
		// the caller's ancestry).
		if report != nil {
			report(d, n)
		}
		resp := seccompNotifResp{id: req.id, error: -int32(d.Errno)}
		if err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(&resp)); err != nil {
			// ENOENT: the caller died or was interrupted meanwhile.
			if err != unix.ENOENT && err != unix.EINTR {
				return fmt.Errorf("seccomp notify: respond: %w", err)
			}
		}
	}
}

// listenerWaiter returns wait, which parks the goroutine in the runtime's
// poller (pollwait) until the listener fd is readable or hung up (its poll
// revents) or ctx ends, and stop, which releases what wait uses. A listener
// the poller refuses is an error: it has no poll method, so poll(2) could
// not wait for it either.
func listenerWaiter(ctx context.Context, fd int) (wait func() (int16, error), stop func(), err error) {
	f, ok, err := pollwait.File(fd, "seccomp listener")
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp notify: %w", err)
	}
	if !ok {
		return nil, nil, fmt.Errorf("seccomp notify: listener fd %d cannot be polled", fd)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("seccomp notify: %w", err)
	}
	// A deadline in the past wakes a parked wait when ctx ends.
	unhook := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	wait = func() (int16, error) {
		rev, err := pollwait.Readable(rc)
		if err != nil {
			return 0, fmt.Errorf("seccomp notify: wait: %w", err)
		}
		return rev, nil
	}
	return wait, func() { unhook(); f.Close() }, nil
}

func ioctlPtr(fd int, req uint, arg unsafe.Pointer) error {
	for {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		return nil
	}
}

// lookupNotification resolves a notification to its denial, translating a
// foreign ABI's syscall number through its name.
func (f *Filter) lookupNotification(n Notification, native seccomp.ScmpArch) Denial {
	arch := archFromAudit(n.Arch, n.Syscall)
	if arch == native || arch == seccomp.ArchInvalid {
		return f.Lookup(uint32(n.Syscall), n.Args)
	}
	name := syscallNameByArch(n.Syscall, arch)
	if nr, ok := nativeNumber(name); ok {
		d := f.Lookup(uint32(nr), n.Args)
		d.Name = name
		return d
	}
	d := f.Lookup(^uint32(0), n.Args) // no native equivalent: the default
	d.Name = name
	return d
}

func nativeNumber(name string) (int32, bool) {
	nr, _, ok := resolveSyscall(name)
	return nr, ok && nr >= 0
}

// archFromAudit maps an AUDIT_ARCH_* value (and, for x32, the syscall
// number's __X32_SYSCALL_BIT) to libseccomp's architecture.
func archFromAudit(audit uint32, nr int32) seccomp.ScmpArch {
	switch audit {
	case 0xc000003e: // AUDIT_ARCH_X86_64
		if nr&0x40000000 != 0 {
			return seccomp.ArchX32
		}
		return seccomp.ArchAMD64
	case 0x40000003: // AUDIT_ARCH_I386
		return seccomp.ArchX86
	case 0xc00000b7: // AUDIT_ARCH_AARCH64
		return seccomp.ArchARM64
	case 0x40000028: // AUDIT_ARCH_ARM
		return seccomp.ArchARM
	case 0xc00000f3: // AUDIT_ARCH_RISCV64
		return seccomp.ArchRISCV64
	case 0x80000016: // AUDIT_ARCH_S390X
		return seccomp.ArchS390X
	case 0xc0000015: // AUDIT_ARCH_PPC64LE
		return seccomp.ArchPPC64LE
	}
	return seccomp.ArchInvalid
}
