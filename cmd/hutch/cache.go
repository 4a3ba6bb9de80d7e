package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/caches"
	"github.com/hutchsandbox/hutch/policy"
)

// Exit status of hutch cache: 0 done; 1 something could not be done (a
// cache named that does not exist, one in use by a running sandbox, no
// cache directory, an error on the way), the rest still done; 2 hutch
// cache rm without anything to remove; 125 a flag that does not parse.

// cacheCommand is hutch cache ls|prune|rm: the persistent caches
// (docs/CACHES.md).
func cacheCommand() *cli.Command {
	return &cli.Command{
		Name:  "cache",
		Usage: "list, prune or remove the persistent caches (docs/CACHES.md)",
		Subcommands: []*cli.Command{
			{
				Name:  "ls",
				Usage: "list the caches: scope, name, disk usage, cap, last use, workspace; exit 1 when there is no cache directory",
				Flags: []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print the list as JSON"}},
				Action: func(c *cli.Context) error {
					root, err := cacheRoot()
					if err != nil {
						return err
					}
					list, err := caches.List(root, true)
					if err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
					sortEntries(list)
					if c.Bool("json") {
						if list == nil {
							list = []caches.Entry{}
						}
						b, _ := json.MarshalIndent(list, "", "  ")
						fmt.Println(string(b))
						return nil
					}
					if len(list) == 0 {
						fmt.Printf("no caches in %s\n", root)
						return nil
					}
					w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
					fmt.Fprintln(w, "SCOPE\tNAME\tSIZE\tCAP\tLAST USE\tWORKSPACE")
					for _, e := range list {
						ws := e.Workspace
						switch {
						case e.Scope == caches.ScopeUser:
							ws = "(every workspace)"
						case e.WorkspaceGone:
							ws += " (gone)"
						}
						last := ago(e.LastUsed)
						if e.InUse {
							last = "in use"
						}
						fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", e.Key, e.Name, humanBytes(e.Usage), humanBytes(e.Cap), last, ws)
					}
					return w.Flush()
				},
			},
			{
				Name:  "prune",
				Usage: "bring every cache over its cap down to 90% of it, least recently used files first, and remove the caches of workspaces that no longer exist; --older-than also removes caches unused that long, --all every cache; caches in use are left alone; exit 1 when one could not be pruned",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "all", Usage: "remove every cache that no sandbox holds"},
					&cli.StringFlag{Name: "older-than", Usage: "also remove the caches last used longer than `DURATION` ago, e.g. 720h"},
				},
				Action: func(c *cli.Context) error {
					root, err := cacheRoot()
					if err != nil {
						return err
					}
					var older time.Duration
					if v := c.String("older-than"); v != "" {
						d, err := policy.ParseDuration(v)
						if err != nil || d <= 0 {
							return &exitError{hutch.ExitSetup, fmt.Sprintf("hutch: --older-than %q: want a duration such as 720h (30 days) or 168h", v)}
						}
						older = d.D()
					}
					list, err := caches.List(root, false)
					if err != nil {
						return &exitError{1, "hutch: " + err.Error()}
					}
					sortEntries(list)
					now, failed := time.Now(), false
					for _, e := range list {
						what := e.Key + "/" + e.Name
						if c.Bool("all") || e.WorkspaceGone || (older > 0 && !e.LastUsed.IsZero() && now.Sub(e.LastUsed) > older) {
							err := caches.Remove(root, e.Key, e.Name)
							switch {
							case errors.Is(err, caches.ErrInUse):
								fmt.Printf("%s: in use by a running sandbox, left alone\n", what)
							case err != nil:
								fmt.Fprintf(os.Stderr, "hutch: %s: %v\n", what, err)
								failed = true
							case e.WorkspaceGone:
								fmt.Printf("%s: removed (its workspace %s no longer exists)\n", what, e.Workspace)
							default:
								fmt.Printf("%s: removed (last used %s)\n", what, ago(e.LastUsed))
							}
							continue
						}
						res, err := caches.Prune(root, e.Key, e.Name, 0, now)
						switch {
						case err != nil:
							fmt.Fprintf(os.Stderr, "hutch: %s: %v\n", what, err)
							failed = true
						case res.InUse:
							fmt.Printf("%s: in use by a running sandbox, left alone\n", what)
						case res.Removed > 0:
							fmt.Printf("%s: %s -> %s (cap %s), %d files removed\n", what, humanBytes(res.Before), humanBytes(res.After), humanBytes(res.Cap), res.Removed)
						default:
							fmt.Printf("%s: %s, within its cap %s\n", what, humanBytes(res.After), humanBytes(res.Cap))
						}
					}
					if failed {
						return &exitError{code: 1}
					}
					return nil
				},
			},
			{
				Name:      "rm",
				Usage:     "remove caches: NAME... of a scope (--scope, default this workspace's), every cache of a scope (--scope without NAME), or --all; exit 1 when one is missing or in use",
				ArgsUsage: "[NAME...]",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "scope", Usage: "`SCOPE`: workspace (the workspace's, see --workspace), user, or a scope as hutch cache ls shows it"},
					&cli.StringFlag{Name: "workspace", Aliases: []string{"w"}, Usage: "the workspace `DIR` of --scope workspace (default: the current directory)"},
					&cli.BoolFlag{Name: "all", Usage: "every cache of every scope"},
				},
				Action: cacheRemove,
			},
		},
	}
}

