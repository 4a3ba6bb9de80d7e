package images

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"
)

// overlayOpaque is overlayfs' opaque-directory xattr in userxattr mode
// (the mode a user namespace mounts with: see mounts.Overlay).
const overlayOpaque = "user.overlay.opaque"

// OverlayLayers returns img's layers in overlay-native form, topmost first
// (the order of a mounts.Overlay step's Lower), converting each stored
// layer on first use (overlayLayer).
//
// A sandbox's root uses them with HUTCH_IMAGE_OVERLAY=1 (plan.ImageOverlayEnv,
// mounts.Spec.ImageLayers); by default it binds the flattened Root.
func (s *Store) OverlayLayers(img *Image) ([]string, error) {
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	out := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		if !s.hasLayer(l.DiffID) {
			if err := s.unpackStored(context.Background(), l); err != nil {
				return nil, fmt.Errorf("image %s: %w", img.Digest, err)
			}
		}
		d, err := s.overlayLayer(l)
		if err != nil {
			return nil, fmt.Errorf("image %s: %w", img.Digest, err)
		}
		out[len(img.Layers)-1-i] = d
	}
	return out, nil
}

// overlayPath is a stored layer's overlay-native tree: ovl/ beside fs/.
func (s *Store) overlayPath(diffID v1.Hash) string {
	return filepath.Join(s.layerPath(diffID), "ovl")
}

// overlayLayer returns layers/sha256/DIFFID/ovl, making it when it is
// missing: fs/'s tree again (directories made anew with fs/'s modes and
// times, everything else hard links to fs/'s), plus each whiteout in
// meta.json as a 0/0 character device and each opaque directory marked
// with user.overlay.opaque = "y". fs/ and meta.json stay as they are (the
// flattened Root and hutch image inspect read them), so a store written
// before ovl/ existed needs no version bump: its layers convert here.
//
// Invariant: ovl/ is complete when it exists (made under tmp/ and
// renamed; a concurrent conversion that lost the rename uses the
// winner's).
func (s *Store) overlayLayer(l Layer) (string, error) {
	dst := s.overlayPath(l.DiffID)
	if fi, err := os.Lstat(dst); err == nil && fi.IsDir() {
		return dst, nil
	}
	m, err := s.Meta(l)
	if err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(s.tmpDir(), "ovl-")
	if err != nil {
		return "", fmt.Errorf("convert layer %s: %w", l.DiffID, err)
	}
	defer removeTree(tmp)
	tree := filepath.Join(tmp, "ovl")
	if err := toOverlay(filepath.Join(s.layerPath(l.DiffID), "fs"), tree, m); err != nil {
		return "", fmt.Errorf("convert layer %s to overlay form: %w", l.DiffID, err)
	}
	if err := os.Rename(tree, dst); err != nil {
		if fi, serr := os.Lstat(dst); serr == nil && fi.IsDir() {
			return dst, nil
		}
		return "", fmt.Errorf("convert layer %s: %w", l.DiffID, err)
	}
	return dst, nil
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
	for _, w := range m.Whiteouts {
		if err := whiteout(dst, w); err != nil {
			return fmt.Errorf("whiteout %s: %w", w, err)
		}
	}
	for _, o := range m.Opaque {
		p := filepath.Join(dst, o)
		if err := unix.Lsetxattr(p, overlayOpaque, []byte("y"), 0); err != nil {
			return fmt.Errorf("opaque directory %q: setxattr %s: %w", o, overlayOpaque, err)
		}
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

// whiteout makes rel (clean, relative, from meta.json) beneath dst an
// overlayfs whiteout: a 0/0 character device, which an unprivileged user
// may make since Linux 5.8. A parent the layer lacks is made (an overlay
// merges it with the lower directory of that name); an entry the layer
// has at rel itself already replaces what is below, and is kept.
func whiteout(dst, rel string) error {
	if c, err := entryName(rel); err != nil || c == "" || c != rel {
		return fmt.Errorf("%q is not a path beneath the root", rel)
	}
	p := filepath.Join(dst, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	err := unix.Mknod(p, unix.S_IFCHR|0o600, 0)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("mknod 0/0: %w", err)
	}
	return nil
}
