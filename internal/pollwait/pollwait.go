// Package pollwait waits for descriptors that the Go runtime's poller can
// watch but that no os or net type reads for hutch: a seccomp listener,
// listening sockets whose first connection starts the egress proxy. The
// waiting goroutine is parked; a blocking poll(2) would instead hold an OS
// thread for as long as it waits, and each such thread costs a process
// start (the runtime creates it) and its exit (the kernel tears it down).
package pollwait

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// File registers a duplicate of fd with the runtime's poller and returns
// it. The duplicate shares fd's open file description, which becomes
// non-blocking (O_NONBLOCK): only callers that never read fd with
// blocking semantics may use it. Close the File when done; fd stays open.
// ok is false when the descriptor cannot be polled this way (the File is
// then nil).
func File(fd int, name string) (f *os.File, ok bool, err error) {
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, false, fmt.Errorf("duplicate %s: %w", name, err)
	}
	if err := unix.SetNonblock(dup, true); err != nil {
		unix.Close(dup)
		return nil, false, fmt.Errorf("make %s non-blocking: %w", name, err)
	}
	f = os.NewFile(uintptr(dup), name)
	// Only a file the poller accepted has deadlines.
	if err := f.SetReadDeadline(time.Time{}); errors.Is(err, os.ErrNoDeadline) {
		f.Close()
		return nil, false, nil
	}
	return f, true, nil
}

// Readable parks the calling goroutine until the descriptor behind rc is
// readable or hung up, and returns its poll(2) revents; it returns the
// error of rc.Read when the read deadline passes (os.ErrDeadlineExceeded)
// or the file is closed.
func Readable(rc syscall.RawConn) (int16, error) {
	var rev int16
	err := rc.Read(func(fd uintptr) bool {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(p, 0)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				rev = unix.POLLERR
				return true
			}
			if n == 0 {
				return false // wait for the poller's next readiness
			}
			rev = p[0].Revents
			return true
		}
	})
	return rev, err
}
