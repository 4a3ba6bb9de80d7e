package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/session"
)

func sessionCommand() *cli.Command {
	return &cli.Command{
		Name:  "session",
		Usage: "warm sandboxes: start one, run commands in it with hutch exec, stop it",
		Subcommands: []*cli.Command{
			{
				Name:  "start",
				Usage: "start a session sandbox held by a background supervisor and print its name",
				Flags: append(policyFlags(),
					&cli.StringFlag{Name: "name", Usage: "session `NAME` (default: a generated one)"},
					&cli.StringFlag{Name: "security-log", Usage: "append security events to `FILE` (default: $XDG_STATE_HOME/hutch/security.log)"},
				),
				Action: sessionStart,
			},
			{Name: "ls", Usage: "list running sessions", Action: sessionLs},
			{Name: "ps", Usage: "list a session's background commands (hutch exec --detach)", ArgsUsage: "NAME", Action: sessionPs},
			{Name: "logs", Usage: "print what a background command wrote to stdout and stderr so far (the last 1MiB of each)", ArgsUsage: "NAME ID", Action: sessionLogs},
			{Name: "kill", Usage: "stop a background command: SIGTERM, then SIGKILL after 3s", ArgsUsage: "NAME ID", Action: sessionKill},
			{
				Name:      "stop",
				Usage:     "stop a session: every process is killed, the sandbox and its socket are removed",
				ArgsUsage: "NAME",
				Action:    sessionStop,
			},
			{
				Name:   "serve",
				Hidden: true,
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "name", Required: true},
					&cli.StringFlag{Name: "security-log"},
					// The policy file the effective policy came from (the
					// policy itself arrives on stdin): protected inside.
					&cli.StringFlag{Name: "policy-file"},
				},
				Action: sessionServe,
			},
		},
	}
}

// sessionStart starts `hutch session serve` detached, hands it the
// effective policy on stdin, and waits for it to report readiness on fd 3.
func sessionStart(c *cli.Context) error {
	p, err := effectivePolicy(c, policy.WorkspaceAtFixed)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if err := ensureImage(c.Context, p); err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if p.Filesystem.Workspace, err = hutch.ResolveWorkspace(p.Filesystem.Workspace); err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	name := c.String("name")
	if !c.IsSet("name") { // --name "" is refused below, as exec and stop refuse it
		name = "s-" + seclog.NewSandboxID()[:8]
	}
	if err := session.ValidName(name); err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	dir, err := session.Dir()
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	toml, err := p.Marshal()
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	logf, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: session log: " + err.Error()}
	}
	defer logf.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	args := []string{"session", "serve", "--name", name}
	if l := c.String("security-log"); l != "" {
		abs, _ := filepath.Abs(l)
		args = append(args, "--security-log", abs)
	}
	if p.File != "" {
		args = append(args, "--policy-file", p.File)
	}
	cmd := exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = "hutch"
	cmd.Stdin = bytes.NewReader(toml)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{readyW}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return &exitError{hutch.ExitSetup, "hutch: start the session supervisor: " + err.Error()}
	}
	readyW.Close()
	done := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(readyR).ReadString('\n')
		done <- strings.TrimSpace(line)
	}()
	var line string
	select {
	case line = <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		return &exitError{hutch.ExitSetup, "hutch: the session supervisor did not become ready within 60s; see " + logf.Name()}
	}
	if !strings.HasPrefix(line, "ok") {
		cmd.Wait()
		msg := strings.TrimPrefix(line, "error ")
		if msg == "" {
			b, _ := os.ReadFile(logf.Name())
			msg = "the session supervisor exited: " + strings.TrimSpace(string(b))
		}
		os.Remove(logf.Name()) // nothing of a session that did not start is left
		return &exitError{hutch.ExitSetup, "hutch: cannot start session " + name + ": " + msg}
	}
	cmd.Process.Release()
	fmt.Println(name)
	return nil
}

