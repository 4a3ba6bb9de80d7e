package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/mounts"
)

// overlayOpaque is overlayfs' opaque-directory xattr in userxattr mode
// (the mode a user namespace mounts with: see mounts.Overlay).
const overlayOpaque = "user.overlay.opaque"

// OverlayLayers returns img's layers in overlayfs's form, topmost first
// (the order of a mounts.Overlay step's Lower): each layer's fs/ as it is
// when its unpack made the markers there (LayerMeta.OverlayForm); for a
// layer stored by an earlier hutch, which has none, ovl/ (made on first
// use: overlayLayer). A layer whose unpack could not make its markers
// (this filesystem or kernel refused them) is a *NotOverlayError, wrapped:
// the image's root is then the flattened Root.
//
// The list stops at the topmost layer with an opaque root (".wh..wh..opq"
// at the layer's top): nothing below it shows, and overlayfs itself does
// not read the opaque mark of a layer's root directory. A layer that
// recurs (one diff id twice: two identical build steps) is listed once,
// at its topmost place: overlayfs refuses one directory twice in lowerdir
// ("conflicting lowerdir path"), and the topmost occurrence shows or
// hides everything the lower ones would (they hold the same entries,
// whiteouts and opaque marks), so the merged tree is the same.
func (s *Store) OverlayLayers(img *Image) ([]string, error) {
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	var out []string
	var metas []*LayerMeta
	var ids []v1.Hash
	listed := map[string]bool{}
	for i := len(img.Layers) - 1; i >= 0; i-- {
		l := img.Layers[i]
		if !s.hasLayer(l.DiffID) {
			if err := s.unpackStored(context.Background(), l); err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Digest, err)
			}
		}
		d, m, err := s.overlayLayer(l)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Digest, err)
		}
		if !listed[d] {
			listed[d] = true
			out, metas, ids = append(out, d), append(metas, m), append(ids, l.DiffID)
		}
		if slices.Contains(m.Opaque, "") {
			break
		}
	}
	if err := loneWhiteouts(out, metas, ids); err != nil {
		return nil, fmt.Errorf("image %s: %w", img.Digest, err)
	}
	return out, nil
}

// LoneWhiteoutError says that a layer whites out a name in a directory
// that no other layer of the image makes: an overlay of the layers would
// list that whiteout (overlayfs shows a directory one layer makes as that
// layer has it, markers and all), so the image's root is its flattened
// copy. Image builders do not write such layers (a whiteout deletes what
// a layer below has).
type LoneWhiteoutError struct {
	Layer v1.Hash
	Path  string
}

func (e *LoneWhiteoutError) Error() string {
	return fmt.Sprintf("layer %s whites out /%s, in a directory no other layer of the image makes: an overlay of the layers would list the whiteout; the image's root is its flattened tree here", e.Layer, e.Path)
}

// loneWhiteouts finds a whiteout device of layers (topmost first, with
// their metas and diff ids) in a merged directory that only its own layer
// makes.
func loneWhiteouts(layers []string, metas []*LayerMeta, ids []v1.Hash) error {
	f := &mounts.ImageFS{Root: "/", Layers: layers}
	for k, m := range metas {
		for _, w := range m.Whiteouts {
			var st unix.Stat_t
			if unix.Lstat(filepath.Join(layers[k], w), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
				continue // no device was made (beneath an opaque directory, or it met the layer's own entry)
			}
			dir, _ := splitRel(w)
			if ds := f.Dirs(dir); len(ds) == 1 && ds[0] == filepath.Join(layers[k], dir) {
				return &LoneWhiteoutError{Layer: ids[k], Path: w}
			}
		}
	}
	return nil
}

// NotOverlayError says that a stored layer cannot be an overlay lower
// layer: its unpack could not make overlayfs's markers (Why).
type NotOverlayError struct {
	Layer v1.Hash
	Why   string
}

func (e *NotOverlayError) Error() string {
	return fmt.Sprintf("layer %s is not in overlayfs's form (its unpack could not make the markers: %s); the image's root is its flattened tree here", e.Layer, e.Why)
}

// overlayPath is a stored layer's overlay-native tree: ovl/ beside fs/.
func (s *Store) overlayPath(diffID v1.Hash) string {
	return filepath.Join(s.layerPath(diffID), "ovl")
}

