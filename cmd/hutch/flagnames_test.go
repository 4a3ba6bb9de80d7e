package main

import (
	"bytes"
	"reflect"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// The flag-name cache changes nothing visible: every command's help is
// byte-identical, every flag is wrapped (a new flag type must be added to
// cachedNames), and parsed values arrive.
func TestCachedFlagNames(t *testing.T) {
	var paths [][]string
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := append(append([]string{}, prefix...), c.Name)
			paths = append(paths, p)
			for _, f := range c.Flags {
				switch f.(type) {
				case boolFlag, stringFlag, stringSliceFlag, intFlag, float64Flag:
				default:
					t.Errorf("hutch %s: flag %v (%T) is not wrapped by cachedNames", strings.Join(p, " "), f.Names(), f)
				}
			}
			walk(p, c.Subcommands)
		}
	}
	walk(nil, newApp().Commands)
	if len(paths) < 10 {
		t.Fatalf("only %d commands found", len(paths))
	}
	help := func(app *cli.App, path []string) string {
		var out bytes.Buffer
		app.Writer, app.ErrWriter = &out, &out
		args := append(append([]string{"hutch"}, path...), "--help")
		if err := app.Run(args); err != nil {
			t.Fatalf("hutch %s --help: %v", strings.Join(path, " "), err)
		}
		return out.String()
	}
	for _, p := range paths {
		want, got := help(newAppUncached(), p), help(newApp(), p)
		if want != got {
			t.Errorf("hutch %s --help differs with cached names:\nwant:\n%s\ngot:\n%s", strings.Join(p, " "), want, got)
		}
		if !strings.Contains(got, "--") && len(p) > 0 {
			t.Logf("hutch %s has no flags", strings.Join(p, " "))
		}
	}
	// Values and IsSet through the wrappers.
	app := newApp()
	cmd := &cli.Command{
		Name: "probe",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "net"}, &cli.StringSliceFlag{Name: "allow"}, &cli.IntFlag{Name: "pids"},
			&cli.Float64Flag{Name: "cpus"}, &cli.BoolFlag{Name: "json"}, &cli.StringFlag{Name: "workspace", Aliases: []string{"w"}},
		},
	}
	var got []any
	cmd.Action = func(c *cli.Context) error {
		got = []any{c.String("net"), c.StringSlice("allow"), c.Int("pids"), c.Float64("cpus"), c.Bool("json"), c.String("w"), c.IsSet("cpus"), c.IsSet("json"), c.IsSet("workspace")}
		return nil
	}
	app.Commands = []*cli.Command{cmd}
	cacheFlagNames(app.Commands)
	if err := app.Run([]string{"hutch", "probe", "--net", "none", "--allow", "a", "--allow", "b", "--pids", "7", "--cpus", "0.5", "-w", "/x"}); err != nil {
		t.Fatal(err)
	}
	want := []any{"none", []string{"a", "b"}, 7, 0.5, false, "/x", true, false, true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
}
