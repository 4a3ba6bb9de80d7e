package nsjail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A published port's connections reach the sandbox's loopback through
// sockets of the sandbox's network namespace: a socket keeps the namespace
// it was made in, and the supervisor cannot enter that one (setns into a
// network namespace needs CAP_SYS_ADMIN in the supervisor's own user
// namespace). So for each connection the supervisor asks the init for a TCP
// socket (HUTCH_OP_SOCKET), which the init makes and hands over without
// connecting it, and connects it itself, through the runtime's poller: the
// init never waits for a server inside, and the connect is the
// supervisor's, under no command's Landlock domain or seccomp filter.

// socketReply is the init's answer to a socket request: a socket, or why
// there is none.
type socketReply struct {
	fd  int
	err error
}

// ErrNotListening is DialLoopback's error when nothing listens on the port
// inside the sandbox (the connection was refused on IPv4 and IPv6).
var ErrNotListening = errors.New("nothing listens on that port inside the sandbox")

// DialLoopback connects to port on the sandbox's loopback: 127.0.0.1, then
// ::1 when nothing listens on the IPv4 address. The connection is the
// supervisor's; it ends when either side closes it or the sandbox ends.
func (s *Sandbox) DialLoopback(ctx context.Context, port int) (net.Conn, error) {
	c, err := s.dialLoopback(ctx, socketInet, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	if errors.Is(err, syscall.ECONNREFUSED) {
		// A server on ::1 only, or none (the IPv6 attempt's own failure,
		// such as no IPv6 in the kernel, says nothing more).
		if c, err = s.dialLoopback(ctx, socketInet6, &unix.SockaddrInet6{Port: port, Addr: [16]byte{15: 1}}); err != nil && ctx.Err() == nil {
			return nil, fmt.Errorf("connect to port %d on the sandbox's loopback: %w", port, ErrNotListening)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("connect to port %d on the sandbox's loopback: %w", port, err)
	}
	return c, nil
}

// dialLoopback gets a socket of family from the init and connects it to sa.
func (s *Sandbox) dialLoopback(ctx context.Context, family uint32, sa unix.Sockaddr) (net.Conn, error) {
	fd, err := s.socket(ctx, family)
	if err != nil {
		return nil, err
	}
	// The init made it non-blocking: os.NewFile puts it in the poller.
	f := os.NewFile(uintptr(fd), "sandbox loopback")
	defer f.Close()
	if err := connect(ctx, f, sa); err != nil {
		return nil, err
	}
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("connection: %w", err)
	}
	return c, nil
}

// connect connects the non-blocking socket f to sa, waiting in the poller
// until it is connected or refused, or ctx ends.
func connect(ctx context.Context, f *os.File, sa unix.Sockaddr) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		for {
			if cerr = unix.Connect(int(fd), sa); cerr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	if cerr == nil {
		return nil
	}
	if cerr != unix.EINPROGRESS {
		return cerr
	}
	if d, ok := ctx.Deadline(); ok {
		_ = f.SetWriteDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetWriteDeadline(time.Unix(1, 0)) })
	defer stop()
	first := true
	werr := rc.Write(func(fd uintptr) bool {
		if first { // not writable before the handshake ends: wait
			first = false
			return false
		}
		v, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		switch {
		case err != nil:
			cerr = err
		case v != 0:
			cerr = syscall.Errno(v)
		default:
			if _, err := unix.Getpeername(int(fd)); err == unix.ENOTCONN {
				return false // woken early: still connecting
			}
			cerr = nil
		}
		return true
	})
	if werr != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return werr
	}
	return cerr
}

// socket asks the init for a TCP socket of family in the sandbox's network
// namespace.
func (s *Sandbox) socket(ctx context.Context, family uint32) (int, error) {
	ch := make(chan socketReply, 1)
	s.mu.Lock()
	if s.dead != nil {
		s.mu.Unlock()
		return -1, s.dead
	}
	s.nextID++
	id := s.nextID
	if s.sockets == nil {
		s.sockets = map[uint64]chan socketReply{}
	}
	s.sockets[id] = ch
	s.mu.Unlock()
	if err := s.ctrl.send(&message{Op: opSocket, ID: id, Family: family}); err != nil {
		s.dropSocket(id, ch)
		return -1, err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return -1, errors.New("the sandbox ended")
		}
		return r.fd, r.err
	case <-ctx.Done():
		s.dropSocket(id, ch)
		return -1, ctx.Err()
	case <-s.initDone:
		s.dropSocket(id, ch)
		return -1, errors.New("the sandbox ended")
	}
}

// dropSocket forgets a socket request nobody waits for any more, closing
// a socket that came meanwhile.
func (s *Sandbox) dropSocket(id uint64, ch chan socketReply) {
	s.mu.Lock()
	if s.sockets[id] == ch {
		delete(s.sockets, id)
	}
	s.mu.Unlock()
	select {
	case r, ok := <-ch:
		if ok && r.err == nil {
			unix.Close(r.fd)
		}
	default:
	}
}

// socketReplied hands the init's answer to a socket request to its
// waiter; a socket nobody waits for is closed.
func (s *Sandbox) socketReplied(m *message, fds []int) {
	r := socketReply{fd: -1}
	switch {
	case m.Code != 0:
		r.err = fmt.Errorf("%s: %w", m.Error, syscall.Errno(m.Errno))
		closeAll(fds)
	case len(fds) != 1:
		r.err = fmt.Errorf("the init handed over %d descriptors, not a socket", len(fds))
		closeAll(fds)
	default:
		r.fd = fds[0]
	}
	s.mu.Lock()
	ch := s.sockets[m.ID]
	delete(s.sockets, m.ID)
	s.mu.Unlock()
	if ch == nil {
		if r.err == nil {
			unix.Close(r.fd)
		}
		return
	}
	ch <- r // buffered: the one reply
}
