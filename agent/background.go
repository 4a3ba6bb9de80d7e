package agent

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/policy"
)

// BackgroundToolName is the name of the tool that lists, reads and stops
// the commands run_command started in the background.
const BackgroundToolName = "background"

// stopGrace is how long a stop waits after SIGTERM, and then after
// SIGKILL, for a background command to end.
const stopGrace = 3 * time.Second

// Backgrounder is an Executor that can start commands that outlive their
// call (a session's: SessionExecutor).
type Backgrounder interface {
	// Detach starts req's command in the background and returns its id;
	// req.Stdout and req.Stderr are not used (the command's output is
	// kept by the table).
	Detach(req ExecRequest) (string, error)
	// Background is the table of the commands Detach started.
	Background() *background.Table
}

// BackgroundInput is one call of the background tool.
type BackgroundInput struct {
	ID   string `json:"id,omitempty" jsonschema:"A background command's id (background_id from run_command). Absent: list every background command, without output."`
	Stop bool   `json:"stop,omitempty" jsonschema:"Stop the command with id first: SIGTERM, then SIGKILL after 3 s; the result is how it ended and its last output."`
}

// BackgroundResult is the outcome of a call of the background tool.
type BackgroundResult struct {
	Commands []BackgroundCommand `json:"commands" jsonschema:"The background commands (all of them, or the one asked about), in the order they started."`
}

// BackgroundCommand is one background command, with its output when it
// was asked about by id.
type BackgroundCommand struct {
	ID            string   `json:"id" jsonschema:"Its id."`
	Command       string   `json:"command" jsonschema:"The command line it runs."`
	Running       bool     `json:"running" jsonschema:"True while it runs."`
	ExitCode      int      `json:"exit_code" jsonschema:"Once it ended (running is false): its exit status, as run_command's exit_code; 0 while it runs."`
	TimedOut      bool     `json:"timed_out,omitempty" jsonschema:"True when its timeout_seconds ended it."`
	Stopped       bool     `json:"stopped,omitempty" jsonschema:"True when it was stopped with stop: true."`
	Started       string   `json:"started" jsonschema:"When it started (RFC 3339)."`
	Stdout        string   `json:"stdout,omitempty" jsonschema:"With id: the end of what it wrote to stdout so far (UTF-8), at most the server's output cap."`
	Stderr        string   `json:"stderr,omitempty" jsonschema:"With id: the end of its stderr, capped like stdout."`
	StdoutDropped int64    `json:"stdout_dropped,omitempty" jsonschema:"Bytes of stdout before the part returned, not returned (the server keeps the last 1 MiB of each stream)."`
	StderrDropped int64    `json:"stderr_dropped,omitempty" jsonschema:"The same for stderr."`
	Events        []string `json:"policy_events,omitempty" jsonschema:"Once it ended: the 'hutch: ...' lines of its end, as run_command's policy_events."`
}

// startBackground starts in's command (validated: cwd, timeout) in the
// executor's background.
func (t *Tool) startBackground(in RunCommandInput, cwd string, timeout time.Duration) (RunCommandResult, error) {
	if in.Fresh {
		return RunCommandResult{}, inputErrorf("background and fresh cannot be combined: a background command runs in the session sandbox")
	}
	bg, ok := t.Exec.(Backgrounder)
	if !ok {
		return RunCommandResult{}, inputErrorf("background: this server runs every command in a fresh sandbox, which ends with its call; background commands need a session (hutch mcp keeps one)")
	}
	id, err := bg.Detach(ExecRequest{Argv: []string{"/bin/sh", "-c", in.Command}, Cwd: cwd, Timeout: timeout})
	if err != nil {
		return RunCommandResult{}, err
	}
	return RunCommandResult{BackgroundID: id, Events: []string{}, SandboxID: t.sandboxID()}, nil
}

// sandboxID is the session's sandbox id, when the executor has one.
func (t *Tool) sandboxID() string {
	if s, ok := t.Exec.(interface{ SandboxID() string }); ok {
		return s.SandboxID()
	}
	return ""
}

// Background lists the background commands, or reports one (its output,
// how it ended), stopping it first when asked.
func (t *Tool) Background(in BackgroundInput) (BackgroundResult, error) {
	bg, ok := t.Exec.(Backgrounder)
	if !ok {
		return BackgroundResult{}, inputErrorf("this server runs every command in a fresh sandbox: it has no background commands")
	}
	tab := bg.Background()
	if in.ID == "" {
		if in.Stop {
			return BackgroundResult{}, inputErrorf("stop needs the id of the command to stop")
		}
		r := BackgroundResult{Commands: []BackgroundCommand{}}
		for _, info := range tab.List() {
			r.Commands = append(r.Commands, describe(info))
		}
		return r, nil
	}
	c, err := tab.Get(in.ID)
	if errors.Is(err, background.ErrUnknown) {
		return BackgroundResult{}, inputErrorf("no background command %q: call background without an id to list them", in.ID)
	}
	if in.Stop {
		c.Stop(stopGrace)
	}
	bc := describe(c.Info())
	max := t.MaxOutput
	if max <= 0 {
		max = DefaultMaxOutput
	}
	out := c.Output()
	bc.Stdout, bc.StdoutDropped = tail(out.Stdout, out.StdoutDropped, max)
	bc.Stderr, bc.StderrDropped = tail(out.Stderr, out.StderrDropped, max)
	return BackgroundResult{Commands: []BackgroundCommand{bc}}, nil
}

