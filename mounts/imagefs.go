package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ImageFS is a HostFS that shows, at Root, an image's overlay-native layers
// merged as a read-only overlayfs mount of them shows them, and every other
// path as Base does. Root itself never exists on the host: it names the
// merged tree so that the mount plan (which reads the tooling tree at
// plan time: its top-level entries, the /etc mask, the synthesized files'
// symlinks) reads an image's root without a flattened copy of it.
//
// The merge rules are overlayfs's (Documentation/filesystems/overlayfs.rst),
// topmost layer first: a name resolves to the topmost layer that has it; a
// directory merges with the directories below it unless it is opaque
// (user.overlay.opaque = "y", the userxattr form a user namespace mounts
// with); anything that is not a directory hides everything below it; a 0/0
// character device is a whiteout, which hides the name and is not shown.
type ImageFS struct {
	// Base reads every path, the layers' included (OS when nil).
	Base HostFS
	// Root names the merged tree (absolute, clean).
	Root string
	// Layers are the layers' directories on the host, topmost first.
	Layers []string

	// memo holds the entries looked up (entry), by path beneath Root: the
	// layers do not change while a plan is made from them. An ImageFS is
	// therefore for one plan at a time, and not for concurrent use.
	memo map[string]merged
}

// NewImageFS is the ImageFS of layers (topmost first) at root over base;
// nil without layers.
func NewImageFS(base HostFS, root string, layers []string) *ImageFS {
	if len(layers) == 0 {
		return nil
	}
	return &ImageFS{Base: base, Root: filepath.Clean(root), Layers: layers}
}

// TreeFS is the tree a root at root is read from: with layers, their
// ImageFS over base; without, base itself (OS when nil), where root is a
// host directory.
func TreeFS(base HostFS, root string, layers []string) HostFS {
	if img := NewImageFS(base, root, layers); img != nil {
		return img
	}
	if base == nil {
		return OS
	}
	return base
}

func (f *ImageFS) base() HostFS {
	if f.Base == nil {
		return OS
	}
	return f.Base
}

// rel is p relative to Root ("" for Root itself); false when p is not
// beneath Root.
func (f *ImageFS) rel(p string) (string, bool) {
	p = filepath.Clean(p)
	if p == f.Root {
		return "", true
	}
	r, ok := strings.CutPrefix(p, f.Root+"/")
	return r, ok
}

// isWhiteout: fi is overlayfs's whiteout, a 0/0 character device (an image
// layer holds no other device: the unpack skips them).
func isWhiteout(fi fs.FileInfo) bool {
	if fi.Mode().Type() != fs.ModeDevice|fs.ModeCharDevice {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Rdev == 0
}

// opaque: the directory p is marked overlay-opaque (userxattr).
func opaque(p string) bool {
	b := make([]byte, 4)
	n, err := unix.Lgetxattr(p, "user.overlay.opaque", b)
	return err == nil && string(b[:n]) == "y"
}

// step goes down one component c from the directories dirs that make a
// merged directory (topmost first): it returns the topmost entry named c
// (its host path and lstat; "" when c is missing or whited out) and the
// directories that make the merged directory c when it is one.
func (f *ImageFS) step(dirs []string, c string) (top string, topInfo fs.FileInfo, sub []string, err error) {
	for _, d := range dirs {
		q := filepath.Join(d, c)
		fi, err := f.base().Lstat(q)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
			continue // not in this layer: the ones below may have it
		}
		if err != nil {
			return "", nil, nil, err
		}
		if isWhiteout(fi) {
			break // hides c in every layer below
		}
		if top == "" {
			top, topInfo = q, fi
		}
		if !fi.IsDir() {
			break // a file or symlink replaces what is below (and, under a directory above, is hidden)
		}
		if sub = append(sub, q); opaque(q) {
			break
		}
	}
	if topInfo != nil && !topInfo.IsDir() {
		sub = nil
	}
	return top, topInfo, sub, nil
}

// merged is one entry of the merged tree, as entry found it.
type merged struct {
	top  string      // the host path of the layer entry it shows
	info fs.FileInfo // its lstat
	sub  []string    // the layers' directories that make it, when it is a directory
	err  error       // fs.ErrNotExist, syscall.ENOTDIR, or a layer's lstat error
}

