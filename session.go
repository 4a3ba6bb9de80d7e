package hutch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/caches"
	"github.com/hutchsandbox/hutch/egress"
	"github.com/hutchsandbox/hutch/gitrepos"
	"github.com/hutchsandbox/hutch/limits"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/publish"
	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/store"
)

const initSetupBudget = 30 * time.Second

// Session is a running sandbox: namespaces, root filesystem, egress proxy
// and security log, created once. Every Exec gets the full per-command
// hardening (uid 1000, no capabilities, no_new_privs, Landlock, seccomp)
// again. A Session is safe for concurrent use.
type Session struct {
	p      *policy.Policy
	o      SessionOptions
	plan   *plan.Sandbox
	st     *store.Store
	sb     *nsjail.Sandbox
	repos  *gitrepos.Watch
	filter *seccompprofiles.Filter
	rec    *seclog.Recorder // session-wide events (the proxy)
	egress *egress.Server
	limits *limits.Sandbox
	caches *caches.Held // the persistent caches, locked while the sandbox lives
	// cachesDone delivers Acquire's outcome (nil: no caches); joinCaches
	// takes it once.
	cachesDone <-chan error
	cachesErr  error
	cachesUsec int64
	id         string
	timing     []nsjail.Stage

	// published serves the plan's published ports (nil: none;
	// published.go); background holds the detached commands (detach.go).
	published  *publish.Server
	lastActive atomic.Int64 // a published port's last connection (UnixNano)
	background background.Table

	// warnings go to the first command's Result.Warnings.
	warnMu   sync.Mutex
	warnings []string

	// env is the last command environment made from the session's host
	// environment: an agent's calls repeat the same extra variables.
	envMu    sync.Mutex
	envExtra []string
	env      []string

	// notifyCtx ends the spawner's notification server (at Close).
	notifyCtx    context.Context
	notifyCancel context.CancelFunc

	// scratch is the landlock isolation's private HOME and TMPDIR
	// directory (removed at Close); proxyPorts the egress proxy's ports on
	// the host's loopback there. Both "" / nil for namespaces.
	scratch    string
	proxyPorts []uint16
	// review is the change set a review sandbox writes (nil: none);
	// reviewSummary what it held when the sandbox ended.
	review        *reviewing
	reviewSummary *ReviewSummary

	closeOnce sync.Once
	// closeTiming holds the teardown stages (--debug), written by Close.
	closeTiming []nsjail.Stage
	closed      chan struct{}
}

// command is what a session knows of one running command (the Tag of its
// nsjail.Process): where its security events go, and its own seccomp
// notification server when it started the direct way.
type command struct {
	rec        *seclog.Recorder
	stopNotify context.CancelFunc
	notifyDone chan struct{}
}

// ID identifies the session's sandbox in the security log.
func (s *Session) ID() string { return s.id }

// Policy is the session's effective policy.
func (s *Session) Policy() *policy.Policy { return s.p }

// Plan is the session's sandbox as planned.
func (s *Session) Plan() *plan.Sandbox { return s.plan }

// Workspace is the host directory of the workspace (mounted at
// Plan().Workspace.Mount inside).
func (s *Session) Workspace() string { return s.plan.Workspace.Host }

// ReviewSummary is what a review sandbox left in its change set, once it
// has ended (Close); nil before, or without review mode.
func (s *Session) ReviewSummary() *ReviewSummary {
	select {
	case <-s.closed:
		return s.reviewSummary
	default:
		return nil
	}
}

// ChangeSet is the id of the change set a review sandbox writes ("" when
// the session is not in review mode).
func (s *Session) ChangeSet() string {
	if s.review == nil {
		return ""
	}
	return s.review.cs.Meta.ID
}

// imageDigest is the manifest digest of the image the root is made of, or
// "" (host or rootfs tooling).
func (s *Session) imageDigest() string {
	if s.plan.Image == nil {
		return ""
	}
	return s.plan.Image.Digest
}

// Done is closed when the session's sandbox has ended.
func (s *Session) Done() <-chan struct{} { return s.closed }

