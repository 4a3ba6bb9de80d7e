package images

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// Root returns img's flattened tree (roots/sha256/MANIFEST/BUILD), building
// it from the stored layers when it is missing.
//
// Each build of a root gets a path of its own (BUILD is a new name each
// time): a root removed and built again is never at the path of the one
// before, so that nothing holding the old path (an init that opened a
// plan hint's bind sources) can take the old tree, or a missing one, for
// the new.
func (s *Store) Root(img *Image) (string, error) {
	if r, ok := s.builtRoot(img.Digest); ok {
		return r, nil
	}
	unlock, err := s.lock(false)
	if err != nil {
		return "", err
	}
	defer unlock()
	return s.buildRoot(img)
}

// buildRoot is Root with the store's lock held (shared) by the caller.
func (s *Store) buildRoot(img *Image) (string, error) {
	if r, ok := s.builtRoot(img.Digest); ok {
		return r, nil
	}
	for _, l := range img.Layers {
		if !s.hasLayer(l.DiffID) {
			// Pulled with --no-unpack: unpacked now, from the stored blob.
			if err := s.unpackStored(context.Background(), l); err != nil {
				return "", fmt.Errorf("image %s: %w", img.Digest, err)
			}
		}
	}
	// Invariant: every build is named root-* (its temporary name), so no
	// build is ever at LayeredRoot's name.
	tmp, err := os.MkdirTemp(s.tmpDir(), "root-")
	if err != nil {
		return "", err
	}
	defer removeTree(tmp)
	tree := filepath.Join(tmp, "fs")
	if err := os.Mkdir(tree, 0o755); err != nil {
		return "", err
	}
	f := &flattener{dst: tree, dirs: map[string]fs.FileInfo{}}
	for _, l := range img.Layers {
		m, err := s.Meta(l)
		if err != nil {
			return "", err
		}
		if err := f.layer(filepath.Join(s.layerPath(l.DiffID), "fs"), m); err != nil {
			return "", fmt.Errorf("image %s: flatten layer %s: %w", img.Digest, l.DiffID, err)
		}
	}
	if err := f.finish(); err != nil {
		return "", err
	}
	if r, ok := s.builtRoot(img.Digest); ok {
		return r, nil // built meanwhile by another hutch
	}
	dir := s.rootPath(img.Digest)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	dst := filepath.Join(dir, filepath.Base(tmp))
	if err := os.Rename(tree, dst); err != nil {
		return "", fmt.Errorf("image %s: store its root: %w", img.Digest, err)
	}
	return dst, nil
}

// LayeredRoot is a path that names img's root merged from its layers
// (OverlayLayers) and is never made on disk: no flattened build of img is
// ever at it (builds are named root-*: see buildRoot). The mount planner
// uses it as the virtual root of the union view of the layers.
func (s *Store) LayeredRoot(img *Image) string {
	return filepath.Join(s.rootPath(img.Digest), "layers")
}

// BuiltRoot is img's flattened tree when it has been built; it builds
// nothing.
func (s *Store) BuiltRoot(img *Image) (string, bool) { return s.builtRoot(img.Digest) }

