package images

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Whiteout names of the OCI layer format.
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// UnpackError is an entry of a layer that hutch refuses to unpack.
type UnpackError struct {
	Entry  string
	Reason string
}

func (e *UnpackError) Error() string {
	return fmt.Sprintf("layer entry %q: %s", e.Entry, e.Reason)
}

// entryName checks a tar entry's name (or a hard link's target) and
// returns it clean and relative ("" for the layer's root). Absolute names
// and names with ".." are refused, not rewritten: a layer that has them
// was not made by an image builder.
func entryName(n string) (string, error) {
	if strings.HasPrefix(n, "/") {
		return "", errors.New("an absolute name (refused: a layer's names are relative to its root)")
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", errors.New(`a name with ".." (refused: path traversal)`)
		}
	}
	c := path.Clean(n)
	if c == "." {
		return "", nil
	}
	return c, nil
}

// unpacker writes one layer's tree beneath root, rootless: every file is
// the invoking user's, set-id bits are dropped, device nodes skipped (and
// reported), whiteouts and opaque directories recorded in meta and, once
// the tar is read, made overlayfs's markers in the tree (overlayMarkers;
// where they are refused, none are left and meta says why), hard links
// kept inside the layer. No path component it walks through may be a
// symlink (openat2 RESOLVE_NO_SYMLINKS beneath the root), so nothing in a
// layer can make it write outside root.
type unpacker struct {
	root   string
	rootFD int
	meta   LayerMeta
	dirs   map[string]dirAttr
	buf    []byte
	// marks make the overlay markers (the zero value: the real calls).
	marks markerOps
}

type dirAttr struct {
	mode  uint32
	mtime time.Time
}

// unpackLayer unpacks the uncompressed layer tar r into dir/fs (dir
// exists and is empty), its markers made by marks, and returns its meta.
// It reads r to its end.
func unpackLayer(r io.Reader, dir string, marks markerOps) (*LayerMeta, error) {
	root := filepath.Join(dir, "fs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return nil, err
	}
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", root, err)
	}
	defer unix.Close(fd)
	u := &unpacker{root: root, rootFD: fd, dirs: map[string]dirAttr{}, buf: make([]byte, 256<<10), marks: marks}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("layer tar: %w", err)
		}
		if err := u.entry(h, tr); err != nil {
			return nil, err
		}
	}
	// The tar's end-of-archive blocks and any padding: the digest is
	// of the whole stream.
	if _, err := io.Copy(io.Discard, r); err != nil {
		return nil, err
	}
	// The markers before the directories' modes: a read-only directory
	// takes neither a device nor an xattr from its (unprivileged) owner.
	// Whiteouts apply to the layers below whatever their place in the
	// tar, so making them once the tree is whole is the same as making
	// them in order, and simpler: what a later entry put at a whiteout's
	// name is already there to be looked at.
	if err := overlayMarkers(u.rootFD, &u.meta, u.marks); err != nil {
		u.meta.OverlayWhy = err.Error()
	} else {
		u.meta.OverlayForm = true
	}
	if err := u.finishDirs(); err != nil {
		return nil, err
	}
	return &u.meta, nil
}

// openBeneath opens the directory rel (clean, relative; "" is the root)
// beneath rootFD, O_PATH, without following any symlink or leaving
// rootFD's filesystem.
func openBeneath(rootFD int, rel string) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV}
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(rootFD, rel, how)
}

// openDir opens rel (clean, relative; "" is the root) beneath the root
// without following any symlink, creating missing directories when create.
func (u *unpacker) openDir(rel string, create bool) (int, error) {
	fd, err := openBeneath(u.rootFD, rel)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, err
	}
	parent, err := u.openDir(path.Dir(rel), true)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	if err := unix.Mkdirat(parent, path.Base(rel), 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, err
	}
	return openBeneath(u.rootFD, rel)
}

// clear removes what is at name in parent (rel is its path beneath the
// root), keeping a directory when keepDir.
func (u *unpacker) clear(parent int, name, rel string, keepDir bool) (isDir bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		// rel's parents were opened without symlinks: the joined path
		// stays beneath the root.
		return false, removeTree(filepath.Join(u.root, rel))
	}
	return false, unix.Unlinkat(parent, name, 0)
}

