package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// Every test in this package sends traffic to loopback only: the dialer
// below refuses anything else, and stub resolvers stand in for DNS.

// guardDialer dials loopback addresses only and counts its calls.
type guardDialer struct {
	t     testing.TB
	calls atomic.Int64
}

func (g *guardDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g.calls.Add(1)
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Unmap().IsLoopback() {
		g.t.Errorf("test dialer asked for %s %q: tests may only reach loopback", network, addr)
		return nil, errors.New("test dialer: not loopback")
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// stubResolver maps names to addresses; any other name fails (and, when
// strict, fails the test: the proxy must not resolve names it refuses).
type stubResolver struct {
	t      testing.TB
	m      map[string][]string
	strict bool
	calls  atomic.Int64
}

func (s *stubResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	s.calls.Add(1)
	list, ok := s.m[host]
	if !ok {
		if s.strict {
			s.t.Errorf("resolver asked for %q", host)
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	var out []netip.Addr
	for _, a := range list {
		out = append(out, netip.MustParseAddr(a))
	}
	return out, nil
}

// syncBuffer is a bytes.Buffer safe for concurrent writes and reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness runs a proxy on loopback listeners for one test.
type harness struct {
	t        testing.TB
	p        *Proxy
	log      *syncBuffer
	rec      *seclog.Recorder
	dialer   *guardDialer
	resolver *stubResolver
	httpAddr string
	socks    string
	dnsAddr  string
	cancel   context.CancelFunc
	done     chan error
}

func newHarness(t testing.TB, cfg Config, names map[string][]string) *harness {
	t.Helper()
	h := &harness{t: t, log: &syncBuffer{}, dialer: &guardDialer{t: t}, resolver: &stubResolver{t: t, m: names}}
	h.rec = seclog.NewRecorder(seclog.New(h.log), "sbx1", []string{"test"})
	cfg.Recorder = h.rec
	if cfg.Dialer == nil {
		cfg.Dialer = h.dialer.dial
	}
	if cfg.Resolver == nil {
		cfg.Resolver = h.resolver
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.p = p
	hl := listen(t)
	sl := listen(t)
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.httpAddr, h.socks, h.dnsAddr = hl.Addr().String(), sl.Addr().String(), pc.LocalAddr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done = make(chan error, 3)
	go func() { h.done <- p.ServeHTTP(ctx, hl) }()
	go func() { h.done <- p.ServeSOCKS5(ctx, sl) }()
	go func() { h.done <- p.ServeDNS(ctx, pc) }()
	t.Cleanup(h.stop)
	return h
}

// stop cancels the proxy and waits for its three Serve calls.
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	h.cancel = nil
	timeout := time.After(10 * time.Second)
	for i := 0; i < 3; i++ {
		select {
		case err := <-h.done:
			if err != nil {
				h.t.Errorf("Serve returned %v after cancel", err)
			}
		case <-timeout:
			h.t.Errorf("Serve did not return within 10s of cancel")
			return
		}
	}
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// waitLog waits until the security log holds a line containing every
// one of parts, and returns it.
func (h *harness) waitLog(parts ...string) string {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		for _, line := range strings.Split(h.log.String(), "\n") {
			ok := line != ""
			for _, p := range parts {
				ok = ok && strings.Contains(line, p)
			}
			if ok {
				return line
			}
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("no security log line with %q in:\n%s", parts, h.log.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startEcho serves a TCP echo on loopback until the test ends.
func startEcho(t testing.TB) (addr string, port int) {
	t.Helper()
	ln := listen(t)
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_ = c.SetDeadline(time.Now().Add(30 * time.Second))
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String(), ln.Addr().(*net.TCPAddr).Port
}

// dialProxy connects to addr with a deadline.
func dialProxy(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	t.Cleanup(func() { c.Close() })
	return c
}

// roundTrip sends raw to the HTTP proxy and reads one response.
func roundTrip(t testing.TB, addr, raw string) (*http.Response, string) {
	t.Helper()
	c := dialProxy(t, addr)
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("reading the response to %q: %v", raw, err)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil && !isReset(err) {
		t.Fatalf("reading the body: %v", err)
	}
	resp.Body.Close()
	return resp, string(body)
}

func isReset(err error) bool { return err != nil && strings.Contains(err.Error(), "reset") }

// connect opens a CONNECT tunnel through the proxy, returning the
// connection and the response status line.
func connect(t testing.TB, proxyAddr, target string) (net.Conn, *bufio.Reader, *http.Response) {
	t.Helper()
	c := dialProxy(t, proxyAddr)
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	return c, br, resp
}

// settleGoroutines waits until the goroutine count is at most n.
func settleGoroutines(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines did not settle: %d > %d\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func allow(host string, reason string, ports ...int) policy.AllowEntry {
	return policy.AllowEntry{Host: host, Ports: ports, Reason: reason}
}
