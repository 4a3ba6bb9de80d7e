package main

import (
	"context"
	"errors"
	"os"
	"testing"
)

// Bad usage is an exit 125 naming the flag or command and what it takes;
// nothing goes to stdout (the help text used to).
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--pids", "abc", "--", "true"}, `hutch: invalid value "abc" for flag --pids: want a whole number (see hutch run --help)`},
		{[]string{"run", "--cpus=x", "--", "true"}, `hutch: invalid value "x" for flag --cpus: want a number, e.g. 0.5 (see hutch run --help)`},
		{[]string{"run", "--json=maybe", "--", "true"}, `hutch: invalid boolean value "maybe" for --json: a switch, true or false (--json or --json=false) (see hutch run --help)`},
		{[]string{"exec", "--nope", "s", "--", "true"}, `hutch: flag provided but not defined: --nope (see hutch exec --help)`},
		{[]string{"nope"}, `hutch: unknown command "nope" for hutch: want one of run, exec, session, mcp, plan, doctor, policy, seccomp, cache, image, diff, apply, discard, changes (see hutch --help)`},
		{[]string{"session", "nope"}, `hutch: unknown command "nope" for hutch session: want one of start, ls, ps, logs, kill, stop (see hutch session --help)`},
		{[]string{"policy", "show", "--memory", "1MiB", "--allow", "a.example.com:0"}, `hutch: --allow "a.example.com:0": port "0": want a number 1..65535`},
		{[]string{"policy", "show", "--memory", "1MiB", "--pids", "0"}, "hutch: --memory 1MiB: resources.memory: must be at least 16MiB, not 1MiB\n--pids 0: resources.pids: must be between 1 and 4194304, not 0"},
	} {
		stdout := os.Stdout
		r, w, _ := os.Pipe()
		os.Stdout = w
		err := newApp().RunContext(context.Background(), append([]string{"hutch"}, tc.args...))
		os.Stdout = stdout
		w.Close()
		out := make([]byte, 1)
		n, _ := r.Read(out)
		r.Close()
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != 125 && ee.code != 1 || ee.msg != tc.want || n != 0 {
			t.Errorf("hutch %q: %v (stdout %d bytes); want exit 125 or 1 with\n%s", tc.args, err, n, tc.want)
		}
	}
}
