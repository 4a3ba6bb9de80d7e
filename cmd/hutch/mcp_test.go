//go:build !mcpimage

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
)

func TestDecodeRunCommandInput(t *testing.T) {
	in, err := decodeRunCommandInput(json.RawMessage(`{"command":"ls","cwd":"src","timeout_seconds":5,"fresh":true}`))
	if err != nil || in != (agent.RunCommandInput{Command: "ls", Cwd: "src", TimeoutSeconds: 5, Fresh: true}) {
		t.Errorf("decode: %+v, %v", in, err)
	}
	for raw, want := range map[string]string{
		``:                                      "arguments missing",
		`null`:                                  "arguments missing",
		`{"command":1}`:                         `argument "command": want a string, got JSON number`,
		`{"command":"x","timeout_seconds":"5"}`: `argument "timeout_seconds": want an integer, got JSON string`,
		`{"command":"x","fresh":"yes"}`:         `argument "fresh": want a boolean`,
		`{"command":"x","cmd":"y"}`:             `unknown argument "cmd": run_command takes command, cwd, timeout_seconds, fresh and background`,
		`["ls"]`:                                `arguments: want an object with "command", got JSON array`,
		`{"command":"x"} {}`:                    "more than one JSON value",
		`{"command":`:                           "arguments: ",
	} {
		if _, err := decodeRunCommandInput(json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want it to contain %q", raw, err, want)
		}
	}
}

// The direct decoding takes plain arguments (this fails if it stopped
// taking them) and agrees with encoding/json wherever it takes them.
func TestDecodeRunCommandInputDirect(t *testing.T) {
	for _, raw := range []string{
		`{"command":"ls","cwd":"src","timeout_seconds":5,"fresh":true}`,
		` {"fresh":false, "command":"echo hi"} `,
		`{"command":"make serve","background":true}`,
		`{}`,
	} {
		var taken bool
		if validObject([]byte(raw)) {
			taken = objectMembers([]byte(raw), func(string, []byte) bool { return true })
		}
		if !taken {
			t.Errorf("%s: not taken directly", raw)
		}
		checkDecodeRunCommandInput(t, raw)
	}
	for _, raw := range runCommandInputCases {
		checkDecodeRunCommandInput(t, raw)
	}
}

func checkDecodeRunCommandInput(t *testing.T, raw string) {
	got, gerr := decodeRunCommandInput(json.RawMessage(raw))
	want, werr := decodeRunCommandInputJSON(json.RawMessage(raw))
	if got != want || (gerr == nil) != (werr == nil) || (gerr != nil && gerr.Error() != werr.Error()) {
		t.Errorf("%s:\n got %+v, %v\nwant %+v, %v", raw, got, gerr, want, werr)
	}
}

// FuzzDecodeRunCommandInput: the direct decoding and encoding/json agree.
func FuzzDecodeRunCommandInput(f *testing.F) {
	for _, raw := range runCommandInputCases {
		f.Add(raw)
	}
	f.Fuzz(checkDecodeRunCommandInput)
}

var runCommandInputCases = []string{
	`{"command":"ls","cwd":"src","timeout_seconds":5,"fresh":true}`,
	`{"command":"a\"b","cwd":"\u0073rc"}`,
	`{"command":"x","command":"y"}`,
	`{"Command":"x"}`,
	`{"command":null}`,
	`{"command":"x","timeout_seconds":1.5}`,
	`{"command":"x","timeout_seconds":1e3}`,
	`{"command":"x","timeout_seconds":-1}`,
	`{"command":"x","timeout_seconds":99999999999999999999}`,
	`{"command":"x","fresh":1}`,
	`{"command":"x","fresh":null}`,
	`{"command":"x","background":"yes"}`,
	`{"command":"x","background":false,"background":true}`,
	`{"command":"x"} {}`,
	`{"command":"x",}`,
	`{"command":["x"]}`,
	`[]`,
	`null`,
	``,
	`"x"`,
	`{"command":"\t"}`,
	"{\"command\":\"\xe0\"}",
}

// writeExec is an executor that runs nothing and writes out to stdout.
type writeExec struct{ out []byte }

func (e writeExec) Run(ctx context.Context, req agent.ExecRequest) (agent.ExecResult, error) {
	if len(e.out) > 0 {
		if _, err := req.Stdout.Write(e.out); err != nil {
			return agent.ExecResult{}, err
		}
	}
	return agent.ExecResult{SandboxID: "x"}, nil
}

