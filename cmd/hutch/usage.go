package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
)

// handleUsage gives every command and subcommand the same handling of bad
// usage: a flag that does not parse, or an unknown command, is an error
// naming it and what would be valid, exit 125, and no help text on stdout
// (which a --json caller reads).
func handleUsage(app *cli.App) {
	app.OnUsageError = usageError
	app.Action = unknownCommand
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			c.OnUsageError = usageError
			if len(c.Subcommands) > 0 && c.Action == nil {
				c.Action = unknownCommand
			}
			walk(c.Subcommands)
		}
	}
	walk(app.Commands)
}

// unknownCommand is the action of hutch and of a command with
// subcommands: without arguments it shows the help, else it refuses the
// name it was given.
func unknownCommand(c *cli.Context) error {
	cmds, where := c.App.Commands, c.App.Name
	sub := c.Command != nil && len(c.Command.Subcommands) > 0
	if sub {
		cmds, where = c.Command.Subcommands, c.Command.HelpName
	}
	if c.NArg() == 0 {
		if sub {
			return cli.ShowSubcommandHelp(c)
		}
		return cli.ShowAppHelp(c)
	}
	var names []string
	for _, cmd := range cmds {
		if !cmd.Hidden && cmd.Name != "help" {
			names = append(names, cmd.Name)
		}
	}
	return &exitError{hutch.ExitSetup, fmt.Sprintf("hutch: unknown command %q for %s: want one of %s (see %s --help)",
		c.Args().First(), where, strings.Join(names, ", "), where)}
}

// usageError turns urfave/cli's "invalid value "x" for flag -pids: parse
// error" into "hutch: --pids "x": want a whole number (see hutch run --help)".
func usageError(c *cli.Context, err error, _ bool) error {
	where := c.App.Name
	if c.Command != nil && c.Command.Name != "" {
		where = c.Command.HelpName
	}
	msg := strings.TrimSuffix(err.Error(), ": parse error")
	var fields []string
	for _, w := range strings.Fields(msg) {
		if strings.HasPrefix(w, "-") && !strings.HasPrefix(w, "--") && len(strings.TrimSuffix(w, ":")) > 2 {
			w = "-" + w // Go's flag package writes long flags with one dash
		}
		fields = append(fields, w)
	}
	msg = strings.Join(fields, " ")
	if c.Command != nil {
		for _, f := range c.Command.Flags {
			name := f.Names()[0]
			if !strings.Contains(msg+" ", "--"+name+" ") && !strings.Contains(msg, "--"+name+":") {
				continue
			}
			switch f.(type) {
			case intFlag, *cli.IntFlag:
				msg += ": want a whole number"
			case float64Flag, *cli.Float64Flag:
				msg += ": want a number, e.g. 0.5"
			case boolFlag, *cli.BoolFlag:
				msg += ": a switch, true or false (--" + name + " or --" + name + "=false)"
			}
			break
		}
	}
	return &exitError{hutch.ExitSetup, "hutch: " + msg + " (see " + where + " --help)"}
}

// envFlag checks the --env entries (K=V or K) before anything is set up.
func envFlag(c *cli.Context) error {
	_, err := policy.Default().CommandEnv(nil, c.StringSlice("env"))
	return err
}

// flagKeys are the policy keys that flags set, for errors about the
// effective policy.
var flagKeys = map[string]string{
	"filesystem.workspace": "workspace", "filesystem.workspace_at": "workspace-at", "filesystem.tooling": "tooling", "filesystem.tmp_size": "tmp-size",
	"resources.memory": "memory", "resources.pids": "pids", "resources.cpus": "cpus", "resources.timeout": "timeout",
	"network.mode": "net", "seccomp.profile": "seccomp-profile",
	"seccomp.ptrace": "allow-ptrace", "sandbox.isolation": "isolation",
}

// nameFlags rewrites the problems of the effective policy that flags
// caused to name the flag and its value first: "--memory 1MiB:
// resources.memory: must be at least 16MiB, not 1MiB". fromFile are the
// policy's allow entries, read-only binds and publish entries before the
// flags added theirs.
func nameFlags(c *cli.Context, err error, fromFile fromFile) error {
	var list []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{err}
	}
	var lines []string
	for _, e := range list {
		var pe *policy.Error
		line := e.Error()
		if errors.As(e, &pe) {
			if flag, value, ok := flagFor(c, pe.Key, fromFile); ok {
				line = fmt.Sprintf("--%s %s: %s", flag, value, line)
			} else {
				line = "effective policy (after flags): " + line
			}
		}
		lines = append(lines, line)
	}
	return errors.New(strings.Join(lines, "\n"))
}

// fromFile counts the list entries a policy file gave, before the flags
// (--allow, --ro-bind, --publish) added theirs.
type fromFile struct{ allow, readOnly, publish int }

// flagFor finds the flag, and its value, that set key.
func flagFor(c *cli.Context, key string, fromFile fromFile) (flag, value string, ok bool) {
	if f, ok := flagKeys[key]; ok && c.IsSet(f) {
		return f, fmt.Sprint(c.Value(f)), true
	}
	for _, list := range []struct {
		prefix, flag string
		before       int
	}{{"network.allow[", "allow", fromFile.allow}, {"filesystem.read_only[", "ro-bind", fromFile.readOnly}, {"network.publish[", "publish", fromFile.publish}} {
		rest, found := strings.CutPrefix(key, list.prefix)
		if !found {
			continue
		}
		var i int
		if _, err := fmt.Sscanf(rest, "%d]", &i); err != nil || i < list.before {
			return "", "", false
		}
		if vals := c.StringSlice(list.flag); i-list.before < len(vals) {
			return list.flag, fmt.Sprintf("%q", vals[i-list.before]), true
		}
	}
	return "", "", false
}
