// Package agent is the agent-facing face of hutch: one tool, run_command,
// that runs a shell command line in a sandbox and returns what an agent
// needs to act on the outcome — the command's output (capped), its exit
// status, whether the timeout ended it, and the policy events it caused
// ("hutch: network blocked by policy: ...").
//
// The package does not depend on any agent protocol; cmd/hutch's `mcp`
// subcommand serves the Tool over MCP, and other programs can embed it:
//
//	t := agent.New(p, secLog) // p: a resolved, validated *policy.Policy
//	res, err := t.RunCommand(ctx, agent.RunCommandInput{Command: "go test ./..."})
//
// Where the command runs is behind the Executor interface. HutchExecutor
// makes a fresh sandbox per call (hutch.Run); a session executor (a warm
// sandbox reused across calls) can replace it without changing the tool.
package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/internal/outpipe"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// ToolName is the name under which the tool is offered to agents.
const ToolName = "run_command"

// DefaultMaxOutput is the default cap of the stdout and of the stderr kept
// per call (each stream separately), in bytes of their JSON encoding (a
// NUL is six there). The rest is read and dropped, so the command never
// blocks on a full pipe.
const DefaultMaxOutput = 1 << 20

// DefaultDrainGrace is how long RunCommand keeps reading output after the
// executor reports the command finished. Executors end every process of
// the command before they return, so the streams end at once; the grace is
// a safety net against a writer that survives, which would otherwise hang
// the call.
const DefaultDrainGrace = 2 * time.Second

// maxTimeoutSeconds bounds timeout_seconds when no policy limit applies
// (a year), so that the duration cannot overflow.
const maxTimeoutSeconds = 365 * 24 * 3600

// RunCommandInput is one call of run_command.
type RunCommandInput struct {
	Command        string `json:"command" jsonschema:"Shell command line to run with /bin/sh -c inside the sandbox, e.g. 'go test ./... 2>&1 | tail -50'. Standard input is empty (/dev/null)."`
	Cwd            string `json:"cwd,omitempty" jsonschema:"Working directory: relative to the workspace (e.g. 'src/app'), or an absolute path inside it (the tool description says where the workspace is). Default: the workspace."`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty" jsonschema:"Wall-clock limit for this command in seconds; 0 or absent means the policy's timeout, which is also the largest value accepted. When it expires every process of the command is killed and exit_code is 124."`
	Fresh          bool   `json:"fresh,omitempty" jsonschema:"Run in a new one-off sandbox even when a session sandbox is kept across calls (/tmp and HOME are then not shared with other calls). Use it for suspicious operations."`
	Background     bool   `json:"background,omitempty" jsonschema:"Start the command in the background of the session sandbox (a dev server, a watcher) and return at once with its background_id; it keeps running across calls until it exits, is stopped with the background tool (which also reads its output), or the server ends. No time limit unless timeout_seconds is given. Not with fresh."`
}

// RunCommandResult is the outcome of one call.
type RunCommandResult struct {
	Stdout          string   `json:"stdout" jsonschema:"The command's standard output (UTF-8; invalid bytes replaced), at most the server's output cap; see stdout_truncated."`
	Stderr          string   `json:"stderr" jsonschema:"The command's standard error, capped like stdout; see stderr_truncated."`
	ExitCode        int      `json:"exit_code" jsonschema:"Exit status: the command's own; 128+N when killed by signal N; 124 timed out; 125 sandbox error or cancelled; 126 cannot execute; 127 command not found."`
	TimedOut        bool     `json:"timed_out" jsonschema:"True when the wall-clock timeout ended the command (exit_code is then 124)."`
	StdoutTruncated bool     `json:"stdout_truncated" jsonschema:"True when stdout exceeded the cap; the kept part ends with a line '[hutch: output truncated: N bytes dropped]'."`
	StderrTruncated bool     `json:"stderr_truncated" jsonschema:"True when stderr exceeded the cap (same marker as stdout)."`
	Events          []string `json:"policy_events" jsonschema:"What the sandbox did to this command: 'hutch: ...' lines naming each denial (e.g. 'hutch: network blocked by policy: destination host:443 not allowlisted (1 attempt)'), a timeout or a command that could not be started. Empty when nothing was blocked. Blocked actions are policy decisions: do not retry or work around them; ask the user."`
	SandboxID       string   `json:"sandbox_id" jsonschema:"Identifier of the sandbox in hutch's security log."`
	Image           string   `json:"image,omitempty" jsonschema:"The manifest digest of the image the sandbox's root filesystem is made of, when it runs on an image."`
	BackgroundID    string   `json:"background_id,omitempty" jsonschema:"Set when the command was started with background: its id for the background tool, which lists it, reads its output and stops it. stdout and stderr are then empty and exit_code 0: the command runs on."`
	Isolation       string   `json:"isolation,omitempty" jsonschema:"Set when the sandbox was made without namespaces ('landlock': hosts without user namespaces); isolation_limits then says what it does not give."`
	IsolationLimits []string `json:"isolation_limits,omitempty" jsonschema:"What this sandbox's isolation does not give compared with hutch's namespaces (e.g. host files denied rather than hidden, other processes visible, no unix sockets): expect these failures, and do not try to use what they describe."`

	// Review mode only (its own block: the tags above keep their alignment).
	PendingChanges *hutch.ReviewSummary `json:"pending_changes,omitempty" jsonschema:"Review mode only: the workspace is not written; what the sandbox changed so far waits in a change set (id, counts and the first paths) for the user to review and apply. Applying is the user's step: do not try to apply or copy the changes yourself."`
}

