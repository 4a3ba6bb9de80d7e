// Package egress is hutch's egress proxy: the only way out of a sandbox
// whose network mode is "proxy". The sandbox's network namespace has only
// loopback; its init creates, inside that namespace, an HTTP proxy
// listener, a SOCKS5 listener and a UDP socket on 127.0.0.1:53, and hands
// them to the supervisor, which serves them from the host side with a
// Proxy: ServeHTTP, ServeSOCKS5 and ServeDNS. The proxy connects, from the
// host's network namespace, only to destinations the allowlist names (by
// name and port), refuses names that resolve to internal addresses unless
// the allowlist names those addresses, answers every DNS query REFUSED,
// and records every block (and every allowed connection) as a security
// event. docs/NETWORK.md describes the design.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// Defaults of Config's zero fields.
const (
	DefaultDialTimeout    = 10 * time.Second
	DefaultIdleTimeout    = 5 * time.Minute
	DefaultHeadTimeout    = 10 * time.Second
	DefaultMaxHeaderBytes = 32 << 10
	DefaultMaxConns       = 256
)

// Rules named by the proxy's security events and X-Hutch-Block.
const (
	// RuleAllow decides destinations: network.allow in the policy.
	RuleAllow = "network.allow"
	// RuleDNS refuses every DNS query from inside the sandbox.
	RuleDNS = "network.dns"
	// RuleProxy covers the proxy's own protocol handling: malformed
	// requests, unreachable destinations, the connection limit.
	RuleProxy = "network.proxy"
)

