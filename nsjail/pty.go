package nsjail

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ptmxDev is the device number of a devpts instance's ptmx node (5:2).
var ptmxDev = unix.Mkdev(5, 2)

// OpenPTY makes a pseudo-terminal in the sandbox's own devpts instance
// (/dev/pts inside) and returns its master, the supervisor's end, for a
// command to run on (ExecRequest.Terminal). Its slave is /dev/pts/N as the
// sandbox sees it, owned by the commands' uid, so that ttyname,
// /dev/stdin and /dev/tty work for the command. The master is
// non-blocking, so that reads on it wait in the runtime's poller and take
// deadlines; they report the end (EIO) once the slave was opened and no
// process holds it any more.
//
// The supervisor opens the sandbox's ptmx through its root (resolved inside
// it, no symbolic links, and checked to be a ptmx node). The slave is
// opened from the master itself (TIOCGPTPEER), never by a path the sandbox
// could change, only while a spawn request carries it (Sandbox.send): the
// supervisor holds no copy that would keep the terminal open after the
// command's end.
func (s *Sandbox) OpenPTY() (*os.File, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root < 0 {
		return nil, errors.New("open the sandbox's pseudo-terminal: the sandbox is not running")
	}
	mfd, err := unix.Openat2(s.root, "dev/pts/ptmx", &unix.OpenHow{
		Flags:   unix.O_RDWR | unix.O_NOCTTY | unix.O_NONBLOCK | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, fmt.Errorf("open the sandbox's /dev/pts/ptmx: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(mfd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != ptmxDev {
		unix.Close(mfd)
		return nil, errors.New("open the sandbox's pseudo-terminal: /dev/pts/ptmx is not a ptmx device")
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, fmt.Errorf("unlock the sandbox's pseudo-terminal: %w", err)
	}
	return os.NewFile(uintptr(mfd), "pty master"), nil
}

// ptySlave opens the slave of the pseudo-terminal master.
func ptySlave(master *os.File) (int, error) {
	// TIOCGPTPEER opens the slave with the flags it is given and returns
	// the descriptor: x/sys/unix has no wrapper that passes both.
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, master.Fd(), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		return -1, fmt.Errorf("open the command's terminal: %w", errno)
	}
	return int(fd), nil
}