// entry finds the merged entry rel, going down from its parent's (each
// entry looked up once per ImageFS: the plan asks for the same
// directories over and over, and every step down costs a stat and an
// xattr read per layer).
func (f *ImageFS) entry(rel string) merged {
	if m, ok := f.memo[rel]; ok {
		return m
	}
	var m merged
	switch {
	case len(f.Layers) == 0:
		m.err = fs.ErrNotExist
	case rel == "":
		m.top, m.sub = f.Layers[0], f.Layers
		m.info, m.err = f.base().Lstat(f.Layers[0])
	default:
		dir, name := path.Split(rel)
		parent := f.entry(strings.TrimSuffix(dir, "/"))
		switch {
		case parent.err != nil:
			m.err = parent.err
		case parent.sub == nil:
			m.err = syscall.ENOTDIR
		default:
			m.top, m.info, m.sub, m.err = f.step(parent.sub, name)
			if m.err == nil && m.top == "" {
				m.err = fs.ErrNotExist
			}
		}
	}
	if f.memo == nil {
		f.memo = map[string]merged{}
	}
	f.memo[rel] = m
	return m
}

// lookup finds the merged entry rel: the host path of the layer entry it
// shows, and its lstat.
func (f *ImageFS) lookup(rel string) (string, fs.FileInfo, error) {
	m := f.entry(rel)
	return m.top, m.info, m.err
}

// Dirs are the layers' directories that make the merged directory rel
// (relative to Root), topmost first: the lower layers of an overlay that
// shows it. None when rel is not a directory in the merged tree.
func (f *ImageFS) Dirs(rel string) []string {
	m := f.entry(rel)
	if m.err != nil {
		return nil
	}
	return m.sub
}

// Real is the host path of the layer entry that the merged entry p (beneath
// Root) shows: the topmost layer's. Binding it shows that entry alone; for
// a directory, Dirs says which layers its merged view takes.
func (f *ImageFS) Real(p string) (string, error) {
	rel, ok := f.rel(p)
	if !ok {
		return "", fmt.Errorf("%s is not in the image's root %s", p, f.Root)
	}
	real, _, err := f.lookup(rel)
	if err != nil {
		return "", &fs.PathError{Op: "lookup", Path: p, Err: err}
	}
	return real, nil
}

// Lstat is os.Lstat of the merged tree beneath Root, Base's elsewhere.
func (f *ImageFS) Lstat(p string) (fs.FileInfo, error) {
	rel, ok := f.rel(p)
	if !ok {
		return f.base().Lstat(p)
	}
	_, fi, err := f.lookup(rel)
	if err != nil {
		return nil, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return fi, nil
}

// Readlink is os.Readlink of the merged tree beneath Root, Base's
// elsewhere.
func (f *ImageFS) Readlink(p string) (string, error) {
	rel, ok := f.rel(p)
	if !ok {
		return f.base().Readlink(p)
	}
	real, _, err := f.lookup(rel)
	if err != nil {
		return "", &fs.PathError{Op: "readlink", Path: p, Err: err}
	}
	return f.base().Readlink(real)
}

// ReadDirNames lists a merged directory: every name of its layers'
// directories that is not whited out in a layer above the one holding it.
func (f *ImageFS) ReadDirNames(p string) ([]string, error) {
	rel, ok := f.rel(p)
	if !ok {
		return f.base().ReadDirNames(p)
	}
	dirs := f.Dirs(rel)
	if dirs == nil {
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	seen := map[string]bool{}
	var names []string
	for _, d := range dirs {
		ns, err := f.base().ReadDirNames(d)
		if err != nil {
			return nil, fmt.Errorf("image layer %s: %w", d, err)
		}
		for _, n := range ns {
			if seen[n] {
				continue
			}
			seen[n] = true
			if fi, err := f.base().Lstat(filepath.Join(d, n)); err == nil && isWhiteout(fi) {
				continue
			}
			names = append(names, n)
		}
	}
	return names, nil
}

// DirID is Base's outside Root. A merged directory is no host directory
// (it is never a bind source: an overlay step's sources are its layers'
// directories), so beneath Root it is false.
func (f *ImageFS) DirID(p string) (DirID, bool) {
	if _, ok := f.rel(p); ok {
		return DirID{}, false
	}
	return f.base().DirID(p)
}

// StatIn is the lstat of the entry that the absolute path p inside a root
// tree (root on fsys: a rootfs directory or an ImageFS's Root) resolves to,
// its symlinks followed as they resolve inside the sandbox whose root that
// tree is (an absolute target from the tree's root, ".." stopping there):
// the plan's view of a root that is the tree, bound read-only.
func StatIn(fsys HostFS, root, p string) (fs.FileInfo, error) {
	// Source ends in "/": the view joins it with the path beneath Target.
	v := view{fsys: fsys, p: &Plan{Steps: []Step{{Kind: Bind, Source: filepath.Clean(root) + "/", Target: "/", ReadOnly: true}}}}
	r, err := v.resolve(p)
	if err != nil {
		return nil, err
	}
	if !r.exists {
		return nil, &fs.PathError{Op: "stat", Path: p, Err: fs.ErrNotExist}
	}
	return fsys.Lstat(filepath.Join(root, r.path))
}
