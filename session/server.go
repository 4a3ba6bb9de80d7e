package session

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/terminal"
)

// Server serves one session on its control socket.
type Server struct {
	Name    string
	Session *hutch.Session
	// PolicyTOML is returned by info (clients run --fresh with it).
	PolicyTOML string
	// Idle and Max end the session after that long without a command,
	// and after that long in any case.
	Idle, Max time.Duration
	Logger    *slog.Logger

	started time.Time
	mu      sync.Mutex
	running int
	execs   int
	last    time.Time
	stop    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

// Listen creates the control socket at path (0600). A socket left by a
// dead session is replaced; a live one is an error.
func Listen(path string) (*net.UnixListener, error) {
	if c, err := net.DialTimeout("unixpacket", path, time.Second); err == nil {
		c.Close()
		return nil, fmt.Errorf("a session is already running on %s", path)
	}
	_ = os.Remove(path)
	old := syscall.Umask(0o177)
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("session socket %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// Serve accepts clients until the session is stopped, idles out, reaches
// its maximum lifetime, or ctx ends. It then closes the session (every
// process killed) and removes the socket.
func (s *Server) Serve(ctx context.Context, ln *net.UnixListener) error {
	s.started, s.last = time.Now(), time.Now()
	s.stop = make(chan struct{})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.stop:
		case <-s.Session.Done():
		}
		cancel()
		ln.Close()
	}()
	go s.lifetime(ctx)
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			break
		}
		if !peerAllowed(c) {
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(ctx, c)
		}()
	}
	cancel()
	// Close the sandbox first: running commands end, and handlers waiting
	// for the teardown (stop) can answer.
	err := s.Session.Close()
	s.wg.Wait()
	return err
}

// Stop ends the session.
func (s *Server) Stop() { s.once.Do(func() { close(s.stop) }) }

func (s *Server) lifetime(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.mu.Lock()
			last := s.last
			if a := s.Session.LastActive(); a.After(last) {
				last = a // a published port's connection is activity too
			}
			idle := s.running == 0 && s.Idle > 0 && now.Sub(last) > s.Idle
			s.mu.Unlock()
			if idle || (s.Max > 0 && now.Sub(s.started) > s.Max) {
				s.log("session lifetime reached", "idle", idle)
				s.Stop()
				return
			}
		}
	}
}

func (s *Server) log(msg string, args ...any) {
	if s.Logger != nil {
		s.Logger.Info(msg, args...)
	}
}

// peerAllowed admits only the session owner (and root).
func peerAllowed(c *net.UnixConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err != nil || cred == nil {
		return false
	}
	return int(cred.Uid) == os.Getuid() || cred.Uid == 0
}

func (s *Server) handle(ctx context.Context, c *net.UnixConn) {
	defer c.Close()
	for {
		var req Request
		fds, err := recv(c, &req)
		if err != nil {
			return
		}
		switch req.Op {
		case "exec":
			if len(fds) != 4 {
				closeFDs(fds)
				send(c, &Reply{Op: "error", Error: "exec needs the caller's stdin, stdout and stderr and the request"})
				continue
			}
			if err := readBody(fds[3], &req); err != nil {
				closeFDs(fds[:3])
				send(c, &Reply{Op: "error", Error: err.Error()})
				continue
			}
			fds = fds[:3]
			if err := checkExec(&req); err != nil {
				closeFDs(fds)
				send(c, &Reply{Op: "error", Error: err.Error()})
				return
			}
			// An exec is the last request on its connection: the relay of
			// signal requests owns the connection until it ends.
			s.exec(ctx, c, &req, fds)
			return
		case "detach":
			if len(fds) != 1 {
				closeFDs(fds)
				send(c, &Reply{Op: "error", Error: "detach needs the request"})
				continue
			}
			send(c, s.detach(fds[0]))
		case "ps", "logs", "kill":
			closeFDs(fds)
			s.touch()
			s.background(c, &req)
		case "info":
			closeFDs(fds)
			send(c, &Reply{Op: "info", Info: s.info()})
		case "stop":
			closeFDs(fds)
			s.Stop()
			<-s.Session.Done()
			send(c, &Reply{Op: "stopped"})
			return
		default:
			closeFDs(fds)
			send(c, &Reply{Op: "error", Error: fmt.Sprintf("unknown request %q", req.Op)})
		}
	}
}

