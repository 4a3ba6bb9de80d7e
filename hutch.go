// Package hutch runs commands in rootless sandboxes. It is the API that the
// hutch CLI uses and that other tools embed: build a policy (package
// policy), then Run a command under it.
package hutch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
)

// Exit codes of hutch's own failures (Docker's convention; timeout(1)'s).
const (
	ExitTimeout     = 124
	ExitSetup       = 125
	ExitCannotExec  = 126
	ExitNotFound    = 127
	exitSignalBase  = 128
	defaultWorkDir  = policy.WorkspaceMount
	initSetupBudget = 30 * time.Second
)

// RunOptions describes one sandboxed execution.
type RunOptions struct {
	// Policy governs the sandbox; nil means policy.Default().
	Policy *policy.Policy
	// Argv is the command and its arguments. Argv[0] is looked up in the
	// sandbox's PATH.
	Argv []string
	// HostEnv is the caller's environment, filtered by the policy.
	HostEnv []string
	// ExtraEnv are --env entries: "K=V" sets, "K" passes K through.
	ExtraEnv []string
	// Cwd is the working directory inside, absolute or relative to
	// /workspace; "" means /workspace.
	Cwd string
	// Stdin, Stdout and Stderr are given to the command as they are.
	Stdin, Stdout, Stderr *os.File
	// Executable is the hutch binary to re-exec ("" = /proc/self/exe).
	Executable string
	// ForwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT that hutch
	// receives to the command.
	ForwardSignals bool
	// Timing asks for per-stage timings in the result.
	Timing bool
	// SecurityLog receives the run's security events; nil discards them
	// (the summary lines in Result.Messages are produced either way).
	SecurityLog *seclog.Log
	Logger      *slog.Logger
}

// Result is the outcome of a run.
type Result struct {
	// ExitCode is what hutch exits with: the command's own status, 128+N
	// for signal N, or one of the Exit* codes.
	ExitCode int
	// TimedOut is true when the wall-clock timeout ended the command.
	TimedOut bool
	// Messages are the "hutch: ..." lines for the caller, one per event
	// the sandbox caused (a timeout, an exec failure, a denial).
	Messages []string
	// Timing lists per-stage durations when requested.
	Timing []nsjail.Stage
	// SandboxID identifies the sandbox in the security log.
	SandboxID string
}

