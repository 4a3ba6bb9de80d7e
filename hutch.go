// Package hutch runs commands in rootless sandboxes. It is the API that the
// hutch CLI uses and that other tools embed: build a policy (package
// policy), then Run one command in a fresh sandbox, or start a Session and
// Exec many commands in one warm sandbox.
package hutch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/seclog"
)

// Exit codes of hutch's own failures (Docker's convention; timeout(1)'s).
const (
	ExitTimeout    = 124
	ExitSetup      = 125
	ExitCannotExec = 126
	ExitNotFound   = 127
)

const initSetupBudget = 30 * time.Second

// SessionOptions describes a sandbox that stays up for many commands.
type SessionOptions struct {
	// Policy governs the sandbox; nil means policy.Default().
	Policy *policy.Policy
	// HostEnv is the caller's environment, filtered by the policy for
	// every command.
	HostEnv []string
	// Executable is the hutch binary to re-exec ("" = /proc/self/exe).
	Executable string
	// SecurityLog receives security events; nil discards them (the
	// summary lines in Result.Messages are produced either way).
	SecurityLog *seclog.Log
	// Diagnostics receives the init's own diagnostics; nil discards them.
	Diagnostics *os.File
	// Timing asks for per-stage timings.
	Timing bool
	Logger *slog.Logger
	// Prestarted is an init started early (package nsjail/prestart, used by
	// the hutch command); NewSession adopts it or discards it.
	Prestarted *nsjail.Prestarted
}

// Session is a running sandbox: namespaces, root filesystem, egress proxy
// and security log, created once. Every Exec gets the full per-command
// hardening (uid 1000, no capabilities, no_new_privs, Landlock, seccomp)
// again. A Session is safe for concurrent use.
type Session struct {
	p      *policy.Policy
	o      SessionOptions
	sb     *nsjail.Sandbox
	prot   *mounts.Protection
	filter *seccompprofiles.Filter
	prof   string
	rec    *seclog.Recorder // session-wide events (the proxy)
	egress *egressServer
	limits *limits
	ws     string
	id     string
	timing []nsjail.Stage
	// warnings go to the first command's Result.Warnings.
	warnMu   sync.Mutex
	warnings []string

	// env is the last command environment made from the session's host
	// environment: an agent's calls repeat the same extra variables.
	envMu    sync.Mutex
	envExtra []string
	env      []string

	// spawner starts a session's later commands (spawner.go).
	spawner       spawnerGate
	scopesSignals bool // the Landlock ruleset scopes signals

	closeOnce sync.Once
	// closeTiming holds the teardown stages (--debug), written by Close.
	closeTiming []nsjail.Stage
	closed      chan struct{}
}

// ID identifies the session's sandbox in the security log.
func (s *Session) ID() string { return s.id }

// Policy is the session's effective policy.
func (s *Session) Policy() *policy.Policy { return s.p }

// Workspace is the host directory mounted at /workspace.
func (s *Session) Workspace() string { return s.ws }

// Done is closed when the session's sandbox has ended.
func (s *Session) Done() <-chan struct{} { return s.closed }

