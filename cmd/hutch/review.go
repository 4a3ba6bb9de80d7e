package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/review"
)

// reviewFlag turns review mode on (filesystem.review) for run, session
// start, mcp and plan.
var reviewFlag = &cli.BoolFlag{Name: "review", Usage: "keep the workspace's writes in a change set instead of your files (filesystem.review): hutch diff, apply and discard act on it"}

// Exit statuses of hutch apply beyond 0 (all applied), 1 (an error) and 2
// (usage): some selected changes were left in the change set.
const exitApplyLeft = 3

// sessionStopWait is how long apply and discard wait for a session that
// was just stopped to release its change set.
const sessionStopWait = 10 * time.Second

func reviewCommands() []*cli.Command {
	return []*cli.Command{
		{
			Name:      "diff",
			Usage:     "show a change set of review mode: added, modified and deleted files, a unified diff for text",
			ArgsUsage: "ID [PATH...]",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print the changes as JSON (without file contents)"},
				&cli.BoolFlag{Name: "stat", Usage: "list the changed paths only, without their diffs"},
			},
			Action: diffAction,
		},
		{
			Name:      "apply",
			Usage:     "apply a change set's changes (all, or those at or beneath PATHs) to the workspace; exit 3 when some are left (conflicts, refused, protected)",
			ArgsUsage: "ID [PATH...]",
			Flags: []cli.Flag{
				&cli.BoolFlag{Name: "allow-protected", Usage: "apply changes to protected paths too (filesystem.protected, git's configuration and hooks)"},
				&cli.BoolFlag{Name: "json", Usage: "print what was applied and what was left as JSON"},
			},
			Action: applyAction,
		},
		{
			Name:      "discard",
			Usage:     "drop a change set without applying it",
			ArgsUsage: "ID",
			Action:    discardAction,
		},
		{
			Name:   "changes",
			Usage:  "list the change sets of review mode",
			Flags:  []cli.Flag{&cli.BoolFlag{Name: "json", Usage: "print them as JSON"}},
			Action: changesAction,
		},
	}
}

// openChangeSet opens the change set the first argument names.
func openChangeSet(c *cli.Context, usage string) (*review.ChangeSet, error) {
	if c.NArg() < 1 {
		return nil, &exitError{2, "hutch: usage: " + usage}
	}
	root := hutch.ChangesRoot()
	if root == "" {
		return nil, &exitError{1, "hutch: no state directory (neither XDG_STATE_HOME nor HOME is set), so no change sets"}
	}
	cs, err := review.Open(root, c.Args().First())
	if err != nil {
		return nil, &exitError{1, "hutch: " + err.Error()}
	}
	return cs, nil
}