// Config configures a Proxy. Zero fields take the defaults above.
type Config struct {
	// Allow is the allowlist (the policy's network.allow, plus discovered
	// registries when the caller wants them).
	Allow []policy.AllowEntry
	// Recorder receives the security events; nil discards them.
	Recorder *seclog.Recorder
	// Resolver resolves destination names on the host; nil is
	// net.DefaultResolver.
	Resolver Resolver
	// DialTimeout bounds resolving and connecting to a destination.
	DialTimeout time.Duration
	// IdleTimeout closes a tunnel or forwarded request when no byte has
	// moved either way for this long.
	IdleTimeout time.Duration
	// HeadTimeout bounds receiving an HTTP request head or a SOCKS5
	// handshake, from the moment the connection is accepted: a client
	// that trickles its request is dropped.
	HeadTimeout time.Duration
	// MaxHeaderBytes caps an HTTP request head.
	MaxHeaderBytes int
	// MaxConns caps the connections served at once, HTTP and SOCKS5
	// together. Beyond it a connection gets 503 (HTTP) or a general
	// failure (SOCKS5).
	MaxConns int
	// Logger receives operational messages (not security events); nil
	// discards them.
	Logger *slog.Logger
	// Dialer connects to a vetted address ("tcp", "IP:port"); nil is a
	// net.Dialer. Tests inject one.
	Dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Proxy serves the egress proxy's sockets. One Proxy may serve several
// listeners at once; MaxConns counts all of them.
type Proxy struct {
	cfg      Config
	allow    *Allowlist
	resolver Resolver
	dialer   func(ctx context.Context, network, addr string) (net.Conn, error)
	rec      *seclog.Recorder
	log      *slog.Logger

	sem  chan struct{} // one token per connection being served
	busy chan struct{} // one token per over-limit connection being refused
}

// maxBusy bounds the over-limit connections being answered at once; past
// it they are closed without an answer.
const maxBusy = 32

// New checks cfg and returns a Proxy.
func New(cfg Config) (*Proxy, error) {
	allow, err := CompileAllowlist(cfg.Allow)
	if err != nil {
		return nil, fmt.Errorf("egress proxy: %w", err)
	}
	for _, d := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"DialTimeout", &cfg.DialTimeout, DefaultDialTimeout},
		{"IdleTimeout", &cfg.IdleTimeout, DefaultIdleTimeout},
		{"HeadTimeout", &cfg.HeadTimeout, DefaultHeadTimeout},
	} {
		if *d.v < 0 {
			return nil, fmt.Errorf("egress proxy: %s is negative", d.name)
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}
	if cfg.MaxHeaderBytes < 0 || cfg.MaxConns < 0 {
		return nil, errors.New("egress proxy: MaxHeaderBytes and MaxConns must not be negative")
	}
	if cfg.MaxHeaderBytes == 0 {
		cfg.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	p := &Proxy{
		cfg:      cfg,
		allow:    allow,
		resolver: cfg.Resolver,
		dialer:   cfg.Dialer,
		rec:      cfg.Recorder,
		log:      cfg.Logger,
		sem:      make(chan struct{}, cfg.MaxConns),
		busy:     make(chan struct{}, maxBusy),
	}
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dialer == nil {
		d := &net.Dialer{Timeout: cfg.DialTimeout, KeepAlive: 30 * time.Second}
		p.dialer = d.DialContext
	}
	if p.rec == nil {
		p.rec = seclog.NewRecorder(nil, "", nil)
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	return p, nil
}

// Allowlist is the compiled allowlist the proxy decides by.
func (p *Proxy) Allowlist() *Allowlist { return p.allow }

// ServeHTTP serves an HTTP proxy on ln: CONNECT host:port opens a tunnel,
// a request with an absolute http:// URI is forwarded (one request per
// connection), anything else gets 400. It closes ln, and returns once
// every connection it accepted is closed, when ctx is done (returning nil)
// or ln fails (returning the error; errors.Is(err, net.ErrClosed) when
// someone else closed ln).
func (p *Proxy) ServeHTTP(ctx context.Context, ln net.Listener) error {
	return p.serve(ctx, ln, p.handleHTTP, p.busyHTTP)
}

// ServeSOCKS5 serves a SOCKS5 proxy (RFC 1928, no authentication, CONNECT
// only) on ln. It returns like ServeHTTP.
func (p *Proxy) ServeSOCKS5(ctx context.Context, ln net.Listener) error {
	return p.serve(ctx, ln, p.handleSOCKS5, p.busySOCKS5)
}

func (p *Proxy) serve(ctx context.Context, ln net.Listener, handle, busy func(context.Context, net.Conn)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer func() {
		stop()
		_ = ln.Close()
		cancel() // closes every connection still open
		wg.Wait()
	}()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if !temporaryAcceptError(err) {
				return fmt.Errorf("egress proxy: accept on %s: %w", ln.Addr(), err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.log.Warn("egress proxy: accept failed; retrying", "listener", ln.Addr().String(), "err", err, "backoff", backoff)
			if !sleepCtx(ctx, backoff) {
				return nil
			}
			continue
		}
		backoff = 0
		select {
		case p.sem <- struct{}{}:
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-p.sem }()
				p.run(ctx, c, handle)
			}()
		default:
			p.recordBusy()
			select {
			case p.busy <- struct{}{}:
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer func() { <-p.busy }()
					p.run(ctx, c, busy)
				}()
			default:
				_ = c.Close()
			}
		}
	}
}

// run serves one connection: it closes c when ctx is done or handle
// returns, and turns a panic into a log message.
func (p *Proxy) run(ctx context.Context, c net.Conn, handle func(context.Context, net.Conn)) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("egress proxy: panic serving a connection", "remote", c.RemoteAddr().String(), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	handle(ctx, c)
}

func temporaryAcceptError(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []error{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED, syscall.EINTR, syscall.EAGAIN} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// recordBlock records a destination refused by policy.
func (p *Proxy) recordBlock(be *blockError, proto string) {
	detail := map[string]any{"proto": proto, "host": be.host, "port": be.port}
	if be.internal.IsValid() {
		detail["why"] = "internal-address"
		detail["address"] = be.internal.String()
	} else {
		detail["why"] = "not-allowlisted"
	}
	p.rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    RuleAllow,
		Subject: be.dest(),
		Message: be.message(),
		Detail:  detail,
		Level:   slog.LevelWarn,
	})
}