// connect serves run_command over e in memory and returns a client session.
func connect(tb testing.TB, e agent.Executor) *mcp.ClientSession {
	tb.Helper()
	ctx := context.Background()
	lg := slog.New(slog.DiscardHandler)
	srv, err := newMCPServer(ctx, &agent.Tool{Exec: e, Workspace: policy.WorkspacePaths{Host: "/home/u/proj", Mount: "/home/u/proj"}}, policy.Default(), agent.DefaultMaxOutput, lg, lg)
	if err != nil {
		tb.Fatal(err)
	}
	ct, st := mcp.NewInMemoryTransports()
	if _, err := srv.Connect(ctx, st, nil); err != nil {
		tb.Fatal(err)
	}
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cs.Close() })
	return cs
}

// The tool is listed with the schemas the SDK infers from the Go types, and
// its results carry structured content that matches them.
func TestMCPToolSchemasAndResults(t *testing.T) {
	ctx := context.Background()
	cs := connect(t, writeExec{out: []byte("hello\n")})
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || len(tools.Tools) != 1 {
		t.Fatalf("tools/list: %+v, %v", tools, err)
	}
	schemas, _ := json.Marshal([]any{tools.Tools[0].InputSchema, tools.Tools[0].OutputSchema})
	for _, want := range []string{`"required":["command"]`, `"additionalProperties":false`, `"policy_events":{`,
		`"required":["stdout","stderr","exit_code","timed_out","stdout_truncated","stderr_truncated","policy_events","sandbox_id"]`} {
		if !strings.Contains(string(schemas), want) {
			t.Errorf("schemas lack %s:\n%s", want, schemas)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolName, Arguments: map[string]any{"command": "echo hello"}})
	if err != nil || res.IsError {
		t.Fatalf("call: %+v, %v", res, err)
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if !strings.Contains(string(sc), `"stdout":"hello\n"`) || !strings.Contains(string(sc), `"policy_events":[]`) {
		t.Errorf("structured content %s", sc)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: agent.ToolName, Arguments: map[string]any{"command": "x", "cwd": "/etc"}})
	if err != nil || !res.IsError || !strings.Contains(res.Content[0].(*mcp.TextContent).Text, "invalid input: cwd \"/etc\" resolves to /etc, outside /home/u/proj") {
		t.Errorf("cwd outside the workspace: %+v, %v", res, err)
	}
}

// BenchmarkMCPProtocol prices the MCP layer alone: client and server in
// one process over the SDK's in-memory transport, an executor that runs
// nothing (small: no output; 512KiB: that much stdout).
func BenchmarkMCPProtocol(b *testing.B) {
	for _, c := range []struct {
		name string
		out  []byte
	}{{"small", nil}, {"512KiB", []byte(strings.Repeat("0123456789abcde\n", 32<<10))}} {
		b.Run(c.name, func(b *testing.B) {
			ctx := context.Background()
			cs := connect(b, writeExec{out: c.out})
			args := &mcp.CallToolParams{Name: agent.ToolName, Arguments: map[string]any{"command": "/bin/true"}}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if res, err := cs.CallTool(ctx, args); err != nil || res.IsError {
					b.Fatal(res, err)
				}
			}
		})
	}
}