// ExecRequest is one command for an Executor. Cwd is validated and
// absolute when the Tool knows its workspace (Tool.Workspace), else as the
// caller gave it, for the sandbox to check; Stdout and Stderr are the write ends of pipes that the
// executor hands to the command and must not close.
type ExecRequest struct {
	// Argv is the command, e.g. ["/bin/sh", "-c", "make test"].
	Argv []string
	// Cwd is the working directory inside the sandbox.
	Cwd string
	// Timeout is the wall-clock limit; 0 means the policy's.
	Timeout time.Duration
	// Fresh asks for a one-off sandbox even when the executor keeps one.
	Fresh bool
	// Stdout and Stderr receive the command's output.
	Stdout, Stderr *os.File
}

// ExecResult is what an Executor reports about a finished command.
type ExecResult struct {
	// ExitCode is the command's status or one of hutch's Exit* codes.
	ExitCode int
	// TimedOut is true when the timeout ended the command.
	TimedOut bool
	// Events are the "hutch: ..." lines this command caused.
	Events []string
	// SandboxID names the sandbox in the security log.
	SandboxID string
	// Isolation and IsolationLimits: see hutch.Result (empty for
	// namespaces).
	Isolation       string
	IsolationLimits []string
	// Review is what the sandbox's change set holds (review mode).
	Review *hutch.ReviewSummary
	// Image is the digest of the image the sandbox's root is made of.
	Image string
}

// Executor runs commands in a sandbox. Run returns an error only when the
// command could not be run at all (the sandbox could not be made); a
// command that fails, times out or is denied something is a result.
// Implementations must be safe for concurrent use. An Executor that holds
// resources across calls (a session) also implements io.Closer; Tool.Close
// calls it.
type Executor interface {
	Run(ctx context.Context, req ExecRequest) (ExecResult, error)
}

// Tool is the run_command tool. Its zero MaxOutput means DefaultMaxOutput.
type Tool struct {
	// Exec runs the commands.
	Exec Executor
	// MaxOutput caps stdout and stderr kept per call (each separately), in
	// bytes of their JSON encoding; 0 means DefaultMaxOutput.
	MaxOutput int
	// MaxTimeout is the largest timeout_seconds accepted, normally the
	// policy's resources.timeout; 0 means no limit is checked here.
	MaxTimeout time.Duration
	// DrainGrace bounds the reading of output after the command ended;
	// 0 means DefaultDrainGrace.
	DrainGrace time.Duration
	// Workspace is where the executor's workspace is, on the host and
	// inside: a call's cwd is checked against it and made absolute (a host
	// path in the workspace is the same directory). Zero: the cwd is passed
	// on as given, for the sandbox to check.
	Workspace policy.WorkspacePaths

	// spare is the output capture made ahead of the next call.
	spareMu sync.Mutex
	spare   *outputCapture
	closed  bool
}

// New returns a Tool that runs every command in a fresh sandbox under p
// (resolved and validated, as policy.Load and the CLI flags produce it),
// recording security events in log (nil discards them), and that accepts
// timeouts up to p's resources.timeout.
func New(p *policy.Policy, log *seclog.Log) *Tool {
	if p == nil {
		p = policy.Default()
	}
	t := &Tool{
		Exec:       &HutchExecutor{Policy: p, SecurityLog: log},
		MaxTimeout: p.Resources.Timeout.D(),
	}
	if host, err := hutch.ResolveWorkspace(p.Filesystem.Workspace); err == nil {
		// hutch.Run's default: the workspace at its host path.
		t.Workspace = p.Filesystem.PathsFor(host, policy.WorkspaceAtHost)
	}
	return t
}