// NewSession creates a sandbox. A returned error means the sandbox could
// not be made; the message says what failed and what to do. Nothing is
// left behind on the host on error.
func NewSession(ctx context.Context, o *SessionOptions) (sess *Session, err error) {
	t0 := time.Now()
	p := o.Policy
	if p == nil {
		p = policy.Default()
	}
	s := &Session{p: p, o: *o, closed: make(chan struct{}), id: seclog.NewSandboxID()}
	defer o.Prestarted.Discard() // a no-op once the launch adopted it
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	mark := func(name string, since time.Time) time.Time {
		if o.Timing {
			s.timing = append(s.timing, nsjail.Stage{Name: name, Usec: time.Since(since).Microseconds()})
		}
		return time.Now()
	}
	tm := time.Now()
	if s.ws, err = ResolveWorkspace(p.Filesystem.Workspace); err != nil {
		return nil, err
	}
	s.rec = seclog.NewRecorder(o.SecurityLog, s.id, []string{"(session)"})
	// The limits (probing the host's cgroups, maybe creating one) run
	// beside the planning. The init must be in its cgroup before it runs
	// anything: an init launched here is cloned into it, so the launch
	// waits for the limits and the planning overlaps the init's exec
	// instead; a prestarted init is already running and joins its cgroup
	// when adopted, after the planning.
	tLimits := time.Now()
	limitsDone := make(chan error, 1)
	var limitsTook time.Duration
	go func() {
		l, err := setupLimits(ctx, p, s.id, o.Logger)
		s.limits, limitsTook = l, time.Since(tLimits)
		limitsDone <- err
	}()
	var limitsErr error
	joined := false
	joinLimits := func() error {
		if !joined {
			joined = true
			limitsErr = <-limitsDone
			if o.Timing {
				s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.limits", Usec: limitsTook.Microseconds()})
			}
		}
		return limitsErr
	}
	defer joinLimits() // before the error path's Close, which uses s.limits
	var tLaunch time.Time
	launch := func() error {
		if err := joinLimits(); err != nil {
			return err
		}
		if s.limits.cg == nil {
			if w := warnOnce(s.rec, "rlimit-fallback", "memory, pids and cpus are capped only per process here (no cgroup): "+s.limits.reason); w != "" {
				s.warnings = append(s.warnings, w)
			}
		}
		cfg := &nsjail.Config{Executable: o.Executable, Logger: o.Logger, Prestarted: o.Prestarted}
		if o.Diagnostics != nil {
			cfg.Stderr = o.Diagnostics
		}
		if cg := s.limits.cg; cg != nil {
			if fd, ok := cg.FD(); ok {
				cfg.CgroupFD = fd // the init starts inside it (CLONE_INTO_CGROUP)
			} else {
				cfg.AfterStart = cg.AddProc // before the init runs any command
			}
		}
		tLaunch = time.Now()
		var err error
		if s.sb, err = nsjail.Launch(cfg); err != nil {
			return err
		}
		mark("supervisor.launch", tLaunch)
		return nil
	}
	if o.Prestarted == nil {
		if err = launch(); err != nil {
			return nil, err
		}
	}
	tm = mark("supervisor.pre", tm)
	hidden, err := hostdirs.InWorkspace(s.ws, hostdirs.Own())
	if err != nil {
		return nil, err
	}
	// Files hutch reads or appends to again, when they lie in the
	// workspace: read-only inside.
	protected := p.Filesystem.Protected
	files := []string{p.File}
	if prof := p.Seccomp.Profile; prof != "" && prof != "default" {
		files = append(files, prof)
	}
	if l := o.SecurityLog; l != nil {
		files = append(files, l.Path())
	}
	if rels, err := hostdirs.ConfigInWorkspace(s.ws, files); err != nil {
		return nil, err
	} else if len(rels) > 0 {
		protected = append(slices.Clone(protected), rels...)
	}
	if s.prot, err = mounts.PrepareProtected(s.ws, policy.WorkspaceMount, protected, hidden); err != nil {
		return nil, err
	}
	spec := &mounts.Spec{
		Tooling:        p.Filesystem.Tooling,
		Workspace:      s.ws,
		WorkspaceMount: policy.WorkspaceMount,
		Protected:      s.prot,
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
	tm = mark("supervisor.mount-plan", tm)
	if s.filter, s.prof, err = seccompFilter(ctx, p, o.Logger); err != nil {
		return nil, err
	}
	tm = mark("supervisor.seccomp", tm)
	if o.Prestarted != nil {
		if err = launch(); err != nil {
			return nil, err
		}
	}
	tm = mark("supervisor.adopt", tm)
	if s.filter.NotifyUnavailable != "" {
		s.rec.Record(seclog.Event{Kind: seclog.KindSandbox, Rule: "seccomp", Subject: "notification unavailable",
			Message: "seccomp user notification unavailable (" + s.filter.NotifyUnavailable + "): denials are enforced but not logged", Level: slog.LevelInfo})
	}
	proxied := p.Network.Mode == policy.NetProxy
	ls := landlockSpec(p, plan)
	s.scopesSignals = ls != nil && ls.ScopeSignal
	setup := nsjail.Setup{
		Plan:     plan,
		Landlock: ls,
		Hostname: p.Sandbox.Hostname,
		UID:      p.Sandbox.UID,
		GID:      p.Sandbox.GID,
		Timing:   o.Timing,
		Proxy:    proxied,
		Rlimits:  s.limits.rlimits,
	}
	mark("supervisor.setup", tm)
	tPlan := time.Since(t0)
	sctx, cancel := context.WithTimeout(ctx, initSetupBudget)
	err = s.sb.Configure(sctx, setup, s.filter.BPF)
	cancel()
	if err != nil {
		return nil, err
	}
	if o.Timing {
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.configure", Usec: time.Since(tLaunch).Microseconds()})
	}
	if pre := o.Prestarted; pre != nil && pre.PlanHint != "" {
		if o.Logger != nil {
			o.Logger.Debug("plan hint", "path", pre.PlanHint, "state", s.sb.Ready.PlanHint)
		}
		if s.sb.Ready.PlanHint != "used" {
			storePlanHint(pre.PlanHint, plan, o.Logger)
		}
	}
	s.recordLandlockGaps()
	if proxied {
		te := time.Now()
		if s.egress, err = startEgress(context.Background(), p, s.ws, s.sb.ProxyFiles, s.rec, o.Logger); err != nil {
			return nil, &nsjail.SetupError{Op: "start the egress proxy", Err: err}
		}
		mark("supervisor.egress", te)
	}
	if o.Timing {
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.plan", Usec: tPlan.Microseconds()})
		s.timing = append(s.timing, s.sb.Timing...)
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.start", Usec: time.Since(t0).Microseconds()})
	}
	go func() {
		<-s.sb.Done()
		s.Close()
	}()
	return s, nil
}

// recordLandlockGaps logs what this kernel's Landlock could not enforce.
func (s *Session) recordLandlockGaps() {
	r := s.sb.Ready
	if r == nil {
		return
	}
	var abiGaps []string
	for _, gap := range r.LandlockNotEnforced {
		s.rec.Record(seclog.Event{Kind: seclog.KindSandbox, Rule: "landlock", Subject: "not enforced",
			Message: "landlock: not enforced on this host: " + gap, Level: slog.LevelInfo,
			Detail: map[string]any{"abi": r.LandlockABI}})
		if strings.Contains(gap, "needs Landlock ABI") || strings.Contains(gap, "not available") {
			abiGaps = append(abiGaps, gap)
		}
	}
	if len(abiGaps) > 0 {
		if w := warnOnce(s.rec, fmt.Sprintf("landlock-abi-%d", r.LandlockABI),
			"Landlock on this kernel cannot apply all of hutch's rules: "+strings.Join(abiGaps, "; ")); w != "" {
			s.warnMu.Lock()
			s.warnings = append(s.warnings, w)
			s.warnMu.Unlock()
		}
	}
}

// Close tears the sandbox down: every process is killed, the proxy stops,
// placeholders are removed. It is idempotent.
func (s *Session) Close() error {
	var err error
	s.closeOnce.Do(func() {
		t := time.Now()
		mark := func(name string) {
			if s.o.Timing {
				s.closeTiming = append(s.closeTiming, nsjail.Stage{Name: name, Usec: time.Since(t).Microseconds()})
			}
			t = time.Now()
		}
		// SIGKILL first; while the kernel tears the sandbox down, clean up
		// what does not need it gone. The protected-path placeholders may
		// go now only if no sandboxed process is left (the init said so at
		// the last command's end): otherwise one could recreate a path the
		// moment its placeholder disappears.
		if s.sb != nil {
			empty := s.sb.Empty()
			s.sb.Kill()
			if s.prot != nil && len(s.prot.Placeholders) > 0 && s.o.Logger != nil {
				when := "after the init is gone (a sandboxed process may be left)"
				if empty {
					when = "while the init dies (no sandboxed process is left)"
				}
				s.o.Logger.Debug("teardown: protected-path placeholders removed " + when)
			}
			if empty && s.prot != nil {
				_ = s.prot.Cleanup() // what is left is retried below
			}
		}
		mark("teardown.kill")
		s.stopSpawner()
		s.egress.stop()
		mark("teardown.egress")
		if s.sb != nil {
			s.sb.Close()
		}
		mark("teardown.init")
		s.limits.close()
		mark("teardown.limits")
		if s.prot != nil {
			err = s.prot.Cleanup()
		}
		mark("teardown.placeholders")
		close(s.closed)
	})
	return err
}

// ExecOptions describes one command run in a session.
type ExecOptions struct {
	// Argv is the command and its arguments; Argv[0] is looked up in the
	// sandbox's PATH.
	Argv []string
	// ExtraEnv are --env entries: "K=V" sets, "K" passes K through from
	// the session's HostEnv (or from Env when set).
	ExtraEnv []string
	// Env, when non-nil, replaces the session's HostEnv for this command
	// (a session client's own environment).
	Env []string
	// Cwd is the working directory inside, absolute or relative to
	// /workspace; "" means /workspace.
	Cwd string
	// Timeout overrides the policy's wall-clock limit when > 0.
	Timeout time.Duration
	// Stdin, Stdout and Stderr are given to the command as they are.
	Stdin, Stdout, Stderr *os.File
	// Signals relays these signals to the command while it runs.
	Signals <-chan os.Signal
}

// Result is the outcome of one command.
type Result struct {
	// ExitCode is the command's own status, 128+N for signal N, or one of
	// the Exit* codes.
	ExitCode int
	// TimedOut is true when the wall-clock timeout ended the command.
	TimedOut bool
	// Messages are the "hutch: ..." lines for the caller, one per kind of
	// event the sandbox caused (a timeout, an exec failure, denials).
	Messages []string
	// SandboxID identifies the sandbox in the security log.
	SandboxID string
	// Warnings say what this host could not enforce (best effort). They
	// come once, with the first command of a session, and are also in the
	// security log; the CLI prints them on its stderr.
	Warnings []string
	// Timing lists per-stage durations when requested.
	Timing []nsjail.Stage
}

// commandEnv is the environment of o's command: the policy's filter of the
// host environment and o.ExtraEnv, pointed at the proxy when there is one.
// The result is read-only; the last one made from the session's own host
// environment is kept.
func (s *Session) commandEnv(o *ExecOptions) ([]string, error) {
	if o.Env == nil {
		s.envMu.Lock()
		defer s.envMu.Unlock()
		if s.env != nil && slices.Equal(s.envExtra, o.ExtraEnv) {
			return s.env, nil
		}
	}
	host := s.o.HostEnv
	if o.Env != nil {
		host = o.Env
	}
	env, err := s.p.CommandEnv(host, o.ExtraEnv)
	if err != nil {
		return nil, err
	}
	if s.p.Network.Mode == policy.NetProxy {
		env = proxyEnv(env)
	}
	if o.Env == nil {
		s.env, s.envExtra = env, slices.Clone(o.ExtraEnv)
	}
	return env, nil
}

// Exec runs one command in the session and waits for it. The command and
// everything it started are gone when Exec returns.
func (s *Session) Exec(ctx context.Context, o *ExecOptions) (*Result, error) {
	t0 := time.Now()
	if len(o.Argv) == 0 {
		return nil, errors.New("no command given")
	}
	cwd, err := insideCwd(o.Cwd)
	if err != nil {
		return nil, err
	}
	env, err := s.commandEnv(o)
	if err != nil {
		return nil, err
	}
	stdin, stdout, stderr := o.Stdin, o.Stdout, o.Stderr
	if stdin == nil || stdout == nil || stderr == nil {
		devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		defer devnull.Close()
		for _, f := range []**os.File{&stdin, &stdout, &stderr} {
			if *f == nil {
				*f = devnull
			}
		}
	}
	rec := seclog.NewRecorder(s.o.SecurityLog, s.id, o.Argv)
	stopWatch := s.rec.Watch(rec)
	defer stopWatch()
	via := s.useSpawner()
	req := &nsjail.ExecRequest{Argv: o.Argv, Env: env, Cwd: cwd, Stdin: stdin, Stdout: stdout, Stderr: stderr, ViaSpawner: via}
	if via {
		// Known before it can run, so that its first denial is its own.
		var tracked *nsjail.Process
		req.Created = func(p *nsjail.Process) { tracked = p; s.track(p, rec) }
		defer func() { s.untrack(tracked) }()
	}
	nctx, stopNotify := context.WithCancel(context.Background())
	defer stopNotify()
	var notifyDone chan struct{}
	if s.filter.Notify && !via {
		mine, child, err := notifyPair()
		if err != nil {
			return nil, err
		}
		req.Notify = child
		notifyDone = make(chan struct{})
		go func() {
			defer close(notifyDone)
			serveSeccomp(nctx, mine, s.filter, s.prof, func(uint32) *seclog.Recorder { return rec })
		}()
	}
	before := s.limits.events()
	proc, err := s.sb.Exec(req)
	tSent := time.Now()
	if req.Notify != nil {
		req.Notify.Close()
	}
	if err != nil {
		return nil, &nsjail.SetupError{Op: "start the command", Err: err}
	}
	res := &Result{SandboxID: s.id}
	s.warnMu.Lock()
	res.Warnings, s.warnings = s.warnings, nil
	s.warnMu.Unlock()
	timeout := s.p.Resources.Timeout.D()
	if o.Timeout > 0 {
		timeout = o.Timeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	cancelled := false
wait:
	for {
		select {
		case <-proc.Done():
			break wait
		case sig := <-o.Signals:
			if ss, ok := sig.(syscall.Signal); ok {
				_ = proc.Signal(ss)
			}
		case <-timer.C:
			res.TimedOut = true
			_ = proc.Terminate()
			s.awaitOrKill(proc)
			break wait
		case <-ctx.Done():
			cancelled = true
			_ = proc.Terminate()
			s.awaitOrKill(proc)
			break wait
		}
	}
	info := proc.Wait()
	if errors.Is(info.Err, nsjail.ErrSpawnerGone) {
		// Nothing ran: start the command the direct way.
		s.spawnerGone()
		return s.Exec(ctx, o)
	}
	tDone := time.Now()
	stopNotify()
	if notifyDone != nil {
		<-notifyDone
	}
	switch {
	case res.TimedOut:
		res.ExitCode = ExitTimeout
		msg := fmt.Sprintf("timed out after %s; the command and all its processes were killed (raise the limit with --timeout or resources.timeout)", policy.Duration(timeout))
		rec.Record(seclog.Event{Kind: seclog.KindTimeout, Rule: "resources.timeout", Subject: timeout.String(), Message: msg, Level: slog.LevelInfo})
		res.Messages = append(res.Messages, "hutch: "+msg)
	case cancelled:
		res.ExitCode = ExitSetup
		res.Messages = append(res.Messages, "hutch: cancelled; the command and all its processes were killed")
	case info.ExecCode != 0:
		res.ExitCode = info.ExecCode
		res.Messages = append(res.Messages, execMessage(o.Argv[0], info, env))
	case info.Err != nil:
		res.ExitCode = ExitSetup
		res.Messages = append(res.Messages, "hutch: "+info.Err.Error())
	default:
		res.ExitCode = info.Code()
	}
	if info.Err == nil && info.ExecCode == 0 {
		s.limits.report(before, s.limits.events(), info.Status, s.p, rec)
	}
	res.Messages = append(res.Messages, rec.Summary()...)
	if s.o.Timing {
		res.Timing = append(append(res.Timing, s.timing...),
			nsjail.Stage{Name: "exec.prepare", Usec: tSent.Sub(t0).Microseconds()},
			nsjail.Stage{Name: "exec.run", Usec: tDone.Sub(tSent).Microseconds()},
			nsjail.Stage{Name: "exec.report", Usec: time.Since(tDone).Microseconds()},
			nsjail.Stage{Name: "exec", Usec: time.Since(t0).Microseconds()})
	}
	return res, nil
}

// awaitOrKill waits for a terminated command; if its reaper does not end
// it promptly (sandboxed code can stop its own reaper), the whole sandbox
// goes, which always works.
func (s *Session) awaitOrKill(proc *nsjail.Process) {
	select {
	case <-proc.Done():
	case <-time.After(3 * time.Second):
		s.Close()
		<-proc.Done()
	}
}

// ForwardedSignals are the signals hutch relays to the command it runs.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// RunOptions describes one command in a fresh, one-off sandbox.
type RunOptions struct {
	Policy     *policy.Policy
	Argv       []string
	HostEnv    []string
	ExtraEnv   []string
	Cwd        string
	Stdin      *os.File
	Stdout     *os.File
	Stderr     *os.File
	Executable string
	// ForwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT that hutch
	// receives to the command.
	ForwardSignals bool
	Timing         bool
	SecurityLog    *seclog.Log
	Logger         *slog.Logger
	// Prestarted: see SessionOptions.
	Prestarted *nsjail.Prestarted
}

// Run executes one command in a fresh sandbox and tears the sandbox down.
// A returned error means the sandbox could not be made (exit 125).
func Run(ctx context.Context, o *RunOptions) (*Result, error) {
	t0 := time.Now()
	if len(o.Argv) == 0 {
		return nil, errors.New("no command given: usage: hutch run [flags] -- COMMAND [ARG...]")
	}
	sess, err := NewSession(ctx, &SessionOptions{
		Policy: o.Policy, HostEnv: o.HostEnv, Executable: o.Executable,
		SecurityLog: o.SecurityLog, Diagnostics: o.Stderr, Timing: o.Timing, Logger: o.Logger,
		Prestarted: o.Prestarted,
	})
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	var sigs chan os.Signal
	if o.ForwardSignals {
		sigs = make(chan os.Signal, 4)
		signal.Notify(sigs, ForwardedSignals...)
		defer signal.Stop(sigs)
	}
	res, err := sess.Exec(ctx, &ExecOptions{
		Argv: o.Argv, ExtraEnv: o.ExtraEnv, Cwd: o.Cwd,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Signals: sigs,
	})
	if err != nil {
		return nil, err
	}
	if cerr := sess.Close(); cerr != nil && o.Logger != nil {
		o.Logger.Warn("teardown", "err", cerr)
	}
	if o.Timing {
		res.Timing = append(res.Timing, sess.closeTiming...)
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

// insideCwd is the command's working directory inside the sandbox; one
// outside the workspace is refused (policy.InsideCwd).
func insideCwd(c string) (string, error) {
	return policy.InsideCwd(c)
}