func (u *unpacker) entry(h *tar.Header, r io.Reader) error {
	rel, err := entryName(h.Name)
	if err != nil {
		return &UnpackError{h.Name, err.Error()}
	}
	if rel == "" {
		if h.Typeflag == tar.TypeDir {
			u.dirs[""] = dirAttr{dirMode(h.Mode), h.ModTime}
		}
		return nil
	}
	dir, base := path.Dir(rel), path.Base(rel)
	if dir == "." {
		dir = ""
	}
	if base == opaqueMarker {
		u.meta.Opaque = append(u.meta.Opaque, dir)
		fd, err := u.openDir(dir, true)
		if err != nil {
			return &UnpackError{h.Name, "its directory: " + err.Error()}
		}
		unix.Close(fd)
		return nil
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		if n := strings.TrimPrefix(base, whiteoutPrefix); n == "" || n == "." || n == ".." {
			return &UnpackError{h.Name, "a whiteout of " + strconv.Quote(n) + " (refused: it names no entry of the directory)"}
		}
		u.meta.Whiteouts = append(u.meta.Whiteouts, path.Join(dir, strings.TrimPrefix(base, whiteoutPrefix)))
		fd, err := u.openDir(dir, true)
		if err != nil {
			return &UnpackError{h.Name, "its directory: " + err.Error()}
		}
		unix.Close(fd)
		return nil
	}
	switch h.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		kind := "character"
		if h.Typeflag == tar.TypeBlock {
			kind = "block"
		}
		u.meta.Skipped = append(u.meta.Skipped, fmt.Sprintf("/%s: %s device %d:%d (a rootless unpack cannot make device nodes; the sandbox's /dev has its own)", rel, kind, h.Devmajor, h.Devminor))
		return nil
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		u.meta.Skipped = append(u.meta.Skipped, fmt.Sprintf("/%s: tar entry type %q (not a file hutch keeps)", rel, h.Typeflag))
		return nil
	}
	parent, err := u.openDir(dir, true)
	if err != nil {
		return &UnpackError{h.Name, "its directory cannot be reached without following a symlink or leaving the layer: " + err.Error()}
	}
	defer unix.Close(parent)
	isDir, err := u.clear(parent, base, rel, h.Typeflag == tar.TypeDir)
	if err != nil {
		return &UnpackError{h.Name, "replacing an earlier entry: " + err.Error()}
	}
	fail := func(op string, err error) error { return &UnpackError{h.Name, op + ": " + err.Error()} }
	switch h.Typeflag {
	case tar.TypeDir:
		if !isDir {
			if err := unix.Mkdirat(parent, base, 0o700); err != nil {
				return fail("mkdir", err)
			}
		}
		u.dirs[rel] = dirAttr{dirMode(h.Mode), h.ModTime}
	case tar.TypeReg, tar.TypeRegA, tar.TypeGNUSparse:
		fd, err := unix.Openat(parent, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return fail("create", err)
		}
		f := os.NewFile(uintptr(fd), rel)
		n, err := io.CopyBuffer(f, r, u.buf)
		if err == nil {
			err = unix.Fchmod(int(f.Fd()), fileMode(h.Mode))
		}
		if err == nil {
			ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
			err = unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fail("write", err)
		}
		u.meta.Files++
		u.meta.Bytes += n
	case tar.TypeSymlink:
		// Kept verbatim: it resolves inside the sandbox's root, where
		// the image is the whole tree.
		if err := unix.Symlinkat(h.Linkname, parent, base); err != nil {
			return fail("symlink", err)
		}
		ts := []unix.Timespec{unix.NsecToTimespec(h.ModTime.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
		unix.UtimesNanoAt(parent, base, ts, unix.AT_SYMLINK_NOFOLLOW)
		u.meta.Files++
	case tar.TypeLink:
		target, err := entryName(h.Linkname)
		if err != nil || target == "" {
			if err == nil {
				err = errors.New("the layer's root")
			}
			return &UnpackError{h.Name, fmt.Sprintf("hard link to %q: %v", h.Linkname, err)}
		}
		tdir := path.Dir(target)
		if tdir == "." {
			tdir = ""
		}
		tp, err := u.openDir(tdir, false)
		if err != nil {
			return &UnpackError{h.Name, fmt.Sprintf("hard link to %q: not an earlier entry of this layer: %v", h.Linkname, err)}
		}
		err = unix.Linkat(tp, path.Base(target), parent, base, 0)
		unix.Close(tp)
		if err != nil {
			return &UnpackError{h.Name, fmt.Sprintf("hard link to %q: not a file made earlier in this layer: %v", h.Linkname, err)}
		}
		u.meta.Files++
	case tar.TypeFifo:
		if err := unix.Mknodat(parent, base, unix.S_IFIFO|fileMode(h.Mode), 0); err != nil {
			return fail("mkfifo", err)
		}
		u.meta.Files++
	}
	return nil
}

// finishDirs sets the directories' modes and times, deepest first (a
// read-only directory is filled before its mode is set).
func (u *unpacker) finishDirs() error {
	for _, r := range deepestFirst(u.dirs) {
		a := u.dirs[r]
		fd, err := u.openDir(r, false)
		if err != nil {
			continue // replaced by a later entry
		}
		p := fmt.Sprintf("/proc/self/fd/%d", fd)
		err = unix.Chmod(p, a.mode)
		if err == nil && !a.mtime.IsZero() {
			ts := []unix.Timespec{unix.NsecToTimespec(a.mtime.UnixNano()), unix.NsecToTimespec(a.mtime.UnixNano())}
			err = unix.UtimesNano(p, ts)
		}
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("directory %s: %w", r, err)
		}
	}
	return nil
}

// deepestFirst are m's keys (relative paths), longest first: a directory
// comes before its parents.
func deepestFirst[T any](m map[string]T) []string {
	rels := make([]string, 0, len(m))
	for r := range m {
		rels = append(rels, r)
	}
	sort.Slice(rels, func(i, j int) bool { return len(rels[i]) > len(rels[j]) })
	return rels
}

// fileMode is a tar mode as hutch keeps it on a file: permissions and
// readable by its owner (hutch copies it when it cannot link it); set-id
// and sticky bits dropped (inert under no_new_privs inside, but on the host
// the file is the user's and other users could run it).
func fileMode(m int64) uint32 { return uint32(m)&0o777 | 0o400 }

// dirMode keeps a directory's permissions and sticky bit (set once the
// directory is filled; removeTree makes it writable again to remove it).
func dirMode(m int64) uint32 { return uint32(m) & 0o1777 }

// removeTree removes path and everything beneath it, first making its
// directories writable (a layer's read-only directories).
func removeTree(p string) error {
	err := os.RemoveAll(p)
	if err == nil {
		return nil
	}
	filepath.WalkDir(p, func(q string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}