// Close releases what the executor holds across calls (a session's
// sandbox) and the output capture made ahead of the next call.
func (t *Tool) Close() error {
	t.spareMu.Lock()
	spare := t.spare
	t.spare, t.closed = nil, true
	t.spareMu.Unlock()
	if spare != nil {
		spare.discard()
	}
	if c, ok := t.Exec.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// InputError is a problem with the caller's input (RunCommandInput); the
// message says what to change. Other errors from RunCommand mean the
// sandbox could not run the command.
type InputError struct{ Msg string }

func (e *InputError) Error() string { return e.Msg }

func inputErrorf(format string, a ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, a...)}
}

// Validate checks in and returns the working directory inside the sandbox
// and the timeout (0 = the policy's) it asks for.
func (t *Tool) Validate(in RunCommandInput) (cwd string, timeout time.Duration, err error) {
	if strings.TrimSpace(in.Command) == "" {
		return "", 0, inputErrorf("command is empty: pass a shell command line, e.g. \"ls -la\"")
	}
	if strings.ContainsRune(in.Command, 0) {
		return "", 0, inputErrorf("command contains a NUL byte")
	}
	if t.Workspace.Mount == "" {
		if strings.ContainsRune(in.Cwd, 0) {
			return "", 0, inputErrorf("cwd contains a NUL byte")
		}
		cwd = in.Cwd
	} else if cwd, err = t.ResolveCwd(in.Cwd); err != nil {
		return "", 0, err
	}
	if in.TimeoutSeconds < 0 {
		return "", 0, inputErrorf("timeout_seconds %d: must be positive (or 0 for the policy's timeout)", in.TimeoutSeconds)
	}
	if in.TimeoutSeconds > 0 {
		limit := int64(t.MaxTimeout / time.Second)
		if t.MaxTimeout > 0 && int64(in.TimeoutSeconds) > limit {
			return "", 0, inputErrorf("timeout_seconds %d exceeds the policy's limit of %d seconds (resources.timeout %s); pass at most %d, or 0 for the limit itself",
				in.TimeoutSeconds, limit, policy.Duration(t.MaxTimeout), limit)
		}
		if int64(in.TimeoutSeconds) > maxTimeoutSeconds {
			return "", 0, inputErrorf("timeout_seconds %d: too large (at most %d)", in.TimeoutSeconds, maxTimeoutSeconds)
		}
		timeout = time.Duration(in.TimeoutSeconds) * time.Second
	}
	return cwd, timeout, nil
}

// ResolveCwd turns cwd (relative to the workspace, or absolute) into a
// clean absolute path inside the sandbox, and rejects one outside the
// workspace (policy.WorkspacePaths.Cwd) with an *InputError.
func (t *Tool) ResolveCwd(cwd string) (string, error) {
	p, err := t.Workspace.Cwd(cwd)
	if err != nil {
		return "", &InputError{Msg: err.Error()}
	}
	return p, nil
}

// RunCommand runs in.Command with /bin/sh -c and returns its output and
// outcome. A command that fails, times out or is blocked by the policy is a
// result (see ExitCode, TimedOut, Events); an error means the input was
// invalid (*InputError) or the sandbox could not run the command.
func (t *Tool) RunCommand(ctx context.Context, in RunCommandInput) (RunCommandResult, error) {
	cwd, timeout, err := t.Validate(in)
	if err != nil {
		return RunCommandResult{}, err
	}
	if in.Background {
		return t.startBackground(in, cwd, timeout)
	}
	return t.RunArgv(ctx, []string{"/bin/sh", "-c", in.Command}, cwd, timeout, in.Fresh)
}

