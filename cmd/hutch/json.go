package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/session"
)

// jsonFlag makes run and exec print the run_command result object (the
// same as hutch mcp's) instead of passing the output through.
var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "capture stdout and stderr and print the result as JSON (the object hutch mcp's run_command returns); stdin is empty"}

// printJSONResult runs argv through tool and prints the result object; the
// exit status is the command's.
func printJSONResult(ctx context.Context, tool *agent.Tool, argv []string, cwd string, timeout time.Duration, fresh bool) error {
	dir := cwd
	if tool.Workspace.Mount != "" {
		var err error
		if dir, err = tool.ResolveCwd(cwd); err != nil {
			return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
		}
	}
	res, err := tool.RunArgv(ctx, argv, dir, timeout, fresh)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	b, _ := json.MarshalIndent(res, "", "  ")
	fmt.Println(string(b))
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}

// runJSON is `hutch run --json`.
func runJSON(c *cli.Context, p *policy.Policy, ws policy.WorkspacePaths, cwd string, secLog *seclog.Log, logger *slog.Logger) error {
	tool := &agent.Tool{Exec: &agent.HutchExecutor{
		Policy: p, SecurityLog: secLog, HostEnv: os.Environ(), ExtraEnv: c.StringSlice("env"), Logger: logger,
		ForwardSignals: true,
	}, Workspace: ws}
	return printJSONResult(c.Context, tool, c.Args().Slice(), cwd, 0, false)
}

// clientExecutor runs commands in a running session over its socket.
type clientExecutor struct {
	name     string
	extraEnv []string
}

func (e *clientExecutor) Run(ctx context.Context, req agent.ExecRequest) (agent.ExecResult, error) {
	cl, err := session.Dial(e.name)
	if err != nil {
		return agent.ExecResult{}, err
	}
	defer cl.Close()
	if req.Fresh {
		info, err := cl.Info()
		if err != nil {
			return agent.ExecResult{}, err
		}
		p, err := policy.Parse([]byte(info.Policy), "session "+e.name+" policy")
		if err != nil {
			return agent.ExecResult{}, err
		}
		return (&agent.HutchExecutor{Policy: p, HostEnv: os.Environ(), ExtraEnv: e.extraEnv, ForwardSignals: true, HostCwd: hostCwd()}).Run(ctx, req)
	}
	// Relayed to the command, as the plain `hutch exec` does.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, hutch.ForwardedSignals...)
	defer signal.Stop(sigs)
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		return agent.ExecResult{}, err
	}
	defer stdin.Close()
	rep, err := cl.Exec(&session.Request{Argv: req.Argv, Env: os.Environ(), ExtraEnv: e.extraEnv, Cwd: req.Cwd, HostCwd: hostCwd(), TimeoutMS: req.Timeout.Milliseconds()},
		stdin, req.Stdout, req.Stderr, sigs)
	if err != nil {
		return agent.ExecResult{}, err
	}
	return agent.ExecResult{ExitCode: rep.ExitCode, TimedOut: rep.TimedOut, Events: rep.Messages, SandboxID: rep.SandboxID,
		Isolation: rep.Isolation, IsolationLimits: rep.IsolationLimits, Image: rep.Image}, nil
}

// hostCwd is the caller's current directory, "" when it cannot be had: a
// command given no cwd starts at the same place in the workspace.
func hostCwd() string {
	wd, _ := os.Getwd()
	return wd
}

// execJSON is `hutch exec --json`.
func execJSON(c *cli.Context, name string, argv []string, timeout time.Duration) error {
	tool := &agent.Tool{Exec: &clientExecutor{name: name, extraEnv: c.StringSlice("env")}}
	return printJSONResult(c.Context, tool, argv, c.String("cwd"), timeout, c.Bool("fresh"))
}