// NewSession creates a sandbox: it plans it from the policy and this host's
// facts (package plan), then makes it. A returned error means the sandbox
// could not be made; the message says what failed and what to do. Nothing
// is left behind on the host on error.
func NewSession(ctx context.Context, o *SessionOptions) (sess *Session, err error) {
	t0 := time.Now()
	defer o.Prestarted.Discard() // a no-op once the launch adopted it
	p := apiPolicy(o.Policy)
	host, err := plan.Gather(p, plan.GatherOptions{Env: o.HostEnv, SecurityLog: o.SecurityLog.Path(), ProbeUserns: nsjail.ProbeUserNamespacesOnce(store.Open()), ProbeOverlay: nsjail.ProbeOverlay})
	if err != nil {
		return nil, err
	}
	host.Build = o.Build
	var rv *reviewing
	if p.Filesystem.Review {
		if rv, err = openReview(p, host, o.ChangeSet, o.SessionName); err != nil {
			return nil, err
		}
	}
	sb, err := plan.Build(p, host, o.one)
	if err != nil {
		rv.end()
		return nil, err
	}
	s := &Session{p: p, o: *o, plan: sb, st: store.Open(), closed: make(chan struct{}), id: seclog.NewSandboxID(), review: rv}
	if o.Timing {
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.plan", Usec: time.Since(t0).Microseconds()})
	}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	// The caches' directories are made and held (no prune removes
	// anything under the sandbox) beside the launch, before its root is
	// built (start joins it before Configure).
	if len(sb.Caches) > 0 {
		done := make(chan error, 1)
		s.cachesDone = done
		go func() {
			tc := time.Now()
			h, err := caches.Acquire(sb.CacheSpecs(), tc)
			s.caches, s.cachesUsec = h, time.Since(tc).Microseconds()
			done <- err
		}()
	}
	if err = s.start(ctx, t0); err != nil {
		return nil, err
	}
	return s, nil
}

// joinCaches waits for the caches' Acquire (if there are caches) and
// returns its error; the first call records its time under --debug.
func (s *Session) joinCaches() error {
	if s.cachesDone != nil {
		s.cachesErr, s.cachesDone = <-s.cachesDone, nil
		if s.o.Timing {
			s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.caches", Usec: s.cachesUsec})
		}
	}
	return s.cachesErr
}

// mark records a stage's time under --debug and returns now.
func (s *Session) mark(name string, since time.Time) time.Time {
	if s.o.Timing {
		s.timing = append(s.timing, nsjail.Stage{Name: name, Usec: time.Since(since).Microseconds()})
	}
	return time.Now()
}