// RunArgv runs argv (no shell) with validated cwd and timeout, capturing
// its output like RunCommand: the result object of `hutch run --json`.
func (t *Tool) RunArgv(ctx context.Context, argv []string, cwd string, timeout time.Duration, fresh bool) (RunCommandResult, error) {
	if t.Exec == nil {
		return RunCommandResult{}, errors.New("agent: Tool has no Executor")
	}
	max := t.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	grace := t.DrainGrace
	if grace <= 0 {
		grace = DefaultDrainGrace
	}

	c, err := t.takeCapture(max)
	if err != nil {
		return RunCommandResult{}, err
	}
	res, runErr := t.Exec.Run(ctx, ExecRequest{
		Argv:    argv,
		Cwd:     cwd,
		Timeout: timeout,
		Fresh:   fresh,
		Stdout:  c.outW,
		Stderr:  c.errW,
	})
	cutOff := c.finish(grace)
	stdout, stderr := &c.stdout, &c.stderr
	// The next call's capture, made once this call's answer is out: with
	// the MCP server on one processor the goroutine runs when this one is
	// done.
	go t.refill(max)

	if runErr != nil {
		msg := runErr.Error()
		if s := strings.TrimSpace(stderr.text()); s != "" {
			msg += "\n" + s
		}
		return RunCommandResult{}, errors.New(msg)
	}
	r := RunCommandResult{
		Stdout:          stdout.text(),
		Stderr:          stderr.text(),
		ExitCode:        res.ExitCode,
		TimedOut:        res.TimedOut,
		StdoutTruncated: stdout.dropped > 0,
		StderrTruncated: stderr.dropped > 0,
		Events:          append([]string{}, res.Events...),
		SandboxID:       res.SandboxID,
		Isolation:       res.Isolation,
		IsolationLimits: res.IsolationLimits,
		PendingChanges:  res.Review,
		Image:           res.Image,
	}
	if cutOff {
		r.Events = append(r.Events, fmt.Sprintf("hutch: stopped reading output %s after the command ended: a background process still holds stdout or stderr open", grace))
	}
	return r, nil
}

// outputCapture is a call's stdout and stderr: two pipes whose write ends go
// to the command, each read to its end by a goroutine of its own.
type outputCapture struct {
	outR, outW, errR, errW *os.File
	stdout, stderr         capture
	max                    int
	drained                chan struct{}
}

// newOutputCapture makes the pipes and starts their readers, which keep at
// most max bytes of each.
func newOutputCapture(max int) (*outputCapture, error) {
	c := &outputCapture{max: max, drained: make(chan struct{})}
	var err error
	if c.outR, c.outW, err = outpipe.New(); err != nil {
		return nil, fmt.Errorf("create the stdout pipe: %w", err)
	}
	if c.errR, c.errW, err = outpipe.New(); err != nil {
		c.outR.Close()
		c.outW.Close()
		return nil, fmt.Errorf("create the stderr pipe: %w", err)
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.stdout.readAll(c.outR, max) }()
	go func() { defer wg.Done(); c.stderr.readAll(c.errR, max) }()
	go func() { wg.Wait(); close(c.drained) }()
	return c, nil
}

// finish closes the write ends (the streams end when the sandbox's copies
// do) and waits for the readers, at most grace; cutOff says it stopped
// them (a background process still held a write end).
func (c *outputCapture) finish(grace time.Duration) (cutOff bool) {
	c.outW.Close()
	c.errW.Close()
	timer := time.NewTimer(grace)
	select {
	case <-c.drained:
	case <-timer.C:
		cutOff = true
	}
	timer.Stop()
	// Closing the read ends ends readers still blocked (cut off).
	c.outR.Close()
	c.errR.Close()
	<-c.drained
	return cutOff
}

// discard ends a capture that no command used.
func (c *outputCapture) discard() { c.finish(0) }

// takeCapture returns the capture made ahead for a call, or makes one.
// Making the pipes and registering their read ends with the poller is
// kept off each call's path; a capture made ahead has never been
// given to a sandbox, so nothing of an earlier call can write into it.
func (t *Tool) takeCapture(max int) (*outputCapture, error) {
	t.spareMu.Lock()
	c := t.spare
	t.spare = nil
	t.spareMu.Unlock()
	if c != nil && c.max == max {
		return c, nil
	}
	if c != nil {
		c.discard()
	}
	return newOutputCapture(max)
}

// refill makes the capture for the next call when there is none.
func (t *Tool) refill(max int) {
	t.spareMu.Lock()
	busy := t.spare != nil || t.closed
	t.spareMu.Unlock()
	if busy {
		return
	}
	c, err := newOutputCapture(max)
	if err != nil {
		return // the next call makes its own, and reports why it cannot
	}
	t.spareMu.Lock()
	if t.spare == nil && !t.closed {
		t.spare, c = c, nil
	}
	t.spareMu.Unlock()
	if c != nil {
		c.discard()
	}
}

// TruncationMarker is the line that ends kept output when the rest was
// dropped.
func TruncationMarker(dropped int64) string {
	return fmt.Sprintf("[hutch: output truncated: %d bytes dropped]", dropped)
}

// capture keeps the first max bytes of a stream and counts the rest.
type capture struct {
	buf     []byte
	dropped int64
	max     int
}

