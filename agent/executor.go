package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// HutchExecutor runs each command in a fresh sandbox with hutch.Run and
// tears the sandbox down afterwards: nothing is shared between calls, so
// it ignores ExecRequest.Fresh. Its standard input is /dev/null.
type HutchExecutor struct {
	// Policy governs every sandbox; nil means policy.Default(). A request's
	// Timeout replaces resources.timeout for that call.
	Policy *policy.Policy
	// SecurityLog receives the security events; nil discards them.
	SecurityLog *seclog.Log
	// Executable is the hutch binary to re-exec for the sandbox's init;
	// "" means /proc/self/exe (right inside the hutch binary itself).
	Executable string
	// HostEnv is the environment the policy filters for the command; nil
	// means os.Environ().
	HostEnv []string
	// ExtraEnv are "K=V" (set) or "K" (pass through) entries, as --env.
	ExtraEnv []string
	// Logger receives hutch's diagnostics; nil discards them.
	Logger *slog.Logger
	// ForwardSignals relays the SIGINT, SIGTERM, SIGHUP and SIGQUIT this
	// process receives to the command while it runs (hutch.RunOptions'):
	// for a command-line caller such as `hutch run --json`, not for a
	// server with calls of its own.
	ForwardSignals bool
	// HostCwd is the caller's host directory: a request without a Cwd
	// starts at the same place in the workspace (hutch.RunOptions').
	HostCwd string
}

// Run implements Executor.
func (e *HutchExecutor) Run(ctx context.Context, req ExecRequest) (ExecResult, error) {
	p := policy.Default()
	if e.Policy != nil {
		cp := *e.Policy // hutch.Run only reads it; a shallow copy is enough
		p = &cp
	}
	if req.Timeout > 0 {
		p.Resources.Timeout = policy.Duration(req.Timeout)
	}
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return ExecResult{}, fmt.Errorf("open %s for stdin: %w", os.DevNull, err)
	}
	defer stdin.Close()
	env := e.HostEnv
	if env == nil {
		env = os.Environ()
	}
	logger := e.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	res, err := hutch.Run(ctx, &hutch.RunOptions{
		Policy:         p,
		Argv:           req.Argv,
		HostEnv:        env,
		ExtraEnv:       e.ExtraEnv,
		Cwd:            req.Cwd,
		HostCwd:        e.HostCwd,
		Stdin:          stdin,
		Stdout:         req.Stdout,
		Stderr:         req.Stderr,
		Executable:     e.Executable,
		SecurityLog:    e.SecurityLog,
		Logger:         logger,
		ForwardSignals: e.ForwardSignals,
	})
	if err != nil {
		return ExecResult{}, fmt.Errorf("cannot set up the sandbox: %w", err)
	}
	return ExecResult{
		ExitCode:  res.ExitCode,
		TimedOut:  res.TimedOut,
		Events:    res.Messages,
		SandboxID: res.SandboxID,
		Isolation: res.Isolation, IsolationLimits: res.IsolationLimits,
		Review: res.Review,
		Image:  res.Image,
	}, nil
}
