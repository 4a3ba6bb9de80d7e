//go:build !mcpimage

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// mcpProgressEvery is how often a running call reports progress to a
// client that asked for it (a progress token), so that clients which reset
// their request timeout on progress keep long commands alive.
const mcpProgressEvery = 10 * time.Second

// mcpServerStatus says how `hutch mcp` runs, for hutch doctor.
func mcpServerStatus() string {
	return "linked into this binary (built without the mcpimage tag)"
}

// serveMCP is the action of `hutch mcp` in a binary that links the MCP
// server in (built without the mcpimage tag; see mcp_image.go for the
// other kind).
func serveMCP(c *cli.Context) error {
	if c.NArg() > 0 {
		return &exitError{hutch.ExitSetup, "hutch: mcp takes no arguments (the agent sends the commands); see hutch mcp --help"}
	}
	if c.IsSet("listen") {
		return serveMCPHTTP(c)
	}
	for _, f := range []string{"token-file", "tls-cert", "tls-key", "allow-plain-http", "max-sessions", "idle-timeout"} {
		if c.IsSet(f) {
			return &exitError{hutch.ExitSetup, "hutch: mcp: --" + f + " is a setting of the HTTP server: add --listen ADDR, or drop it to serve on stdio"}
		}
	}
	oneProcessor()
	level := slog.LevelInfo
	if c.Bool("debug") {
		level = slog.LevelDebug
	}
	// Standard output is the protocol: every log line goes to stderr,
	// written after the response of the call that made it.
	later := newLaterLog(laterLogWait)
	defer later.Close()
	logger := slog.New(later.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})))
	sandboxLogger := logger
	if !c.Bool("debug") {
		sandboxLogger = slog.New(later.Handler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}

	p, ws, maxOutput, err := mcpSettings(c)
	if err != nil {
		return err
	}
	secLog, closeLog, err := openSecurityLog(c.String("security-log"))
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	defer closeLog()

	// The session lives as long as the server: a warm sandbox started
	// here, reused by every call (fresh: true gets a one-off sandbox), and
	// torn down by tool.Close below.
	fresh := &agent.HutchExecutor{
		Policy:      p,
		SecurityLog: secLog,
		HostEnv:     os.Environ(),
		ExtraEnv:    c.StringSlice("env"),
		Logger:      sandboxLogger,
	}
	exec, err := agent.NewSessionExecutor(c.Context, fresh)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	tool := &agent.Tool{Exec: exec, MaxOutput: maxOutput, MaxTimeout: p.Resources.Timeout.D(), Workspace: p.Filesystem.PathsFor(ws, "")}
	defer func() {
		if err := tool.Close(); err != nil {
			logger.Warn("hutch mcp: closing the executor", "err", err)
		}
	}()

	sdkLogger := sandboxLogger // the SDK's own chatter only with --debug
	// A signal stops the server and cancels the calls in flight: their
	// sandboxes are killed (the SDK alone would wait for them to finish).
	ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	server, err := newMCPServer(ctx, tool, p, maxOutput, logger, sdkLogger)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: mcp: " + err.Error()}
	}
	logger.Info("hutch mcp: serving run_command on stdio", "workspace", ws, "network", p.Network.Mode,
		"timeout", policy.Duration(p.Resources.Timeout.D()).String(), "max_output", maxOutput)
	stdin, restoreStdin, err := pollableStdin()
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: mcp: " + err.Error()}
	}
	defer restoreStdin()
	err = server.Run(ctx, &lineTransport{r: stdin, w: os.Stdout, written: later.Release})
	switch {
	case err == nil, errors.Is(err, context.Canceled), ctx.Err() != nil:
		logger.Info("hutch mcp: stopped")
		return nil
	default:
		return &exitError{1, "hutch: mcp: " + err.Error()}
	}
}

