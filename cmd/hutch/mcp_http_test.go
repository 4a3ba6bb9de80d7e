//go:build !mcpimage

package main

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// countingExec is a session's executor that runs nothing and counts the
// executors open.
type countingExec struct{ open *atomic.Int32 }

func (e countingExec) Run(context.Context, agent.ExecRequest) (agent.ExecResult, error) {
	return agent.ExecResult{SandboxID: "fake"}, nil
}

func (e countingExec) Close() error { e.open.Add(-1); return nil }

// Initializes that arrive together, past the HTTP layer's check of the
// cap (here: without it), are held to it by the middleware: with --max-sessions 2, of eight
// concurrent clients two get a session, six the cap's error; the sandboxes
// of the refused ones are never made, and every sandbox made is closed
// when its session is deleted.
func TestMCPHTTPCapConcurrent(t *testing.T) {
	var open, made atomic.Int32
	lifetime, cancel := context.WithCancel(context.Background())
	defer cancel()
	newTool := func(context.Context) (*agent.Tool, error) {
		made.Add(1)
		open.Add(1)
		time.Sleep(100 * time.Millisecond) // as a sandbox takes time to start
		return &agent.Tool{Exec: countingExec{&open}}, nil
	}
	lg := slog.New(slog.NewTextHandler(io.Discard, nil))
	h, _, err := newMCPHTTPHandler(lifetime, &mcpHTTPConfig{maxSessions: 2}, &agent.Tool{Exec: countingExec{&open}}, newTool,
		policy.Default(), lg, lg, seclog.Discard())
	if err != nil {
		t.Fatal(err)
	}
	h.noCapPrecheck = true // as if all of them passed it together
	srv := httptest.NewServer(h.routes())
	defer func() { srv.CloseClientConnections(); srv.Close() }()

	const n = 8
	var wg sync.WaitGroup
	var mu sync.Mutex
	var sessions []*mcp.ClientSession
	var refusals []string
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil)
			s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: srv.URL + mcpHTTPPath, MaxRetries: -1}, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				refusals = append(refusals, err.Error())
				return
			}
			sessions = append(sessions, s)
		}()
	}
	wg.Wait()
	if len(sessions) != 2 || len(refusals) != n-2 {
		t.Fatalf("%d sessions and %d refusals, want 2 and %d: %v", len(sessions), len(refusals), n-2, refusals)
	}
	for _, r := range refusals {
		if !strings.Contains(r, "at most 2 at a time (--max-sessions 2)") {
			t.Errorf("a refusal without the cap: %s", r)
		}
	}
	if m := made.Load(); m != 2 {
		t.Errorf("%d sandboxes made, want 2 (none for a refused session)", m)
	}
	for _, s := range sessions {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}})
		if err != nil || res.IsError {
			t.Fatalf("run_command: %v %+v", err, res)
		}
		s.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for open.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d sandboxes still open after every session was deleted", open.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
