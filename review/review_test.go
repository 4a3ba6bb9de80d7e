package review

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProtected(t *testing.T) {
	prot := []string{".hutch.toml", "secrets"}
	for p, want := range map[string]bool{
		".hutch.toml": true, "secrets/key": true, "secretsx": false,
		".git": true, "sub/.git": true, ".git/config": true, ".git/hooks/pre-commit": true, "a/.git/config.worktree": true,
		".git/commondir": true, ".git/objects/ab/cd": false, ".git/index": false, "src/main.go": false, "git/config": false,
	} {
		if got := Protected(p, prot); got != want {
			t.Errorf("Protected(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestRefusal(t *testing.T) {
	for _, c := range []struct {
		ch      Change
		refused bool
	}{
		{Change{Path: "a", Op: Added, Type: TypeFile}, false},
		{Change{Path: "a", Op: Added, Type: TypeFIFO}, true},
		{Change{Path: "a", Op: Added, Type: TypeSocket}, true},
		{Change{Path: "a", Op: Modified, Type: TypeDevice}, true},
		{Change{Path: "a", Op: Deleted, Type: TypeFIFO}, false}, // removing one is fine
		{Change{Path: "d/l", Op: Added, Type: TypeSymlink, Target: "../x"}, false},
		{Change{Path: "d/l", Op: Added, Type: TypeSymlink, Target: "../../x"}, true},
		{Change{Path: "l", Op: Added, Type: TypeSymlink, Target: "/etc/passwd"}, true},
		{Change{Path: "l", Op: Added, Type: TypeSymlink, Target: "a/../../b"}, true},
	} {
		if got := refusal(&c.ch) != ""; got != c.refused {
			t.Errorf("%+v: refused %v, want %v", c.ch, got, c.refused)
		}
	}
}

func TestCleanPaths(t *testing.T) {
	if got, err := cleanPaths([]string{"./a/b/", "c"}); err != nil || strings.Join(got, ",") != "a/b,c" {
		t.Errorf("cleanPaths: %v %v", got, err)
	}
	for _, bad := range []string{"", "/etc", "..", "../x", "a/../../x"} {
		if _, err := cleanPaths([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if got, _ := cleanPaths([]string{"."}); got != nil {
		t.Errorf(". is not the whole workspace: %v", got)
	}
}

// A path selects what lies beneath it, the directories above it, and a
// replaced directory above it whole.
func TestSelectChanges(t *testing.T) {
	all := []Change{
		{Path: "new", Op: Added, Type: TypeDir}, {Path: "new/a"}, {Path: "new/b"},
		{Path: "build", Op: Modified, Type: TypeDir, Replaced: true}, {Path: "build/x"}, {Path: "build/old", Op: Deleted, opaqueDel: true},
		{Path: "other"},
	}
	got := func(ps ...string) string {
		sel, err := selectChanges(all, ps)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, c := range sel {
			out = append(out, c.Path)
		}
		return strings.Join(out, ",")
	}
	for ps, want := range map[string]string{
		"new/a":   "new,new/a",
		"build/x": "build,build/x,build/old",
		"other":   "other",
		"":        "new,new/a,new/b,build,build/x,build/old,other",
	} {
		var args []string
		if ps != "" {
			args = []string{ps}
		}
		if g := got(args...); g != want {
			t.Errorf("select %q: %s, want %s", ps, g, want)
		}
	}
}

func TestLines(t *testing.T) {
	if got := lines([]byte("a\nb\n")); len(got) != 2 || got[1] != "b\n" {
		t.Errorf("lines: %q", got)
	}
	if got := lines([]byte("a\nb")); len(got) != 2 || !strings.HasPrefix(got[1], "b\n\\ No newline") {
		t.Errorf("lines without a last newline: %q", got)
	}
}

// Change sets: ids, one workspace each, none inside its workspace, pruned
// after the retention.
func TestChangeSetLifecycle(t *testing.T) {
	for _, bad := range []string{"", "-x", "a/b", "..", strings.Repeat("a", 65)} {
		if ValidID(bad) == nil {
			t.Errorf("id %q accepted", bad)
		}
	}
	root, ws := t.TempDir(), t.TempDir()
	if _, err := Create(filepath.Join(ws, "state"), "x", Meta{Workspace: ws}); err == nil || !strings.Contains(err.Error(), "inside the workspace") {
		t.Errorf("a change set inside its workspace: %v", err)
	}
	c, err := Create(root, "s1", Meta{Workspace: ws, Session: "s1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Create(root, "s1", Meta{Workspace: t.TempDir()}); err == nil || !strings.Contains(err.Error(), "holds changes to the workspace") {
		t.Errorf("a change set reused for another workspace: %v", err)
	}
	l, err := c.TryLock()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Discard(0); err == nil || !strings.Contains(err.Error(), "running session s1") {
		t.Errorf("discard while locked: %v", err)
	}
	l.Unlock()
	os.WriteFile(filepath.Join(c.Upper(), "f"), []byte("x"), 0o644)
	if removed, err := c.End(nil); err != nil || removed {
		t.Fatalf("End of a change set with a change: %v %v", removed, err)
	}
	if gone := Prune(root, time.Now()); len(gone) != 0 {
		t.Errorf("pruned a fresh change set: %v", gone)
	}
	if gone := Prune(root, time.Now().Add(Retention+time.Hour)); len(gone) != 1 {
		t.Errorf("did not prune an old change set: %v", gone)
	}
	if cs, _ := List(root); len(cs) != 0 {
		t.Errorf("left after prune: %v", cs)
	}
	// A change set without a change goes at End.
	c, _ = Create(root, "empty", Meta{Workspace: ws})
	if removed, err := c.End(nil); err != nil || !removed {
		t.Errorf("End of an empty change set: %v %v", removed, err)
	}
}
