//go:build !mcpimage

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/seclog"
)

// httpSessions holds the sandbox of each MCP session of the HTTP server.
// A sandbox is made when its MCP session initializes (the middleware) and
// ended when the MCP session ends (an HTTP DELETE, the idle timeout, the
// server stopping), or when it cannot be made.
//
// Invariants: at most max entries; an entry's tool is set once, by the
// initialize that made the entry, and closed once, by whoever removes the
// entry from m (end, or the creator when closing began meanwhile).
type httpSessions struct {
	max  int
	idle time.Duration
	// newTool makes a session's sandbox.
	newTool func(ctx context.Context) (*agent.Tool, error)
	logger  *slog.Logger
	secLog  *seclog.Log

	mu      sync.Mutex
	m       map[string]*httpSession // by Mcp-Session-Id
	closing bool
	// wg counts sandboxes being made or closed.
	wg sync.WaitGroup
}

type httpSession struct {
	tool    *agent.Tool // nil while the sandbox is being made
	started time.Time
}

// codeSessionCap is the JSON-RPC error code of an initialize refused for
// the cap or because the server is stopping (a server error, in the range
// JSON-RPC leaves to servers).
const codeSessionCap = -32000

func (s *httpSessions) capMessage() string {
	msg := fmt.Sprintf("hutch: too many MCP sessions: this server holds at most %d at a time (--max-sessions %d), each a sandbox; end one (HTTP DELETE of its Mcp-Session-Id), wait for one to end", s.max, s.max)
	if s.idle > 0 {
		msg += fmt.Sprintf(" (idle sessions end after --idle-timeout %s)", s.idle)
	}
	return msg + ", or start the server with a larger --max-sessions"
}

// full reports whether another session would be over the cap.
func (s *httpSessions) full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m) >= s.max
}

// count is the number of sessions.
func (s *httpSessions) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// recordCap writes a refusal for the cap to the security log.
func (s *httpSessions) recordCap(remote string) {
	ev := seclog.Event{
		Kind: seclog.KindAccess, Rule: "mcp --max-sessions", Subject: fmt.Sprintf("--max-sessions %d", s.max),
		Message: "refused a new MCP session: the server holds its maximum of sessions", Level: slog.LevelWarn,
	}
	if remote != "" {
		ev.Detail = map[string]any{"remote": remote}
	}
	s.secLog.Record(ev)
}

// middleware makes the sandbox of a session that initializes; the
// session's other requests pass through.
func (s *httpSessions) middleware(lifetime context.Context) mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			ss, ok := req.GetSession().(*mcp.ServerSession)
			if method != "initialize" || !ok || ss.ID() == "" {
				return next(ctx, method, req)
			}
			id := ss.ID()
			s.mu.Lock()
			switch {
			case s.closing:
				s.mu.Unlock()
				return nil, &jsonrpc.Error{Code: codeSessionCap, Message: "hutch: the server is stopping: it takes no new MCP sessions"}
			case s.m[id] != nil:
				s.mu.Unlock()
				return next(ctx, method, req) // a second initialize: the SDK refuses it
			case len(s.m) >= s.max:
				s.mu.Unlock()
				s.recordCap("")
				s.logger.Warn("mcp http: session refused: at the cap", "max_sessions", s.max)
				return nil, &jsonrpc.Error{Code: codeSessionCap, Message: s.capMessage()}
			}
			e := &httpSession{started: time.Now()}
			s.m[id] = e
			s.wg.Add(1)
			s.mu.Unlock()
			defer s.wg.Done()

			tool, err := s.newTool(lifetime)
			if err == nil {
				var res mcp.Result
				res, err = next(ctx, method, req)
				if err == nil {
					s.mu.Lock()
					if s.m[id] == e && !s.closing {
						e.tool = tool
						tool = nil
					}
					s.mu.Unlock()
					if tool == nil {
						// The SDK closes a session on its DELETE (whose
						// sandbox has ended by then), at the idle timeout and
						// when the server stops (whose sandboxes closeAll
						// ends first): what is left to end here is idle.
						go func() { _ = ss.Wait(); s.end(id, "idle for --idle-timeout "+s.idle.String()) }()
						s.logger.Info("mcp http: session started", "session", id, "sessions", s.count())
						return res, nil
					}
					err = errors.New("the server is stopping")
				}
				if cerr := tool.Close(); cerr != nil {
					s.logger.Warn("mcp http: closing a sandbox", "session", id, "err", cerr)
				}
			}
			s.mu.Lock()
			if s.m[id] == e {
				delete(s.m, id)
			}
			s.mu.Unlock()
			s.logger.Error("mcp http: session not started", "session", id, "err", err)
			return nil, fmt.Errorf("hutch: %w", err)
		}
	}
}

// toolOf returns the sandbox of the MCP session ss.
func (s *httpSessions) toolOf(ss *mcp.ServerSession) (*agent.Tool, error) {
	id := ""
	if ss != nil {
		id = ss.ID()
	}
	s.mu.Lock()
	e := s.m[id]
	s.mu.Unlock()
	if e == nil || e.tool == nil {
		return nil, errors.New("this MCP session has no sandbox any more (it was ended, or the server is stopping): start a new session")
	}
	return e.tool, nil
}

// has reports whether id is a session with a sandbox.
func (s *httpSessions) has(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.m[id] != nil
}

// end closes the sandbox of session id, if it still has one; why says
// why, for the log.
func (s *httpSessions) end(id, why string) {
	s.mu.Lock()
	e := s.m[id]
	if e == nil || e.tool == nil {
		s.mu.Unlock()
		return
	}
	delete(s.m, id)
	s.wg.Add(1)
	n := len(s.m)
	s.mu.Unlock()
	defer s.wg.Done()
	err := e.tool.Close()
	s.logger.Info("mcp http: session ended", "session", id, "why", why, "age", time.Since(e.started).Round(time.Second).String(), "sessions", n)
	if err != nil {
		s.logger.Warn("mcp http: closing a sandbox", "session", id, "err", err)
	}
}

// closeAll refuses new sessions, ends every sandbox and waits until the
// sandboxes being made or closed are gone.
func (s *httpSessions) closeAll() {
	s.mu.Lock()
	s.closing = true
	var ids []string
	for id := range s.m {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, id := range ids {
		wg.Add(1)
		go func() { defer wg.Done(); s.end(id, "server stopping") }()
	}
	wg.Wait()
	s.wg.Wait()
}
