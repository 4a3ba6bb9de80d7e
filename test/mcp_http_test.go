package test

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// httpMCP is a started `hutch mcp --listen 127.0.0.1:0`.
type httpMCP struct {
	t      *testing.T
	cmd    *exec.Cmd
	url    string
	token  string
	secLog string

	mu     sync.Mutex
	stderr strings.Builder
	exited chan struct{}
	err    error
}

var serveURL = regexp.MustCompile(`url=(https?://\S+)`)

// startHTTPMCP starts `hutch mcp --listen 127.0.0.1:0` (or the address of
// extra's first two words "--listen" ADDR) with a token file (unless
// noToken) and extra args, in a fresh workspace, and waits for the
// URL it serves. The server is stopped (SIGTERM, and it must exit 0) when
// the test ends.
func startHTTPMCP(t *testing.T, o opts, noToken bool, extra ...string) *httpMCP {
	t.Helper()
	ws := userDir(t)
	state := userDir(t)
	if o.root {
		ownTree(t, o, ws)
		ownTree(t, o, state)
	}
	o.dir = ws
	m := &httpMCP{t: t, secLog: filepath.Join(state, "security.log"), exited: make(chan struct{})}
	listen := "127.0.0.1:0"
	if len(extra) > 1 && extra[0] == "--listen" {
		listen, extra = extra[1], extra[2:]
	}
	args := []string{"mcp", "--listen", listen, "--security-log", m.secLog}
	if !noToken {
		m.token = fmt.Sprintf("tok-%d-%d-0123456789abcdefghijklmnop", os.Getpid(), time.Now().UnixNano())
		tf := filepath.Join(state, "token")
		if err := os.WriteFile(tf, []byte(m.token+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ownTree(t, o, tf)
		args = append(args, "--token-file", tf)
	}
	m.cmd = hutchCmd(o, append(args, extra...)...)
	pr, err := m.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			m.mu.Lock()
			m.stderr.WriteString(line + "\n")
			m.mu.Unlock()
			if u := serveURL.FindStringSubmatch(line); u != nil {
				select {
				case urlc <- u[1]:
				default:
				}
			}
		}
		io.Copy(io.Discard, pr)
		m.err = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() { m.stop() })
	select {
	case m.url = <-urlc:
	case <-m.exited:
		t.Fatalf("hutch mcp --listen exited before serving (%v); stderr:\n%s", m.err, m.log())
	case <-time.After(30 * time.Second):
		t.Fatalf("hutch mcp --listen did not say where it serves within 30s; stderr:\n%s", m.log())
	}
	return m
}

func (m *httpMCP) log() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.stderr.String()
}

// stop sends SIGTERM and checks that the server exits 0 within 20s.
func (m *httpMCP) stop() {
	m.t.Helper()
	select {
	case <-m.exited:
	default:
		m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(20 * time.Second):
			m.cmd.Process.Kill()
			<-m.exited
			m.t.Errorf("hutch mcp --listen did not exit within 20s of SIGTERM; stderr:\n%s", m.log())
			return
		}
	}
	if m.err != nil {
		m.t.Errorf("hutch mcp --listen: %v after SIGTERM, want exit 0; stderr:\n%s", m.err, m.log())
	}
}

// waitLog waits (bounded) for the server to log line.
func (m *httpMCP) waitLog(line string) {
	m.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(m.log(), line) {
		if time.Now().After(deadline) {
			m.t.Errorf("the server did not log %s; stderr:\n%s", line, m.log())
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// connect opens an MCP session with the official Go SDK's streamable
// client, with token as the bearer token.
func (m *httpMCP) connect(ctx context.Context, token string) (*mcp.ClientSession, error) {
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	hc := &http.Client{Transport: bearer{token, http.DefaultTransport}}
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: m.url, HTTPClient: hc, MaxRetries: -1}, nil)
}

func (m *httpMCP) mustConnect(ctx context.Context) *mcp.ClientSession {
	m.t.Helper()
	s, err := m.connect(ctx, m.token)
	if err != nil {
		m.t.Fatalf("connect: %v; stderr:\n%s", err, m.log())
	}
	return s
}

// run calls run_command and returns its structured result.
func run(t *testing.T, s *mcp.ClientSession, args map[string]any) map[string]any {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: args})
	if err != nil {
		t.Fatalf("run_command %v: %v", args, err)
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if res.IsError || sc == nil {
		t.Fatalf("run_command %v: an error result: %+v", args, res.Content)
	}
	return sc
}