// checkExec refuses an exec request the session cannot honour as asked.
// (Clients check their flags first; this is for any other client of the
// socket.)
func checkExec(req *Request) error {
	switch {
	case len(req.Argv) == 0:
		return errors.New("exec request: argv is empty: name the command to run")
	case req.TimeoutMS < 0:
		return fmt.Errorf("exec request: timeout_ms %d: want a whole number of milliseconds, at least 1, or 0 for the policy's timeout", req.TimeoutMS)
	}
	return nil
}

func (s *Server) info() *Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Info{
		Name: s.Name, Pid: os.Getpid(), SandboxID: s.Session.ID(), Workspace: s.Session.Workspace(),
		Started: s.started, Execs: s.execs, Running: s.running,
		Background: s.Session.Background().Running(), Published: s.Session.PublishedAddrs(),
		Idle: s.Idle.String(), Max: s.Max.String(), Policy: s.PolicyTOML,
	}
}

// exec runs one command with the caller's descriptors. Signal requests
// that arrive meanwhile are relayed; if the client goes away, the command
// is terminated (as `hutch run` does when it is killed).
func (s *Server) exec(ctx context.Context, c *net.UnixConn, req *Request, fds []int) {
	files := make([]*os.File, 3)
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "stdio")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	s.mu.Lock()
	s.running++
	s.execs++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.running--
		s.last = time.Now()
		s.mu.Unlock()
	}()
	ectx, cancel := context.WithCancel(ctx)
	defer cancel()
	sigs := make(chan os.Signal, 8)
	go func() {
		for {
			var r Request
			fds, err := recv(c, &r)
			closeFDs(fds)
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					cancel() // the client is gone
				}
				return
			}
			if r.Op == "signal" && r.Signal > 0 && r.Signal < 65 {
				select {
				case sigs <- syscall.Signal(r.Signal):
				default:
				}
			}
		}
	}()
	term, err := s.terminal(req, files)
	if err != nil {
		send(c, &Reply{Op: "exit", ExitCode: hutch.ExitSetup, Messages: []string{"hutch: " + err.Error()}, SandboxID: s.Session.ID()})
		return
	}
	if term != nil {
		// The client relays the master; this copy goes with the reply.
		send(c, &Reply{Op: "started", SandboxID: s.Session.ID()}, int(term.Master.Fd()))
		defer term.Close()
	} else {
		send(c, &Reply{Op: "started", SandboxID: s.Session.ID()})
	}
	res, err := s.Session.Exec(ectx, &hutch.ExecOptions{
		Argv: req.Argv, Env: req.Env, ExtraEnv: req.ExtraEnv, Cwd: req.Cwd, HostCwd: req.HostCwd,
		Timeout: time.Duration(req.TimeoutMS) * time.Millisecond,
		Stdin:   files[0], Stdout: files[1], Stderr: files[2], Signals: sigs, Terminal: term,
	})
	if err != nil {
		send(c, &Reply{Op: "exit", ExitCode: hutch.ExitSetup, Messages: []string{"hutch: " + err.Error()}, SandboxID: s.Session.ID()})
		return
	}
	send(c, &Reply{Op: "exit", ExitCode: res.ExitCode, TimedOut: res.TimedOut, Messages: append(res.Messages, res.Warnings...), SandboxID: res.SandboxID,
		Isolation: res.Isolation, IsolationLimits: res.IsolationLimits, Image: res.Image})
}

// terminal is the pseudo-terminal a client that relays its terminal asks
// for (Request.Terminal), with the modes and window size of the caller's
// terminal among the stdio it passed; nil when it asks for none or has no
// terminal.
func (s *Server) terminal(req *Request, stdio []*os.File) (*hutch.Terminal, error) {
	if !req.Terminal {
		return nil, nil
	}
	c := terminal.Find(stdio[0], stdio[1], stdio[2])
	if c == nil {
		return nil, nil
	}
	return s.Session.NewTerminal(c.File())
}
