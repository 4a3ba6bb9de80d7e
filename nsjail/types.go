package nsjail

import (
	"os"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/plan"
)

// Setup is what the init needs to build a sandbox. It travels from the
// supervisor to the init once, over the control socket.
type Setup struct {
	// Sandbox is the plan: root filesystem, identity, Landlock rules,
	// network.
	Sandbox *plan.Sandbox
	// Rlimits are set on every command (by its exec stage): the plan's, or
	// its fallback when the sandbox has no cgroup (limits.Sandbox.Rlimits).
	Rlimits []cgroup.Rlimit
	// Seccomp is the BPF program (struct sock_filter[]) every command runs
	// under; nil for none.
	Seccomp []byte
	// Timing asks the init to report per-stage timings.
	Timing bool
	// Stdio are a one-off sandbox's command's standard streams: those that
	// are files on the host get a Landlock rule of their own, with the
	// access each was opened with, so that the command can reopen them
	// through /dev/stdin, /dev/stdout and /dev/stderr
	// (landlock.AddOpenFileRule). A session's commands come later and
	// share one ruleset; they get none.
	Stdio []*os.File
}

// Ready is the init's answer to a successful setup.
type Ready struct {
	// Landlock describes what the kernel could and could not enforce.
	LandlockABI         int      `json:"landlock_abi"`
	LandlockEnforced    []string `json:"landlock_enforced,omitempty"`
	LandlockNotEnforced []string `json:"landlock_not_enforced,omitempty"`
	// PlanHint is what became of a prestarted init's plan hint: "" (none),
	// "used" or "unused" (it differed from the setup's plan, or could not
	// be read or built).
	PlanHint string `json:"plan_hint,omitempty"`
}

// Spawn asks the init to start one command.
type Spawn struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Cwd  string   `json:"cwd"`
	// Notify: a unix socket (4th fd) receives the seccomp listener.
	Notify bool `json:"notify,omitempty"`
	// ViaSpawner: the session's spawner starts the command (it carries the
	// shared restrictions and the seccomp listener already).
	ViaSpawner bool `json:"via_spawner,omitempty"`
	// Terminal: the command's stdio holds a terminal of its own (the
	// sandbox's, Sandbox.OpenPTY), which becomes its controlling terminal;
	// the command leads a session of its own instead of a process group in
	// the sandbox's session.
	Terminal bool `json:"terminal,omitempty"`
}
