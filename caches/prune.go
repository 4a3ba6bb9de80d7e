package caches

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

// unit is what pruning removes at once: a file, or a directory that a
// pattern names as a whole (an unpacked module).
type unit struct {
	rel   string // slash-separated, relative to the cache
	dir   bool
	size  int64 // disk usage, bytes
	files int
	used  time.Time // the newest access or change of its files
}

// usage is what a walk of a cache finds.
type usage struct {
	total int64 // disk usage of everything, directories included
	files int
	units []unit
}

// measure walks dir without following any symlink, as du does: disk
// usage (allocated blocks) of files and directories, and the units of
// pruning with the time each was last used (the newer of access and
// modification: go touches its build cache's entries on use; elsewhere
// relatime's access time is a day's precision, enough to tell what was
// used least recently).
func measure(dir string, patterns []string) (usage, error) {
	var u usage
	cur := -1 // index of the unit directory being walked, or -1
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir {
				return err
			}
			return nil // gone meanwhile, or unreadable: not counted
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		size, used := diskUsage(fi)
		u.total += size
		if p == dir {
			return nil
		}
		rel := filepath.ToSlash(p[len(dir)+1:])
		if cur >= 0 && !strings.HasPrefix(rel, u.units[cur].rel+"/") {
			cur = -1
		}
		if cur >= 0 {
			un := &u.units[cur]
			un.size += size
			if !d.IsDir() {
				un.files++
				u.files++
				if used.After(un.used) {
					un.used = used
				}
			}
			return nil
		}
		if d.IsDir() {
			for _, pat := range patterns {
				if policy.MatchUnit(pat, rel) {
					u.units = append(u.units, unit{rel: rel, dir: true, size: size}) // used: its files'
					cur = len(u.units) - 1
					break
				}
			}
			return nil
		}
		u.files++
		u.units = append(u.units, unit{rel: rel, size: size, files: 1, used: used})
		return nil
	})
	return u, err
}

// diskUsage is what fi takes on disk and when it was last used.
func diskUsage(fi fs.FileInfo) (int64, time.Time) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fi.Size(), fi.ModTime()
	}
	used := fi.ModTime()
	if at := time.Unix(st.Atim.Sec, st.Atim.Nsec); at.After(used) {
		used = at
	}
	return st.Blocks * 512, used
}

// PruneResult is what Prune did to one cache.
type PruneResult struct {
	Key, Name string
	// InUse: a sandbox held the cache, so it was left as it was.
	InUse bool
	// Before and After are its disk usage; Removed counts the files
	// removed.
	Before, After int64
	Removed       int
	Cap           int64
}

// Prune brings the cache key/name down to PruneTo of its cap when it is
// over it, removing the least recently used units first, and records its
// size. cap 0 is the cap its record holds (the last run's policy's). A
// cache a sandbox holds is left alone (InUse).
func Prune(root, key, name string, cap int64, now time.Time) (PruneResult, error) {
	s := Spec{Root: root, Key: key, Name: name}
	res := PruneResult{Key: key, Name: name}
	lock, busy, err := tryLockExclusive(s.lockPath())
	if err != nil {
		return res, err
	}
	if busy {
		res.InUse = true
		return res, nil
	}
	defer lock.Close()
	r, rerr := readRecord(s.recordPath())
	if cap <= 0 {
		cap = r.Cap
	}
	if cap <= 0 {
		cap = int64(policy.DefaultCacheSize)
	}
	res.Cap = cap
	u, err := measure(s.Dir(), r.Units)
	if errors.Is(err, fs.ErrNotExist) {
		return res, nil
	}
	if err != nil {
		return res, err
	}
	res.Before, res.After = u.total, u.total
	if u.total > cap {
		goal := int64(float64(cap) * PruneTo)
		slices.SortStableFunc(u.units, func(a, b unit) int { return a.used.Compare(b.used) })
		var errs []error
		for _, un := range u.units {
			if res.After <= goal {
				break
			}
			if err := removeUnit(s.Dir(), un); err != nil {
				errs = append(errs, err)
				continue
			}
			res.After -= un.size
			res.Removed += un.files
		}
		if len(errs) > 0 && res.Removed == 0 {
			return res, fmt.Errorf("prune %s: %w", s.Dir(), errors.Join(errs...))
		}
		if m, err := measure(s.Dir(), r.Units); err == nil {
			res.After = m.total
		}
	}
	if rerr == nil {
		r.Checked, r.Size = now, res.After
		_ = writeRecord(s.recordPath(), r)
	}
	return res, nil
}

