// Package hutch runs commands in rootless sandboxes. It is the API that the
// hutch CLI uses and that other tools embed: Run one command in a fresh
// sandbox, or start a Session and Exec many commands in one warm sandbox.
//
// The package is composition only: package plan turns the policy and the
// host's facts into a plan.Sandbox; here that plan is executed, each part by
// its own package (limits: cgroup or rlimits; nsjail: namespaces, root
// filesystem, per-command hardening; seccompprofiles: the filter and its
// notifications; egress: the proxy), and served.
package hutch

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/hutchsandbox/hutch/seclog"
	"github.com/hutchsandbox/hutch/store"
)

// Exit codes of hutch's own failures (Docker's convention; timeout(1)'s).
const (
	ExitTimeout    = 124
	ExitSetup      = 125
	ExitCannotExec = 126
	ExitNotFound   = 127
)

// SessionOptions describes a sandbox that stays up for many commands.
type SessionOptions struct {
	// Policy governs the sandbox; nil means policy.Default(). An empty
	// filesystem.workspace_at means "host" here: the workspace appears at
	// its own host path, so the paths a host-side caller passes work
	// inside.
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
	// ChangeSet names the change set of a review sandbox
	// (filesystem.review): made if missing, added to if it exists for the
	// same workspace; "" makes a new one-off id. SessionName is recorded
	// in it (apply then says which session to stop).
	ChangeSet, SessionName string
	// Build, when set, makes the sandbox an image build step's (package
	// imagebuild): its root is Build.Root overlaid with the writable
	// Build.Upper (mounts.Spec.Build). Not a policy key: only hutch image
	// build sets it.
	Build *mounts.BuildRoot

	// one is the command of a one-off sandbox (Run): the plan is made for
	// it alone (its limits are its own, not a session's shared ones).
	one *plan.Request
	// oneStdio are that command's standard streams (nsjail.Setup.Stdio).
	oneStdio []*os.File
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
	// Cwd is the working directory inside, absolute (inside, or the
	// workspace's host path) or relative to the workspace; "" means the
	// workspace, or where HostCwd lies in it.
	Cwd string
	// HostCwd is the caller's host directory: with Cwd empty, the command
	// starts at the same place in the workspace when it lies there.
	HostCwd string
	// Timeout overrides the policy's wall-clock limit when > 0.
	Timeout time.Duration
	// Stdin, Stdout and Stderr are given to the command as they are.
	Stdin, Stdout, Stderr *os.File
	// Signals relays these signals to the command while it runs.
	Signals <-chan os.Signal
	// Terminal, when set (Session.NewTerminal), is the command's terminal:
	// it replaces each of Stdin, Stdout and Stderr that is a terminal (the
	// caller's), and the command leads a session of its own with it as
	// its controlling terminal. The caller relays its Master (package
	// terminal).
	Terminal *Terminal
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
	// Image is the manifest digest of the image the sandbox's root is
	// made of (tooling "image:REF"), "" otherwise.
	Image string
	// Warnings say what this host could not enforce (best effort). They
	// come once, with the first command of a session, and are also in the
	// security log; the CLI prints them on its stderr.
	Warnings []string
	// Timing lists per-stage durations when requested.
	Timing []nsjail.Stage
	// Isolation is how the sandbox was made when it was not with
	// namespaces (policy.IsolationLandlock), and IsolationLimits what that
	// does not give (plan.LandlockDifferences); both empty for namespaces.
	Isolation       string
	IsolationLimits []string
	// Review is what a review sandbox (filesystem.review) left in its
	// change set; set by Run when the sandbox ended.
	Review *ReviewSummary `json:"review,omitempty"`
}

