// Package publish serves a sandbox's published ports (network.publish,
// --publish): it listens on the host's addresses and relays every
// connection it accepts to a port on the sandbox's loopback, which the
// caller's Dial reaches (nsjail's Sandbox.DialLoopback: a socket made in the
// sandbox's network namespace by its init, connected by the supervisor).
//
// Every accepted connection is a security event; one that cannot reach the
// sandbox (nothing listens there) is reset at once and recorded, with the
// reason, as a warning. Nothing outlives Stop: the listeners close and every
// relayed connection is cut.
package publish

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/seclog"
)

// DefaultMaxConns bounds the connections a sandbox relays at once, over all
// its published ports: each holds two descriptors of the supervisor.
const DefaultMaxConns = 256

// dialTimeout bounds the connect into the sandbox (a server whose backlog
// is full lets SYNs go unanswered).
const dialTimeout = 30 * time.Second

// Rule names the policy key in security events.
const Rule = "network.publish"

// Config is what Listen needs.
type Config struct {
	// Ports are the plan's published ports.
	Ports []plan.Publish
	// Dial connects to a port on the sandbox's loopback.
	Dial func(ctx context.Context, port int) (net.Conn, error)
	// Recorder receives the security events (nil: none).
	Recorder *seclog.Recorder
	// Logger receives diagnostics (nil: none).
	Logger *slog.Logger
	// Accepted, when set, is called for each accepted connection (a
	// session counts it as activity).
	Accepted func()
	// MaxConns bounds the connections relayed at once; 0 is
	// DefaultMaxConns.
	MaxConns int
}

// Server is the listeners of one sandbox's published ports.
type Server struct {
	cfg    Config
	lns    []net.Listener
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{} // both sides of every relayed connection
	n     int                   // the host's side of them
}

// Listen opens a listener for each of cfg.Ports, or none: on an error the
// ones opened are closed, and the error names the entry, its address and
// what to do. Serve starts accepting.
func Listen(cfg Config) (*Server, error) {
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	s := &Server{cfg: cfg, conns: map[net.Conn]struct{}{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	for i, p := range cfg.Ports {
		addr := net.JoinHostPort(p.HostAddress, strconv.Itoa(p.HostPort))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range s.lns {
				l.Close()
			}
			cause := err
			if oe, ok := err.(*net.OpError); ok {
				cause = oe.Err // it repeats the address
				if se, ok := cause.(*os.SyscallError); ok {
					cause = se.Err
				}
			}
			return nil, fmt.Errorf("%s[%d]: listen on %s: %w%s", Rule, i, addr, cause, advice(err, p.HostPort))
		}
		s.lns = append(s.lns, ln)
	}
	return s, nil
}

// advice says what to do about a listener that could not be opened.
func advice(err error, port int) string {
	switch {
	case errors.Is(err, syscall.EADDRINUSE):
		return " (another process, or another sandbox, listens there: pick another host port)"
	case errors.Is(err, syscall.EACCES) && port < 1024:
		return " (ports below 1024 need privileges on the host: pick a host port of 1024 or more)"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return " (no interface of this host has that address)"
	}
	return ""
}

// Addrs are the addresses listened on, in the order of the ports.
func (s *Server) Addrs() []net.Addr {
	var a []net.Addr
	for _, ln := range s.lns {
		a = append(a, ln.Addr())
	}
	return a
}

// Serve accepts connections on every listener until Stop.
func (s *Server) Serve() {
	for i, ln := range s.lns {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.accept(ln, s.cfg.Ports[i])
		}()
	}
}

// Stop closes the listeners and cuts every relayed connection, and waits
// until nothing of them is left. A nil Server is stopped already.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.cancel()
	for _, ln := range s.lns {
		ln.Close()
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *Server) accept(ln net.Listener, p plan.Publish) {
	for {
		c, err := ln.Accept()
		if err != nil {
			if s.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			if s.cfg.Logger != nil {
				s.cfg.Logger.Warn("published port: accept", "address", ln.Addr().String(), "err", err)
			}
			continue // a transient failure (EMFILE, ECONNABORTED): keep serving
		}
		if s.cfg.Accepted != nil {
			s.cfg.Accepted()
		}
		if !s.track(c) {
			s.refused(c, p, fmt.Sprintf("more than %d connections are relayed at once", s.cfg.MaxConns))
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.untrack(c, true)
			s.relay(c, p)
		}()
	}
}

