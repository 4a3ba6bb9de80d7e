// Package review keeps the change sets of review mode: a sandbox whose
// workspace is the lower layer of an overlay writes into the change set's
// upper layer instead of the user's files (mounts.Overlay), and afterwards
// the user looks at the changes (Diff), applies all or some of them to the
// workspace (Apply) or drops them (Discard).
//
// A change set lives in hutch's state directory, in changes/ID/: meta.json
// (Meta), upper/ and work/ (the overlay's writable layer and the kernel's
// work directory), lock (held by the sandbox writing it and by Apply and
// Discard) and, while an Apply runs or after one was killed, journal.
//
// The upper layer is written by sandboxed code: everything read from it is
// read without following symlinks, and nothing in it is trusted to be what
// its name says (a FIFO where a file was, a symlink out of the workspace, a
// hard link). See docs/REVIEW.md for the rules Apply keeps.
package review

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Retention is how long a change set that nobody applied or discarded is
// kept after its sandbox ended: older ones are removed by Prune, which every
// review sandbox runs at its start.
const Retention = 30 * 24 * time.Hour

// Meta is a change set's metadata (meta.json).
type Meta struct {
	// ID names the change set: a session's name, or the id a one-off
	// review run printed.
	ID string `json:"id"`
	// Workspace is the workspace's absolute, symlink-free host path.
	Workspace string `json:"workspace"`
	// Mount is where the workspace appeared inside the sandbox.
	Mount string `json:"mount,omitempty"`
	// Session is the session's name when a session wrote the change set.
	Session string `json:"session,omitempty"`
	// Created is when the change set was made; Ended when its last
	// sandbox ended (zero while one runs).
	Created time.Time `json:"created"`
	Ended   time.Time `json:"ended,omitzero"`
	// Protected are the workspace's protected paths (relative) when the
	// sandbox started: the policy's filesystem.protected, hutch's files
	// in the workspace, the git repositories' configuration and hooks.
	// A change to one is shown and applied only when asked for explicitly.
	Protected []string `json:"protected,omitempty"`
}

// ChangeSet is one change set on disk.
type ChangeSet struct {
	// Dir is the change set's directory.
	Dir  string
	Meta Meta
}

// Upper is the overlay's upper layer.
func (c *ChangeSet) Upper() string { return filepath.Join(c.Dir, "upper") }

// Work is the overlay's work directory.
func (c *ChangeSet) Work() string { return filepath.Join(c.Dir, "work") }

// Root is the directory that holds the change sets under hutch's state
// directory state.
func Root(state string) string { return filepath.Join(state, "changes") }

// validID says whether id is 1..64 of [A-Za-z0-9._-], starting with a
// letter or digit. (A loop, not a package-level regexp: every hutch process
// would compile it at start.)
func validID(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	for i, c := range []byte(id) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '_' && c != '-') {
			return false
		}
	}
	return true
}

// ValidID checks a change set's id: 1..64 letters, digits, '.', '_' or
// '-', not starting with a punctuation mark.
func ValidID(id string) error {
	if !validID(id) {
		return fmt.Errorf("change set id %q: want 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", id)
	}
	return nil
}

// NewID makes the id of a one-off review run's change set: its time and a
// random suffix, so that ids sort by age.
func NewID(now time.Time) string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return now.UTC().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}

// ErrNotFound is returned by Open for a change set that does not exist.
var ErrNotFound = errors.New("no such change set")

// Open reads the change set id under root.
func Open(root, id string) (*ChangeSet, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	c := &ChangeSet{Dir: filepath.Join(root, id)}
	b, err := os.ReadFile(filepath.Join(c.Dir, "meta.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("change set %s: %w (hutch changes lists them)", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("read change set %s: %w", id, err)
	}
	if err := json.Unmarshal(b, &c.Meta); err != nil {
		return nil, fmt.Errorf("change set %s: %s: %w", id, filepath.Join(c.Dir, "meta.json"), err)
	}
	return c, nil
}

// Create makes the change set id under root for workspace ws, or reopens
// it when it exists for the same workspace (a session started again under
// its name goes on adding to it). A change set of another workspace is
// refused. The change set's directories must not lie inside the workspace:
// overlayfs refuses an upper layer inside its lower one.
func Create(root, id string, m Meta) (*ChangeSet, error) {
	if err := ValidID(id); err != nil {
		return nil, err
	}
	if rel, err := filepath.Rel(m.Workspace, root); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return nil, fmt.Errorf("review mode keeps its change sets in %s, which lies inside the workspace %s, and overlayfs cannot keep its upper layer inside its lower one: set XDG_STATE_HOME to a directory outside the workspace", root, m.Workspace)
	}
	if c, err := Open(root, id); err == nil {
		if c.Meta.Workspace != m.Workspace {
			return nil, fmt.Errorf("change set %s holds changes to the workspace %s, not %s: apply or discard them first (hutch apply %s, hutch discard %s), or choose another name", id, c.Meta.Workspace, m.Workspace, id, id)
		}
		c.Meta.Ended = time.Time{}
		c.Meta.Protected = m.Protected
		return c, c.writeMeta()
	} else if !errors.Is(err, ErrNotFound) {
		return nil, err
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("create %s: %w", root, err)
	}
	c := &ChangeSet{Dir: filepath.Join(root, id), Meta: m}
	c.Meta.ID = id
	if c.Meta.Created.IsZero() {
		c.Meta.Created = time.Now()
	}
	if err := os.Mkdir(c.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create change set %s: %w", id, err)
	}
	for _, d := range []string{c.Upper(), c.Work()} {
		if err := os.Mkdir(d, 0o700); err != nil {
			os.RemoveAll(c.Dir)
			return nil, fmt.Errorf("create change set %s: %w", id, err)
		}
	}
	// The upper layer's root gets the workspace's mode: overlayfs shows the
	// merged root with the upper's attributes.
	if fi, err := os.Stat(m.Workspace); err == nil {
		os.Chmod(c.Upper(), fi.Mode().Perm())
	}
	if err := c.writeMeta(); err != nil {
		os.RemoveAll(c.Dir)
		return nil, err
	}
	return c, nil
}