// overlayLayer returns the tree of l in overlayfs's form, and l's meta:
// fs/ when its unpack made the markers there; a *NotOverlayError when the
// unpack could not; for a layer stored by an earlier hutch (neither
// recorded in its meta) layers/sha256/DIFFID/ovl, made when it is
// missing: fs/'s tree again (directories made anew with fs/'s modes and
// times, everything else hard links to fs/'s) with the markers the unpack
// makes today (overlayMarkers). fs/ and meta.json of such a layer stay as
// they are (the flattened Root and hutch image inspect read them), so a
// store written before the markers existed needs no version bump.
//
// Invariant: ovl/ is complete when it exists (made under tmp/ and
// renamed; a concurrent conversion that lost the rename uses the
// winner's).
func (s *Store) overlayLayer(l Layer) (string, *LayerMeta, error) {
	m, err := s.Meta(l)
	if err != nil {
		return "", nil, err
	}
	switch {
	case m.OverlayForm:
		return filepath.Join(s.layerPath(l.DiffID), "fs"), m, nil
	case m.OverlayWhy != "":
		return "", nil, &NotOverlayError{Layer: l.DiffID, Why: m.OverlayWhy}
	}
	dst := s.overlayPath(l.DiffID)
	if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
		return dst, m, nil
	}
	tmp, err := os.MkdirTemp(s.tmpDir(), "ovl-")
	if err != nil {
		return "", nil, fmt.Errorf("convert layer %s: %w", l.DiffID, err)
	}
	defer removeTree(tmp)
	tree := filepath.Join(tmp, "ovl")
	if err := toOverlay(filepath.Join(s.layerPath(l.DiffID), "fs"), tree, m); err != nil {
		return "", nil, fmt.Errorf("convert layer %s to overlay form: %w", l.DiffID, err)
	}
	if err := os.Rename(tree, dst); err != nil {
		if fi, serr := os.Lstat(dst); serr == nil && fi.IsDir() {
			return dst, m, nil
		}
		return "", nil, fmt.Errorf("convert layer %s: %w", l.DiffID, err)
	}
	return dst, m, nil
}

// toOverlay writes the overlay-native form of the unpacked tree src, with
// m's whiteouts and opaque directories, to the new directory dst.
func toOverlay(src, dst string, m *LayerMeta) error {
	dirs := map[string]fs.FileInfo{}
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs[rel] = info
			// 0700 while it is filled; its own mode is set at the end.
			return os.Mkdir(to, 0o700)
		}
		return linkOrCopy(p, to, info)
	})
	if err != nil {
		return err
	}
	fd, err := unix.Open(dst, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open %s: %w", dst, err)
	}
	err = overlayMarkers(fd, m, markerOps{})
	unix.Close(fd)
	if err != nil {
		return err
	}
	for _, r := range deepestFirst(dirs) {
		info := dirs[r]
		p := filepath.Join(dst, r)
		if err := os.Chmod(p, info.Mode()&(fs.ModePerm|fs.ModeSticky)); err != nil {
			return err
		}
		os.Chtimes(p, info.ModTime(), info.ModTime())
	}
	return nil
}

// markerOps make overlayfs's markers in a layer's tree; a nil func is the
// real system call (tests replace them to play a filesystem or kernel that
// refuses them).
type markerOps struct {
	// whiteout makes name in the directory dirFD a 0/0 character device.
	whiteout func(dirFD int, name string) error
	// opaque sets user.overlay.opaque = "y" on the directory at p (a
	// /proc/self/fd link).
	opaque func(p string) error
}

func (o markerOps) mkWhiteout(dirFD int, name string) error {
	if o.whiteout != nil {
		return o.whiteout(dirFD, name)
	}
	// A 0/0 character device: an unprivileged user may make one since
	// Linux 5.8 (the only device node it may make).
	return unix.Mknodat(dirFD, name, unix.S_IFCHR|0o600, 0)
}

func (o markerOps) setOpaque(p string) error {
	if o.opaque != nil {
		return o.opaque(p)
	}
	return unix.Setxattr(p, overlayOpaque, []byte("y"), 0)
}

