package imagebuild

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// epoch is every build layer entry's modification time: a layer is made
// from content alone, so that the same inputs give the same digest.
var epoch = time.Unix(0, 0).UTC()

// tarWriter writes a layer's tar reproducibly: entries in the order given
// (callers walk in lexical order), owner 0:0, no user or group names, the
// fixed epoch as time, set-id bits dropped.
type tarWriter struct {
	tw   *tar.Writer
	dirs map[string]bool
	// keepTimes keeps the files' modification times (a run step's layer).
	keepTimes bool
}

func newTarWriter(w io.Writer) *tarWriter {
	return &tarWriter{tw: tar.NewWriter(w), dirs: map[string]bool{}}
}

// parents writes the directories above name (a slash path without a
// leading slash) that were not written yet, mode 0755.
func (t *tarWriter) parents(name string) error {
	dir := path.Dir(name)
	if dir == "." || t.dirs[dir] {
		return nil
	}
	if err := t.parents(dir); err != nil {
		return err
	}
	t.dirs[dir] = true
	return t.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: dir + "/", Mode: 0o755, ModTime: epoch})
}

// file writes the host entry at src (not followed when a symlink) as name.
func (t *tarWriter) file(src, name string, info fs.FileInfo) error {
	if err := t.parents(name); err != nil {
		return err
	}
	h := &tar.Header{Name: name, Mode: int64(info.Mode().Perm()), ModTime: epoch}
	if t.keepTimes {
		h.ModTime = info.ModTime().Truncate(time.Second)
	}
	if info.Mode()&fs.ModeSticky != 0 {
		h.Mode |= 0o1000
	}
	switch {
	case info.IsDir():
		if t.dirs[name] {
			return nil
		}
		t.dirs[name] = true
		h.Typeflag, h.Name = tar.TypeDir, name+"/"
		return t.tw.WriteHeader(h)
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		h.Typeflag, h.Linkname = tar.TypeSymlink, target
		return t.tw.WriteHeader(h)
	case info.Mode().IsRegular():
		f, err := os.Open(src)
		if err != nil {
			return err
		}
		defer f.Close()
		h.Typeflag, h.Size = tar.TypeReg, info.Size()
		if err := t.tw.WriteHeader(h); err != nil {
			return err
		}
		if n, err := io.Copy(t.tw, f); err != nil || n != info.Size() {
			return fmt.Errorf("%s: changed while being read (%d of %d bytes): %w", src, n, info.Size(), err)
		}
		return nil
	default:
		return fmt.Errorf("%s: %s: only files, directories and symlinks can be copied into an image", src, info.Mode().Type())
	}
}

// tree writes src (a file, symlink or directory, walked in lexical order
// without following symlinks) at dest (a slash path without leading slash).
func (t *tarWriter) tree(src, dest string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := dest
		if rel != "." {
			name = path.Join(dest, filepath.ToSlash(rel))
		}
		if name == "" || name == "." {
			// The root directory itself (rootfs:DIR): not an entry.
			return nil
		}
		return t.file(p, strings.TrimPrefix(name, "/"), info)
	})
}

func (t *tarWriter) close() error { return t.tw.Close() }

// writeLayerTar writes a tar of src at dest into a new file in tmpDir and
// returns its path; the caller removes it.
func writeLayerTar(tmpDir, src, dest string) (string, error) {
	return layerFile(tmpDir, false, func(tw *tarWriter) error { return tw.tree(src, strings.TrimPrefix(dest, "/")) })
}

// layerFile writes a layer tar through write into a new file in tmpDir
// and returns its path (the caller removes it); nothing is left on error.
func layerFile(tmpDir string, keepTimes bool, write func(*tarWriter) error) (string, error) {
	f, err := os.CreateTemp(tmpDir, "build-layer-")
	if err != nil {
		return "", err
	}
	tw := newTarWriter(f)
	tw.keepTimes = keepTimes
	err = write(tw)
	if err == nil {
		err = tw.close()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", err
	}
	return f.Name(), nil
}

// upperLayer writes the layer tar of an overlay upper directory made by a
// run step (one subdirectory per top-level directory of the image): its
// files as they are (modification times kept), its whiteouts (character
// devices 0/0, or files with the user.overlay.whiteout xattr) as OCI
// ".wh.NAME" entries, and its opaque directories (user.overlay.opaque "y")
// with a ".wh..wh..opq" entry. Top-level directories the step left empty
// are not in the layer.
func upperLayer(tmpDir, upper string) (string, error) {
	p, err := layerFile(tmpDir, true, func(tw *tarWriter) error { return tw.upper(upper) })
	if err != nil {
		return "", fmt.Errorf("the step's layer: %w", err)
	}
	return p, nil
}

// upper writes the tree of an overlay upper directory (upperLayer).
func (tw *tarWriter) upper(upper string) error {
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == upper {
			return err
		}
		rel, err := filepath.Rel(upper, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() && !strings.Contains(name, "/") {
			if ents, _ := os.ReadDir(p); len(ents) == 0 && !isOpaque(p) {
				return fs.SkipDir // left as it was
			}
		}
		if isWhiteout(p, info) {
			wh := path.Join(path.Dir(name), ".wh."+path.Base(name))
			if err := tw.parents(wh); err != nil {
				return err
			}
			return tw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: wh, Mode: 0o600, ModTime: epoch})
		}
		if err := tw.file(p, name, info); err != nil {
			return err
		}
		if d.IsDir() && isOpaque(p) {
			return tw.tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name + "/.wh..wh..opq", Mode: 0o600, ModTime: epoch})
		}
		return nil
	})
}

// isWhiteout: overlayfs's whiteout, a 0/0 character device or (Linux
// 6.7) a file with the user.overlay.whiteout xattr.
func isWhiteout(p string, info fs.FileInfo) bool {
	if info.Mode()&fs.ModeCharDevice != 0 {
		if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
			return true
		}
	}
	if info.Mode().IsRegular() && info.Size() == 0 {
		n, err := unix.Lgetxattr(p, "user.overlay.whiteout", nil)
		return err == nil && n >= 0
	}
	return false
}

// isOpaque: an overlayfs opaque directory (userxattr).
func isOpaque(p string) bool {
	b := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "user.overlay.opaque", b)
	return err == nil && n == 1 && b[0] == 'y'
}