// writeMeta replaces meta.json (a temporary file renamed over it).
func (c *ChangeSet) writeMeta() error {
	b, err := json.MarshalIndent(c.Meta, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(c.Dir, ".meta.json.tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("write change set %s: %w", c.Meta.ID, err)
	}
	if err := os.Rename(tmp, filepath.Join(c.Dir, "meta.json")); err != nil {
		return fmt.Errorf("write change set %s: %w", c.Meta.ID, err)
	}
	return nil
}

// Lock is a change set's lock, held while a sandbox writes its upper layer
// and while Apply or Discard change it.
type Lock struct{ f *os.File }

// ErrBusy says that a change set's lock is held.
var ErrBusy = errors.New("change set in use")

// TryLock takes the change set's lock without waiting: ErrBusy when a
// sandbox (a running session, a review run) or another apply holds it.
func (c *ChangeSet) TryLock() (*Lock, error) { return c.LockWithin(0) }

// LockWithin takes the change set's lock, waiting up to d for a sandbox
// that is ending (a session just stopped) to release it.
func (c *ChangeSet) LockWithin(d time.Duration) (*Lock, error) {
	deadline := time.Now().Add(d)
	for {
		l, err := c.tryLock()
		if err == nil || !errors.Is(err, ErrBusy) || time.Now().After(deadline) {
			return l, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *ChangeSet) tryLock() (*Lock, error) {
	f, err := os.OpenFile(filepath.Join(c.Dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock change set %s: %w", c.Meta.ID, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			who := "a running review sandbox"
			if c.Meta.Session != "" {
				who = "the running session " + c.Meta.Session + " (stop it first: hutch session stop " + c.Meta.Session + ")"
			}
			return nil, fmt.Errorf("change set %s is in use by %s: %w", c.Meta.ID, who, ErrBusy)
		}
		return nil, fmt.Errorf("lock change set %s: %w", c.Meta.ID, err)
	}
	return &Lock{f: f}, nil
}

// Unlock releases the lock.
func (l *Lock) Unlock() {
	if l != nil && l.f != nil {
		l.f.Close()
		l.f = nil
	}
}

// End records that the change set's sandbox ended. A change set that
// holds no change is removed; End reports whether it was. d is its Diff
// when the caller has one (nil: End makes it).
func (c *ChangeSet) End(d *Result) (removed bool, err error) {
	if d == nil {
		d, err = Diff(c, DiffOptions{})
	}
	if err == nil && len(d.Changes) == 0 {
		if err := c.remove(); err != nil {
			return false, err
		}
		return true, nil
	}
	c.Meta.Ended = time.Now()
	return false, c.writeMeta()
}

// Discard removes the change set and everything in it. It refuses while a
// sandbox or an apply holds its lock.
func (c *ChangeSet) Discard(wait time.Duration) error {
	l, err := c.LockWithin(wait)
	if err != nil {
		return err
	}
	defer l.Unlock()
	c.cleanWorkspace()
	return c.remove()
}

// remove deletes the change set's directory. The kernel makes work/work
// without permissions; everything there is the user's, so each directory
// that cannot be read is opened up first.
func (c *ChangeSet) remove() error {
	// Rename first, so that a change set half removed is never opened.
	gone := filepath.Join(filepath.Dir(c.Dir), ".gone-"+filepath.Base(c.Dir))
	if err := os.Rename(c.Dir, gone); err != nil {
		return fmt.Errorf("remove change set %s: %w", c.Meta.ID, err)
	}
	return removeAll(gone)
}

func removeAll(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

// List returns the change sets under root, oldest first.
func List(root string) ([]*ChangeSet, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list change sets: %w", err)
	}
	var out []*ChangeSet
	for _, e := range ents {
		if !e.IsDir() || ValidID(e.Name()) != nil {
			continue
		}
		if c, err := Open(root, e.Name()); err == nil {
			out = append(out, c)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Meta.Created.Before(out[j].Meta.Created) })
	return out, nil
}

// Prune removes the change sets under root whose sandbox ended more than
// Retention before now and that nothing holds, and what a removal killed
// half-way left. It returns the ids it removed.
func Prune(root string, now time.Time) []string {
	ents, _ := os.ReadDir(root)
	var gone []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".gone-") {
			removeAll(filepath.Join(root, e.Name()))
		}
	}
	cs, _ := List(root)
	for _, c := range cs {
		// A change set whose sandbox was killed has no end: its creation
		// counts (one still in use holds its lock, and stays).
		t := c.Meta.Ended
		if t.IsZero() {
			t = c.Meta.Created
		}
		if now.Sub(t) < Retention {
			continue
		}
		if c.Discard(0) == nil {
			gone = append(gone, c.Meta.ID)
		}
	}
	return gone
}
