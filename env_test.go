package hutch_test

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
)

// A session keeps the last command environment it made; a different
// ExtraEnv or Env must not get the kept one.
func TestSessionCommandEnv(t *testing.T) {
	p := policy.Default()
	p.Filesystem.Workspace = t.TempDir()
	p.Network.DiscoverRegistries = false
	p.Network.Mode = policy.NetNone
	sess, err := hutch.NewSession(context.Background(), &hutch.SessionOptions{Policy: p, HostEnv: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}})
	if err != nil {
		t.Fatalf("no sandbox: %v", err)
	}
	defer sess.Close()
	run := func(o *hutch.ExecOptions) string {
		t.Helper()
		r, w, _ := os.Pipe()
		o.Argv, o.Stdout = []string{"/bin/sh", "-c", `echo "X=${X-unset} LANG=${LANG-unset}"`}, w
		res, err := sess.Exec(context.Background(), o)
		w.Close()
		out, _ := io.ReadAll(r)
		r.Close()
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("exec: %v, %+v", err, res)
		}
		return strings.TrimSpace(string(out))
	}
	for i, c := range []struct {
		o    hutch.ExecOptions
		want string
	}{
		{hutch.ExecOptions{ExtraEnv: []string{"X=1"}}, "X=1 LANG=C.UTF-8"},
		{hutch.ExecOptions{ExtraEnv: []string{"X=1"}}, "X=1 LANG=C.UTF-8"},
		{hutch.ExecOptions{}, "X=unset LANG=C.UTF-8"},
		{hutch.ExecOptions{ExtraEnv: []string{"X=2"}}, "X=2 LANG=C.UTF-8"},
		{hutch.ExecOptions{Env: []string{"LANG=de_DE.UTF-8"}, ExtraEnv: []string{"X=2"}}, "X=2 LANG=de_DE.UTF-8"},
		{hutch.ExecOptions{ExtraEnv: []string{"X=2"}}, "X=2 LANG=C.UTF-8"},
	} {
		if got := run(&c.o); got != c.want {
			t.Errorf("exec %d: %q, want %q", i, got, c.want)
		}
	}
}

// More than execve takes is refused before anything starts, naming the
// limit, with the exit status of a command that cannot be executed.
func TestExecArgsTooLong(t *testing.T) {
	p := policy.Default()
	p.Filesystem.Workspace = t.TempDir()
	p.Network.Mode = policy.NetNone
	sess, err := hutch.NewSession(context.Background(), &hutch.SessionOptions{Policy: p, HostEnv: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatalf("no sandbox: %v", err)
	}
	defer sess.Close()
	res, err := sess.Exec(context.Background(), &hutch.ExecOptions{Argv: []string{"/bin/sh", "-c", strings.Repeat("x", 200<<10)}})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != hutch.ExitCannotExec || len(res.Messages) != 1 || !strings.Contains(res.Messages[0], "MAX_ARG_STRLEN") {
		t.Fatalf("exit %d, messages %q", res.ExitCode, res.Messages)
	}
}
