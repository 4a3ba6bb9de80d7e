package caches

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

func TestScopeKey(t *testing.T) {
	a := ScopeKey(ScopeWorkspace, "/home/me/My Project")
	b := ScopeKey(ScopeWorkspace, "/srv/other/My Project")
	if !strings.HasPrefix(a, "ws-my_project-") || len(a) != len("ws-my_project-")+16 {
		t.Errorf("ScopeKey = %q", a)
	}
	if a == b {
		t.Errorf("two workspaces of one base name share the scope %q", a)
	}
	if a != ScopeKey("", "/home/me/My Project") {
		t.Error("an empty scope is not the workspace's")
	}
	if k := ScopeKey(ScopeUser, "/home/me/x"); k != UserKey {
		t.Errorf("user scope = %q", k)
	}
	if k := ScopeKey(ScopeWorkspace, "/"); !strings.HasPrefix(k, "ws-root-") {
		t.Errorf("ScopeKey(/) = %q", k)
	}
	if k := ScopeKey(ScopeWorkspace, "/x/"+strings.Repeat("é", 40)); len(k) > 3+32+1+16 {
		t.Errorf("ScopeKey of a long name = %q", k)
	}
}

func TestMatchUnit(t *testing.T) {
	for _, c := range []struct {
		pat, rel string
		want     bool
	}{
		{"**/?*@v*", "golang.org/x/text@v0.14.0", true},
		{"**/?*@v*", "example.test/greet@v1.0.0", true},
		{"**/?*@v*", "cache/download/golang.org/x/text/@v", false},
		{"**/?*@v*", "golang.org/x", false},
		{"_npx/*", "_npx/1a2b", true},
		{"_npx/*", "_npx/1a2b/node_modules", false},
		{"src/*/*", "src/index.crates.io-6f17d22bba15001f/serde-1.0.0", true},
		{"**", "a/b/c", true},
	} {
		if got := policy.MatchUnit(c.pat, c.rel); got != c.want {
			t.Errorf("MatchUnit(%q, %q) = %v, want %v", c.pat, c.rel, got, c.want)
		}
	}
}

func write(t *testing.T, p string, n int, mtime time.Time) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, make([]byte, n), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, mtime, mtime); err != nil {
		t.Fatal(err)
	}
}

func TestAcquireLayout(t *testing.T) {
	root := filepath.Join(t.TempDir(), "caches")
	now := time.Now()
	s := Spec{Root: root, Key: ScopeKey(ScopeWorkspace, "/w/proj"), Name: "go-build", Scope: ScopeWorkspace, Workspace: "/w/proj", Target: "/home/sandbox/.cache/go-build", Cap: 1 << 20}
	h, err := Acquire([]Spec{s}, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root, filepath.Dir(s.Dir()), s.Dir()} {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v: want a 0700 directory", d, fi, err)
		}
	}
	r, err := readRecord(s.recordPath())
	if err != nil || r.Workspace != "/w/proj" || r.Cap != 1<<20 || !r.LastUsed.Equal(now.Round(0)) && !r.LastUsed.Equal(now) {
		t.Errorf("record %+v, %v", r, err)
	}
	// Held: neither pruned nor removed.
	write(t, filepath.Join(s.Dir(), "big"), 4<<20, now)
	if res, err := Prune(root, s.Key, s.Name, 0, now); err != nil || !res.InUse {
		t.Errorf("prune of a held cache: %+v, %v", res, err)
	}
	if err := Remove(root, s.Key, s.Name); !errors.Is(err, ErrInUse) {
		t.Errorf("remove of a held cache: %v", err)
	}
	if l, _ := List(root, true); len(l) != 1 || !l[0].InUse || l[0].Usage < 4<<20 || l[0].Workspace != "/w/proj" {
		t.Errorf("List = %+v", l)
	}
	h.Release()
	h.Release()
	if err := Remove(root, s.Key, s.Name); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := os.Lstat(s.Dir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the cache is still there: %v", err)
	}
	if _, err := os.Lstat(filepath.Dir(s.Dir())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the scope of its last cache is still there: %v", err)
	}
	if err := Remove(root, s.Key, s.Name); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("removing a missing cache: %v", err)
	}
	// Acquire makes it again.
	h, err = Acquire([]Spec{s}, now)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
}