// builtRoot is the root built for manifest, if any (the first by name
// when two hutch processes built one at once).
func (s *Store) builtRoot(manifest v1.Hash) (string, bool) {
	dir := s.rootPath(manifest)
	f, err := os.Open(dir)
	if err != nil {
		return "", false
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil || len(names) == 0 {
		return "", false
	}
	slices.Sort(names)
	return filepath.Join(dir, names[0]), true
}

// flattener merges layer trees, bottom to top, into dst as an overlay
// mount would show them: an upper directory merges with a lower directory
// (unless the upper one is opaque), anything else in the upper layer
// replaces what is below; whiteouts delete. It takes the whiteouts and
// opaque directories from each layer's LayerMeta, never from the tree:
// a layer's overlay markers (character devices, user.overlay.opaque) are
// passed over (devices) or not copied (xattrs: dst's directories are made
// anew). Files are hard links to the
// layers' (copies where a link is refused). It never follows a symlink in
// dst: every path it changes has real directories as parents.
type flattener struct {
	dst string
	// dirs: each directory's attributes from the topmost layer that has it.
	dirs map[string]fs.FileInfo
}

// remove deletes rel (clean, relative) from dst when it is there, its
// parents reached without symlinks (a whiteout beneath a lower symlink
// deletes nothing: the upper layer's directory replaces the symlink).
func (f *flattener) remove(rel string) error {
	if c, err := entryName(rel); err != nil || c == "" || c != rel {
		return fmt.Errorf("%q is not a path beneath the root", rel)
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	root, err := unix.Open(f.dst, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(root)
	dir := path.Dir(rel)
	pfd, err := unix.Openat2(root, dir, how)
	if err != nil {
		return nil // a parent is missing or not a directory: nothing to delete
	}
	unix.Close(pfd)
	if err := removeTree(filepath.Join(f.dst, rel)); err != nil {
		return err
	}
	for d := range f.dirs {
		if d == rel || strings.HasPrefix(d, rel+"/") {
			delete(f.dirs, d)
		}
	}
	return nil
}

func (f *flattener) layer(src string, m *LayerMeta) error {
	for _, w := range m.Whiteouts {
		if err := f.remove(w); err != nil {
			return fmt.Errorf("whiteout %s: %w", w, err)
		}
	}
	for _, o := range m.Opaque {
		if o == "" {
			continue // an opaque root: nothing below shows
		}
		if err := f.remove(o); err != nil {
			return fmt.Errorf("opaque directory %s: %w", o, err)
		}
	}
	if slices.Contains(m.Opaque, "") {
		if err := f.clearRoot(); err != nil {
			return err
		}
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if rel == "." {
			return nil
		}
		if d.Type()&fs.ModeCharDevice != 0 {
			// The unpack makes no device node but overlayfs's whiteouts
			// (0/0), which m.Whiteouts has already applied.
			return nil
		}
		to := filepath.Join(f.dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		cur, lerr := os.Lstat(to)
		if d.IsDir() {
			if lerr == nil && !cur.IsDir() {
				if err := os.Remove(to); err != nil {
					return err
				}
				lerr = fs.ErrNotExist
			}
			if lerr != nil {
				if err := os.Mkdir(to, 0o700); err != nil {
					return err
				}
			}
			f.dirs[rel] = info
			return nil
		}
		if lerr == nil {
			if cur.IsDir() {
				if err := f.remove(rel); err != nil {
					return err
				}
			} else if err := os.Remove(to); err != nil {
				return err
			}
		}
		return linkOrCopy(p, to, info)
	})
}

func (f *flattener) clearRoot() error {
	es, err := os.ReadDir(f.dst)
	if err != nil {
		return err
	}
	for _, e := range es {
		if err := f.remove(e.Name()); err != nil {
			return err
		}
	}
	return nil
}

// finish gives the directories their modes and times, deepest first.
func (f *flattener) finish() error {
	for _, r := range deepestFirst(f.dirs) {
		info := f.dirs[r]
		p := filepath.Join(f.dst, r)
		if err := os.Chmod(p, info.Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
			return err
		}
		os.Chtimes(p, info.ModTime(), info.ModTime())
	}
	return nil
}

// linkOrCopy makes to the same file as from: a hard link, or a copy where
// the file system refuses one (a symlink or FIFO is made anew).
func linkOrCopy(from, to string, info fs.FileInfo) error {
	if err := os.Link(from, to); err == nil {
		return nil
	}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(from)
		if err != nil {
			return err
		}
		return os.Symlink(t, to)
	case info.Mode()&fs.ModeNamedPipe != 0:
		return unix.Mkfifo(to, uint32(info.Mode().Perm()))
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chtimes(to, info.ModTime(), info.ModTime())
}