// ForwardedSignals are the signals hutch relays to the command it runs.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// RunOptions describes one command in a fresh, one-off sandbox.
type RunOptions struct {
	Policy   *policy.Policy
	Argv     []string
	HostEnv  []string
	ExtraEnv []string
	Cwd      string
	// HostCwd: see ExecOptions.
	HostCwd    string
	Stdin      *os.File
	Stdout     *os.File
	Stderr     *os.File
	Executable string
	// ForwardSignals relays SIGINT, SIGTERM, SIGHUP and SIGQUIT that hutch
	// receives to the command.
	ForwardSignals bool
	// Terminal: when Stdin, Stdout or Stderr is a terminal, the command
	// runs on a pseudo-terminal of the sandbox's own instead, relayed to
	// it (package terminal: raw mode on the caller's terminal while the
	// command runs and its stdin is the terminal, the window size followed,
	// the modes restored at the end). The streams that are not terminals
	// are passed as they are.
	Terminal    bool
	Timing      bool
	SecurityLog *seclog.Log
	Logger      *slog.Logger
	// Prestarted: see SessionOptions.
	Prestarted *nsjail.Prestarted
	// Build: see SessionOptions.
	Build *mounts.BuildRoot
}

// apiPolicy is p (nil: policy.Default()) with the Go API's defaults: the
// workspace at its own host path unless p says where (callers are
// host-side programs that pass host paths; the CLI's hutch run sets
// "/workspace" itself). p is not changed.
func apiPolicy(p *policy.Policy) *policy.Policy {
	if p == nil {
		p = policy.Default()
	}
	if p.Filesystem.WorkspaceAt == "" {
		cp := *p
		cp.Filesystem.WorkspaceAt = policy.WorkspaceAtHost
		p = &cp
	}
	return p
}

// Plan is the sandbox that Run with o would set up, computed and not made:
// the policy and this host's facts (package plan). Nothing is created.
func Plan(o *RunOptions) (*plan.Sandbox, error) {
	p := apiPolicy(o.Policy)
	h, err := plan.Gather(p, plan.GatherOptions{Env: o.HostEnv, SecurityLog: o.SecurityLog.Path(), ProbeUserns: nsjail.ProbeUserNamespacesOnce(store.Open()), ProbeOverlay: nsjail.ProbeOverlay})
	if err != nil {
		return nil, err
	}
	if p.Filesystem.Review {
		planReview(h)
	}
	var req *plan.Request
	if len(o.Argv) > 0 {
		req = &plan.Request{Argv: o.Argv, Cwd: o.Cwd, HostCwd: o.HostCwd, ExtraEnv: o.ExtraEnv}
	}
	return plan.Build(p, h, req)
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
		Prestarted: o.Prestarted, Build: o.Build, one: &plan.Request{Argv: o.Argv, Cwd: o.Cwd, HostCwd: o.HostCwd, ExtraEnv: o.ExtraEnv},
		oneStdio: []*os.File{o.Stdin, o.Stdout, o.Stderr},
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
	term, relay, err := runTerminal(sess, o)
	if err != nil {
		return nil, err
	}
	res, err := sess.Exec(ctx, &ExecOptions{
		Argv: o.Argv, ExtraEnv: o.ExtraEnv, Cwd: o.Cwd, HostCwd: o.HostCwd,
		Stdin: o.Stdin, Stdout: o.Stdout, Stderr: o.Stderr, Signals: sigs, Terminal: term,
	})
	if relay != nil {
		// What the command wrote last, then the caller's modes back.
		if rerr := relay.Close(); rerr != nil && o.Logger != nil {
			o.Logger.Warn("terminal", "err", rerr)
		}
	}
	if err != nil {
		return nil, err
	}
	if cerr := sess.Close(); cerr != nil && o.Logger != nil {
		o.Logger.Warn("teardown", "err", cerr)
	}
	res.Review = sess.ReviewSummary()
	if o.Timing {
		res.Timing = append(res.Timing, sess.closeTiming...)
		res.Timing = append(res.Timing, nsjail.Stage{Name: "total", Usec: time.Since(t0).Microseconds()})
	}
	return res, nil
}

// ResolveWorkspace returns the absolute, symlink-free path of the
// workspace ("" = the current directory) and checks that it is a directory.
// It is plan.ResolveWorkspace.
func ResolveWorkspace(dir string) (string, error) { return plan.ResolveWorkspace(dir) }