// descendants lists the processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold anything but ')'.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	var out []int
	for q := []int{pid}; len(q) > 0; q = q[1:] {
		for _, c := range children[q[0]] {
			out = append(out, c)
			q = append(q, c)
		}
	}
	return out
}

// waitNoDescendants waits (bounded) until the server has no child left.
func (m *httpMCP) waitNoDescendants(within time.Duration) {
	m.t.Helper()
	deadline := time.Now().Add(within)
	for len(descendants(m.cmd.Process.Pid)) > 0 {
		if time.Now().After(deadline) {
			m.t.Fatalf("processes of the server still alive %s after its sessions ended: %v; stderr:\n%s", within, descendants(m.cmd.Process.Pid), m.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Over HTTP each MCP session has a sandbox of its own: a file one writes
// to its /tmp is not in the other's; a session's DELETE ends its sandbox
// (its background command is gone, nothing of it left) and not the
// other's; a call after DELETE is refused.
func TestMCPHTTPSessionPerSandbox(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		m := startHTTPMCP(t, o, false)
		ctx := context.Background()
		a, b := m.mustConnect(ctx), m.mustConnect(ctx)
		defer b.Close()
		if a.ID() == b.ID() || a.ID() == "" {
			t.Fatalf("session ids %q and %q: want two distinct ones", a.ID(), b.ID())
		}
		marker := uniqueMarker(t)
		r := run(t, a, map[string]any{"command": "echo from-a > /tmp/" + marker + " && cat /tmp/" + marker})
		if r["stdout"] != "from-a\n" {
			t.Fatalf("session a: %v", r)
		}
		r = run(t, b, map[string]any{"command": "cat /tmp/" + marker + " 2>&1; echo; ls /tmp"})
		if strings.Contains(r["stdout"].(string), "from-a") || !strings.Contains(r["stdout"].(string), "No such file") {
			t.Fatalf("session b sees session a's /tmp: %v", r)
		}
		// a's sandbox persists across its calls (the session's warm sandbox).
		r = run(t, a, map[string]any{"command": "cat /tmp/" + marker})
		if r["stdout"] != "from-a\n" {
			t.Fatalf("session a's second call: %v", r)
		}
		run(t, a, map[string]any{"command": "sh -c 'sleep 3600' " + marker + "-a", "background": true})
		run(t, b, map[string]any{"command": "sh -c 'sleep 3600' " + marker + "-b", "background": true})
		deadline := time.Now().Add(10 * time.Second)
		for len(processesWith(marker+"-a")) == 0 || len(processesWith(marker+"-b")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the background commands did not start; stderr:\n%s", m.log())
			}
			time.Sleep(20 * time.Millisecond)
		}

		// The SDK's Close sends DELETE with the session id.
		if err := a.Close(); err != nil {
			t.Fatalf("close (DELETE) session a: %v", err)
		}
		waitGone(t, marker+"-a", 10*time.Second)
		if len(processesWith(marker+"-b")) == 0 {
			t.Fatalf("DELETE of session a ended session b's command too")
		}
		m.waitLog(`msg="mcp http: session ended" session=` + a.ID() + ` why="deleted by the client"`)
		// The request log names method, path, session, status and tool.
		if !regexp.MustCompile(`msg="mcp http" method=POST path=/mcp session=` + b.ID() + ` remote=127\.0\.0\.1:\d+ status=200 duration=\S+ rpc=tools/call tool=run_command`).MatchString(m.log()) {
			t.Errorf("no request log line for session b's tools/call; stderr:\n%s", m.log())
		}
		if err := b.Close(); err != nil {
			t.Fatalf("close session b: %v", err)
		}
		waitGone(t, marker+"-b", 10*time.Second)
		m.waitNoDescendants(10 * time.Second)
	})
}

// A request without the token, or with a wrong one, is refused with 401
// and a WWW-Authenticate challenge, and recorded in the security log; the
// MCP client cannot connect with a wrong token.
func TestMCPHTTPAuth(t *testing.T) {
	m := startHTTPMCP(t, opts{}, false)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`
	for _, tc := range []struct{ name, auth, challenge string }{
		{"none", "", `Bearer realm="hutch"`},
		{"wrong", "Bearer " + m.token + "x", `Bearer realm="hutch", error="invalid_token"`},
		{"basic", "Basic " + m.token, `Bearer realm="hutch"`},
	} {
		req, _ := http.NewRequest("POST", m.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != tc.challenge ||
			resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(string(msg), "--token-file") {
			t.Errorf("%s: status %d, WWW-Authenticate %q, session %q, body %q: want 401, %q, no session, a body naming --token-file",
				tc.name, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), resp.Header.Get("Mcp-Session-Id"), msg, tc.challenge)
		}
	}
	// Browsers are kept out even with the token: a cross-origin request,
	// and a Host that is not loopback on the loopback address (DNS
	// rebinding).
	for _, tc := range []struct{ name, header, value string }{
		{"origin", "Origin", "http://evil.example"},
		{"fetch-site", "Sec-Fetch-Site", "cross-site"},
		{"host", "Host", "evil.example"},
	} {
		req, _ := http.NewRequest("POST", m.url, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+m.token)
		if tc.header == "Host" {
			req.Host = tc.value
		} else {
			req.Header.Set(tc.header, tc.value)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || resp.Header.Get("Mcp-Session-Id") != "" {
			t.Errorf("%s %s: status %d, session %q; want 403 and no session", tc.header, tc.value, resp.StatusCode, resp.Header.Get("Mcp-Session-Id"))
		}
	}
	// The probe needs no token and says nothing else.
	if resp, err := http.Get(strings.TrimSuffix(m.url, "/mcp") + "/healthz"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "ok\n" {
			t.Errorf("GET /healthz: %d %q, want 200 ok", resp.StatusCode, b)
		}
	}
	if s, err := m.connect(context.Background(), m.token+"x"); err == nil {
		s.Close()
		t.Fatal("the MCP client connected with a wrong token")
	}
	s := m.mustConnect(context.Background())
	s.Close()
	sec, _ := os.ReadFile(m.secLog)
	if n := strings.Count(string(sec), `"kind":"access","rule":"mcp --token-file"`); n < 4 {
		t.Errorf("security log: %d refusals of the token, want 4 or more:\n%s", n, sec)
	}
	for _, why := range []string{"no bearer token", "a wrong bearer token"} {
		if !strings.Contains(string(sec), "refused an MCP HTTP request with "+why) {
			t.Errorf("security log: no refusal for %s:\n%s", why, sec)
		}
	}
}

// Over --max-sessions, an initialize is refused with a JSON-RPC error
// naming the cap and the flag, and no session; once a session ends, a new one is
// accepted.
func TestMCPHTTPSessionCap(t *testing.T) {
	m := startHTTPMCP(t, opts{}, false, "--max-sessions", "1")
	ctx := context.Background()
	a := m.mustConnect(ctx)
	_, err := m.connect(ctx, m.token)
	if err == nil || !strings.Contains(err.Error(), "at most 1 at a time (--max-sessions 1)") {
		t.Fatalf("a second session over --max-sessions 1: err %v, want the cap named", err)
	}
	req, _ := http.NewRequest("POST", m.url, strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"c","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+m.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Mcp-Session-Id") != "" || !strings.Contains(string(msg), `"id":7,"error":{"code":-32000`) || !strings.Contains(string(msg), "--max-sessions") {
		t.Errorf("initialize over the cap: %d %s; want a JSON-RPC error for id 7 naming --max-sessions, no session", resp.StatusCode, msg)
	}
	sec, _ := os.ReadFile(m.secLog)
	if !strings.Contains(string(sec), `"kind":"access","rule":"mcp --max-sessions"`) {
		t.Errorf("security log: no refusal for the cap:\n%s", sec)
	}
	a.Close()
	b := m.mustConnect(ctx)
	run(t, b, map[string]any{"command": "true"})
	b.Close()
}

// A session with no request for --idle-timeout ends, its sandbox too (its
// background command is killed, nothing of it left); the client's next
// call fails.
func TestMCPHTTPIdleExpiry(t *testing.T) {
	m := startHTTPMCP(t, opts{}, false, "--idle-timeout", "2s")
	s := m.mustConnect(context.Background())
	defer s.Close()
	marker := uniqueMarker(t)
	run(t, s, map[string]any{"command": "sh -c 'sleep 3600' " + marker, "background": true})
	deadline := time.Now().Add(10 * time.Second)
	for len(processesWith(marker)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the background command did not start; stderr:\n%s", m.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	waitGone(t, marker, 15*time.Second)
	m.waitNoDescendants(10 * time.Second)
	m.waitLog(`msg="mcp http: session ended" session=` + s.ID() + ` why="idle for --idle-timeout 2s"`)
	if _, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}}); err == nil {
		t.Errorf("a call on an expired session succeeded")
	}
}

// A DELETE while a call runs kills the call's command and ends the
// session at once: it does not wait for the command.
func TestMCPHTTPDeleteDuringCall(t *testing.T) {
	m := startHTTPMCP(t, opts{}, false)
	s := m.mustConnect(context.Background())
	marker := uniqueMarker(t)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	answered := make(chan answer, 1)
	go func() {
		res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "sh -c 'sleep 3600' " + marker}})
		answered <- answer{res, err}
	}()
	// A second call of the session, by plain HTTP: its answer must come
	// on its event stream before the session closes.
	raw := make(chan string, 1)
	go func() {
		req, _ := http.NewRequest("POST", m.url, strings.NewReader(`{"jsonrpc":"2.0","id":99,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"sh -c 'sleep 3600' `+marker+`-raw"}}}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Mcp-Session-Id", s.ID())
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		req.Header.Set("Authorization", "Bearer "+m.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			raw <- err.Error()
			return
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		raw <- string(b)
	}()
	deadline := time.Now().Add(10 * time.Second)
	for len(processesWith(marker)) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the commands did not start; stderr:\n%s", m.log())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The Go SDK's Close waits for the calls in flight before it sends
	// its DELETE: this one is another client's, or a client's that gave up.
	req, _ := http.NewRequest("DELETE", m.url, nil)
	req.Header.Set("Mcp-Session-Id", s.ID())
	req.Header.Set("Authorization", "Bearer "+m.token)
	start := time.Now()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("DELETE: %v; stderr:\n%s", err, m.log())
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Errorf("DELETE: status %d, want 204", resp.StatusCode)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("DELETE took %s with a call running", d)
	}
	waitGone(t, marker, 5*time.Second)
	m.waitNoDescendants(10 * time.Second)
	select {
	case a := <-answered:
		if a.err != nil {
			t.Fatalf("the call running at the DELETE: %v, want its result; stderr:\n%s", a.err, m.log())
		}
		sc, _ := a.res.StructuredContent.(map[string]any)
		if sc["exit_code"] != float64(125) || !strings.Contains(fmt.Sprint(sc["policy_events"]), "the sandbox ended") {
			t.Errorf("the call running at the DELETE: %v, want exit code 125 and the sandbox's end in its events", sc)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the call running at the DELETE got no answer within 10s; stderr:\n%s", m.log())
	}
	select {
	case body := <-raw:
		if !strings.Contains(body, `"id":99,"result":`) || !strings.Contains(body, `"exit_code":125`) {
			t.Errorf("the plain HTTP call running at the DELETE got %q, want its result (exit code 125)", body)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("the plain HTTP call running at the DELETE got no answer within 10s")
	}
}

// SIGTERM ends every session: the command running in a call and the
// background ones are killed, no process or cgroup (root: the cgroup v1
// backend) is left, and the server exits 0.
func TestMCPHTTPShutdown(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		m := startHTTPMCP(t, o, false)
		ctx := context.Background()
		a, b := m.mustConnect(ctx), m.mustConnect(ctx)
		marker := uniqueMarker(t)
		run(t, a, map[string]any{"command": "sh -c 'sleep 3600' " + marker + "-bg", "background": true})
		go b.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "sh -c 'sleep 3600' " + marker + "-fg"}})
		deadline := time.Now().Add(10 * time.Second)
		for len(processesWith(marker+"-bg")) == 0 || len(processesWith(marker+"-fg")) == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("the commands did not start; stderr:\n%s", m.log())
			}
			time.Sleep(20 * time.Millisecond)
		}
		pid := m.cmd.Process.Pid
		// The cgroups of a sandbox are named after the process that made
		// them: the server or one of its descendants.
		makers := append(descendants(pid), pid)
		start := time.Now()
		m.stop()
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("the server took %s to stop", d)
		}
		waitGone(t, marker, 5*time.Second)
		if d := descendants(pid); len(d) > 0 {
			t.Errorf("processes of the server left after it exited: %v", d)
		}
		for _, dir := range cgroupDirs() {
			for _, p := range makers {
				if strings.HasPrefix(filepath.Base(dir), fmt.Sprintf("hutch-%d-", p)) {
					t.Errorf("cgroup %s of the server's sandboxes left after it exited", dir)
				}
			}
		}
	})
}