// mcpSettings are the policy, the workspace directory and the output cap
// that the flags of `hutch mcp` give, or an exitError naming the flag.
func mcpSettings(c *cli.Context) (p *policy.Policy, ws string, maxOutput int, err error) {
	p, err = effectivePolicy(c, policy.WorkspaceAtHost)
	if err != nil {
		return nil, "", 0, &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if err := ensureImage(c.Context, p); err != nil {
		return nil, "", 0, &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if err := envFlag(c); err != nil {
		return nil, "", 0, &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	ws, err = hutch.ResolveWorkspace(p.Filesystem.Workspace)
	if err != nil {
		return nil, "", 0, &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	maxOutput = agent.DefaultMaxOutput
	if v := c.String("max-output"); v != "" {
		s, err := policy.ParseSize(v)
		if err != nil || s <= 0 || s > 1<<30 {
			return nil, "", 0, &exitError{hutch.ExitSetup, fmt.Sprintf("hutch: --max-output %q: want a size from 1B to 1GiB, e.g. 256KiB", v)}
		}
		maxOutput = int(s)
	}
	return p, ws, maxOutput, nil
}

// newMCPServer makes the server with the run_command tool over tool. Calls
// are cancelled when the request is (the client cancelled it or went away)
// and when lifetime ends.
//
// The tool is registered with the SDK's untyped AddTool, with the schemas
// the typed mcp.AddTool would infer, and its arguments are decoded here:
// the typed path unmarshals and validates the arguments against the schema
// (each unmarshal allocating a 32 KiB buffer), then marshals, re-parses and
// validates the result against the output schema, whose cost grew with the output (a megabyte of stdout was parsed
// twice more). Decoding strictly (unknown fields, wrong types) and
// Tool.Validate check the same things, with messages that name the field.
func newMCPServer(lifetime context.Context, tool *agent.Tool, p *policy.Policy, maxOutput int, logger, sdkLogger *slog.Logger) (*mcp.Server, error) {
	return newMCPServerWith(lifetime, tool, func(*mcp.ServerSession) (*agent.Tool, error) { return tool, nil }, p, maxOutput, logger, sdkLogger, nil)
}

// toolLookup returns the tool of the MCP session ss: the one tool of a
// stdio server, the session's own sandbox over HTTP.
type toolLookup func(ss *mcp.ServerSession) (*agent.Tool, error)

// newMCPServerWith is newMCPServer with the tool of each call found by
// toolOf (tool is the model every session's tool follows: it describes
// them), and opts, if set, for the server's options beyond its
// instructions and logger.
func newMCPServerWith(lifetime context.Context, tool *agent.Tool, toolOf toolLookup, p *policy.Policy, maxOutput int, logger, sdkLogger *slog.Logger, opts *mcp.ServerOptions) (*mcp.Server, error) {
	if opts == nil {
		opts = &mcp.ServerOptions{}
	}
	opts.Instructions = "hutch runs shell commands in a rootless sandbox with the project at " + tool.Workspace.Mount + ". Use run_command for every command; read policy_events in each result: blocked actions are policy decisions to report to the user, not errors to retry."
	opts.Logger = sdkLogger
	server := mcp.NewServer(&mcp.Implementation{Name: "hutch", Title: "hutch sandbox", Version: version}, opts)
	inSchema, err := jsonschema.For[agent.RunCommandInput](&jsonschema.ForOptions{})
	if err != nil {
		return nil, fmt.Errorf("run_command input schema: %w", err)
	}
	outSchema, err := jsonschema.For[agent.RunCommandResult](&jsonschema.ForOptions{})
	if err != nil {
		return nil, fmt.Errorf("run_command output schema: %w", err)
	}
	desc := agent.Describe(p, agent.DescribeOptions{Workspace: tool.Workspace, MaxOutput: maxOutput, Session: isSession(tool)})
	if _, ok := tool.Exec.(agent.Backgrounder); ok {
		desc += "\n\nA command started with background: true is the exception: it runs on in the session's background across calls (a dev server, a watcher) until it exits, is stopped, or the server ends; the background tool reads its output and stops it."
	}
	server.AddTool(&mcp.Tool{
		Name:         agent.ToolName,
		Title:        "Run a command in the hutch sandbox",
		Description:  desc,
		Annotations:  &mcp.ToolAnnotations{Title: "Run a command in the hutch sandbox"},
		InputSchema:  inSchema,
		OutputSchema: outSchema,
	}, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		in, err := decodeRunCommandInput(req.Params.Arguments)
		if err != nil {
			logger.Info("run_command: invalid input", "err", err)
			return toolError(fmt.Errorf("invalid input: %w", err)), nil
		}
		tool, err := toolOf(req.Session)
		if err != nil {
			return toolError(fmt.Errorf("hutch: %w", err)), nil
		}
		logger := logger
		if req.Session != nil && req.Session.ID() != "" { // over HTTP: which session
			logger = logger.With("session", req.Session.ID())
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(lifetime, cancel)()
		start := time.Now()
		stopProgress := reportProgress(ctx, req, start, logger)
		res, err := tool.RunCommand(ctx, in)
		stopProgress()
		if err != nil {
			var ie *agent.InputError
			if errors.As(err, &ie) {
				logger.Info("run_command: invalid input", "err", err)
				return toolError(fmt.Errorf("invalid input: %w", err)), nil
			}
			logger.Error("run_command: sandbox failure", "command", in.Command, "err", err)
			return toolError(fmt.Errorf("hutch: %w", err)), nil
		}
		logger.Info("run_command", "command", in.Command, "exit_code", res.ExitCode, "timed_out", res.TimedOut,
			"events", len(res.Events), "sandbox", res.SandboxID, "duration", time.Since(start).Round(time.Millisecond).String())
		if res.Events == nil {
			res.Events = []string{} // an array, as the output schema says
		}
		return resultContent(req, res)
	})
	if _, ok := tool.Exec.(agent.Backgrounder); ok {
		if err := addBackgroundTool(server, toolOf, p, logger); err != nil {
			return nil, err
		}
	}
	return server, nil
}

// mcpTextTail is how much of the end of stdout and of stderr the text
// content repeats when the structured content has all of it.
const mcpTextTail = 4 << 10

// isSession reports whether tool's calls share one sandbox.
func isSession(tool *agent.Tool) bool {
	_, ok := tool.Exec.(*agent.SessionExecutor)
	return ok
}

// resultContent is a call's result as the client can take it, with the
// output once (the tool caps it as JSON escapes it, so a response is at
// most about twice the cap): for a client of protocol 2025-06-18 or later,
// which knows structured content, the whole result is structured content
// and the text is the compact form with the last mcpTextTail bytes of each
// stream; for an older client, which reads only text, the text has it all.
func resultContent(req *mcp.CallToolRequest, res agent.RunCommandResult) (*mcp.CallToolResult, error) {
	if !knowsStructuredContent(req) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: agent.FormatText(res)}}}, nil
	}
	structured, err := json.Marshal(res)
	if err != nil {
		return nil, fmt.Errorf("run_command: encode the result: %w", err)
	}
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: agent.FormatTextTail(res, mcpTextTail)}},
		StructuredContent: json.RawMessage(structured),
	}, nil
}

