package hutch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/egress"
	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/internal/pollwait"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// registryCacheTTL bounds how long discovered registries are reused.
// Discovery asks the host's own tools (npm, go), which costs hundreds of
// milliseconds; a command should not pay that each time.
const registryCacheTTL = 10 * time.Minute

// discoveryEnv are the variables that change what discovery finds; they
// key the cache.
var discoveryEnv = []string{"HOME", "PATH", "npm_config_registry", "NPM_CONFIG_REGISTRY", "GOPROXY", "GOSUMDB", "GOFLAGS",
	"PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONFIG_FILE", "CARGO_HOME", "XDG_CONFIG_HOME"}

// DiscoverRegistries returns the package registries the host's tools are
// configured to use, each as an allowlist entry with its reason. Results
// are cached for ten minutes under the user's cache directory; fresh
// forces a new discovery. workspace is never trusted as a source.
func DiscoverRegistries(ctx context.Context, workspace string, fresh bool) []egress.Discovered {
	h := sha256.New()
	for _, k := range discoveryEnv {
		h.Write([]byte(k + "=" + os.Getenv(k) + "\x00"))
	}
	h.Write([]byte(workspace))
	key := hex.EncodeToString(h.Sum(nil))[:24]
	dir := hostdirs.Cache()
	path := ""
	if dir != "" {
		path = filepath.Join(dir, "registries-"+key+".json")
		if fi, err := os.Stat(path); err == nil && !fresh && time.Since(fi.ModTime()) < registryCacheTTL {
			var d []egress.Discovered
			if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &d) == nil {
				return d
			}
		}
	}
	d := egress.Discover(ctx, egress.SystemHost(workspace))
	if path != "" && ctx.Err() == nil {
		if b, err := json.Marshal(d); err == nil {
			_ = hostdirs.WriteFile(path, b) // a cache: the next run discovers again
		}
	}
	return d
}

// egressServer runs the egress proxy for one sandbox on the sockets its
// init made inside the sandbox's network namespace.
type egressServer struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startEgress serves the proxy, the SOCKS5 proxy and the DNS refuser. The
// allowlist (which may need discovery) is built in the background:
// connections wait in the listen backlog meanwhile, and a command that
// never uses the network never waits for it.
func startEgress(ctx context.Context, p *policy.Policy, workspace string, files []*os.File, rec *seclog.Recorder, logger *slog.Logger) (*egressServer, error) {
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
	es := &egressServer{cancel: cancel}
	es.wg.Add(1)
	go func() {
		defer es.wg.Done()
		allow := append([]policy.AllowEntry(nil), p.Network.Allow...)
		// Discovery asks the host's tools (hundreds of milliseconds): do
		// it only once something actually reaches the proxy, so commands
		// that never use the network never pay for it; pending
		// connections wait in the listen backlog meanwhile.
		if p.Network.DiscoverRegistries && !waitForTraffic(ctx, httpLn, socksLn, dnsPC) {
			httpLn.Close()
			socksLn.Close()
			dnsPC.Close()
			return
		}
		if p.Network.DiscoverRegistries {
			for _, d := range DiscoverRegistries(ctx, workspace, false) {
				allow = append(allow, d.Entry)
			}
		}
		px, err := egress.New(egress.Config{Allow: allow, Recorder: rec, Logger: logger})
		if err != nil {
			if logger != nil {
				logger.Error("egress proxy", "err", err)
			}
			httpLn.Close()
			socksLn.Close()
			dnsPC.Close()
			return
		}
		var wg sync.WaitGroup
		wg.Add(3)
		go func() { defer wg.Done(); _ = px.ServeHTTP(ctx, httpLn) }()
		go func() { defer wg.Done(); _ = px.ServeSOCKS5(ctx, socksLn) }()
		go func() { defer wg.Done(); _ = px.ServeDNS(ctx, dnsPC) }()
		wg.Wait()
	}()
	return es, nil
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

// stop ends the proxy and waits for its connections to close.
func (es *egressServer) stop() {
	if es == nil {
		return
	}
	es.cancel()
	es.wg.Wait()
}

// proxyEnv is the environment that points tools at the egress proxy.
func proxyEnv(env []string) []string {
	out := append([]string(nil), env...)
	seen := map[string]int{}
	for i, kv := range out {
		k, _, _ := strings.Cut(kv, "=")
		seen[k] = i
	}
	for _, kv := range egress.Env(nsjail.ProxyHTTPPort, nsjail.ProxySOCKSPort) {
		k, _, _ := strings.Cut(kv, "=")
		if i, ok := seen[k]; ok {
			out[i] = kv
		} else {
			out = append(out, kv)
		}
	}
	sort.Strings(out)
	return out
}
