package gitrepos

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func write(t *testing.T, p, s string) {
	t.Helper()
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindAndProtectedPaths(t *testing.T) {
	ws := t.TempDir()
	write(t, filepath.Join(ws, ".git", "config"), "")
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	write(t, filepath.Join(ws, "a", "b", "lib", ".git", "config"), "")
	write(t, filepath.Join(ws, "node_modules", "x", ".git", "config"), "") // not looked into
	write(t, filepath.Join(ws, "wt", ".git"), "gitdir: ../.git/worktrees/wt\n")
	write(t, filepath.Join(ws, ".git", "worktrees", "wt", "commondir"), "../..\n")
	write(t, filepath.Join(ws, "sub", ".git"), "gitdir: /elsewhere/modules/sub\n")
	s := Find(ws, DefaultBudget)
	if !s.Complete {
		t.Fatal("a small tree not walked whole")
	}
	var dots []string
	for _, r := range s.Repos {
		dots = append(dots, r.Dot)
	}
	if got := strings.Join(dots, " "); got != ".git sub/.git wt/.git a/b/lib/.git" {
		t.Errorf("repos %q, want the shallowest first and none under node_modules", got)
	}
	existing, missing := s.ProtectedPaths(ws)
	if got := strings.Join(existing, " "); got != ".git/config .git/hooks sub/.git wt/.git a/b/lib/.git/config" {
		t.Errorf("existing %q", got)
	}
	if got := strings.Join(missing, " "); !strings.Contains(got, "a/b/lib/.git/hooks") || !strings.Contains(got, ".git/worktrees/wt/config") {
		t.Errorf("missing %q", got)
	}
}

func TestBudget(t *testing.T) {
	ws := t.TempDir()
	for i := range 50 {
		os.MkdirAll(filepath.Join(ws, "d", string(rune('a'+i%26)), string(rune('a'+i/26))), 0o755)
	}
	if s := Find(ws, Budget{Dirs: 10, Time: time.Second}); s.Complete || s.Dirs != 10 {
		t.Errorf("a walk over its budget: %+v", s)
	}
}

func TestWatch(t *testing.T) {
	ws := t.TempDir()
	write(t, filepath.Join(ws, ".git", "config"), "")
	start := Find(ws, DefaultBudget)
	_, missing := start.ProtectedPaths(ws)
	w := NewWatch(ws, start, missing, DefaultBudget)
	if c := w.Check(); len(c) != 0 {
		t.Fatalf("nothing changed, got %+v", c)
	}
	os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
	write(t, filepath.Join(ws, "clone", ".git", "HEAD"), "")
	c := w.Check()
	if len(c) != 2 || c[0].Path != ".git/hooks" || c[0].Repo || c[1].Path != "clone/.git" || !c[1].Repo {
		t.Errorf("changes %+v", c)
	}
	if c := w.Check(); len(c) != 0 {
		t.Errorf("reported twice: %+v", c)
	}
}

// A directory whose entries changed is read again, whatever its mtime says:
// the walk goes by change time, which no process can set back.
func TestWatchSeesThroughMtimes(t *testing.T) {
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "a", "b"), 0o755)
	start := Find(ws, DefaultBudget)
	w := NewWatch(ws, start, nil, DefaultBudget)
	old, _ := os.Stat(filepath.Join(ws, "a", "b"))
	write(t, filepath.Join(ws, "a", "b", "evil", ".git", "config"), "[core]\n\tfsmonitor = x\n")
	os.Chtimes(filepath.Join(ws, "a", "b"), old.ModTime(), old.ModTime())
	if c := w.Check(); len(c) != 1 || c[0].Path != "a/b/evil/.git" {
		t.Errorf("a repository hidden behind a reset mtime: %+v", c)
	}
}
