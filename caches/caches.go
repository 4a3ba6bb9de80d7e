// Package caches keeps hutch's persistent caches: directories that outlive
// sandboxes, bound read-write inside each sandbox of their scope
// (docs/CACHES.md), with the size caps, the pruning and the locks that
// keep them bounded and safe to share.
//
// Layout, beneath hutch's cache directory (hostdirs.Cache):
//
//	caches/                      0700
//	  ws-proj-1a2b3c4d5e6f7a8b/  a workspace's scope (ScopeKey), 0700
//	    go-build/                the cache itself: the bind source, 0700
//	    go-build.json            its record (Record): cap, target, last use, last check
//	    go-build.lock            flock: shared while a sandbox has it, exclusive to prune or remove
//	  user/                      the scope "user"
//
// Invariants:
//   - The caches are hutch's own directories, never a host tool's: what a
//     sandbox writes there reaches only later sandboxes of the same scope.
//   - A sandbox reaches only the cache directories bound into it; the
//     records, locks and the rest of hutch's cache directory (the seccomp
//     filters, plan hints, registries of package store) stay out of reach,
//     as does every other scope.
//   - hutch never follows a symlink inside a cache (sizes, pruning and
//     removal work on the links themselves): whatever a sandbox put there
//     cannot lead hutch elsewhere on the host.
//   - Nothing is pruned or removed while a sandbox holds the cache: every
//     sandbox holds a shared flock on each of its caches from before its
//     root is built until it has ended; pruning and removal take it
//     exclusively, without waiting.
package caches

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/hostdirs"
)

// Scopes, as policy names them.
const (
	ScopeWorkspace = "workspace"
	ScopeUser      = "user"
)

// UserKey is the directory of the scope "user".
const UserKey = "user"

// CheckEvery is how often the end of a run measures a cache it used (and
// prunes it when over its cap): a walk of a large cache costs tens of
// milliseconds, too much for every run.
const CheckEvery = 24 * time.Hour

// PruneTo is the fraction of its cap a pruned cache is brought down to, so
// that one just over its cap is not pruned again at the next check.
const PruneTo = 0.9

// ErrInUse is the error of removing a cache that a running sandbox holds.
var ErrInUse = errors.New("in use by a running sandbox")

// Root is the directory of the caches, "" when hutch has no cache
// directory (no HOME, no XDG_CACHE_HOME).
func Root() string {
	if d := hostdirs.Cache(); d != "" {
		return filepath.Join(d, "caches")
	}
	return ""
}

// ScopeKey names the directory of a scope: UserKey, or for a workspace
// (its real path) "ws-" and its base name, made safe, and a hash of the
// whole path, so that two workspaces never share one.
func ScopeKey(scope, workspace string) string {
	if scope == ScopeUser {
		return UserKey
	}
	h := sha256.Sum256([]byte(workspace))
	return "ws-" + readable(filepath.Base(workspace)) + "-" + hex.EncodeToString(h[:8])
}

// readable is name lower-cased with everything but letters, digits, '.',
// '-' and '_' replaced, at most 32 bytes.
func readable(name string) string {
	var b strings.Builder
	for _, c := range strings.ToLower(name) {
		if b.Len() >= 32 {
			break
		}
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			b.WriteRune(c)
		default:
			b.WriteByte('_')
		}
	}
	if b.Len() == 0 || strings.Trim(b.String(), "_") == "" {
		return "root"
	}
	return b.String()
}

// Spec is one cache as a sandbox mounts it.
type Spec struct {
	// Root is the caches' directory (Root).
	Root string
	// Key is the scope's directory (ScopeKey), Name the cache's.
	Key, Name string
	// Scope and Workspace say whose it is (Workspace for the scope
	// "workspace").
	Scope, Workspace string
	// Target is where it is mounted inside.
	Target string
	// Cap is its size cap in bytes.
	Cap int64
	// Units are patterns of directories pruned whole (policy.MatchUnit).
	Units []string
}

// Dir is the cache's directory: the bind source.
func (s Spec) Dir() string { return filepath.Join(s.Root, s.Key, s.Name) }

func (s Spec) recordPath() string { return filepath.Join(s.Root, s.Key, s.Name+".json") }
func (s Spec) lockPath() string   { return filepath.Join(s.Root, s.Key, s.Name+".lock") }

// Record is what hutch keeps beside each cache (NAME.json).
type Record struct {
	Name      string   `json:"name"`
	Scope     string   `json:"scope"`
	Workspace string   `json:"workspace,omitempty"`
	Target    string   `json:"target"`
	Cap       int64    `json:"cap"`
	Units     []string `json:"units,omitempty"`
	// LastUsed is when a sandbox last started with the cache (the newer
	// of this and the lock file's modification time, which each start
	// sets).
	LastUsed time.Time `json:"last_used"`
	// Checked is when the cache was last measured (and pruned if over
	// its cap); Size what it measured then.
	Checked time.Time `json:"checked"`
	Size    int64     `json:"size"`
}

func readRecord(path string) (Record, error) {
	var r Record
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("cache record %s: %w", path, err)
	}
	return r, nil
}

// writeRecord writes r whole or not at all (a temporary file renamed over
// the old one).
func writeRecord(path string, r Record) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Held are the caches of one sandbox, locked shared until Release.
type Held struct {
	specs   []Spec
	locks   []*os.File
	checked []time.Time // each cache's last check, as Acquire read it
}

