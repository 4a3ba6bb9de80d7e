//go:build !mcpimage

package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// mcpHTTPPath is where the server answers MCP.
const mcpHTTPPath = "/mcp"

// shutdownGrace bounds how long a stopping server waits for its HTTP
// connections to finish after every session has ended.
const shutdownGrace = 5 * time.Second

// serveMCPHTTP is `hutch mcp --listen`: the MCP Streamable HTTP transport
// (the SDK's handler), each MCP session with a sandbox session of its own
// (httpSessions), behind bearer-token authentication and a cross-origin
// check, every request logged.
func serveMCPHTTP(c *cli.Context) error {
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	quiet := logger // the sandboxes' and the SDK's chatter only with --debug
	if !c.Bool("debug") {
		quiet = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	setup := func(err error) error { return &exitError{hutch.ExitSetup, "hutch: mcp: " + err.Error()} }

	cfg, err := mcpHTTPSettings(c)
	if err != nil {
		return setup(err)
	}
	p, ws, maxOutput, err := mcpSettings(c)
	if err != nil {
		return err
	}
	if len(p.Network.Publish) > 0 {
		return setup(errors.New("--publish cannot be used with --listen: every MCP session is a sandbox of its own, and a host port can be published by one only"))
	}
	ln, loopback, err := listenMCP(cfg)
	if err != nil {
		return setup(err)
	}
	defer ln.Close()
	secLog, closeLog, err := openSecurityLog(c.String("security-log"))
	if err != nil {
		return setup(err)
	}
	defer closeLog()

	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	// lifetime ends when the server stops: the calls in flight are
	// cancelled (their commands killed) and no sandbox is made after.
	lifetime, endLifetime := context.WithCancel(context.WithoutCancel(ctx))
	defer endLifetime()

	env := os.Environ()
	model := &agent.Tool{MaxOutput: maxOutput, MaxTimeout: p.Resources.Timeout.D(), Workspace: p.Filesystem.PathsFor(ws, "")}
	newTool := func(ctx context.Context) (*agent.Tool, error) {
		exec, err := agent.NewSessionExecutor(ctx, &agent.HutchExecutor{
			Policy: p, SecurityLog: secLog, HostEnv: env, ExtraEnv: c.StringSlice("env"), Logger: quiet,
		})
		if err != nil {
			return nil, err
		}
		return &agent.Tool{Exec: exec, MaxOutput: model.MaxOutput, MaxTimeout: model.MaxTimeout, Workspace: model.Workspace}, nil
	}
	// The model describes a session's tool: a session executor, which
	// can run commands in the background.
	model.Exec = &agent.SessionExecutor{}
	h, server, err := newMCPHTTPHandler(lifetime, cfg, model, newTool, p, logger, quiet, secLog)
	if err != nil {
		return setup(err)
	}
	sessions := h.sessions

	scheme := "http"
	if cfg.tls != nil {
		scheme = "https"
	}
	auth := "bearer token from " + cfg.tokenFile
	if cfg.token == nil {
		auth = "none"
	}
	if cfg.tokenWarning != "" {
		logger.Warn("hutch mcp: " + cfg.tokenWarning)
	}
	if cfg.token == nil && loopback {
		logger.Warn("hutch mcp: no --token-file: every user and process of this host can reach " + ln.Addr().String() + " and run commands in the sandbox as you; pass --token-file FILE unless this host is yours alone (a pod, a VM)")
	}
	logger.Info("hutch mcp: serving run_command over HTTP", "url", scheme+"://"+ln.Addr().String()+mcpHTTPPath,
		"auth", auth, "max_sessions", cfg.maxSessions, "idle_timeout", cfg.idleTimeout.String(),
		"workspace", ws, "network", p.Network.Mode, "timeout", policy.Duration(p.Resources.Timeout.D()).String(), "max_output", maxOutput)

	srv := &http.Server{
		Handler:           h.routes(),
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig:         cfg.tls,
		ErrorLog:          slog.NewLogLogger(quiet.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return lifetime },
	}
	served := make(chan error, 1)
	go func() {
		if cfg.tls != nil {
			served <- srv.ServeTLS(ln, "", "")
		} else {
			served <- srv.Serve(ln)
		}
	}()
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-served:
	}

	// Stop: no new connections or sessions; the calls in flight are
	// cancelled; every sandbox ends (its processes killed, its cgroups
	// removed); then the MCP sessions and HTTP connections close.
	logger.Info("hutch mcp: stopping", "sessions", sessions.count())
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(shutdownCtx) }()
	endLifetime()
	sessions.closeAll()
	var wg sync.WaitGroup
	for ss := range server.Sessions() {
		wg.Add(1)
		go func() { defer wg.Done(); ss.Close() }()
	}
	wg.Wait()
	if err := <-shut; err != nil {
		srv.Close()
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return &exitError{1, "hutch: mcp: serve " + ln.Addr().String() + ": " + serveErr.Error()}
	}
	logger.Info("hutch mcp: stopped")
	return nil
}