// removeUnit removes un from the cache dir, then the directories it leaves
// empty (not the cache itself).
func removeUnit(dir string, un unit) error {
	p := filepath.Join(dir, filepath.FromSlash(un.rel))
	var err error
	if un.dir {
		err = removeTree(p)
	} else {
		err = removeFile(p)
	}
	if err != nil {
		return err
	}
	for d := filepath.Dir(p); d != dir && strings.HasPrefix(d, dir+"/"); d = filepath.Dir(d) {
		if os.Remove(d) != nil {
			break
		}
	}
	return nil
}

// removeFile removes one file or symlink, making its directory writable
// when it is not (a read-only tree, as Go's module cache makes).
func removeFile(p string) error {
	err := os.Remove(p)
	if errors.Is(err, fs.ErrPermission) {
		if os.Chmod(filepath.Dir(p), 0o700) == nil {
			err = os.Remove(p)
		}
	}
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// removeTree removes p and everything beneath it, making directories
// writable and searchable on the way; it never follows a symlink.
func removeTree(p string) error {
	fi, err := os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.IsDir() {
		// WalkDir calls fn on a directory before reading it, so a
		// directory of mode 0 is opened up before it is listed.
		_ = filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				os.Chmod(q, 0o700)
			}
			return nil
		})
	}
	if err := os.RemoveAll(p); err != nil {
		return err
	}
	return nil
}

// Entry is one cache as hutch cache ls shows it.
type Entry struct {
	Record
	// Key is its scope's directory; Dir the cache's.
	Key string `json:"key"`
	Dir string `json:"dir"`
	// Usage is its disk usage now (when List measured), InUse whether a
	// sandbox holds it.
	Usage int64 `json:"usage"`
	InUse bool  `json:"in_use"`
	// WorkspaceGone: the workspace of a workspace scope no longer exists.
	WorkspaceGone bool `json:"workspace_gone,omitempty"`
}

// List returns every cache under root, by scope and name; with measure,
// each one's disk usage now.
func List(root string, measureUsage bool) ([]Entry, error) {
	keys, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, k := range keys {
		if !k.IsDir() {
			continue
		}
		ents, err := os.ReadDir(filepath.Join(root, k.Name()))
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() {
				continue
			}
			s := Spec{Root: root, Key: k.Name(), Name: e.Name()}
			r, _ := readRecord(s.recordPath())
			if r.Name == "" {
				r.Name = e.Name()
			}
			r.LastUsed = lastUsed(s.lockPath(), r.LastUsed)
			en := Entry{Record: r, Key: s.Key, Dir: s.Dir()}
			if measureUsage {
				if u, err := measure(s.Dir(), nil); err == nil {
					en.Usage = u.total
				}
			} else {
				en.Usage = r.Size
			}
			if lock, busy, err := tryLockExclusive(s.lockPath()); err == nil {
				en.InUse = busy
				if lock != nil {
					lock.Close()
				}
			}
			if r.Scope == ScopeWorkspace && r.Workspace != "" {
				if _, err := os.Stat(r.Workspace); errors.Is(err, fs.ErrNotExist) {
					en.WorkspaceGone = true
				}
			}
			out = append(out, en)
		}
	}
	return out, nil
}

// Remove deletes the cache key/name, its record and its lock; ErrInUse
// when a sandbox holds it, an error wrapping fs.ErrNotExist when there is
// no such cache.
func Remove(root, key, name string) error {
	s := Spec{Root: root, Key: key, Name: name}
	if fi, err := os.Lstat(s.Dir()); err != nil {
		return err
	} else if !fi.IsDir() {
		return fmt.Errorf("%s: not a cache directory", s.Dir())
	}
	lock, busy, err := tryLockExclusive(s.lockPath())
	if err != nil {
		return err
	}
	if busy {
		return ErrInUse
	}
	defer lock.Close()
	if err := removeTree(s.Dir()); err != nil {
		return err
	}
	os.Remove(s.recordPath())
	// Unlinked while held: a sandbox waiting on it finds it replaced and
	// locks the new one (lockShared).
	os.Remove(s.lockPath())
	os.Remove(filepath.Join(root, key)) // the scope too, when that was its last cache (Acquire makes it again)
	return nil
}

// Usage is the disk usage of the cache directory dir now, as du counts
// it; 0 when it cannot be read.
func Usage(dir string) int64 {
	u, err := measure(dir, nil)
	if err != nil {
		return 0
	}
	return u.total
}
