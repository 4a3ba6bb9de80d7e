package mounts

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"
)

// HostFS is what planning reads of the host's file tree: which tooling
// directories exist and which are symlinks, the names in /etc or a rootfs,
// and the identity of directories (to pick where the root is built). Build
// reads the host only through it, so that a plan can be computed from facts
// given as data (tests use MemFS).
type HostFS interface {
	// Lstat is os.Lstat.
	Lstat(path string) (fs.FileInfo, error)
	// Readlink is os.Readlink.
	Readlink(path string) (string, error)
	// ReadDirNames lists the names in a directory, unsorted.
	ReadDirNames(path string) ([]string, error)
	// DirID identifies the directory path resolves to (symlinks followed);
	// false when path is missing or not a directory.
	DirID(path string) (DirID, bool)
}

// DirID is a directory's device and inode.
type DirID struct{ Dev, Ino uint64 }

// OS is the host's own file tree.
var OS HostFS = osFS{}

type osFS struct{}

func (osFS) Lstat(p string) (fs.FileInfo, error) { return os.Lstat(p) }
func (osFS) Readlink(p string) (string, error)   { return os.Readlink(p) }
func (osFS) ReadDirNames(p string) ([]string, error) {
	d, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}
func (osFS) DirID(p string) (DirID, bool) {
	var st unix.Stat_t
	if unix.Stat(p, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return DirID{}, false
	}
	return DirID{uint64(st.Dev), st.Ino}, true
}

// MemFS is a HostFS held in memory, for plans computed from given facts:
// each absolute path maps to its entry. Directories are implied by the
// paths beneath them and may also be listed themselves.
type MemFS map[string]MemEntry

// MemEntry is one path of a MemFS: a directory (the zero value), a regular
// file, or a symlink to Link.
type MemEntry struct {
	File bool
	Link string
}

func (m MemFS) Lstat(p string) (fs.FileInfo, error) {
	p = path.Clean(p)
	if e, ok := m[p]; ok {
		return memInfo{path.Base(p), e}, nil
	}
	if m.isDir(p) {
		return memInfo{path.Base(p), MemEntry{}}, nil
	}
	return nil, &fs.PathError{Op: "lstat", Path: p, Err: fs.ErrNotExist}
}

func (m MemFS) Readlink(p string) (string, error) {
	if e, ok := m[path.Clean(p)]; ok && e.Link != "" {
		return e.Link, nil
	}
	return "", &fs.PathError{Op: "readlink", Path: p, Err: errors.New("not a symlink")}
}

func (m MemFS) ReadDirNames(p string) ([]string, error) {
	p = path.Clean(p)
	if !m.isDir(p) {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	var names []string
	for k := range m {
		if path.Dir(k) == p && k != p {
			names = append(names, path.Base(k))
		}
	}
	for k := range m {
		for d := path.Dir(k); d != "/" && d != "."; d = path.Dir(d) {
			if path.Dir(d) == p && !slices.Contains(names, path.Base(d)) {
				names = append(names, path.Base(d))
			}
		}
	}
	return names, nil
}

func (m MemFS) DirID(p string) (DirID, bool) {
	p = path.Clean(p)
	for range 40 {
		e, ok := m[p]
		if !ok || e.Link == "" {
			break
		}
		if path.IsAbs(e.Link) {
			p = path.Clean(e.Link)
		} else {
			p = path.Join(path.Dir(p), e.Link)
		}
	}
	if !m.isDir(p) {
		return DirID{}, false
	}
	var h uint64 = 14695981039346656037
	for i := 0; i < len(p); i++ {
		h = (h ^ uint64(p[i])) * 1099511628211
	}
	return DirID{Dev: 1, Ino: h}, true
}

// isDir: p is listed as a directory, or a listed path lies beneath it.
func (m MemFS) isDir(p string) bool {
	if p == "/" {
		return true
	}
	if e, ok := m[p]; ok {
		return !e.File && e.Link == ""
	}
	for k := range m {
		if len(k) > len(p) && k[:len(p)] == p && k[len(p)] == '/' {
			return true
		}
	}
	return false
}

type memInfo struct {
	name string
	e    MemEntry
}

func (i memInfo) Name() string { return i.name }
func (i memInfo) Size() int64  { return 0 }
func (i memInfo) Mode() fs.FileMode {
	switch {
	case i.e.Link != "":
		return fs.ModeSymlink | 0o777
	case i.e.File:
		return 0o644
	}
	return fs.ModeDir | 0o755
}
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return i.Mode().IsDir() }
func (i memInfo) Sys() any           { return nil }
