// Package gitrepos finds the git repositories in a workspace, so that a
// sandbox can keep the files host git executes read-only in every one of
// them (nested clones, submodules, worktrees), and notices the ones a
// sandbox created, whose configuration and hooks it wrote.
//
// Git runs what a repository's .git/config and .git/hooks say (core.fsmonitor,
// core.hooksPath, filters, aliases, hooks): a sandbox that can write them
// plants commands that the host user's next git command in that directory
// runs, outside the sandbox. Finding repositories costs a walk of the
// workspace's directories (a read of each), so the walk is bounded: at
// most Budget.Dirs directories, never into .git directories themselves nor
// into node_modules (package managers keep no repositories there).
package gitrepos

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Budget bounds one walk.
type Budget struct {
	// Dirs is the most directories read.
	Dirs int
	// Time is the longest the walk takes.
	Time time.Duration
}

// DefaultBudget is the walk's bound at a sandbox's start and after each of
// its commands: a project of a few thousand directories is walked whole in
// a few tens of milliseconds.
var DefaultBudget = Budget{Dirs: 5000, Time: 100 * time.Millisecond}

// Repo is one git repository found in a workspace.
type Repo struct {
	// Dot is the path of its .git entry, relative to the workspace
	// (".git", "sub/.git").
	Dot string `json:"dot"`
	// File: .git is a file ("gitdir: ..."; a worktree or a submodule)
	// rather than the repository's directory.
	File bool `json:"file,omitempty"`
	// GitDir is its git directory relative to the workspace when it lies
	// inside it: Dot itself, or where a .git file points; "" when outside
	// (then invisible in the sandbox, which only sees the workspace).
	GitDir string `json:"git_dir,omitempty"`
}

// Scan is what a walk found.
type Scan struct {
	Repos []Repo `json:"repos"`
	// Dirs is how many directories the walk read.
	Dirs int `json:"dirs"`
	// Complete is false when the walk stopped at its budget: repositories
	// deeper than it looked were not found.
	Complete bool `json:"complete"`
	// ctimes are the change times of the directories read, by relative
	// path: a directory whose entries change gets a new one, and no
	// process can set it back (utimensat sets mtime, not ctime), so a
	// later walk reads only what changed (Watch); kids are the
	// subdirectories each one had.
	ctimes map[string]int64
	kids   map[string][]string
}

// skip are directory names the walk does not enter.
var skip = map[string]bool{".git": true, "node_modules": true}

// Find walks the workspace ws (an absolute, symlink-free path) breadth
// first, within b, and returns the repositories it found, the shallowest
// first. It follows no symlink and changes nothing.
func Find(ws string, b Budget) Scan {
	s := Scan{ctimes: map[string]int64{}, kids: map[string][]string{}}
	s.walk(ws, []string{""}, b, nil)
	return s
}

// walk reads the directories of queue and those beneath them, within b;
// known, when set, are directories read before whose change time is
// unchanged: they are not read again, but their known subdirectories are
// looked at.
func (s *Scan) walk(ws string, queue []string, b Budget, known *Scan) {
	deadline := time.Now().Add(b.Time)
	for len(queue) > 0 {
		if s.Dirs >= b.Dirs || time.Now().After(deadline) {
			return
		}
		rel := queue[0]
		queue = queue[1:]
		s.Dirs++
		if known != nil {
			if ct, ok := known.ctimes[rel]; ok && ctime(filepath.Join(ws, rel)) == ct {
				// Unchanged: the same entries; its subdirectories may
				// have changed.
				s.ctimes[rel], s.kids[rel] = ct, known.kids[rel]
				queue = append(queue, known.kids[rel]...)
				continue
			}
		}
		f, err := os.Open(filepath.Join(ws, rel))
		if err != nil {
			continue
		}
		var ct int64
		if fi, err := f.Stat(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				ct = st.Ctim.Nano()
			}
		}
		ents, err := f.ReadDir(-1)
		f.Close()
		if err != nil {
			continue
		}
		slices.SortFunc(ents, func(a, b os.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		s.ctimes[rel] = ct
		var kids []string
		for _, e := range ents {
			name, child := e.Name(), filepath.Join(rel, e.Name())
			if name == ".git" {
				if r, ok := repoAt(ws, child, e.Type()); ok {
					s.Repos = append(s.Repos, r)
				}
			}
			if e.IsDir() && !skip[name] {
				kids = append(kids, child)
			}
		}
		s.kids[rel] = kids
		queue = append(queue, kids...)
	}
	s.Complete = true
}

// ctime is a path's change time (no symlink followed), 0 when unknown.
func ctime(p string) int64 {
	var st syscall.Stat_t
	if syscall.Lstat(p, &st) != nil {
		return 0
	}
	return st.Ctim.Nano()
}

// repoAt describes the .git entry dot (relative) of type t.
func repoAt(ws, dot string, t fs.FileMode) (Repo, bool) {
	switch {
	case t.IsDir():
		return Repo{Dot: dot, GitDir: dot}, true
	case t.IsRegular():
		r := Repo{Dot: dot, File: true}
		b, err := readSmall(filepath.Join(ws, dot))
		if err != nil {
			return r, true
		}
		target, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "gitdir:")
		if !ok {
			return r, true
		}
		target = strings.TrimSpace(target)
		if !filepath.IsAbs(target) {
			target = filepath.Join(ws, filepath.Dir(dot), target)
		}
		if rel, ok := beneath(ws, filepath.Clean(target)); ok {
			r.GitDir = rel
		}
		return r, true
	}
	return Repo{}, false // a symlink or something odd: not a repository git uses as it is
}