// Run executes one command in a fresh sandbox and tears the sandbox down.
// A returned error means the sandbox could not be made (exit 125); the
// message says what failed and what to do. Nothing is left behind on the
// host either way.
func Run(ctx context.Context, o *RunOptions) (*Result, error) {
	t0 := time.Now()
	p := o.Policy
	if p == nil {
		p = policy.Default()
	}
	if len(o.Argv) == 0 {
		return nil, errors.New("no command given: usage: hutch run [flags] -- COMMAND [ARG...]")
	}
	cwd, err := insideCwd(o.Cwd)
	if err != nil {
		return nil, err
	}
	env, err := p.CommandEnv(o.HostEnv, o.ExtraEnv)
	if err != nil {
		return nil, err
	}
	proxied := p.Network.Mode == policy.NetProxy
	if proxied {
		env = proxyEnv(env)
	}
	ws, err := ResolveWorkspace(p.Filesystem.Workspace)
	if err != nil {
		return nil, err
	}
	prot, err := mounts.PrepareProtected(ws, policy.WorkspaceMount, p.Filesystem.Protected)
	defer func() {
		if prot != nil {
			if cerr := prot.Cleanup(); cerr != nil && o.Logger != nil {
				o.Logger.Warn("cleanup", "err", cerr)
			}
		}
	}()
	if err != nil {
		return nil, err
	}
	spec := &mounts.Spec{
		Tooling:        p.Filesystem.Tooling,
		Workspace:      ws,
		WorkspaceMount: policy.WorkspaceMount,
		Protected:      prot,
		Home:           policy.SandboxHome,
		TmpSize:        int64(p.Filesystem.TmpSize),
		HomeSize:       int64(p.Filesystem.HomeSize),
		ShmSize:        int64(p.Filesystem.ShmSize),
		Sys:            p.Filesystem.Sys,
		UID:            p.Sandbox.UID,
		GID:            p.Sandbox.GID,
		User:           "sandbox",
		Hostname:       p.Sandbox.Hostname,
	}
	for _, b := range p.Filesystem.ReadOnly {
		t := b.Target
		if t == "" {
			t = b.Source
		}
		spec.ReadOnly = append(spec.ReadOnly, [2]string{b.Source, t})
	}
	plan, err := mounts.Build(spec)
	if err != nil {
		return nil, err
	}
	cfg := &nsjail.Config{
		Setup: nsjail.Setup{
			Plan:     plan,
			Landlock: landlockSpec(p, plan),
			Hostname: p.Sandbox.Hostname,
			UID:      p.Sandbox.UID,
			GID:      p.Sandbox.GID,
			Timing:   o.Timing,
			Proxy:    proxied,
		},
		Executable: o.Executable,
		Stderr:     o.Stderr,
		Logger:     o.Logger,
	}
	filter, profile, err := seccompFilter(ctx, p, o.Logger)
	if err != nil {
		return nil, err
	}
	cfg.Seccomp = filter.BPF
	rec := seclog.NewRecorder(o.SecurityLog, seclog.NewSandboxID(), o.Argv)
	res := &Result{SandboxID: rec.Sandbox()}
	if filter.NotifyUnavailable != "" {
		rec.Record(seclog.Event{Kind: seclog.KindSandbox, Rule: "seccomp", Subject: "notification unavailable",
			Message: "seccomp user notification unavailable (" + filter.NotifyUnavailable + "): denials are enforced but not logged", Level: slog.LevelInfo})
	}
	tPlan := time.Since(t0)
	sctx, cancel := context.WithTimeout(ctx, initSetupBudget)
	sb, err := nsjail.Start(sctx, cfg)
	cancel()
	if err != nil {
		return nil, err
	}
	defer sb.Close()
	tStart := time.Since(t0)
	if proxied {
		es, err := startEgress(ctx, p, ws, sb.ProxyFiles, rec, o.Logger)
		if err != nil {
			return nil, &nsjail.SetupError{Op: "start the egress proxy", Err: err}
		}
		defer es.stop()
	}

	req := &nsjail.ExecRequest{
		Argv: o.Argv, Env: env, Cwd: cwd,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr,
	}
	nctx, stopNotify := context.WithCancel(ctx)
	defer stopNotify()
	var notifyDone chan struct{}
	if filter.Notify {
		mine, child, err := notifyPair()
		if err != nil {
			return nil, err
		}
		req.Notify = child
		notifyDone = make(chan struct{})
		go func() {
			defer close(notifyDone)
			serveSeccomp(nctx, mine, filter, profile, rec)
		}()
	}
	proc, err := sb.Exec(req)
	if req.Notify != nil {
		req.Notify.Close()
	}
	if err != nil {
		return nil, &nsjail.SetupError{Op: "start the command", Err: err}
	}

	var sigs chan os.Signal
	if o.ForwardSignals {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
		defer signal.Stop(sigs)
	}
	timeout := p.Resources.Timeout.D()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
wait:
	for {
		select {
		case <-proc.Done():
			break wait
		case s := <-sigs:
			_ = proc.Signal(s.(syscall.Signal))
		case <-timer.C:
			res.TimedOut = true
			sb.Close()
			<-proc.Done()
			break wait
		case <-ctx.Done():
			sb.Close()
			<-proc.Done()
			res.ExitCode = ExitSetup
			res.Messages = append(res.Messages, "hutch: cancelled; the command and all its processes were killed")
			return res, nil
		}
	}
	info := proc.Wait()
	// The command is gone; its background processes die with the sandbox.
	sb.Close()
	stopNotify()
	if notifyDone != nil {
		<-notifyDone
	}
	switch {
	case res.TimedOut:
		res.ExitCode = ExitTimeout
		res.Messages = append(res.Messages, fmt.Sprintf("hutch: timed out after %s; the command and all its processes were killed (raise the limit with --timeout or resources.timeout)", policy.Duration(timeout)))
	case info.ExecCode != 0:
		res.ExitCode = info.ExecCode
		res.Messages = append(res.Messages, execMessage(o.Argv[0], info, env))
	case info.Err != nil:
		res.ExitCode = ExitSetup
		res.Messages = append(res.Messages, "hutch: "+info.Err.Error())
	default:
		res.ExitCode = info.Code()
	}
	res.Messages = append(res.Messages, rec.Summary()...)
	if o.Timing {
		res.Timing = append(res.Timing, nsjail.Stage{Name: "supervisor.plan", Usec: tPlan.Microseconds()})
		res.Timing = append(res.Timing, sb.Timing...)
		res.Timing = append(res.Timing, nsjail.Stage{Name: "supervisor.start", Usec: tStart.Microseconds()})
		res.Timing = append(res.Timing, nsjail.Stage{Name: "total", Usec: time.Since(t0).Microseconds()})
	}
	return res, nil
}