// sessionServe is the background supervisor of one session.
func sessionServe(c *cli.Context) error {
	oneProcessor()
	ready := os.NewFile(3, "ready")
	fail := func(err error) error {
		fmt.Fprintf(ready, "error %s\n", err)
		ready.Close()
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	toml, err := io.ReadAll(os.Stdin)
	if err != nil {
		return fail(err)
	}
	p, err := policy.Parse(toml, "session policy")
	if err != nil {
		return fail(err)
	}
	p.File = c.String("policy-file")
	name := c.String("name")
	dir, err := session.Dir()
	if err != nil {
		return fail(err)
	}
	logPath := c.String("security-log")
	if logPath == "" {
		logPath = seclog.DefaultPath()
	}
	var sl *seclog.Log
	if logPath != "" {
		if sl, err = seclog.Open(logPath); err != nil {
			return fail(err)
		}
		defer sl.Close()
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ln, err := session.Listen(session.SocketPath(dir, name))
	if err != nil {
		return fail(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	defer stop()
	sess, err := hutch.NewSession(ctx, &hutch.SessionOptions{
		Policy: p, HostEnv: os.Environ(), SecurityLog: sl, Logger: logger,
		ChangeSet: name, SessionName: name, // review mode: the session's change set is named after it
	})
	if err != nil {
		ln.Close()
		return fail(err)
	}
	srv := &session.Server{
		Name: name, Session: sess, PolicyTOML: string(toml), Logger: logger,
		Idle: p.Lifecycle.SessionIdle.D(), Max: p.Lifecycle.SessionMax.D(),
	}
	fmt.Fprintf(ready, "ok %s\n", sess.ID())
	ready.Close()
	logger.Info("session ready", "name", name, "sandbox", sess.ID(), "workspace", sess.Workspace())
	err = srv.Serve(ctx, ln)
	logger.Info("session ended", "name", name)
	os.Remove(filepath.Join(dir, name+".log"))
	return err
}

func sessionLs(c *cli.Context) error {
	dir, err := session.Dir()
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	socks, _ := filepath.Glob(filepath.Join(dir, "*.sock"))
	sort.Strings(socks)
	fmt.Printf("%-20s %-8s %-12s %-8s %-6s %s\n", "NAME", "PID", "SANDBOX", "UPTIME", "EXECS", "WORKSPACE")
	for _, s := range socks {
		name := strings.TrimSuffix(filepath.Base(s), ".sock")
		cl, err := session.DialPath(s, name)
		if err != nil {
			os.Remove(s) // its supervisor is gone
			fmt.Fprintf(os.Stderr, "hutch: removed the stale socket of session %s (its supervisor is gone)\n", name)
			continue
		}
		info, err := cl.Info()
		cl.Close()
		if err != nil {
			continue
		}
		fmt.Printf("%-20s %-8d %-12s %-8s %-6d %s\n", info.Name, info.Pid, info.SandboxID,
			time.Since(info.Started).Round(time.Second), info.Execs, info.Workspace)
	}
	return nil
}

func sessionStop(c *cli.Context) error {
	if c.NArg() != 1 {
		return &exitError{2, "hutch: usage: hutch session stop NAME"}
	}
	cl, err := session.Dial(c.Args().First())
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	defer cl.Close()
	if err := cl.Stop(); err != nil {
		return &exitError{1, "hutch: stop session: " + err.Error()}
	}
	return nil
}

func execCommand() *cli.Command {
	return &cli.Command{
		Name:      "exec",
		Usage:     "run a command in a running session",
		ArgsUsage: "NAME [--] COMMAND [ARG...]   (options go before NAME)",
		Flags: []cli.Flag{
			&cli.StringSliceFlag{Name: "env", Aliases: []string{"e"}, Usage: "set `K=V` inside, or pass K through (repeatable)"},
			&cli.StringFlag{Name: "cwd", Usage: "working `DIR` inside (relative to /workspace)"},
			&cli.StringFlag{Name: "timeout", Usage: "wall-clock limit for this command (default: the session policy's)"},
			&cli.BoolFlag{Name: "fresh", Usage: "run in a new one-off sandbox with the session's policy (for suspicious operations)"},
			&cli.BoolFlag{Name: "detach", Aliases: []string{"d"}, Usage: "run in the session's background and print its id at once: it outlives this exec until it exits, hutch session kill, or the session's end (no time limit unless --timeout)"},
			jsonFlag,
		},
		Action: execAction,
	}
}

func execAction(c *cli.Context) error {
	if c.NArg() < 2 {
		return &exitError{hutch.ExitSetup, "hutch: usage: hutch exec NAME [--] COMMAND [ARG...]"}
	}
	name, argv := c.Args().First(), c.Args().Slice()[1:]
	if strings.HasPrefix(argv[0], "-") && argv[0] != "--" {
		return &exitError{hutch.ExitSetup, fmt.Sprintf("hutch: exec option %s after the session name: put options first: hutch exec [--timeout D] [--env K=V] [--cwd DIR] [--fresh] [--detach] NAME -- COMMAND [ARG...]", argv[0])}
	}
	if argv[0] == "--" {
		argv = argv[1:]
	}
	if len(argv) == 0 {
		return &exitError{hutch.ExitSetup, "hutch: usage: hutch exec NAME [--] COMMAND [ARG...]"}
	}
	timeout, err := timeoutFlag(c)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if err := envFlag(c); err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	if c.Bool("detach") {
		return execDetach(c, name, argv, timeout)
	}
	if c.Bool("json") {
		return execJSON(c, name, argv, timeout)
	}
	cl, err := session.Dial(name)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	defer cl.Close()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, hutch.ForwardedSignals...)
	defer signal.Stop(sigs)
	if c.Bool("fresh") {
		return execFresh(c, cl, argv, timeout, sigs)
	}
	rep, err := cl.Exec(&session.Request{
		Argv: argv, Env: os.Environ(), ExtraEnv: c.StringSlice("env"), Cwd: c.String("cwd"), HostCwd: hostCwd(),
		TimeoutMS: timeout.Milliseconds(), Terminal: true,
	}, os.Stdin, os.Stdout, os.Stderr, sigs)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	for _, m := range rep.Messages {
		fmt.Fprintln(os.Stderr, m)
	}
	if rep.ExitCode != 0 {
		return &exitError{code: rep.ExitCode}
	}
	return nil
}

// execFresh runs the command in a new one-off sandbox with the session's
// policy, leaving the session untouched.
func execFresh(c *cli.Context, cl *session.Client, argv []string, timeout time.Duration, sigs chan os.Signal) error {
	info, err := cl.Info()
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: session info: " + err.Error()}
	}
	cl.Close()
	p, err := policy.Parse([]byte(info.Policy), "session "+info.Name+" policy")
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	p.Network.Publish = nil // the session holds its published ports
	if timeout > 0 {
		p.Resources.Timeout = policy.Duration(timeout)
	}
	if wsHost, err := hutch.ResolveWorkspace(p.Filesystem.Workspace); err == nil {
		if _, err := p.Filesystem.PathsFor(wsHost, "").Cwd(c.String("cwd")); err != nil {
			return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
		}
	}
	signal.Stop(sigs)
	var sl *seclog.Log
	if path := seclog.DefaultPath(); path != "" {
		if sl, err = seclog.Open(path); err == nil {
			defer sl.Close()
		}
	}
	res, err := hutch.Run(c.Context, &hutch.RunOptions{
		Policy: p, Argv: argv, HostEnv: os.Environ(), ExtraEnv: c.StringSlice("env"), Cwd: c.String("cwd"), HostCwd: hostCwd(),
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ForwardSignals: true, Terminal: true, SecurityLog: sl,
	})
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: cannot set up the sandbox: " + err.Error()}
	}
	for _, m := range res.Messages {
		fmt.Fprintln(os.Stderr, m)
	}
	if res.ExitCode != 0 {
		return &exitError{code: res.ExitCode}
	}
	return nil
}