// Without --token-file, a non-loopback address is refused, and without
// TLS too, unless --allow-plain-http: exit 125, the flag named, nothing
// left listening. With the token and --allow-plain-http, or TLS, it
// serves.
func TestMCPHTTPNonLoopback(t *testing.T) {
	ws := userDir(t)
	tf := filepath.Join(userDir(t), "token")
	writeUserFile(t, tf, strings.Repeat("k", 40)+"\n")
	os.Chmod(tf, 0o600)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--listen", "0.0.0.0:0"}, "without --token-file anyone who reaches it could run commands"},
		{[]string{"--listen", ":0"}, "pass --token-file FILE"},
		{[]string{"--listen", "0.0.0.0:0", "--token-file", tf}, "pass --tls-cert and --tls-key, or --allow-plain-http"},
		{[]string{"--listen", "127.0.0.1:0", "--token-file", ws}, "--token-file " + ws + ": not a regular file"},
		{[]string{"--token-file", tf}, "--token-file is a setting of the HTTP server: add --listen ADDR"},
		{[]string{"--listen", "127.0.0.1:0", "--max-sessions", "0"}, "--max-sessions 0: want 1 or more"},
		{[]string{"--listen", "127.0.0.1:0", "--idle-timeout", "soon"}, `--idle-timeout "soon": want a duration`},
	} {
		r := hutch(t, opts{dir: ws, timeout: 20 * time.Second}, append([]string{"mcp"}, tc.args...)...)
		if r.code != 125 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("hutch mcp %v: exit %d, stderr %q; want 125 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
	// With the token and --allow-plain-http it serves, the token required.
	m := startHTTPMCP(t, opts{}, false, "--listen", "0.0.0.0:0", "--allow-plain-http")
	if !strings.Contains(m.url, "://0.0.0.0:") && !strings.Contains(m.url, "://[::]:") {
		t.Fatalf("serving at %s, want every interface", m.url)
	}
	m.url = "http://127.0.0.1:" + m.url[strings.LastIndexByte(m.url, ':')+1:]
	if _, err := m.connect(context.Background(), "wrong"); err == nil {
		t.Fatal("connected with a wrong token")
	}
	s := m.mustConnect(context.Background())
	run(t, s, map[string]any{"command": "true"})
	s.Close()

	// With --tls-cert and --tls-key it serves HTTPS.
	certFile, keyFile, pool := selfSigned(t)
	m = startHTTPMCP(t, opts{}, false, "--listen", "0.0.0.0:0", "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(m.url, "https://") {
		t.Fatalf("serving at %s, want https", m.url)
	}
	m.url = "https://127.0.0.1:" + m.url[strings.LastIndexByte(m.url, ':')+1:]
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	s, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: m.url, HTTPClient: &http.Client{Transport: bearer{m.token, tr}}, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatalf("connect over TLS: %v; stderr:\n%s", err, m.log())
	}
	run(t, s, map[string]any{"command": "true"})
	s.Close()
	if resp, err := http.Get("http://" + strings.TrimPrefix(m.url, "https://")); err == nil {
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("plain HTTP to the TLS server: status %d", resp.StatusCode)
		}
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and its key,
// owned by the test user, and returns their paths and a pool trusting it.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := userDir(t)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeUserFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeUserFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
	os.Chmod(keyFile, 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}