// newMCPHTTPHandler makes the MCP server with the tools of model, whose
// sessions each get a tool from newTool, and the HTTP handler in front of
// it, as cfg says.
func newMCPHTTPHandler(lifetime context.Context, cfg *mcpHTTPConfig, model *agent.Tool, newTool func(context.Context) (*agent.Tool, error),
	p *policy.Policy, logger, quiet *slog.Logger, secLog *seclog.Log) (*mcpHTTPHandler, *mcp.Server, error) {
	sessions := &httpSessions{
		max: cfg.maxSessions, idle: cfg.idleTimeout, logger: logger, secLog: secLog,
		m: map[string]*httpSession{}, newTool: newTool,
	}
	server, err := newMCPServerWith(lifetime, model, sessions.toolOf, p, model.MaxOutput, logger, quiet, nil)
	if err != nil {
		return nil, nil, err
	}
	server.AddReceivingMiddleware(sessions.middleware(lifetime))
	h := &mcpHTTPHandler{
		mcp: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, &mcp.StreamableHTTPOptions{
			SessionTimeout: cfg.idleTimeout,
			Logger:         quiet,
		}),
		origin:   http.NewCrossOriginProtection(),
		sessions: sessions,
		logger:   logger,
		secLog:   secLog,
	}
	if cfg.token != nil {
		sum := sha256.Sum256(cfg.token)
		h.tokenSum = sum[:]
	}
	return h, server, nil
}

// mcpHTTPHandler is the HTTP side of `hutch mcp --listen`: it logs every
// request, refuses cross-origin requests from browsers and requests
// without the token, refuses a new session over the cap before the SDK
// sees it (the cap is the middleware's to keep; this is the common case,
// with the client's address for the security log), and ends a session's sandbox before the SDK's DELETE (which
// waits for the session's calls in flight to return).
type mcpHTTPHandler struct {
	mcp      http.Handler
	origin   *http.CrossOriginProtection
	tokenSum []byte // sha256 of the token; nil: no token
	sessions *httpSessions
	// noCapPrecheck leaves the cap to the middleware alone (for tests of
	// initializes that pass the precheck together).
	noCapPrecheck bool
	posts         postCounter
	logger        *slog.Logger
	secLog        *seclog.Log
}

// deleteGrace bounds how long a DELETE waits for the answers of the
// session's calls, once their commands are killed.
const deleteGrace = 3 * time.Second

// postCounter counts the POSTs in progress of each session.
type postCounter struct {
	mu   sync.Mutex
	n    map[string]int
	zero map[string][]chan struct{} // closed when n[id] drops to 0
}

func (c *postCounter) start(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n, c.zero = map[string]int{}, map[string][]chan struct{}{}
	}
	c.n[id]++
}

func (c *postCounter) done(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n[id]--; c.n[id] > 0 {
		return
	}
	delete(c.n, id)
	for _, ch := range c.zero[id] {
		close(ch)
	}
	delete(c.zero, id)
}

// wait waits until session id has no POST in progress, at most d.
func (c *postCounter) wait(id string, d time.Duration) {
	c.mu.Lock()
	if c.n[id] == 0 {
		c.mu.Unlock()
		return
	}
	ch := make(chan struct{})
	c.zero[id] = append(c.zero[id], ch)
	c.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
	case <-t.C:
	}
}

func (h *mcpHTTPHandler) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(mcpHTTPPath, h.logged(h.guarded(h.mcp)))
	// An unauthenticated probe for orchestrators (a liveness check): it
	// says nothing but that the server answers.
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") })
	mux.Handle("/", h.logged(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "hutch mcp serves MCP at "+mcpHTTPPath+" only", http.StatusNotFound)
	})))
	return mux
}

// requestNote is what the inner handlers learn of a request, for its log
// line.
type requestNote struct {
	rpcMethod, tool string
}

type requestNoteKey struct{}

// logged logs every request when it ends: method, path, MCP session,
// remote address, status, duration, and for a POST the JSON-RPC method
// (and tool of a tools/call).
func (h *mcpHTTPHandler) logged(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		note := &requestNote{}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(context.WithValue(r.Context(), requestNoteKey{}, note)))
		sid := r.Header.Get("Mcp-Session-Id")
		if sid == "" {
			sid = sw.Header().Get("Mcp-Session-Id")
		}
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []slog.Attr{
			slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("session", sid),
			slog.String("remote", r.RemoteAddr), slog.Int("status", status),
			slog.String("duration", time.Since(start).Round(time.Millisecond).String()),
		}
		if note.rpcMethod != "" {
			attrs = append(attrs, slog.String("rpc", note.rpcMethod))
		}
		if note.tool != "" {
			attrs = append(attrs, slog.String("tool", note.tool))
		}
		h.logger.LogAttrs(r.Context(), slog.LevelInfo, "mcp http", attrs...)
	})
}

