package seccompprofiles

import (
	"context"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// WatchComment marks the rules Watch adds. A notification from such a rule
// is not a denial: the watcher decides whether the call continues.
const WatchComment = "hutch: watched network call (the supervisor inspects the destination)"

// NotifyAvailable reports whether user notification can be used here, and
// why not.
func NotifyAvailable() (bool, string) {
	why := notifyUnavailable()
	return why == "", why
}

// WatchNetwork returns a copy of p in which connect(2), and sendto(2) with
// a destination address, notify the supervisor instead of running
// directly, when p allows them. The supervisor inspects the destination
// and lets the call continue or fails it. Use it only with Options.Notify
// and when NotifyAvailable: without a listener the calls would fail.
//
// This is for reporting, not enforcement: the answer to a watched call is
// SECCOMP_USER_NOTIF_FLAG_CONTINUE, which the kernel documents as unsafe
// for security decisions (the caller may change the sockaddr after the
// check). hutch's enforcement is the network namespace, which has no route
// out but the egress proxy; the watch only makes the attempts visible.
func WatchNetwork(p *Profile) *Profile {
	q := p.Clone()
	watched := false
	for i := range q.Syscalls {
		r := &q.Syscalls[i]
		if r.Action != ActAllow || len(r.Args) > 0 || r.Includes != nil || r.Excludes != nil {
			continue
		}
		if j := slices.Index(r.Names, "connect"); j >= 0 {
			r.Names = slices.Delete(r.Names, j, j+1)
			watched = true
		}
		if r.Name == "connect" {
			r.Name = ""
			watched = true
		}
	}
	if !watched {
		return q
	}
	eacces := uint(unix.EACCES)
	q.Syscalls = append(q.Syscalls,
		Syscall{Names: []string{"connect"}, Action: ActNotify, ErrnoRet: &eacces, Comment: WatchComment},
		Syscall{Names: []string{"sendto"}, Action: ActNotify, ErrnoRet: &eacces, Comment: WatchComment,
			Args: []Arg{{Index: 4, Value: 0, Op: "SCMP_CMP_NE"}}},
	)
	return q
}

// Verdict is a watcher's answer to a watched call.
type Verdict struct {
	// Continue lets the call run as if unfiltered.
	Continue bool
	// Errno fails the call when Continue is false (0 means EACCES).
	Errno int
}

// ServeWatch is Serve with a watcher for the calls WatchNetwork added:
// watch receives them (with a reader of the caller's memory) and decides.
// Denials are answered and reported as in Serve.
func ServeWatch(ctx context.Context, fd int, f *Filter, watch func(Notification, MemReader) Verdict, report func(Denial, Notification)) error {
	return serve(ctx, fd, f, watch, report)
}

// MemReader reads the memory of the process that made a notified call,
// checking afterwards that the notification is still valid (so the bytes
// belong to that call's process, not a recycled pid).
type MemReader func(addr uint64, n int) ([]byte, bool)

func memReader(fd int, n Notification) MemReader {
	return func(addr uint64, size int) ([]byte, bool) {
		if size <= 0 || size > 4096 {
			return nil, false
		}
		f, err := unix.Open("/proc/"+strconv.Itoa(int(n.Pid))+"/mem", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, false
		}
		defer unix.Close(f)
		buf := make([]byte, size)
		k, err := unix.Pread(f, buf, int64(addr))
		if err != nil || k != size {
			return nil, false
		}
		id := n.ID
		if err := ioctlPtr(fd, unix.SECCOMP_IOCTL_NOTIF_ID_VALID, unsafe.Pointer(&id)); err != nil {
			return nil, false
		}
		return buf, true
	}
}
