package hutch

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/nsjail"
)

// noTimeout is a detached command's time limit when none is asked for: it
// runs until it ends, is stopped, or its session ends.
const noTimeout = time.Duration(math.MaxInt64)

// Detach starts a command that outlives the call: it returns at once, and
// the command runs in the session until it exits, is stopped
// (background.Command.Stop), or the session ends, which kills it with
// everything else in the sandbox. Its stdin is /dev/null; the last
// background.DefaultKeep bytes of its stdout and of its stderr are kept
// (Output), never written anywhere on the host. o.Stdin, o.Stdout,
// o.Stderr and o.Signals are not used. It has no time limit unless
// o.Timeout is set: the policy's resources.timeout is for commands a
// caller waits for. Like every command of a session it gets the full
// per-command hardening, and its reaper kills whatever it leaves when it
// ends.
func (s *Session) Detach(o *ExecOptions) (*background.Command, error) {
	if s.o.one != nil {
		return nil, errors.New("a one-off sandbox runs one command: start a session to run commands in the background")
	}
	if len(o.Argv) == 0 {
		return nil, errors.New("no command given")
	}
	// Said now rather than only in the command's end.
	if _, err := s.plan.Cwd(o.Cwd, o.HostCwd); err != nil {
		return nil, err
	}
	env, err := s.commandEnv(o)
	if err != nil {
		return nil, err
	}
	if err := nsjail.CheckArgs(o.Argv, env); err != nil {
		return nil, fmt.Errorf("cannot execute %s: %w", o.Argv[0], err)
	}
	eo := *o
	eo.Stdin = nil // /dev/null
	if eo.Timeout <= 0 {
		eo.Timeout = noTimeout
	}
	return s.background.Start(o.Argv, func(ctx context.Context, stdout, stderr *os.File, sigs <-chan os.Signal) (background.Outcome, error) {
		run := eo
		run.Stdout, run.Stderr, run.Signals = stdout, stderr, sigs
		res, err := s.Exec(ctx, &run)
		if err != nil {
			return background.Outcome{}, err
		}
		return background.Outcome{ExitCode: res.ExitCode, TimedOut: res.TimedOut, Messages: append(res.Messages, res.Warnings...)}, nil
	})
}

// Background is the session's detached commands (Detach).
func (s *Session) Background() *background.Table { return &s.background }