// BenchmarkMCPServerRaw prices the server's side of a run_command call: a
// client that writes the request line and reads the answer line over real
// pipes (as over stdio), against the tool alone (its output pipes and
// readers), both with an executor that runs nothing. raw - tool is what
// the SDK's server costs per call.
func BenchmarkMCPServerRaw(b *testing.B) {
	ctx := context.Background()
	tool := &agent.Tool{Exec: writeExec{}}
	b.Run("tool", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := tool.RunCommand(ctx, agent.RunCommandInput{Command: "/bin/true"}); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, tr := range []string{"raw", "line"} {
		b.Run(tr, func(b *testing.B) { benchServerRaw(b, tool, tr == "line") })
	}
}

// benchServerRaw is BenchmarkMCPServerRaw over the SDK's IOTransport or
// (line) hutch's lineTransport.
func benchServerRaw(b *testing.B, tool *agent.Tool, line bool) {
	ctx := context.Background()
	{
		lg := slog.New(slog.DiscardHandler)
		srv, err := newMCPServer(ctx, tool, policy.Default(), agent.DefaultMaxOutput, lg, lg)
		if err != nil {
			b.Fatal(err)
		}
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		defer inW.Close()
		var tr mcp.Transport = &mcp.IOTransport{Reader: inR, Writer: outW}
		if line {
			tr = &lineTransport{r: inR, w: outW}
		}
		ss, err := srv.Connect(ctx, tr, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer ss.Close()
		lines := bufio.NewReader(outR)
		call := func(req string) {
			if _, err := inW.WriteString(req + "\n"); err != nil {
				b.Fatal(err)
			}
			if !strings.Contains(req, `"id"`) {
				return
			}
			line, err := lines.ReadBytes('\n')
			if err != nil || bytes.Contains(line, []byte(`"error"`)) || bytes.Contains(line, []byte(`"isError":true`)) {
				b.Fatalf("%s: %s, %v", req, line, err)
			}
		}
		call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"0"}}}`)
		call(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			call(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"/bin/true"}}}`)
		}
	}
}

// nulExec writes n NUL bytes to stdout and to stderr.
type nulExec struct{ n int }

func (e nulExec) Run(ctx context.Context, req agent.ExecRequest) (agent.ExecResult, error) {
	done := make(chan struct{})
	go func() { defer close(done); req.Stderr.Write(make([]byte, e.n)) }()
	req.Stdout.Write(make([]byte, e.n))
	<-done
	return agent.ExecResult{SandboxID: "x"}, nil
}

// A result's size on the wire is capped after JSON escaping, and the output
// goes once: 200 MB of NUL on stdout and stderr made a 25 MB response (six
// bytes a NUL, text and structured content each with all of it).
func TestMCPResponseSize(t *testing.T) {
	const max = 1 << 20
	for _, version := range []string{"2025-06-18", "2025-03-26"} {
		t.Run(version, func(t *testing.T) {
			ctx := context.Background()
			lg := slog.New(slog.DiscardHandler)
			srv, err := newMCPServer(ctx, &agent.Tool{Exec: nulExec{n: 16 << 20}, MaxOutput: max}, policy.Default(), max, lg, lg)
			if err != nil {
				t.Fatal(err)
			}
			inR, inW, _ := os.Pipe()
			outR, outW, _ := os.Pipe()
			defer inW.Close()
			ss, err := srv.Connect(ctx, &lineTransport{r: inR, w: outW}, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer ss.Close()
			lines := bufio.NewReaderSize(outR, 1<<20)
			call := func(req string) []byte {
				if _, err := inW.WriteString(req + "\n"); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(req, `"id"`) {
					return nil
				}
				line, err := lines.ReadBytes('\n')
				if err != nil {
					t.Fatal(err)
				}
				return line
			}
			call(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"` + version + `","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}`)
			call(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)
			line := call(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"x"}}}`)
			var resp struct {
				Result struct {
					Content []struct {
						Text string `json:"text"`
					} `json:"content"`
					Structured *agent.RunCommandResult `json:"structuredContent"`
				} `json:"result"`
			}
			if err := json.Unmarshal(line, &resp); err != nil || len(resp.Result.Content) != 1 {
				t.Fatalf("response of %d bytes: %v", len(line), err)
			}
			text := resp.Result.Content[0].Text
			if limit := 2*max + 64<<10; len(line) > limit {
				t.Errorf("response of %d bytes, more than twice the cap and a little (%d)", len(line), limit)
			}
			if version < "2025-06-18" {
				// No structured content in this protocol: the text has it all.
				if resp.Result.Structured != nil || !strings.Contains(text, "--- stdout ---\n\x00\x00") || !strings.Contains(text, "bytes dropped]") {
					t.Errorf("protocol %s: structured content %v, text %.80q...", version, resp.Result.Structured != nil, text)
				}
				return
			}
			s := resp.Result.Structured
			if s == nil || !s.StdoutTruncated || !strings.HasSuffix(s.Stdout, "bytes dropped]\n") {
				t.Fatalf("no structured content with the truncated output")
			}
			if !strings.Contains(text, "--- stdout (the last ") || len(text) > 3*mcpTextTail {
				t.Errorf("text of %d bytes: %.120q; want the output's tail only", len(text), text)
			}
		})
	}
}