// recordNote records something about the proxy's own handling (a
// malformed request, an unreachable destination) at Info: it goes to the
// security log, not to the caller's end-of-run summary.
func (p *Proxy) recordNote(subject, message, proto string, detail map[string]any) {
	if detail == nil {
		detail = map[string]any{}
	}
	detail["proto"] = proto
	p.rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    RuleProxy,
		Subject: subject,
		Message: message,
		Detail:  detail,
		Level:   slog.LevelInfo,
	})
}

// recordMalformed records a request the proxy could not understand.
func (p *Proxy) recordMalformed(proto string, c net.Conn, err error) {
	p.recordNote("malformed request", "egress proxy: malformed "+proto+" request: "+err.Error(), proto, map[string]any{"remote": remoteString(c)})
}

// recordUnreachable records an allowed destination that could not be
// resolved or connected to.
func (p *Proxy) recordUnreachable(t *target, proto string, re *reachError) {
	detail := map[string]any{"error": re.err.Error(), "stage": re.stage}
	if t != nil && t.entry != nil {
		detail["entry"] = t.entry.Host
	}
	p.recordNote(re.dest, "egress proxy: "+re.Error(), proto, detail)
}

// recordBusy records a connection refused for MaxConns.
func (p *Proxy) recordBusy() {
	p.rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    RuleProxy,
		Subject: "connection limit",
		Message: fmt.Sprintf("egress proxy refused a connection: %d connections already open (the limit)", p.cfg.MaxConns),
		Detail:  map[string]any{"max_conns": p.cfg.MaxConns},
		Level:   slog.LevelWarn,
	})
}

// recordAllowed records an allowed connection once it has closed.
func (p *Proxy) recordAllowed(t *target, proto string, addr string, sent, received int64, start time.Time) {
	p.rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    RuleAllow,
		Subject: t.dest(),
		Message: fmt.Sprintf("network connection to %s allowed (%s)", t.dest(), t.entry.Reason),
		Detail: map[string]any{
			"proto":          proto,
			"address":        addr,
			"entry":          t.entry.Host,
			"reason":         t.entry.Reason,
			"bytes_sent":     sent,
			"bytes_received": received,
			"duration_ms":    time.Since(start).Milliseconds(),
		},
		Level: slog.LevelInfo,
	})
}

func remoteString(c net.Conn) string {
	if a := c.RemoteAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Env returns the environment variables that point the sandboxed
// command's tools at the proxy, which listens inside the sandbox on
// 127.0.0.1:httpPort (HTTP proxy) and 127.0.0.1:socksPort (SOCKS5),
// as "NAME=value" strings in a fixed order.
func Env(httpPort, socksPort int) []string {
	httpURL := "http://127.0.0.1:" + strconv.Itoa(httpPort)
	socksURL := "socks5h://127.0.0.1:" + strconv.Itoa(socksPort)
	const noProxy = "localhost,127.0.0.1,::1"
	return []string{
		"HTTP_PROXY=" + httpURL,
		"HTTPS_PROXY=" + httpURL,
		"http_proxy=" + httpURL,
		"https_proxy=" + httpURL,
		"ALL_PROXY=" + socksURL,
		"all_proxy=" + socksURL,
		"NO_PROXY=" + noProxy,
		"no_proxy=" + noProxy,
		// Node.js releases that know it: make fetch (and, in newer
		// releases, http and https) honour the variables above.
		"NODE_USE_ENV_PROXY=1",
		// npm (and yarn 1, which reads npm's configuration).
		"npm_config_proxy=" + httpURL,
		"npm_config_https_proxy=" + httpURL,
		// yarn 2+.
		"YARN_HTTP_PROXY=" + httpURL,
		"YARN_HTTPS_PROXY=" + httpURL,
		// pip's --proxy.
		"PIP_PROXY=" + httpURL,
		// Cargo's http.proxy.
		"CARGO_HTTP_PROXY=" + httpURL,
	}
}

// sleepCtx waits d, or until ctx ends; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