// knowsStructuredContent reports whether the client negotiated a protocol
// version with structured tool results (2025-06-18 and later; versions
// are dates, so they compare as strings). Without a session, it does.
func knowsStructuredContent(req *mcp.CallToolRequest) bool {
	if req == nil || req.Session == nil {
		return true
	}
	ip := req.Session.InitializeParams()
	return ip == nil || ip.ProtocolVersion == "" || ip.ProtocolVersion >= "2025-06-18"
}

// decodeRunCommandInput decodes run_command's arguments strictly: a JSON
// object with only the fields of agent.RunCommandInput, each of its type.
// Plain arguments (strings without escapes, an integer, a boolean, each
// once) are read directly; anything else goes through encoding/json.
func decodeRunCommandInput(raw json.RawMessage) (agent.RunCommandInput, error) {
	var in agent.RunCommandInput
	if validObject(raw) && objectMembers(raw, func(key string, v []byte) bool {
		var ok bool
		switch key {
		case "command":
			in.Command, ok = plainString(v)
		case "cwd":
			in.Cwd, ok = plainString(v)
		case "timeout_seconds":
			var n int64
			n, ok = plainInt(v)
			in.TimeoutSeconds = int(n)
			ok = ok && int64(in.TimeoutSeconds) == n
		case "fresh":
			in.Fresh, ok = plainBool(v)
		case "background":
			in.Background, ok = plainBool(v)
		}
		return ok
	}) {
		return in, nil
	}
	return decodeRunCommandInputJSON(raw)
}