// start makes the planned sandbox. Its limits (maybe creating a cgroup) are
// set up beside the rest: the init must be in its cgroup before it runs
// anything, so an init launched here is cloned into it once the limits are
// ready, and the placeholders and the seccomp filter are prepared while the
// init execs; a prestarted init is already running and joins its cgroup
// when adopted, after them.
func (s *Session) start(ctx context.Context, t0 time.Time) error {
	if s.plan.Isolation == policy.IsolationLandlock {
		dir, err := makeScratch()
		if err != nil {
			return &nsjail.SetupError{Op: "make the sandbox's scratch directory", Err: err}
		}
		s.scratch = dir
		s.plan = s.plan.WithScratch(dir).WithUserTasks(userTasks())
	}
	o, sb := &s.o, s.plan
	s.rec = seclog.NewRecorder(o.SecurityLog, s.id, []string{"(session)"})
	tLimits := time.Now()
	limitsDone := make(chan error, 1)
	go func() {
		l, err := limits.Setup(ctx, sb.Resources, s.id, sb.Enforcement == policy.EnforceStrict, o.Logger)
		s.limits = l
		if o.Timing {
			s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.limits", Usec: time.Since(tLimits).Microseconds()})
		}
		limitsDone <- err
	}()
	joined := false
	var limitsErr error
	joinLimits := func() error {
		if !joined {
			joined, limitsErr = true, <-limitsDone
		}
		return limitsErr
	}
	defer joinLimits() // before the error path's Close, which uses s.limits
	var tLaunch time.Time
	launch := func() error {
		if err := joinLimits(); err != nil {
			return err
		}
		for _, w := range sb.Warnings {
			s.warn(w)
		}
		if s.limits.Cgroup() == nil && sb.Resources.Cgroup != nil {
			// The plan expected a cgroup, but none could be made.
			s.warn(plan.FallbackWarning(s.limits.FallbackReason()))
		}
		cfg := &nsjail.Config{Executable: o.Executable, Logger: o.Logger, Prestarted: o.Prestarted,
			Spawner: sb.Process.Spawner, Listener: s.listener, NoNamespaces: sb.Isolation == policy.IsolationLandlock}
		if o.Diagnostics != nil {
			cfg.Stderr = o.Diagnostics
		}
		if cg := s.limits.Cgroup(); cg != nil {
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
		s.mark("supervisor.launch", tLaunch)
		return nil
	}
	if o.Prestarted == nil {
		if err := launch(); err != nil {
			return err
		}
	}
	tm := time.Now()
	var err error
	if s.filter, err = seccompprofiles.Load(ctx, seccompprofiles.LoadOptions{
		Profile: sb.Seccomp.Profile, Notify: true, WatchNetwork: sb.Seccomp.WatchNetwork, Strict: sb.Seccomp.Strict,
		Ptrace: sb.Seccomp.Ptrace, FakeChown: sb.Seccomp.FakeChown, HostNetwork: sb.Isolation == policy.IsolationLandlock, Store: s.st, Logger: o.Logger,
	}); err != nil {
		return err
	}
	if w := s.filter.Warnings; len(w) > 0 {
		// Said when the profile is compiled (a stored filter was said
		// when it was), once per profile.
		s.warn(plan.Warning{Subject: "seccomp-profile-" + s.filter.ProfileHash,
			Message: "seccomp profile " + sb.Seccomp.Profile + ": " + strings.Join(w, "; ")})
	}
	tm = s.mark("supervisor.seccomp", tm)
	s.repos = gitrepos.NewWatch(sb.Workspace.Host, sb.Workspace.Repos, sb.Workspace.Missing, gitrepos.DefaultBudget)
	if o.Prestarted != nil {
		if err := launch(); err != nil {
			return err
		}
	}
	s.mark("supervisor.adopt", tm)
	if s.filter.NotifyUnavailable != "" {
		s.hostFact(seclog.Event{Kind: seclog.KindSandbox, Rule: "seccomp", Subject: "notification unavailable",
			Message: "seccomp user notification unavailable (" + s.filter.NotifyUnavailable + "): denials are enforced but not logged", Level: slog.LevelInfo})
	}
	if s.filter.Notify {
		s.notifyCtx, s.notifyCancel = context.WithCancel(context.Background())
	}
	if err := s.joinCaches(); err != nil {
		return &nsjail.SetupError{Op: "prepare the persistent caches", Err: err}
	}
	sctx, cancel := context.WithTimeout(ctx, initSetupBudget)
	err = s.sb.Configure(sctx, &nsjail.Setup{Sandbox: sb, Rlimits: s.limits.Rlimits(), Seccomp: s.filter.BPF, Timing: o.Timing, Stdio: o.oneStdio})
	cancel()
	if err != nil {
		return err
	}
	if sb.Isolation == policy.IsolationLandlock && sb.Network.Proxy != nil {
		if p := s.sb.ProxyPorts(); len(p) == 3 {
			s.plan = s.plan.WithProxy(p[0], p[1], p[2])
			s.proxyPorts = []uint16{uint16(p[0]), uint16(p[1])}
		}
	}
	s.limits.Watch(s.sb.InitPid()) // the rlimit backend's watchdog; its /proc is mounted now
	if o.Timing {
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.configure", Usec: time.Since(tLaunch).Microseconds()})
	}
	if pre := o.Prestarted; pre != nil && pre.PlanHint != "" {
		if o.Logger != nil {
			o.Logger.Debug("plan hint", "path", pre.PlanHint, "state", s.sb.Ready.PlanHint)
		}
		if s.sb.Ready.PlanHint != "used" && s.review == nil { // a change set's plan is never the next one's
			if err := nsjail.StorePlanHint(s.st, pre, sb.Mounts); err != nil && o.Logger != nil {
				o.Logger.Debug("plan hint not stored", "path", pre.PlanHint, "error", err)
			}
		}
	}
	s.recordLandlockGaps()
	if im := sb.Image; im != nil {
		s.rec.Record(seclog.Event{Kind: seclog.KindSandbox, Rule: "filesystem.tooling", Subject: "image " + im.Ref,
			Message: "the sandbox's root is image " + im.Ref + " (" + im.Digest + ")", Level: slog.LevelInfo,
			Detail: map[string]any{"image": im.Ref, "digest": im.Digest}})
	}
	if px := sb.Network.Proxy; px != nil {
		te := time.Now()
		cfg := egress.ServeConfig{Allow: sb.Network.Allow, Recorder: s.rec, Logger: o.Logger}
		if sb.Network.DiscoverRegistries {
			ws := sb.Workspace.Host
			cfg.Discover = func(ctx context.Context) []policy.AllowEntry {
				var allow []policy.AllowEntry
				for _, d := range egress.DiscoverStored(ctx, s.st, ws, false) {
					allow = append(allow, d.Entry)
				}
				return allow
			}
		}
		if s.egress, err = egress.Serve(context.Background(), cfg, s.sb.ProxyFiles); err != nil {
			return &nsjail.SetupError{Op: "start the egress proxy", Err: err}
		}
		s.mark("supervisor.egress", te)
	}
	if err := s.publish(); err != nil {
		return err
	}
	if o.Timing {
		s.timing = append(s.timing, s.sb.Timing...)
		s.timing = append(s.timing, nsjail.Stage{Name: "supervisor.start", Usec: time.Since(t0).Microseconds()})
	}
	go func() {
		<-s.sb.Done()
		s.Close()
	}()
	return nil
}

// listener serves one seccomp listener of the sandbox (nsjail's
// Config.Listener): a direct command's own (p), or the spawner's (p nil),
// which serves every command it starts and attributes each notification by
// the caller's ancestry.
func (s *Session) listener(p *nsjail.Process) (*os.File, error) {
	if s.filter == nil || !s.filter.Notify {
		return nil, nil
	}
	mine, child, err := seccompprofiles.NotifyPair()
	if err != nil {
		return nil, err
	}
	prof := s.plan.Seccomp.Profile
	if p == nil {
		go seccompprofiles.ServeListener(s.notifyCtx, mine, s.filter, prof, s.recorderFor, s.proxyPorts...)
		return child, nil
	}
	c := p.Tag.(*command)
	ctx, cancel := context.WithCancel(s.notifyCtx)
	c.stopNotify, c.notifyDone = cancel, make(chan struct{})
	go func() {
		defer close(c.notifyDone)
		seccompprofiles.ServeListener(ctx, mine, s.filter, prof, func(uint32) *seclog.Recorder { return c.rec }, s.proxyPorts...)
	}()
	return child, nil
}

// recorderFor attributes a notification of the spawner's listener from host
// thread id tid to its command; one that belongs to none is the session's.
func (s *Session) recorderFor(tid uint32) *seclog.Recorder {
	if p := s.sb.CommandOf(tid); p != nil {
		if c, ok := p.Tag.(*command); ok {
			return c.rec
		}
	}
	return s.rec
}

// warn shows w with the first command's result, and records it in the
// security log, the first time this user sees it on this host: every
// command of an agent does not repeat it, and the log does not grow by a
// fact that did not change. A changed message (another reason) is new.
func (s *Session) warn(w plan.Warning) {
	if !s.hostFact(seclog.Event{Kind: seclog.KindSandbox, Rule: "enforcement", Subject: w.Subject, Message: w.Message, Level: slog.LevelInfo}) {
		return
	}
	s.warnMu.Lock()
	s.warnings = append(s.warnings, "hutch: warning: "+w.Message+" (shown once; see the security log and hutch doctor)")
	s.warnMu.Unlock()
}

// hostFact records ev, a fact of this host rather than of a command (what
// it cannot enforce), once per user and host; it reports whether it was new.
func (s *Session) hostFact(ev seclog.Event) bool {
	h := sha256.Sum256([]byte(ev.Rule + "\x00" + ev.Subject + "\x00" + ev.Message))
	if !s.st.Once(store.Warned, "fact-"+hex.EncodeToString(h[:16]), []byte(ev.Message+"\n")) {
		return false
	}
	s.rec.Record(ev)
	return true
}

// recordLandlockGaps logs what this kernel's Landlock could not enforce.
func (s *Session) recordLandlockGaps() {
	r := s.sb.Ready
	if r == nil {
		return
	}
	for _, gap := range r.LandlockNotEnforced {
		s.hostFact(seclog.Event{Kind: seclog.KindSandbox, Rule: "landlock", Subject: "not enforced",
			Message: "landlock: not enforced on this host: " + gap, Level: slog.LevelInfo,
			Detail: map[string]any{"abi": r.LandlockABI}})
	}
}

// Close tears the sandbox down: every process is killed, the proxy stops,
// the cgroup goes. It is idempotent.
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
		// SIGKILL first; while the kernel tears the sandbox down, stop
		// what does not need it gone.
		if s.sb != nil {
			s.sb.Kill()
		}
		mark("teardown.kill")
		if s.notifyCancel != nil {
			s.notifyCancel()
		}
		s.egress.Stop()
		s.published.Stop()
		mark("teardown.egress")
		if s.sb != nil {
			s.sb.Close()
		}
		s.background.Close() // its commands ended with the sandbox: their ends are read
		mark("teardown.init")
		s.reviewSummary = s.review.end() // the overlay is gone with the init
		mark("teardown.review")
		s.limits.Close()
		mark("teardown.limits")
		if s.scratch != "" {
			// The sandbox's processes are gone: nothing writes here any more.
			if rerr := os.RemoveAll(s.scratch); rerr != nil && s.o.Logger != nil {
				s.o.Logger.Warn("remove the scratch directory", "dir", s.scratch, "err", rerr)
			}
		}
		if s.joinCaches(); s.caches != nil {
			// Once a day per cache: measured, and pruned to its cap
			// (the sandbox is gone; another one holding it defers it).
			s.caches.Release()
			s.caches.Maintain(time.Now())
			mark("teardown.caches")
		}
		close(s.closed)
	})
	return err
}