func diffAction(c *cli.Context) error {
	cs, err := openChangeSet(c, "hutch diff [--json] [--stat] ID [PATH...]")
	if err != nil {
		return err
	}
	d, err := review.Diff(cs, review.DiffOptions{Paths: c.Args().Slice()[1:]})
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(d, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	w := newBufferedStdout()
	defer w.Flush()
	who := ""
	if d.Session != "" {
		who = " (session " + d.Session + ")"
	}
	fmt.Fprintf(w, "change set %s%s of %s: %d added, %d modified, %d deleted\n", d.ID, who, d.Workspace, d.Added, d.Modified, d.Deleted)
	for _, ch := range d.Changes {
		fmt.Fprintln(w, changeLine(ch))
	}
	if c.Bool("stat") {
		return nil
	}
	texts, err := review.NewTexts(cs)
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	defer texts.Close()
	for _, ch := range d.Changes {
		if t := texts.Diff(ch); t != "" {
			fmt.Fprint(w, "\n", t)
		}
	}
	return nil
}

// changeLine is one change as diff lists it: A, M or D, the path, and what
// apply makes of it.
func changeLine(ch review.Change) string {
	var b strings.Builder
	b.WriteString(strings.ToUpper(ch.Op[:1]) + "  " + ch.Path)
	switch {
	case ch.Type == review.TypeDir && ch.Op != review.Deleted:
		b.WriteString("/")
	case ch.Type == review.TypeSymlink && ch.Op != review.Deleted:
		b.WriteString(" -> " + ch.Target)
	case ch.Type != review.TypeFile && ch.Type != review.TypeDir:
		b.WriteString(" (" + ch.Type + ")")
	}
	if ch.OldMode != 0 {
		fmt.Fprintf(&b, " (mode %o -> %o)", ch.OldMode, ch.Mode)
	}
	if ch.Replaced {
		b.WriteString(" (replaced: what the sandbox did not make again is deleted)")
	}
	if ch.HardLink {
		b.WriteString(" (a hard link in the sandbox: applied as a copy)")
	}
	switch {
	case ch.Refused != "":
		b.WriteString("  [refused: " + ch.Refused + "]")
	case ch.Conflict != "":
		b.WriteString("  [conflict: " + ch.Conflict + "]")
	case ch.Protected:
		b.WriteString("  [protected: applied only with --allow-protected]")
	}
	return b.String()
}

func applyAction(c *cli.Context) error {
	cs, err := openChangeSet(c, "hutch apply [--allow-protected] [--json] ID [PATH...]")
	if err != nil {
		return err
	}
	out, err := review.Apply(cs, review.ApplyOptions{Paths: c.Args().Slice()[1:], AllowProtected: c.Bool("allow-protected"), Wait: sessionStopWait})
	if errors.Is(err, review.ErrBusy) {
		return &exitError{1, "hutch: " + err.Error() + "; apply it once its sandbox has ended"}
	}
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	if c.Bool("json") {
		b, _ := json.MarshalIndent(out, "", "  ")
		fmt.Println(string(b))
	} else {
		w := newBufferedStdout()
		for _, ch := range out.Applied {
			fmt.Fprintln(w, "applied  "+changeLine(ch))
		}
		w.Flush()
		for _, s := range out.Skipped {
			fmt.Fprintf(os.Stderr, "hutch: apply: left %s %s: %s\n", s.Op, s.Path, s.Why)
		}
		if out.Left == 0 {
			fmt.Fprintf(os.Stderr, "hutch: apply: %d changes applied; change set %s is empty and removed\n", len(out.Applied), cs.Meta.ID)
		} else {
			fmt.Fprintf(os.Stderr, "hutch: apply: %d changes applied, %d left in change set %s (hutch diff %s shows them)\n", len(out.Applied), out.Left, cs.Meta.ID, cs.Meta.ID)
		}
	}
	if len(out.Skipped) > 0 {
		return &exitError{code: exitApplyLeft}
	}
	return nil
}

func discardAction(c *cli.Context) error {
	cs, err := openChangeSet(c, "hutch discard ID")
	if err != nil {
		return err
	}
	if c.NArg() != 1 {
		return &exitError{2, "hutch: usage: hutch discard ID"}
	}
	if err := cs.Discard(sessionStopWait); err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	fmt.Fprintf(os.Stderr, "hutch: change set %s discarded\n", cs.Meta.ID)
	return nil
}

func changesAction(c *cli.Context) error {
	root := hutch.ChangesRoot()
	cs, err := review.List(root)
	if err != nil {
		return &exitError{1, "hutch: " + err.Error()}
	}
	if c.Bool("json") {
		metas := []review.Meta{}
		for _, x := range cs {
			metas = append(metas, x.Meta)
		}
		b, _ := json.MarshalIndent(metas, "", "  ")
		fmt.Println(string(b))
		return nil
	}
	fmt.Printf("%-28s %-20s %-10s %s\n", "ID", "CREATED", "STATE", "WORKSPACE")
	for _, x := range cs {
		state := "ended"
		if l, err := x.TryLock(); err != nil {
			state = "in use"
		} else {
			l.Unlock()
		}
		fmt.Printf("%-28s %-20s %-10s %s\n", x.Meta.ID, x.Meta.Created.Local().Format("2006-01-02 15:04:05"), state, x.Meta.Workspace)
	}
	return nil
}

func newBufferedStdout() *bufio.Writer { return bufio.NewWriterSize(os.Stdout, 64<<10) }
