// Package outpipe makes the pipes that carry a sandboxed command's output
// to the supervisor.
package outpipe

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// New makes a pipe for a command's output: the read end in Go's poller,
// the write end a plain blocking descriptor to hand to the sandbox (a
// command's write should block when the pipe is full, not fail with
// EAGAIN). os.Pipe would put both ends in the poller, and the write end
// would then cost two mode switches when its descriptor is passed on and a
// poller removal when it is closed: ~10 system calls per command for
// nothing.
func New() (r, w *os.File, err error) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		return nil, nil, fmt.Errorf("pipe2: %w", err)
	}
	// O_NONBLOCK is a flag of each end's open file: the command's end blocks.
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETFL, 0); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, nil, fmt.Errorf("clear O_NONBLOCK on the pipe's write end: %w", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}