// chunks recycles readAll's read buffers: two 64 KiB allocations per call
// were most of an MCP server's garbage (and its GC work) for short commands.
var chunks = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// readAll reads r to its end (or until it is closed), keeping at most max
// bytes: a command writing more never blocks on a full pipe.
func (c *capture) readAll(r io.Reader, max int) {
	c.max = max
	cp := chunks.Get().(*[]byte)
	defer chunks.Put(cp)
	chunk := *cp
	for {
		n, err := r.Read(chunk)
		if n > 0 {
			keep := min(n, max-len(c.buf))
			if keep > 0 {
				c.buf = append(c.buf, chunk[:keep]...)
			}
			c.dropped += int64(n - keep)
		}
		if err != nil {
			return
		}
	}
}

// text is the kept output as valid UTF-8, ending with the truncation
// marker on a line of its own when something was dropped. A character cut
// in half by the cap is dropped whole. The cap counts the text as JSON
// encodes it (its form in a result): at most max bytes once escaped.
func (c *capture) text() string {
	b, dropped := c.buf, c.dropped
	if n := jsonPrefix(b, c.max); n < len(b) {
		dropped += int64(len(b) - n)
		b = b[:n]
	}
	if dropped > 0 {
		// Back up over an incomplete UTF-8 sequence at the cut.
		for i := 1; i <= utf8.UTFMax && i <= len(b); i++ {
			if utf8.RuneStart(b[len(b)-i]) {
				if !utf8.FullRune(b[len(b)-i:]) {
					dropped += int64(i)
					b = b[:len(b)-i]
				}
				break
			}
		}
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if dropped > 0 {
		if s != "" && !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		s += TruncationMarker(dropped) + "\n"
	}
	return s
}

// jsonPrefix returns the length of the longest prefix of b, whole
// characters, that takes at most max bytes as a JSON string's contents;
// max <= 0 means no limit.
func jsonPrefix(b []byte, max int) int {
	if max <= 0 || len(b)*6 <= max { // nothing takes more than 6
		return len(b)
	}
	size := 0
	for i := 0; i < len(b); {
		r, w := utf8.DecodeRune(b[i:])
		if size += jsonSize(r, w); size > max {
			return i
		}
		i += w
	}
	return len(b)
}

// jsonSize is how many bytes a character (r, w bytes of UTF-8) takes in a
// JSON string as encoding/json writes it, with HTML escaping, as the MCP
// SDK marshals results: control characters, <, >, &, U+2028 and U+2029 as
// \uXXXX; ", \, newline, return and tab as two; an invalid byte as U+FFFD.
func jsonSize(r rune, w int) int {
	switch {
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '<' || r == '>' || r == '&' || r == '\u2028' || r == '\u2029':
		return 6
	case r == utf8.RuneError && w == 1:
		return 3
	}
	return w
}

// FormatText renders r compactly for clients that read only text: the exit
// status, then stdout, stderr and the policy events, each only when
// non-empty.
func FormatText(r RunCommandResult) string { return FormatTextTail(r, 0) }

// FormatTextTail is FormatText keeping at most the last tail bytes of
// stdout and of stderr (from a line's start when there is one within
// them), each header saying how much of how much; tail <= 0 keeps all. A
// client that has the whole result as structured content gets the end of
// the output, usually what matters, as text too without a second copy.
func FormatTextTail(r RunCommandResult, tail int) string {
	var b strings.Builder
	if r.BackgroundID != "" {
		return fmt.Sprintf("background_id: %s\nthe command runs in the background: the background tool with id %q reads its output and stops it (stop: true)\n", r.BackgroundID, r.BackgroundID)
	}
	fmt.Fprintf(&b, "exit_code: %d", r.ExitCode)
	if r.TimedOut {
		b.WriteString(" (timed out)")
	}
	b.WriteString("\n")
	writeSection(&b, "stdout", r.Stdout, tail)
	writeSection(&b, "stderr", r.Stderr, tail)
	writeSection(&b, "policy_events", strings.Join(r.Events, "\n"), 0)
	return b.String()
}

// writeSection writes body under a "--- name ---" header, nothing when it
// is empty; with tail > 0 only its last tail bytes (from a line's start
// when there is one within them), the header saying how much of how much.
func writeSection(b *strings.Builder, name, body string, tail int) {
	if body == "" {
		return
	}
	if tail > 0 && len(body) > tail {
		total := len(body)
		kept := body[len(body)-tail:]
		if i := strings.IndexByte(kept, '\n'); i >= 0 && i < len(kept)-1 {
			kept = kept[i+1:]
		}
		for len(kept) > 0 && !utf8.RuneStart(kept[0]) {
			kept = kept[1:]
		}
		body = kept
		name = fmt.Sprintf("%s (the last %d of %d bytes)", name, len(kept), total)
	}
	b.WriteString("--- " + name + " ---\n")
	b.WriteString(body)
	if !strings.HasSuffix(body, "\n") {
		b.WriteString("\n")
	}
}
