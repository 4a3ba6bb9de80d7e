package agent

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/hutchsandbox/hutch"
)

// SessionExecutor runs commands in one warm sandbox (a hutch.Session):
// /tmp and HOME persist between calls, processes do not (each command's
// leftovers are killed when it ends). A request with Fresh runs in a new
// one-off sandbox with the same policy instead. Close ends the session.
type SessionExecutor struct {
	// Session is the warm sandbox.
	Session *hutch.Session
	// Fresh runs Fresh requests; its Policy should be the session's.
	Fresh *HutchExecutor

	nullOnce sync.Once
	null     *os.File // /dev/null, every command's stdin, opened once
	nullErr  error
}

// NewSessionExecutor starts a session for e's policy and environment.
func NewSessionExecutor(ctx context.Context, e *HutchExecutor) (*SessionExecutor, error) {
	env := e.HostEnv
	if env == nil {
		env = os.Environ()
	}
	sess, err := hutch.NewSession(ctx, &hutch.SessionOptions{
		Policy: e.Policy, HostEnv: env, Executable: e.Executable, SecurityLog: e.SecurityLog, Logger: e.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("cannot set up the session sandbox: %w", err)
	}
	if e.Policy != nil && len(e.Policy.Network.Publish) > 0 {
		// A fresh sandbox beside the session cannot listen where the
		// session does: it publishes nothing.
		fresh, p := *e, *e.Policy
		p.Network.Publish = nil
		fresh.Policy = &p
		e = &fresh
	}
	return &SessionExecutor{Session: sess, Fresh: e}, nil
}

// Run implements Executor.
func (e *SessionExecutor) Run(ctx context.Context, req ExecRequest) (ExecResult, error) {
	if req.Fresh {
		return e.Fresh.Run(ctx, req)
	}
	// One /dev/null for every call instead of an open and a close per call. The session passes the descriptor on; a command cannot
	// change what it refers to.
	e.nullOnce.Do(func() { e.null, e.nullErr = os.Open(os.DevNull) })
	if e.nullErr != nil {
		return ExecResult{}, e.nullErr
	}
	stdin := e.null
	res, err := e.Session.Exec(ctx, &hutch.ExecOptions{
		Argv: req.Argv, Cwd: req.Cwd, Timeout: req.Timeout, ExtraEnv: e.Fresh.ExtraEnv,
		Stdin: stdin, Stdout: req.Stdout, Stderr: req.Stderr,
	})
	if err != nil {
		return ExecResult{}, err
	}
	return ExecResult{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Events: res.Messages, SandboxID: res.SandboxID,
		Isolation: res.Isolation, IsolationLimits: res.IsolationLimits,
		Review: e.Session.ReviewPending(), Image: res.Image}, nil
}

// Close ends the session: every process is killed.
func (e *SessionExecutor) Close() error {
	if e.null != nil {
		e.null.Close()
	}
	return e.Session.Close()
}
