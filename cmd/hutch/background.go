package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/session"
)

// execDetach is `hutch exec --detach NAME -- CMD`: the command runs in the
// session's background; its id goes to stdout.
func execDetach(c *cli.Context, name string, argv []string, timeout time.Duration) error {
	for _, f := range []string{"fresh", "json"} {
		if c.Bool(f) {
			return &exitError{hutch.ExitSetup, fmt.Sprintf("hutch: --detach and --%s cannot be combined: a background command runs in the session, and its result is read later with hutch session logs", f)}
		}
	}
	cl, err := session.Dial(name)
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	defer cl.Close()
	id, err := cl.Detach(&session.Request{
		Argv: argv, Env: os.Environ(), ExtraEnv: c.StringSlice("env"), Cwd: c.String("cwd"), TimeoutMS: timeout.Milliseconds(),
	})
	if err != nil {
		return &exitError{hutch.ExitSetup, "hutch: " + err.Error()}
	}
	fmt.Println(id)
	fmt.Fprintf(os.Stderr, "hutch: %s runs in the background of session %s as %s: hutch session logs %s %s; hutch session kill %s %s\n",
		argv[0], name, id, name, id, name, id)
	return nil
}

// backgroundArgs checks NAME [ID] of ps, logs and kill and dials the
// session.
func backgroundArgs(c *cli.Context, withID bool) (*session.Client, string, error) {
	want, usage := 1, "NAME"
	if withID {
		want, usage = 2, "NAME ID"
	}
	if c.NArg() != want {
		return nil, "", &exitError{2, fmt.Sprintf("hutch: usage: hutch session %s %s", c.Command.Name, usage)}
	}
	cl, err := session.Dial(c.Args().First())
	if err != nil {
		return nil, "", &exitError{1, "hutch: " + err.Error()}
	}
	return cl, c.Args().Get(1), nil
}

func sessionPs(c *cli.Context) error {
	cl, _, err := backgroundArgs(c, false)
	if err != nil {
		return err
	}
	defer cl.Close()
	list, err := cl.Ps()
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "ID\tSTATE\tSTARTED\tCOMMAND")
	for _, in := range list {
		fmt.Fprintf(w, "%s\t%s\t%s ago\t%s\n", in.ID, state(in), time.Since(in.Started).Round(time.Second), strings.Join(in.Argv, " "))
	}
	return w.Flush()
}

// state says in a few words whether a background command runs or how it
// ended.
func state(in background.Info) string {
	switch {
	case in.Running:
		return "running"
	case in.TimedOut:
		return fmt.Sprintf("timed out (%d)", in.ExitCode)
	case in.Stopped:
		return fmt.Sprintf("killed (%d)", in.ExitCode)
	}
	return fmt.Sprintf("exited %d", in.ExitCode)
}

func sessionLogs(c *cli.Context) error {
	cl, id, err := backgroundArgs(c, true)
	if err != nil {
		return err
	}
	defer cl.Close()
	stdout, stderr, r, err := cl.Logs(id)
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	os.Stdout.Write(stdout)
	os.Stderr.Write(stderr)
	for _, d := range []struct {
		what string
		n    int64
	}{{"stdout", r.StdoutDropped}, {"stderr", r.StderrDropped}} {
		if d.n > 0 {
			fmt.Fprintf(os.Stderr, "hutch: the first %d bytes of %s are not kept (a background command keeps the last %s of each stream)\n", d.n, d.what, cgroup.FormatBytes(background.DefaultKeep))
		}
	}
	if len(r.Background) == 1 {
		reportEnd(r.Background[0])
	}
	return nil
}

// reportEnd says on stderr how a background command ended, with its
// "hutch: ..." lines; nothing while it runs.
func reportEnd(in background.Info) {
	if in.Running {
		return
	}
	fmt.Fprintf(os.Stderr, "hutch: background command %s %s\n", in.ID, state(in))
	for _, m := range in.Messages {
		fmt.Fprintln(os.Stderr, m)
	}
}

func sessionKill(c *cli.Context) error {
	cl, id, err := backgroundArgs(c, true)
	if err != nil {
		return err
	}
	defer cl.Close()
	in, err := cl.Kill(id)
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	reportEnd(*in)
	return nil
}
