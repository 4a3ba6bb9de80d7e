package nsjail

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// The kernel's bounds on what execve takes (fs/exec.c): every argument and
// environment string at most MAX_ARG_STRLEN bytes with its NUL; all of them
// with their NULs, and a pointer each, within a quarter of the stack limit
// (RLIMIT_STACK, which commands inherit from hutch) but at most three
// quarters of _STK_LIM (8 MiB), and never less than 32 pages.
const (
	maxArgStrlen = 32 * 4096
	minArgMax    = 32 * 4096
	stkLim       = 8 << 20
)

// ArgsError says that a command's arguments and environment exceed what
// execve takes, and which limit.
type ArgsError struct{ Msg string }

func (e *ArgsError) Error() string { return e.Msg }

// CheckArgs reports, in words, when argv and env are more than execve
// accepts inside the sandbox, naming the limit; nil when they fit.
func CheckArgs(argv, env []string) error {
	var stack unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_STACK, &stack); err != nil {
		stack.Cur = stkLim
	}
	return checkArgs(argv, env, stack.Cur)
}

func checkArgs(argv, env []string, stack uint64) error {
	limit := min(uint64(stkLim/4*3), stack/4)
	limit = max(limit, minArgMax)
	total := uint64(8 * (max(len(argv), 1) + len(env)))
	for i, s := range argv {
		if len(s)+1 > maxArgStrlen {
			return &ArgsError{fmt.Sprintf("argument %d of the command is %d bytes; the kernel takes at most %d in one argument (MAX_ARG_STRLEN): pass it in a file instead", i, len(s), maxArgStrlen-1)}
		}
		total += uint64(len(s) + 1)
	}
	for _, s := range env {
		if len(s)+1 > maxArgStrlen {
			name := s
			for j := range s {
				if s[j] == '=' {
					name = s[:j]
					break
				}
			}
			if len(name) > 64 {
				name = name[:64] + "..."
			}
			return &ArgsError{fmt.Sprintf("environment variable %s is %d bytes; the kernel takes at most %d in one variable (MAX_ARG_STRLEN)", name, len(s), maxArgStrlen-1)}
		}
		total += uint64(len(s) + 1)
	}
	if total > limit {
		return &ArgsError{fmt.Sprintf("the command's arguments and environment are %d bytes; the kernel takes at most %d here (ARG_MAX: a quarter of the stack limit, RLIMIT_STACK %d bytes, at most 6 MiB; `ulimit -s` raises it)", total, limit, stack)}
	}
	return nil
}
