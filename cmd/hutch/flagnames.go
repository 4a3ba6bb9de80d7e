package main

import "github.com/urfave/cli/v2"

// urfave/cli's Names() runs a regular expression on every call, and the
// library calls Names for every flag of a command on every flag lookup
// (IsSet, and once per flag for flag actions): quadratic in the number of
// flags, half a millisecond of every `hutch run`. The wrappers below compute
// the names once; every other method is the flag's own (embedded), so
// parsing, help and defaults are unchanged (TestCachedFlagNames).

type boolFlag struct {
	*cli.BoolFlag
	names []string
}

func (f boolFlag) Names() []string { return f.names }

type stringFlag struct {
	*cli.StringFlag
	names []string
}

func (f stringFlag) Names() []string { return f.names }

type stringSliceFlag struct {
	*cli.StringSliceFlag
	names []string
}

func (f stringSliceFlag) Names() []string { return f.names }

type intFlag struct {
	*cli.IntFlag
	names []string
}

func (f intFlag) Names() []string { return f.names }

type float64Flag struct {
	*cli.Float64Flag
	names []string
}

func (f float64Flag) Names() []string { return f.names }

// cacheFlagNames wraps the flags of cmds and their subcommands.
func cacheFlagNames(cmds []*cli.Command) {
	for _, c := range cmds {
		for i, f := range c.Flags {
			c.Flags[i] = cachedNames(f)
		}
		cacheFlagNames(c.Subcommands)
	}
}

func cachedNames(f cli.Flag) cli.Flag {
	switch t := f.(type) {
	case *cli.BoolFlag:
		return boolFlag{t, t.Names()}
	case *cli.StringFlag:
		return stringFlag{t, t.Names()}
	case *cli.StringSliceFlag:
		return stringSliceFlag{t, t.Names()}
	case *cli.IntFlag:
		return intFlag{t, t.Names()}
	case *cli.Float64Flag:
		return float64Flag{t, t.Names()}
	}
	return f
}