// guarded refuses what must not reach the SDK: cross-origin browser
// requests, requests without the token, a new session over the cap.
func (h *mcpHTTPHandler) guarded(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h.origin.Check(r); err != nil {
			http.Error(w, fmt.Sprintf("hutch: refused a cross-origin request (Origin %q): hutch mcp serves MCP clients, not web pages", r.Header.Get("Origin")), http.StatusForbidden)
			return
		}
		if h.tokenSum != nil && !h.authorized(w, r) {
			return
		}
		note, _ := r.Context().Value(requestNoteKey{}).(*requestNote)
		sid := r.Header.Get("Mcp-Session-Id")
		switch r.Method {
		case http.MethodPost:
			if sid != "" {
				h.posts.start(sid)
				defer h.posts.done(sid)
			}
			id, ok := peekRPC(r, note)
			if ok && sid == "" && note != nil && note.rpcMethod == "initialize" && !h.noCapPrecheck && h.sessions.full() {
				h.sessions.recordCap(r.RemoteAddr)
				h.logger.Warn("mcp http: session refused: at the cap", "max_sessions", h.sessions.max, "remote", r.RemoteAddr)
				// The refusal is the initialize's JSON-RPC error, as the SDK
				// would answer, with status 200: the clients show its message
				// (the Go SDK's drops the body of a 503 as a transient error).
				writeRPCError(w, http.StatusOK, id, &jsonrpc.Error{Code: codeSessionCap, Message: h.sessions.capMessage()})
				return
			}
		case http.MethodDelete:
			// The sandbox ends first: its commands are killed, the calls
			// running them are answered (their POSTs end), and then the
			// SDK closes the session (which would wait for the calls, and
			// drop the answers of those that end while it closes).
			if sid != "" && h.sessions.has(sid) {
				h.sessions.end(sid, "deleted by the client")
				h.posts.wait(sid, deleteGrace)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// authorized checks the bearer token in constant time (the SHA-256 sums
// compare, so that not even the length leaks) and answers 401 with a
// WWW-Authenticate challenge (RFC 6750) when it is missing or wrong; each
// refusal is a security event.
func (h *mcpHTTPHandler) authorized(w http.ResponseWriter, r *http.Request) bool {
	scheme, tok, found := strings.Cut(r.Header.Get("Authorization"), " ")
	var why, challenge string
	switch {
	case !found || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(tok) == "":
		why = "no bearer token"
		challenge = `Bearer realm="hutch"`
	default:
		sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(sum[:], h.tokenSum) == 1 {
			return true
		}
		why = "a wrong bearer token"
		challenge = `Bearer realm="hutch", error="invalid_token"`
	}
	h.secLog.Record(seclog.Event{
		Kind: seclog.KindAccess, Rule: "mcp --token-file", Subject: r.RemoteAddr,
		Message: "refused an MCP HTTP request with " + why,
		Detail:  map[string]any{"method": r.Method, "path": r.URL.Path}, Level: slog.LevelWarn,
	})
	h.logger.Warn("mcp http: unauthorized", "why", why, "remote", r.RemoteAddr)
	w.Header().Set("WWW-Authenticate", challenge)
	http.Error(w, "hutch: unauthorized: the request has "+why+": send the header Authorization: Bearer TOKEN, TOKEN being the content of the server's --token-file", http.StatusUnauthorized)
	return false
}

// peekRPC reads the JSON-RPC method (and the tool of a tools/call) of a
// POST's body into note and returns the request's id; the body is put back
// for the SDK, which enforces the size limit (the peek reads no more than
// it allows). ok is false for a body that is not one JSON-RPC request.
func peekRPC(r *http.Request, note *requestNote) (id jsonrpc.ID, ok bool) {
	if r.Body == nil {
		return id, false
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(buf), r.Body), r.Body}
	if err != nil || len(buf) > mcp.DefaultMaxRequestBodyBytes {
		return id, false
	}
	var msg struct {
		ID     any    `json:"id"`
		Method string `json:"method"`
		Params struct {
			Name string `json:"name"`
		} `json:"params"`
	}
	if json.Unmarshal(buf, &msg) != nil {
		return id, false
	}
	if note != nil {
		note.rpcMethod = msg.Method
		if msg.Method == "tools/call" {
			note.tool = msg.Params.Name
		}
	}
	id, err = jsonrpc.MakeID(msg.ID)
	return id, err == nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

// writeRPCError answers with a JSON-RPC error at HTTP status.
func writeRPCError(w http.ResponseWriter, status int, id jsonrpc.ID, jerr *jsonrpc.Error) {
	data, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Error: jerr})
	if err != nil {
		http.Error(w, jerr.Message, status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(data)
}

// statusWriter records the status of a response; it flushes (the SDK's
// event streams need it) and unwraps for http.ResponseController.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
