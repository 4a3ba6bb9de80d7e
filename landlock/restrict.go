package landlock

import (
	"fmt"

	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// RestrictSelf sets no_new_privs and enforces the ruleset fd on the calling
// thread (landlock_restrict_self(fd, 0)). Both are per-thread: the caller
// must hold runtime.LockOSThread, and only that thread (and what it execs or
// clones afterwards) is restricted. Other threads of a Go process are not;
// use it right before execve. The fd is not closed.
//
// This is what hutch's exec stage does in C; RestrictSelf serves tests and
// is a fallback.
func RestrictSelf(fd int) error {
	if fd < 0 {
		return fmt.Errorf("landlock: no ruleset (fd %d)", fd)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("landlock: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, 0); err != nil {
		return fmt.Errorf("landlock: landlock_restrict_self: %w", err)
	}
	return nil
}

// ScopeRuleset returns a ruleset that handles no access right and only
// scopes signals and abstract unix sockets (Landlock ABI 6): each domain
// made from it keeps the processes inside from signalling, or connecting to
// the abstract sockets of, processes outside it, including those of the
// enclosing domain. A session's spawner gives every command such a layer of
// its own. The caller closes the fd.
func ScopeRuleset() (int, error) {
	abi := ABI()
	if abi < 6 {
		return -1, fmt.Errorf("landlock: signal and abstract unix socket scoping need ABI 6 (Linux 6.12), this kernel has ABI %d", abi)
	}
	fd, err := ll.LandlockCreateRuleset(&ll.RulesetAttr{Scoped: ll.ScopeSignal | ll.ScopeAbstractUnixSocket}, 0)
	if err != nil {
		return -1, fmt.Errorf("landlock: create scope ruleset: %w", err)
	}
	return fd, nil
}