// commandEnv is o's command's environment (plan.Sandbox.CommandEnv). The
// result is read-only; the last one made from the session's own host
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
	env, err := s.plan.CommandEnv(host, o.ExtraEnv)
	if err != nil {
		return nil, err
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
	cwd, err := s.plan.Cwd(o.Cwd, o.HostCwd)
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
	if err := nsjail.CheckArgs(o.Argv, env); err != nil {
		// What execve would refuse (E2BIG), said before anything starts.
		return &Result{ExitCode: ExitCannotExec, SandboxID: s.id, Messages: []string{"hutch: cannot execute " + o.Argv[0] + ": " + err.Error()}}, nil
	}
	c := &command{rec: seclog.NewRecorder(s.o.SecurityLog, s.id, o.Argv)}
	stopWatch := s.rec.Watch(c.rec)
	defer stopWatch()
	before := s.limits.Events()
	defer s.limits.Busy()()
	req := &nsjail.ExecRequest{Argv: o.Argv, Env: env, Cwd: cwd, Stdin: stdin, Stdout: stdout, Stderr: stderr, Tag: c}
	if o.Terminal != nil {
		req.Terminal, req.TerminalStreams = o.Terminal.Master, streams(stdin, stdout, stderr)
	}
	proc, err := s.sb.Exec(req)
	tSent := time.Now()
	if err != nil {
		return nil, &nsjail.SetupError{Op: "start the command", Err: err}
	}
	res := &Result{SandboxID: s.id, Image: s.imageDigest()}
	if s.plan.Isolation != policy.IsolationNamespaces {
		res.Isolation, res.IsolationLimits = s.plan.Isolation, s.plan.Differences
	}
	s.warnMu.Lock()
	res.Warnings, s.warnings = s.warnings, nil
	s.warnMu.Unlock()
	timeout := s.plan.Lifecycle.Timeout.D()
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
	tDone := time.Now()
	if c.stopNotify != nil {
		c.stopNotify()
		<-c.notifyDone
	}
	rec := c.rec
	switch {
	case res.TimedOut:
		res.ExitCode = ExitTimeout
		msg := fmt.Sprintf("timed out after %s; the command and all its processes were killed (raise the limit with --timeout or resources.timeout)", policy.Duration(timeout))
		rec.Record(seclog.Event{Kind: seclog.KindTimeout, Rule: "resources.timeout", Subject: timeout.String(), Message: msg, Level: slog.LevelInfo})
		res.Messages = append(res.Messages, "hutch: "+msg)
	case cancelled:
		res.ExitCode = ExitSetup
		res.Messages = append(res.Messages, "hutch: cancelled; the command and all its processes were killed")
	case forkRefused(info):
		res.ExitCode = info.ExecCode
		msg := fmt.Sprintf("process limit %d reached: the command could not start (resources.pids; raise it with --pids)", s.plan.Resources.Limits.Pids)
		if s.plan.Resources.Shared {
			msg = fmt.Sprintf("process limit %d reached: the command could not start; the session's commands share it (resources.pids; raise it with --pids)", s.plan.Resources.Limits.Pids)
		}
		rec.Record(seclog.Event{Kind: seclog.KindLimit, Rule: "resources.pids", Subject: fmt.Sprint("pids ", s.plan.Resources.Limits.Pids), Message: msg, Level: slog.LevelWarn})
		res.Messages = append(res.Messages, "hutch: "+msg)
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
		s.limits.Left(info.Leftover)
		s.limits.Report(before, s.limits.Events(), info.Status, rec)
	}
	if s.o.one != nil {
		// A one-off sandbox ends with its command: its teardown (the
		// kernel's, of the pid namespace) runs beside the checks below.
		s.sb.Kill()
	}
	s.reportRepos(rec)
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

// reportRepos records what the command created in the workspace that git
// on the host would execute and hutch could not protect (it did not exist
// when the sandbox started): a repository, its hooks, its configuration.
func (s *Session) reportRepos(rec *seclog.Recorder) {
	for _, c := range s.repos.Check() {
		dir := filepath.Dir(c.Path)
		where := "the repository in " + dir
		if dir == "." {
			where, dir = "the workspace's repository", "."
		}
		msg := fmt.Sprintf("the command created %s in %s, which hutch could not protect (it did not exist when the sandbox started): git runs what it says; check it before running git there on the host (git -C %s config --list --show-origin; ls -la %s)", c.Path, where, dir, c.Path)
		if c.Repo {
			msg = fmt.Sprintf("the command created a git repository in %s: its configuration and hooks are the sandbox's work, and git runs what they say; check them before running git there on the host (git -C %s config --list --show-origin; ls -la %s/hooks)", dir, dir, c.Path)
		}
		rec.Record(seclog.Event{Kind: seclog.KindWorkspace, Rule: "filesystem.protected (git)", Subject: "created " + c.Path, Message: msg, Level: slog.LevelWarn,
			Detail: map[string]any{"path": c.Path, "workspace": s.plan.Workspace.Host}})
	}
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

// execMessage words a command that could not be executed.
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
			return fmt.Sprintf("hutch: command not found: %s does not exist inside the sandbox (only the tooling tree, the workspace, /tmp and HOME are visible)", cmd)
		}
		return fmt.Sprintf("hutch: command not found: %s (searched PATH inside the sandbox: %s)", cmd, path)
	case ExitCannotExec:
		return fmt.Sprintf("hutch: cannot execute %s: %s", cmd, info.ExecError)
	default:
		return fmt.Sprintf("hutch: could not start %s in the sandbox: %s", cmd, info.ExecError)
	}
}

// forkRefused reports whether a command could not start because its fork
// was refused (EAGAIN): the process limit is reached.
func forkRefused(info nsjail.ExitInfo) bool {
	return info.ExecCode == ExitSetup && strings.HasPrefix(info.ExecError, "fork the command:") &&
		strings.Contains(info.ExecError, syscall.EAGAIN.Error())
}
