package egress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/internal/pollwait"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/store"
)

// registryCacheTTL bounds how long discovered registries are reused.
// Discovery asks the host's own tools (npm, go), which costs hundreds of
// milliseconds; a command should not pay that each time.
const registryCacheTTL = 10 * time.Minute

// discoveryEnv are the variables that change what discovery finds; they
// key the stored result.
var discoveryEnv = []string{"HOME", "PATH", "npm_config_registry", "NPM_CONFIG_REGISTRY", "GOPROXY", "GOSUMDB", "GOFLAGS",
	"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE", "CARGO_HOME", "XDG_CONFIG_HOME"}

// DiscoverStored is Discover of SystemHost(workspace) through st: a result
// younger than ten minutes for the same environment and workspace is reused
// unless fresh is set. workspace is never trusted as a source.
func DiscoverStored(ctx context.Context, st *store.Store, workspace string, fresh bool) []Discovered {
	h := sha256.New()
	for _, k := range discoveryEnv {
		h.Write([]byte(k + "=" + os.Getenv(k) + "\x00"))
	}
	h.Write([]byte(workspace))
	key := hex.EncodeToString(h.Sum(nil))[:24]
	if b, mod, err := st.Get(store.Registries, key); err == nil && !fresh && time.Since(mod) < registryCacheTTL {
		var d []Discovered
		if json.Unmarshal(b, &d) == nil {
			return d
		}
	}
	d := Discover(ctx, SystemHost(workspace))
	if ctx.Err() == nil {
		if b, err := json.Marshal(d); err == nil {
			_ = st.Put(store.Registries, key, b) // a cache: the next run discovers again
		}
	}
	return d
}

// ServeConfig is what one sandbox's egress needs.
type ServeConfig struct {
	// Allow is the policy's allowlist.
	Allow []policy.AllowEntry
	// Discover, when set, adds the registries the host's tools use; it is
	// called once, when the first connection or datagram arrives.
	Discover func(context.Context) []policy.AllowEntry
	// Recorder receives the security events.
	Recorder *seclog.Recorder
	Logger   *slog.Logger
}

// Server runs the egress proxy of one sandbox on the sockets its init made
// inside the sandbox's network namespace.
type Server struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Serve serves the HTTP proxy, the SOCKS5 proxy and the DNS refuser on
// files (in that order; it takes them over). The allowlist (which may need
// discovery) is built when something first reaches the proxy: connections
// wait in the listen backlog meanwhile, and a command that never uses the
// network never waits for it.
func Serve(ctx context.Context, cfg ServeConfig, files []*os.File) (*Server, error) {
	if len(files) != 3 {
		return nil, errors.New("egress: want the HTTP, SOCKS5 and DNS sockets")
	}
	httpLn, err := net.FileListener(files[0])
	if err != nil {
		return nil, err
	}
	socksLn, err := net.FileListener(files[1])
	if err != nil {
		httpLn.Close()
		return nil, err
	}
	dnsPC, err := net.FilePacketConn(files[2])
	if err != nil {
		httpLn.Close()
		socksLn.Close()
		return nil, err
	}
	for _, f := range files {
		f.Close()
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Server{cancel: cancel}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		closeAll := func() { httpLn.Close(); socksLn.Close(); dnsPC.Close() }
		allow := append([]policy.AllowEntry(nil), cfg.Allow...)
		if cfg.Discover != nil {
			// Discovery asks the host's tools (hundreds of milliseconds):
			// only once something actually reaches the proxy.
			if !waitForTraffic(ctx, httpLn, socksLn, dnsPC) {
				closeAll()
				return
			}
			allow = append(allow, cfg.Discover(ctx)...)
		}
		px, err := New(Config{Allow: allow, Recorder: cfg.Recorder, Logger: cfg.Logger})
		if err != nil {
			if cfg.Logger != nil {
				cfg.Logger.Error("egress proxy", "err", err)
			}
			closeAll()
			return
		}
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); _ = px.ServeHTTP(ctx, httpLn) }()
		go func() { defer wg.Done(); _ = px.ServeSOCKS5(ctx, socksLn) }()
		go func() { defer wg.Done(); _ = px.ServeDNS(ctx, dnsPC) }()
		wg.Wait()
	}()
	return s, nil
}

// Stop ends the proxy and waits for its connections to close.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
}

// waitForTraffic blocks until a connection or datagram is pending on one of
// the proxy's sockets (true) or ctx ends (false). It does not consume it.
// Each socket is watched, through a duplicate of its descriptor, by a
// goroutine parked in the runtime's poller (pollwait), not by a thread in
// poll(2) for the sandbox's whole life.
func waitForTraffic(ctx context.Context, socks ...any) bool {
	var watched []*os.File
	defer func() {
		for _, f := range watched {
			f.Close()
		}
	}()
	var rcs []syscall.RawConn
	for _, s := range socks {
		sc, ok := s.(syscall.Conn)
		if !ok {
			return true
		}
		raw, err := sc.SyscallConn()
		if err != nil {
			return true
		}
		var f *os.File
		var pollable bool
		if cerr := raw.Control(func(fd uintptr) { f, pollable, err = pollwait.File(int(fd), "proxy socket") }); cerr != nil || err != nil || !pollable {
			return true // start the proxy now
		}
		watched = append(watched, f)
		rc, err := f.SyscallConn()
		if err != nil {
			return true
		}
		rcs = append(rcs, rc)
	}
	ready := make(chan bool, len(rcs))
	for _, rc := range rcs {
		go func() {
			_, err := pollwait.Readable(rc)
			ready <- !errors.Is(err, os.ErrDeadlineExceeded) // an error: start the proxy, which reports it
		}()
	}
	got, pending := false, len(rcs)
	select {
	case got = <-ready:
		pending--
	case <-ctx.Done():
	}
	for _, f := range watched {
		_ = f.SetReadDeadline(time.Unix(1, 0)) // wake the other watchers
	}
	for ; pending > 0; pending-- {
		<-ready
	}
	return got && ctx.Err() == nil
}