// Pruning removes the least recently used units first, down to PruneTo of
// the cap, a unit directory whole; it never follows a symlink and copes
// with read-only trees.
func TestPrune(t *testing.T) {
	root := t.TempDir()
	s := Spec{Root: root, Key: "user", Name: "go-mod", Cap: 10 << 20, Units: []string{"**/?*@v*"}}
	h, err := Acquire([]Spec{s}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
	old, mid, recent := time.Now().Add(-72*time.Hour), time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour)
	d := s.Dir()
	// An old module, read-only as go makes it, with one recently used file:
	// used recently as a whole.
	write(t, filepath.Join(d, "example.test/a@v1.0.0/a.go"), 3<<20, old)
	write(t, filepath.Join(d, "example.test/a@v1.0.0/sub/b.go"), 1<<20, recent)
	// An old module, read-only: pruned whole.
	write(t, filepath.Join(d, "example.test/b@v1.0.0/b.go"), 3<<20, old)
	write(t, filepath.Join(d, "example.test/b@v1.0.0/sub/c.go"), 1<<20, old)
	for _, p := range []string{"example.test/b@v1.0.0/sub", "example.test/b@v1.0.0", "example.test/a@v1.0.0/sub", "example.test/a@v1.0.0"} {
		os.Chmod(filepath.Join(d, p), 0o555)
	}
	write(t, filepath.Join(d, "cache/download/example.test/b/@v/v1.0.0.zip"), 2<<20, mid)
	write(t, filepath.Join(d, "cache/download/example.test/a/@v/v1.0.0.zip"), 2<<20, recent)
	// A symlink out of the cache: removed as a link, never followed.
	outside := filepath.Join(t.TempDir(), "precious")
	write(t, outside, 10, old)
	os.Symlink(filepath.Dir(outside), filepath.Join(d, "link"))
	res, err := Prune(root, s.Key, s.Name, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}

	if res.InUse || res.Before <= s.Cap || res.After > int64(float64(s.Cap)*PruneTo) {
		t.Errorf("prune: %+v", res)
	}
	for p, want := range map[string]bool{
		"example.test/b@v1.0.0":                       false,
		"example.test/a@v1.0.0/a.go":                  true,
		"example.test/a@v1.0.0/sub/b.go":              true,
		"cache/download/example.test/a/@v/v1.0.0.zip": true,
	} {
		_, err := os.Lstat(filepath.Join(d, p))
		if (err == nil) != want {
			t.Errorf("%s exists: %v, want %v", p, err == nil, want)
		}
	}
	if _, err := os.Stat(outside); err != nil {
		t.Errorf("a file the cache's symlink led to was removed: %v", err)
	}
	r, _ := readRecord(s.recordPath())
	if r.Size != res.After || r.Checked.IsZero() {
		t.Errorf("record after prune: %+v", r)
	}
	// Under the cap: nothing goes.
	again, err := Prune(root, s.Key, s.Name, 0, time.Now())
	if err != nil || again.Removed != 0 {
		t.Errorf("second prune: %+v, %v", again, err)
	}
	// The read-only module is removable too.
	for _, p := range []string{"example.test/a@v1.0.0/sub", "example.test/a@v1.0.0"} {
		os.Chmod(filepath.Join(d, p), 0o555)
	}
	if err := Remove(root, s.Key, s.Name); err != nil {
		t.Fatal(err)
	}
}

// Maintain checks a cache only once CheckEvery has passed since its last
// check, and prunes it then.
func TestMaintain(t *testing.T) {
	root := t.TempDir()
	now := time.Now()
	s := Spec{Root: root, Key: "user", Name: "pip", Cap: 2 << 20}
	h, err := Acquire([]Spec{s}, now)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(s.Dir(), "a"), 2<<20, now.Add(-time.Hour))
	write(t, filepath.Join(s.Dir(), "b"), 1<<20, now)
	h.Release()
	if got := h.Maintain(now.Add(time.Hour)); len(got) != 0 {
		t.Errorf("checked within a day of the last check: %+v", got)
	}
	got := h.Maintain(now.Add(CheckEvery + time.Minute))
	if len(got) != 1 || got[0].Removed != 1 {
		t.Fatalf("Maintain = %+v", got)
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "a")); err == nil {
		t.Error("the least recently used file is still there")
	}
	if _, err := os.Stat(filepath.Join(s.Dir(), "b")); err != nil {
		t.Errorf("the recently used file went: %v", err)
	}
}

// A cache path that is a symlink (not hutch's making) is refused.
func TestAcquireRefusesSymlink(t *testing.T) {
	root := t.TempDir()
	s := Spec{Root: root, Key: "user", Name: "npm"}
	os.MkdirAll(filepath.Join(root, "user"), 0o700)
	os.Symlink(t.TempDir(), s.Dir())
	if _, err := Acquire([]Spec{s}, time.Now()); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Fatalf("Acquire over a symlink: %v", err)
	}
	// Released on error: the lock is free.
	if lock, busy, err := tryLockExclusive(s.lockPath()); err != nil || busy {
		t.Errorf("lock after a failed Acquire: busy %v, %v", busy, err)
	} else {
		lock.Close()
	}
}