// track registers c for Stop; false when the sandbox relays its most.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n >= s.cfg.MaxConns || s.ctx.Err() != nil {
		return false
	}
	s.conns[c] = struct{}{}
	s.n++
	return true
}

// untrack forgets c, the host's side of a connection (outer) or the
// sandbox's, and closes it.
func (s *Server) untrack(c net.Conn, outer bool) {
	s.mu.Lock()
	delete(s.conns, c)
	if outer {
		s.n--
	}
	s.mu.Unlock()
	c.Close()
}

// relay connects c to the sandbox's port and copies both ways until both
// directions end, one fails, or Stop.
func (s *Server) relay(c net.Conn, p plan.Publish) {
	ctx, cancel := context.WithTimeout(s.ctx, dialTimeout)
	in, err := s.cfg.Dial(ctx, p.SandboxPort)
	cancel()
	if err != nil {
		if s.ctx.Err() == nil {
			s.refused(c, p, err.Error())
		}
		return
	}
	if !s.trackInner(in) {
		in.Close()
		return
	}
	defer s.untrack(in, false)
	s.record(seclog.Event{Kind: seclog.KindNetwork, Rule: Rule, Subject: subject(p), Level: slog.LevelInfo,
		Message: fmt.Sprintf("published port %s: connection from %s relayed to port %d on the sandbox's loopback", hostAddr(p), c.RemoteAddr(), p.SandboxPort),
		Detail:  detail(c, p)})
	sent, received := pipe(c, in)
	if s.cfg.Logger != nil {
		s.cfg.Logger.Debug("published port: connection closed", "address", hostAddr(p), "peer", c.RemoteAddr().String(),
			"sandbox_port", p.SandboxPort, "bytes_in", sent, "bytes_out", received)
	}
}

// trackInner registers the sandbox's side of a connection for Stop.
func (s *Server) trackInner(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// refused records a connection that is not relayed, and why, and resets
// it: the client sees what it would see if nothing listened (some, such
// as Node's fetch, wait forever on a connection closed cleanly before
// their request).
func (s *Server) refused(c net.Conn, p plan.Publish, why string) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // the close that follows sends RST
	}
	s.record(seclog.Event{Kind: seclog.KindNetwork, Rule: Rule, Subject: subject(p), Level: slog.LevelWarn,
		Message: fmt.Sprintf("published port %s: a connection was not relayed: %s", hostAddr(p), why),
		Detail:  detail(c, p)})
}

func (s *Server) record(ev seclog.Event) {
	if s.cfg.Recorder != nil {
		s.cfg.Recorder.Record(ev)
	}
}

func hostAddr(p plan.Publish) string {
	return net.JoinHostPort(p.HostAddress, strconv.Itoa(p.HostPort))
}

func subject(p plan.Publish) string {
	return fmt.Sprintf("publish %s->%d", hostAddr(p), p.SandboxPort)
}

func detail(c net.Conn, p plan.Publish) map[string]any {
	return map[string]any{"peer": c.RemoteAddr().String(), "host_address": p.HostAddress, "host_port": p.HostPort, "sandbox_port": p.SandboxPort}
}

// pipe copies a to b and b to a until both directions end or one fails. A
// direction that ends cleanly half-closes its destination, so that a
// request-then-response protocol sees the end of the request; a failure
// closes both. It returns the bytes copied each way.
func pipe(a, b net.Conn) (ab, ba int64) {
	done := make(chan int64, 1)
	go func() {
		n, err := io.Copy(b, a)
		end(b, a, err)
		done <- n
	}()
	ba, err := io.Copy(a, b)
	end(a, b, err)
	ab = <-done
	return ab, ba
}

// end finishes one direction of pipe: dst's write side closes after a
// clean end, both connections after a failure.
func end(dst, src net.Conn, err error) {
	if err != nil {
		dst.Close()
		src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		return
	}
	dst.Close()
}