func readSmall(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if err != nil && n == 0 {
		return nil, err
	}
	return b[:n], nil
}

// beneath returns p relative to root when it lies beneath it.
func beneath(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return rel, true
}

// Executed are the paths of a git directory that host git executes or
// takes commands from, relative to the git directory: its configuration
// and its hooks (a worktree's git directory has a config.worktree too).
var Executed = []string{"config", "config.worktree", "hooks"}

// ProtectedPaths lists, relative to the workspace, what must stay read-only
// of the repositories in s: each .git file (it names the git directory git
// uses) and, in each git directory inside the workspace, what Executed
// names — the paths that exist; missing ones are returned apart, to be
// checked after a command (git creates them, and so could the sandbox).
func (s Scan) ProtectedPaths(ws string) (existing, missing []string) {
	seen := map[string]bool{}
	add := func(p string) {
		if seen[p] {
			return
		}
		seen[p] = true
		if _, err := os.Lstat(filepath.Join(ws, p)); errors.Is(err, fs.ErrNotExist) {
			missing = append(missing, p)
		} else {
			existing = append(existing, p)
		}
	}
	for _, r := range s.Repos {
		if r.File {
			add(r.Dot)
		}
		if r.GitDir == "" {
			continue
		}
		for _, e := range Executed {
			add(filepath.Join(r.GitDir, e))
		}
		// A worktree's git directory names the main one (commondir), whose
		// configuration and hooks git uses as well.
		if b, err := readSmall(filepath.Join(ws, r.GitDir, "commondir")); err == nil {
			common := strings.TrimSpace(string(b))
			if !filepath.IsAbs(common) {
				common = filepath.Join(ws, r.GitDir, common)
			}
			if rel, ok := beneath(ws, filepath.Clean(common)); ok {
				for _, e := range Executed {
					add(filepath.Join(rel, e))
				}
			}
		}
	}
	return existing, missing
}

// New returns the repositories of after that before did not have.
func New(before, after Scan) []Repo {
	var out []Repo
	for _, r := range after.Repos {
		if !slices.ContainsFunc(before.Repos, func(b Repo) bool { return b.Dot == r.Dot }) {
			out = append(out, r)
		}
	}
	return out
}

// Watch notices what a sandbox's commands created that hutch could not
// protect beforehand: a protected path that was missing (a .git, a hooks
// directory), and a repository that was not there (a clone, git init).
// Nothing created inside the sandbox is protected until the next sandbox:
// the sandbox itself made it, and it is reported instead. A Watch is safe
// for concurrent use.
type Watch struct {
	ws      string
	budget  Budget
	mu      sync.Mutex
	missing []string
	seen    Scan
}

// Change is one thing a command created.
type Change struct {
	// Path is what appeared, relative to the workspace.
	Path string
	// Repo: Path is a repository's .git.
	Repo bool
}

// NewWatch watches the workspace ws from what it held when the sandbox
// started: the repositories found then, and the protected paths that were
// missing.
func NewWatch(ws string, start Scan, missing []string, b Budget) *Watch {
	seen := start
	seen.Repos = slices.Clone(start.Repos)
	seen.ctimes, seen.kids = maps.Clone(start.ctimes), maps.Clone(start.kids)
	return &Watch{ws: ws, budget: b, seen: seen, missing: slices.Clone(missing)}
}

// Check returns what appeared since the sandbox started or the last Check,
// once each.
func (w *Watch) Check() []Change {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []Change
	left := w.missing[:0]
	for _, p := range w.missing {
		if _, err := os.Lstat(filepath.Join(w.ws, p)); err == nil {
			out = append(out, Change{Path: p, Repo: filepath.Base(p) == ".git"})
		} else {
			left = append(left, p)
		}
	}
	w.missing = left
	// Only what changed is read again (Scan.ctimes); a repository that was
	// there stays known.
	now := Scan{ctimes: map[string]int64{}, kids: map[string][]string{}}
	now.walk(w.ws, []string{""}, w.budget, &w.seen)
	for _, r := range New(w.seen, now) {
		if !slices.ContainsFunc(out, func(c Change) bool { return c.Path == r.Dot }) {
			out = append(out, Change{Path: r.Dot, Repo: true})
		}
	}
	w.seen.Repos = append(w.seen.Repos, New(w.seen, now)...)
	w.seen.ctimes, w.seen.kids = now.ctimes, now.kids
	return out
}
