// Package store is hutch's own on-disk store: small entries under keys, in
// namespaces beneath hutch's cache directory (hostdirs.Cache), each
// namespace kept to a bound so that nothing in it grows without limit.
// It holds what hutch computes once and reuses: compiled seccomp filters,
// the mount plans a prestarted init builds ahead (plan hints), discovered
// package registries, the markers of warnings already shown, and the
// unpacked MCP server image.
//
// Invariants:
//   - An entry is written whole or not at all: a private temporary file
//     beside it is renamed over it, so a concurrent reader sees the old
//     contents or the new, never a part.
//   - Entries are files of mode 0600 in directories of mode 0700 that only
//     this user can write; no sandbox can reach them (hostdirs hides the
//     cache directory from a workspace that contains it).
//   - After every Put, a namespace holds at most its Keep entries; the least
//     recently written go first.
//   - A store without a directory (no HOME, no XDG_CACHE_HOME) misses every
//     Get and keeps nothing: everything it holds can be computed again.
package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hutchsandbox/hutch/hostdirs"
)

// Store is the root of the namespaces: one directory.
type Store struct {
	dir string
}

// Open is the store in hutch's cache directory (hostdirs.Cache), or a
// store that keeps nothing when there is none.
func Open() *Store { return At(hostdirs.Cache()) }

// At is the store in dir ("" keeps nothing).
func At(dir string) *Store { return &Store{dir: dir} }

// Dir is the store's directory, "" when it keeps nothing.
func (s *Store) Dir() string {
	if s == nil {
		return ""
	}
	return s.dir
}

// The namespaces hutch uses, with their bounds. Each is a directory of the
// store named as the namespace.
var (
	// Seccomp holds compiled seccomp filters, by profile, kernel and binary.
	Seccomp = Namespace{Name: "seccomp", Keep: 32}
	// Plans holds plan hints, by command line and directory (named by
	// nsjail/prestart/prestart.c, which reads them before the Go runtime).
	Plans = Namespace{Name: "plans", Keep: 64}
	// Registries holds the registries the host's tools are configured to
	// use, by the environment that decides them.
	Registries = Namespace{Name: "registries", Keep: 32}
	// Warned holds a marker per best-effort warning already shown.
	Warned = Namespace{Name: "warned", Keep: 256}
	// Probes holds what a probe of the host found and may be kept for the
	// boot (nsjail.ProbeUserNamespacesOnce), by the boot it holds for.
	Probes = Namespace{Name: "probes", Keep: 8}
	// MCP holds the MCP server image unpacked for hosts that refuse
	// executable memfds, by build.
	MCP = Namespace{Name: "mcp", Keep: 1}
)

// Namespace names one directory of the store and its bound.
type Namespace struct {
	// Name is the directory's name.
	Name string
	// Keep is the most entries the namespace holds after a Put.
	Keep int
}

// Path is where ns keeps key, "" when the store keeps nothing. Readers that
// cannot call Get (C code before the Go runtime) and executables run from
// the store use it.
func (s *Store) Path(ns Namespace, key string) string {
	if s.Dir() == "" || !validKey(key) {
		return ""
	}
	return filepath.Join(s.dir, ns.Name, key)
}

// Get returns the entry of key in ns and when it was written; an error
// wrapping fs.ErrNotExist when there is none.
func (s *Store) Get(ns Namespace, key string) ([]byte, time.Time, error) {
	p := s.Path(ns, key)
	if p == "" {
		return nil, time.Time{}, fmt.Errorf("store %s/%s: %w", ns.Name, key, fs.ErrNotExist)
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("store: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, time.Time{}, fmt.Errorf("store %s: not a regular file: %w", p, fs.ErrNotExist)
	}
	b := make([]byte, fi.Size())
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, time.Time{}, fmt.Errorf("store: read %s: %w", p, err)
	}
	return b, fi.ModTime(), nil
}

