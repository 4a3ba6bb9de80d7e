package nsjail

import (
	"fmt"

	"github.com/hutchsandbox/hutch/landlock"
)

// buildLandlock turns the spec into a ruleset fd inside the sandbox (after
// pivot_root, so paths are the sandbox's and rules attach to the final
// mounts) and records what this kernel enforced. The fd goes to every exec
// stage, which restricts itself with it just before execve.
func buildLandlock(spec *LandlockSpec, r *Ready) (int, error) {
	rules := landlock.Rules{
		ReadExec:          spec.ReadExec,
		ReadOnly:          spec.ReadOnly,
		ListOnly:          spec.ListOnly,
		ReadWrite:         spec.ReadWrite,
		ReadWriteFiles:    spec.ReadWriteFiles,
		ConnectTCP:        spec.ConnectTCP,
		BindTCP:           spec.BindTCP,
		ScopeAbstractUnix: spec.ScopeAbstractUnix,
		ScopeSignal:       spec.ScopeSignal,
	}
	fd, rep, err := landlock.Build(rules, spec.Strict)
	r.LandlockABI = rep.ABI
	r.LandlockEnforced = rep.Enforced
	r.LandlockNotEnforced = rep.NotEnforced
	if err != nil {
		return -1, fmt.Errorf("landlock (enforcement = \"strict\"): %w", err)
	}
	return fd, nil
}