// landlockSpec derives the Landlock rules from the policy and the mount
// plan: read+execute on the tooling tree and extra read-only binds, read on
// /etc, /proc and /dev, read-write on the workspace and scratch mounts and
// the device nodes; no TCP bind or connect beyond what the policy allows;
// abstract unix sockets and signals scoped to the sandbox's own commands.
func landlockSpec(p *policy.Policy, plan *mounts.Plan) *nsjail.LandlockSpec {
	ls := &nsjail.LandlockSpec{
		ReadOnly:          []string{"/etc", "/proc", "/dev"},
		ListOnly:          []string{"/"},
		ReadWrite:         []string{policy.WorkspaceMount, "/tmp", policy.SandboxHome, "/dev/shm"},
		ReadWriteFiles:    []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/ptmx", "/dev/pts"},
		ScopeAbstractUnix: true,
		ScopeSignal:       true,
		Strict:            p.Enforcement == policy.EnforceStrict,
	}
	if p.Filesystem.Sys {
		ls.ReadOnly = append(ls.ReadOnly, "/sys")
	}
	for _, s := range plan.Steps {
		if s.Kind == mounts.Bind && s.ReadOnly && s.Target != "/etc" && !strings.HasPrefix(s.Target, "/etc/") {
			ls.ReadExec = append(ls.ReadExec, s.Target)
		}
	}
	if p.Network.Mode == policy.NetProxy {
		ls.ConnectTCP = append(ls.ConnectTCP, nsjail.ProxyHTTPPort, nsjail.ProxySOCKSPort)
	}
	for _, port := range p.Network.LocalPorts {
		ls.ConnectTCP = append(ls.ConnectTCP, uint16(port))
		ls.BindTCP = append(ls.BindTCP, uint16(port))
	}
	return ls
}

func execMessage(cmd string, info nsjail.ExitInfo, env []string) string {
	switch info.ExecCode {
	case ExitNotFound:
		path := policy.DefaultPath
		for _, e := range env {
			if strings.HasPrefix(e, "PATH=") {
				path = e[5:]
			}
		}
		if strings.Contains(cmd, "/") {
			return fmt.Sprintf("hutch: command not found: %s does not exist inside the sandbox (only the tooling tree, /workspace, /tmp and HOME are visible)", cmd)
		}
		return fmt.Sprintf("hutch: command not found: %s (searched PATH inside the sandbox: %s)", cmd, path)
	case ExitCannotExec:
		return fmt.Sprintf("hutch: cannot execute %s: %s", cmd, info.ExecError)
	default:
		return fmt.Sprintf("hutch: could not start %s in the sandbox: %s", cmd, info.ExecError)
	}
}

// ResolveWorkspace returns the absolute, symlink-free path of the
// workspace ("" = the current directory) and checks that it is a directory.
func ResolveWorkspace(dir string) (string, error) {
	if dir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", fmt.Errorf("workspace: current directory: %w", err)
		}
		dir = wd
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w (pass an existing directory with --workspace)", dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("workspace %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("workspace %s: not a directory (pass a directory with --workspace)", dir)
	}
	if real == "/" {
		return "", fmt.Errorf("workspace %s: refusing to expose the whole host root read-write; pass a project directory with --workspace", dir)
	}
	return real, nil
}

func insideCwd(c string) (string, error) {
	if c == "" {
		return defaultWorkDir, nil
	}
	if !filepath.IsAbs(c) {
		c = filepath.Join(defaultWorkDir, c)
	}
	return filepath.Clean(c), nil
}