// overlayMarkers makes m's whiteouts and opaque directories overlayfs's
// markers in the layer tree at rootFD (its directories still writable by
// their owner), so that an overlay of the layers shows what the flattener
// makes of them:
//   - an opaque directory is marked user.overlay.opaque = "y", unless a
//     later entry replaced it with a non-directory (which hides the lower
//     one by itself);
//   - a whiteout whose name is a directory of the tree (the layer deletes
//     the lower entry and brings a directory of its own: malformed, but
//     the flattener then shows the upper directory's content alone) marks
//     that directory opaque too;
//   - a whiteout whose name the tree lacks becomes a 0/0 character device,
//     unless it is beneath a directory marked opaque (or the layer's root
//     is opaque): nothing below shows there, and overlayfs lists the
//     entries of a directory only one layer has as they are, a whiteout
//     device among them;
//   - a whiteout whose name is any other entry needs no marker (the entry
//     hides the lower one), nor does one beneath a parent the tree does
//     not have as a directory (what the tree has there hides the lower
//     parent whole).
//
// Limitation (of overlayfs's form itself, for ovl/ as for fs/): a
// whiteout in a directory that no layer below has either hides nothing,
// and overlayfs lists it (as an entry that cannot be stat'ed); image
// builders make whiteouts of what the layers below have.
//
// On an error it removes every marker it made, so that the tree holds
// none, and says which marker failed and why.
func overlayMarkers(rootFD int, m *LayerMeta, ops markerOps) (err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	// gone: rel's lookup found no directory there (missing, replaced by
	// a non-directory, or beneath a symlink): no marker is needed.
	gone := func(err error) bool {
		return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV)
	}
	// What the tree has at each whiteout's name: the directories are
	// marked opaque, the missing names made devices.
	opaque := map[string]bool{}
	for _, o := range m.Opaque {
		if c, err := entryName(o); err != nil || c != o {
			return fmt.Errorf("opaque directory %q is not a path beneath the layer's root", o)
		}
		opaque[o] = true
	}
	var devices []string
	for _, w := range m.Whiteouts {
		if c, err := entryName(w); err != nil || c == "" || c != w {
			return fmt.Errorf("whiteout %q is not a path beneath the layer's root", w)
		}
		dir, base := splitRel(w)
		pfd, err := openBeneath(rootFD, dir)
		if gone(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("overlayfs's whiteout of /%s: open its directory: %w", w, err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		unix.Close(pfd)
		switch {
		case errors.Is(err, unix.ENOENT):
			devices = append(devices, w)
		case err != nil:
			return fmt.Errorf("overlayfs's whiteout of /%s: %w", w, err)
		case st.Mode&unix.S_IFMT == unix.S_IFDIR:
			opaque[w] = true
		}
	}
	for _, o := range slices.Sorted(maps.Keys(opaque)) {
		fd, err := openBeneath(rootFD, o)
		if gone(err) {
			delete(opaque, o)
			continue
		}
		if err != nil {
			return fmt.Errorf("overlayfs's opaque mark on /%s: open: %w", o, err)
		}
		p := fmt.Sprintf("/proc/self/fd/%d", fd)
		err = ops.setOpaque(p)
		if err == nil && !opaqueShows(p) {
			unix.Removexattr(p, overlayOpaque) // (what can be undone)
			err = errHiddenMarker
		}
		unix.Close(fd)
		if err != nil {
			why := ""
			if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) {
				why = " (the store's filesystem takes no user extended attributes: a tmpfs before Linux 6.6, some NFS)"
			}
			return fmt.Errorf("overlayfs's opaque mark on /%s: setxattr %s: %w%s", o, overlayOpaque, err, why)
		}
		undo = append(undo, func() {
			if fd, err := openBeneath(rootFD, o); err == nil {
				unix.Removexattr(fmt.Sprintf("/proc/self/fd/%d", fd), overlayOpaque)
				unix.Close(fd)
			}
		})
	}
	for _, w := range devices {
		if beneathAny(w, opaque) {
			continue
		}
		dir, base := splitRel(w)
		pfd, err := openBeneath(rootFD, dir)
		if err != nil {
			return fmt.Errorf("overlayfs's whiteout of /%s: open its directory: %w", w, err)
		}
		err = ops.mkWhiteout(pfd, base)
		if errors.Is(err, unix.EEXIST) {
			unix.Close(pfd)
			continue // the same whiteout twice in the layer
		}
		if err == nil && !whiteoutShows(pfd, base) {
			unix.Unlinkat(pfd, base, 0) // (what can be undone)
			err = errHiddenMarker
		}
		unix.Close(pfd)
		if err != nil {
			why := ""
			if errors.Is(err, unix.EPERM) {
				why = " (an unprivileged user may make one since Linux 5.8, but not through an overlay: is the store's filesystem itself an overlay, a container's root? keep hutch's data directory on a volume)"
			}
			return fmt.Errorf("overlayfs's whiteout of /%s: mknod a 0/0 character device: %w%s", w, err, why)
		}
		undo = append(undo, func() {
			if fd, err := openBeneath(rootFD, dir); err == nil {
				unix.Unlinkat(fd, base, 0)
				unix.Close(fd)
			}
		})
	}
	return nil
}

// errHiddenMarker: a marker was made but does not show: the store's file
// system is itself an overlay (a container's root, say), which takes a
// 0/0 device for its own whiteout and keeps its user.overlay. attributes to
// itself, so that an overlay of the layers would not see them.
var errHiddenMarker = errors.New("made, but the store's filesystem does not show it (is it itself an overlay, a container's root? keep hutch's data directory on a volume)")

// whiteoutShows: name in the directory dirFD is a 0/0 character device.
func whiteoutShows(dirFD int, name string) bool {
	var st unix.Stat_t
	return unix.Fstatat(dirFD, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0
}

// opaqueShows: the directory at p reads user.overlay.opaque = "y".
func opaqueShows(p string) bool {
	b := make([]byte, 4)
	n, err := unix.Getxattr(p, overlayOpaque, b)
	return err == nil && string(b[:n]) == "y"
}

// splitRel is rel's directory ("" for the root) and last name.
func splitRel(rel string) (dir, base string) {
	dir, base = path.Dir(rel), path.Base(rel)
	if dir == "." {
		dir = ""
	}
	return dir, base
}

// beneathAny: rel is strictly beneath one of dirs ("" is the root).
func beneathAny(rel string, dirs map[string]bool) bool {
	for d := path.Dir(rel); ; d = path.Dir(d) {
		if d == "." {
			return dirs[""]
		}
		if dirs[d] {
			return true
		}
	}
}