// decodeRunCommandInputJSON is decodeRunCommandInput through encoding/json.
func decodeRunCommandInputJSON(raw json.RawMessage) (agent.RunCommandInput, error) {
	var in agent.RunCommandInput
	if len(bytes.TrimSpace(raw)) == 0 || bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		return in, errors.New("arguments missing: pass an object with \"command\" (a shell command line)")
	}
	return in, decodeArgs(raw, &in, "run_command takes command, cwd, timeout_seconds, fresh and background", `an object with "command"`)
}

// decodeArgs decodes a tool's arguments into v strictly (only its fields,
// each of its type, one JSON value); an error names the argument, with
// takes (what the tool takes) after an unknown one and want (the shape of
// the arguments) after a value of another shape.
func decodeArgs(raw json.RawMessage, v any, takes, want string) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &te) && te.Field != "":
			return fmt.Errorf("argument %q: want %s, got JSON %s", te.Field, jsonKind(te.Type), te.Value)
		case errors.As(err, &te):
			return fmt.Errorf("arguments: want %s, got JSON %s", want, te.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return fmt.Errorf("unknown argument %s: %s", strings.TrimPrefix(err.Error(), "json: unknown field "), takes)
		}
		return fmt.Errorf("arguments: %w", err)
	}
	if dec.More() {
		return errors.New("arguments: more than one JSON value")
	}
	return nil
}

// jsonKind names a Go field type as JSON Schema would.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer"
	}
	return t.String()
}

// toolError is a call's failure as the tool's result (isError), as the MCP
// specification asks for errors the model should see.
func toolError(err error) *mcp.CallToolResult {
	var r mcp.CallToolResult
	r.SetError(err)
	return &r
}

// reportProgress sends a progress notification every mcpProgressEvery
// while a call runs, when the client asked for progress; the returned
// function stops it.
func reportProgress(ctx context.Context, req *mcp.CallToolRequest, start time.Time, logger *slog.Logger) func() {
	if req == nil || req.Params == nil || req.Session == nil {
		return func() {}
	}
	token := req.Params.GetProgressToken()
	if token == nil {
		return func() {}
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(mcpProgressEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				elapsed := now.Sub(start).Round(time.Second)
				err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: token,
					Progress:      elapsed.Seconds(),
					Message:       "running for " + elapsed.String(),
				})
				if err != nil {
					logger.Debug("run_command: progress notification", "err", err)
				}
			}
		}
	}()
	return func() { close(done); <-finished }
}

// openSecurityLog opens the security log as `hutch run` does: path, or
// the default location; none (with a warning) when there is no default.
func openSecurityLog(path string) (*seclog.Log, func(), error) {
	if path == "" {
		path = seclog.DefaultPath()
	}
	if path == "" {
		fmt.Fprintln(os.Stderr, "hutch: warning: no security log (neither XDG_STATE_HOME nor HOME is set); pass --security-log FILE")
		return nil, func() {}, nil
	}
	l, err := seclog.Open(path)
	if err != nil {
		return nil, nil, err
	}
	return l, func() { l.Close() }, nil
}