func cacheRemove(c *cli.Context) error {
	if c.NArg() == 0 && !c.IsSet("scope") && !c.Bool("all") {
		return &exitError{2, "hutch: usage: hutch cache rm [--scope SCOPE] NAME... | --scope SCOPE | --all (see hutch cache ls)"}
	}
	root, err := cacheRoot()
	if err != nil {
		return err
	}
	list, err := caches.List(root, false)
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	sortEntries(list)
	var targets []caches.Entry
	failed := false
	if c.Bool("all") {
		if c.NArg() > 0 || c.IsSet("scope") {
			return &exitError{2, "hutch: cache rm --all takes no NAME and no --scope"}
		}
		targets = list
	} else {
		key, err := scopeFlag(c)
		if err != nil {
			return err
		}
		for _, e := range list {
			if e.Key == key && (c.NArg() == 0 || slices.Contains(c.Args().Slice(), e.Name)) {
				targets = append(targets, e)
			}
		}
		for _, n := range c.Args().Slice() {
			if !slices.ContainsFunc(targets, func(e caches.Entry) bool { return e.Name == n }) {
				fmt.Fprintf(os.Stderr, "hutch: no cache %q in the scope %s (see hutch cache ls)\n", n, key)
				failed = true
			}
		}
	}
	for _, e := range targets {
		what := e.Key + "/" + e.Name
		size := caches.Usage(e.Dir)
		err := caches.Remove(root, e.Key, e.Name)
		switch {
		case errors.Is(err, caches.ErrInUse):
			fmt.Fprintf(os.Stderr, "hutch: %s: in use by a running sandbox or session; stop it first (hutch session ls)\n", what)
			failed = true
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(os.Stderr, "hutch: %s: no such cache\n", what)
			failed = true
		case err != nil:
			fmt.Fprintf(os.Stderr, "hutch: %s: %v\n", what, err)
			failed = true
		default:
			fmt.Printf("%s: removed (%s)\n", what, humanBytes(size))
		}
	}
	if failed {
		return &exitError{code: 1}
	}
	return nil
}

// scopeFlag is the scope directory --scope and --workspace name.
func scopeFlag(c *cli.Context) (string, error) {
	switch s := c.String("scope"); s {
	case "", caches.ScopeWorkspace:
		ws, err := hutch.ResolveWorkspace(c.String("workspace"))
		if err != nil {
			return "", &exitError{1, "hutch: " + err.Error()}
		}
		return caches.ScopeKey(caches.ScopeWorkspace, ws), nil
	case caches.ScopeUser:
		return caches.UserKey, nil
	default:
		if s == "." || s == ".." || strings.ContainsAny(s, "/\x00") {
			return "", &exitError{1, fmt.Sprintf("hutch: --scope %q: want workspace, user, or a scope as hutch cache ls shows it", s)}
		}
		return s, nil
	}
}

// cacheRoot is the caches' directory, or exit 1 when hutch has none.
func cacheRoot() (string, error) {
	root := caches.Root()
	if root == "" {
		return "", &exitError{1, "hutch: no cache directory: neither XDG_CACHE_HOME nor HOME is set"}
	}
	return filepath.Clean(root), nil
}

func sortEntries(l []caches.Entry) {
	slices.SortFunc(l, func(a, b caches.Entry) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
}

// humanBytes is n in the largest binary unit that leaves a number of at
// least 1, with one decimal.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	f, u := float64(n), 0
	for f >= unit && u < 4 {
		f /= unit
		u++
	}
	return fmt.Sprintf("%.1f%s", f, []string{"B", "KiB", "MiB", "GiB", "TiB"}[u])
}

// ago says how long ago t was, roughly.
func ago(t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := time.Since(t)
	switch {
	case d < time.Minute:
		return "just now"
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}