// Acquire makes each cache's directories (0700) if missing, takes its
// shared lock (waiting for a prune or removal in progress) and records its
// use. Call it before the sandbox's root is built, and Release once the
// sandbox has ended. On error nothing stays locked.
func Acquire(specs []Spec, now time.Time) (*Held, error) {
	h := &Held{}
	for _, s := range specs {
		if err := h.acquire(s, now); err != nil {
			h.Release()
			return nil, fmt.Errorf("cache %s (%s): %w", s.Name, s.Dir(), err)
		}
	}
	return h, nil
}

func (h *Held) acquire(s Spec, now time.Time) error {
	if s.Root == "" || s.Key == "" || s.Name == "" || strings.ContainsAny(s.Key+s.Name, "/\x00") {
		return errors.New("no cache directory")
	}
	scope := filepath.Join(s.Root, s.Key)
	var lock *os.File
	for try := 0; ; try++ {
		if err := os.MkdirAll(scope, 0o700); err != nil {
			return err
		}
		if err := realDir(scope); err != nil {
			return err
		}
		var err error
		lock, err = lockShared(s.lockPath())
		if errors.Is(err, fs.ErrNotExist) && try < 10 {
			continue // a removal took the scope's last cache, and the scope, meanwhile
		}
		if err != nil {
			return err
		}
		break
	}
	h.locks = append(h.locks, lock)
	h.specs = append(h.specs, s)
	dir := s.Dir()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	if err := realDir(dir); err != nil {
		return err
	}
	// The last use is the lock file's modification time: one call, where
	// rewriting the record would cost a file and a rename every run.
	ts := []unix.Timespec{unix.NsecToTimespec(now.UnixNano()), unix.NsecToTimespec(now.UnixNano())}
	_ = unix.UtimesNanoAt(unix.AT_FDCWD, fdPath(lock), ts, 0)
	r, err := readRecord(s.recordPath())
	if err != nil {
		// A new cache (or a record lost): empty, or measured at the next
		// check a day on.
		r = Record{Checked: now}
	}
	h.checked = append(h.checked, r.Checked)
	if err == nil && r.Name == s.Name && r.Scope == s.Scope && r.Workspace == s.Workspace && r.Target == s.Target && r.Cap == s.Cap && slices.Equal(r.Units, s.Units) {
		return nil // the record is as this run would write it
	}
	r.Name, r.Scope, r.Workspace, r.Target, r.Cap, r.Units = s.Name, s.Scope, s.Workspace, s.Target, s.Cap, s.Units
	r.LastUsed = now
	return writeRecord(s.recordPath(), r)
}

// fdPath names the open file f through /proc/self/fd, so that a call by
// path reaches the file f is, whatever happened to its name since.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }

// lastUsed is when a sandbox last started with the cache whose lock is at
// lockPath (the lock's modification time), or fallback.
func lastUsed(lockPath string, fallback time.Time) time.Time {
	if fi, err := os.Stat(lockPath); err == nil && fi.ModTime().After(fallback) {
		return fi.ModTime()
	}
	return fallback
}

// realDir refuses a path that is a symlink or not a directory: hutch made
// it, and only this user can write where it lies.
func realDir(p string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory (hutch made it one; remove it)", p)
	}
	return nil
}

// Release unlocks the caches. It is idempotent.
func (h *Held) Release() {
	if h == nil {
		return
	}
	for _, f := range h.locks {
		f.Close()
	}
	h.locks = nil
}

// Maintain measures, after Release, each cache whose last check is older
// than CheckEvery, and prunes one over its cap (Prune). A cache another
// sandbox holds is left for a later check. It returns what it did.
func (h *Held) Maintain(now time.Time) []PruneResult {
	if h == nil {
		return nil
	}
	var out []PruneResult
	for i, s := range h.specs {
		// As Acquire read it: a check since by another sandbox makes this
		// one only measure again, once.
		if i < len(h.checked) && now.Sub(h.checked[i]) < CheckEvery {
			continue
		}
		if res, err := Prune(s.Root, s.Key, s.Name, 0, now); err == nil {
			out = append(out, res)
		}
	}
	return out
}

// lockShared opens and flocks path shared, waiting, and checks that the
// locked file is still the one at path (a removal unlinks it while holding
// it exclusively).
func lockShared(path string) (*os.File, error) {
	for i := 0; ; i++ {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if same(f, path) || i > 100 {
			return f, nil
		}
		f.Close()
	}
}

// tryLockExclusive flocks path exclusively without waiting; busy when a
// sandbox holds it. A missing lock file is created.
func tryLockExclusive(path string) (f *os.File, busy bool, err error) {
	for i := 0; i < 100; i++ {
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
		if err != nil {
			return nil, false, err
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, true, nil
			}
			return nil, false, fmt.Errorf("lock %s: %w", path, err)
		}
		if same(f, path) {
			return f, false, nil
		}
		f.Close()
	}
	return nil, false, fmt.Errorf("lock %s: it keeps being replaced", path)
}

// same reports whether the open file f is the file at path now.
func same(f *os.File, path string) bool {
	a, err1 := f.Stat()
	b, err2 := os.Lstat(path)
	return err1 == nil && err2 == nil && os.SameFile(a, b)
}