func describe(in background.Info) BackgroundCommand {
	cmd := strings.Join(in.Argv, " ")
	if len(in.Argv) == 3 && in.Argv[0] == "/bin/sh" && in.Argv[1] == "-c" {
		cmd = in.Argv[2] // run_command's own wrapping
	}
	return BackgroundCommand{ID: in.ID, Command: cmd, Running: in.Running, ExitCode: in.ExitCode, TimedOut: in.TimedOut,
		Stopped: in.Stopped, Started: in.Started.Format(time.RFC3339), Events: in.Messages}
}

// tail is the end of b as valid UTF-8 that takes at most max bytes as a
// JSON string's contents, whole characters, and the bytes before it
// (dropped, plus what was cut here).
func tail(b []byte, dropped int64, max int) (string, int64) {
	size, i := 0, len(b)
	for i > 0 {
		r, w := utf8.DecodeLastRune(b[:i])
		if size+jsonSize(r, w) > max {
			break
		}
		size += jsonSize(r, w)
		i -= w
	}
	// Not from within a character cut at the ring's start.
	for i < len(b) && !utf8.RuneStart(b[i]) {
		i++
	}
	return strings.ToValidUTF8(string(b[i:]), "\uFFFD"), dropped + int64(i)
}

// Detach implements Backgrounder: req's command runs in the session's
// background.
func (e *SessionExecutor) Detach(req ExecRequest) (string, error) {
	c, err := e.Session.Detach(&hutch.ExecOptions{Argv: req.Argv, Cwd: req.Cwd, Timeout: req.Timeout, ExtraEnv: e.Fresh.ExtraEnv})
	if err != nil {
		return "", fmt.Errorf("start the command in the background: %w", err)
	}
	return c.ID, nil
}

// Background implements Backgrounder.
func (e *SessionExecutor) Background() *background.Table { return e.Session.Background() }

// SandboxID is the session's sandbox id.
func (e *SessionExecutor) SandboxID() string { return e.Session.ID() }

// FormatBackground renders r for clients that read only text: a line per
// command (its id, state and command line), then, for a command asked
// about by id, its stdout, stderr and events as FormatTextTail writes
// them (tail > 0 keeps the last tail bytes of each stream).
func FormatBackground(r BackgroundResult, tail int) string {
	var b strings.Builder
	if len(r.Commands) == 0 {
		b.WriteString("no background commands\n")
	}
	for _, c := range r.Commands {
		state := "running"
		switch {
		case c.Running:
		case c.TimedOut:
			state = fmt.Sprintf("timed out (exit_code %d)", c.ExitCode)
		case c.Stopped:
			state = fmt.Sprintf("stopped (exit_code %d)", c.ExitCode)
		default:
			state = fmt.Sprintf("exited (exit_code %d)", c.ExitCode)
		}
		fmt.Fprintf(&b, "id %s: %s, started %s: %s\n", c.ID, state, c.Started, c.Command)
		writeSection(&b, "stdout", c.Stdout, tail)
		writeSection(&b, "stderr", c.Stderr, tail)
		writeSection(&b, "policy_events", strings.Join(c.Events, "\n"), 0)
	}
	return b.String()
}

// DescribeBackground is the background tool's description, and what a
// session's published ports make reachable.
func DescribeBackground(p *policy.Policy) string {
	var b strings.Builder
	b.WriteString("List, read or stop the commands that run_command started with background: true (dev servers, watchers, long jobs). ")
	b.WriteString("Without arguments: every background command, running or ended, with its id and state. ")
	b.WriteString("With id: that command's state and the end of its stdout and stderr so far (the server keeps the last 1 MiB of each; stdout_dropped and stderr_dropped count what came before). ")
	b.WriteString("With id and stop: true: stop it (SIGTERM, then SIGKILL after 3 s) and report how it ended. ")
	b.WriteString("Background commands run in the session sandbox until they exit, are stopped, or the server ends; they have no time limit unless run_command's timeout_seconds gave one.")
	if p != nil && len(p.Network.Publish) > 0 {
		var pubs []string
		for _, e := range p.Network.Publish {
			addr := e.HostAddress
			if addr == "" {
				addr = policy.DefaultPublishAddress
			}
			pubs = append(pubs, fmt.Sprintf("sandbox port %d at %s", e.SandboxPort, net.JoinHostPort(addr, strconv.Itoa(e.HostPort))))
		}
		fmt.Fprintf(&b, " Published ports (a server listening inside the sandbox on one of them is reachable from the host, for the user's browser or tools): %s.", strings.Join(pubs, "; "))
	}
	return b.String()
}