// Has reports whether ns holds key.
func (s *Store) Has(ns Namespace, key string) bool {
	p := s.Path(ns, key)
	if p == "" {
		return false
	}
	fi, err := os.Lstat(p)
	return err == nil && fi.Mode().IsRegular()
}

// Put stores data under key in ns, whole, then prunes ns to its bound. A
// store that keeps nothing does nothing.
func (s *Store) Put(ns Namespace, key string, data []byte) error {
	return s.PutMode(ns, key, data, 0o600)
}

// PutMode is Put with the entry's mode (0500 for an executable).
func (s *Store) PutMode(ns Namespace, key string, data []byte, mode fs.FileMode) error {
	return s.PutWith(ns, key, mode, func(w *os.File) error {
		_, err := w.Write(data)
		return err
	})
}

// PutWith is PutMode with the entry's contents written by write, for
// entries too large to hold in memory whole.
func (s *Store) PutWith(ns Namespace, key string, mode fs.FileMode, write func(*os.File) error) error {
	if s.Dir() == "" {
		return nil
	}
	p := s.Path(ns, key)
	if p == "" {
		return fmt.Errorf("store %s: invalid key %q", ns.Name, key)
	}
	if err := writeFile(p, write, mode); err != nil {
		return fmt.Errorf("store %s: %w", ns.Name, err)
	}
	return s.prune(ns, key)
}

// Remove deletes key from ns; a missing entry is not an error.
func (s *Store) Remove(ns Namespace, key string) error {
	p := s.Path(ns, key)
	if p == "" {
		return nil
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Once reports whether this is the first time key is marked in ns, and
// marks it: the caller does once per user and host what Once says true for.
// Without a store every call is the first.
func (s *Store) Once(ns Namespace, key string, note []byte) bool {
	if s.Has(ns, key) {
		return false
	}
	_ = s.Put(ns, key, note) // unmarked, it is shown again: no worse than before
	return true
}

// prune removes the oldest entries of ns beyond its bound, never keep (the
// entry just written), and stale temporary files.
func (s *Store) prune(ns Namespace, keep string) error {
	dir := filepath.Join(s.dir, ns.Name)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("store %s: %w", ns.Name, err)
	}
	type entry struct {
		name string
		mod  time.Time
	}
	var es []entry
	var errs []error
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil || !fi.Mode().IsRegular() {
			continue
		}
		if strings.HasPrefix(e.Name(), ".tmp-") {
			// A writer that died between create and rename; a live one
			// renames within moments.
			if time.Since(fi.ModTime()) > time.Hour {
				_ = os.Remove(filepath.Join(dir, e.Name()))
			}
			continue
		}
		if e.Name() != keep {
			es = append(es, entry{e.Name(), fi.ModTime()})
		}
	}
	bound := max(ns.Keep-1, 0) // the new entry takes one place
	if len(es) <= bound {
		return nil
	}
	slices.SortFunc(es, func(a, b entry) int { return b.mod.Compare(a.mod) })
	for _, e := range es[bound:] {
		if err := os.Remove(filepath.Join(dir, e.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("store %s: prune: %w", ns.Name, errors.Join(errs...))
	}
	return nil
}

// validKey accepts what a file name in a namespace may be: letters, digits,
// '-', '_' and '.', not starting with '.' (temporary files do), at most 128.
func validKey(k string) bool {
	if k == "" || len(k) > 128 || k[0] == '.' {
		return false
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// writeFile writes path atomically with mode, its contents from write,
// creating the directory (0700) when missing.
func writeFile(path string, write func(*os.File) error, mode fs.FileMode) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-*") // 0600
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op after the rename
	if err := write(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if mode != 0o600 {
		if err := tmp.Chmod(mode); err != nil {
			tmp.Close()
			return fmt.Errorf("chmod %s: %w", tmp.Name(), err)
		}
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	return os.Rename(tmp.Name(), path)
}
