package mounts

import (
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// MaxImageLower is the most layers imageEntry stacks in one overlay (the
// executor's limit, HUTCH_MAX_LOWER); an entry of more is bound from the
// flattened tree.
const MaxImageLower = 128

// imageEntry adds the image's top-level entry (or /var/lib) rel: as a
// read-only overlay of the image's overlay-native layers (Spec.ImageLayers)
// when the flattened tree has a directory there that two or more layers
// contribute to, else as addHostEntry from the flattened tree dir (which
// shows the same: it is the layers merged). The overlay step's Source is
// the flattened tree's entry: plan-time resolution (the /etc tree, the
// view) reads it, the executor does not.
func imageEntry(fsys HostFS, p *Plan, layers []string, dir, rel, why string) error {
	src := filepath.Join(dir, rel)
	if fi, err := fsys.Lstat(src); err == nil && fi.IsDir() && len(layers) > 0 {
		if lowers := entryLowers(fsys, layers, rel); len(lowers) >= 2 && len(lowers) <= MaxImageLower {
			p.Add(Step{Kind: Overlay, Source: src, Target: "/" + rel, Lower: lowers, Why: why + " (overlay of the image's layers)"})
			return nil
		}
	}
	return addHostEntry(fsys, p, src, "/"+rel, why)
}

// entryLowers are the layers (topmost first, as given) whose directory at
// rel shows in the merged view: going down, a layer where rel or one of
// its parents is a whiteout or not a directory hides everything below it
// (and contributes nothing); a layer where rel or a parent is an opaque
// directory contributes its directory and hides the rest.
func entryLowers(fsys HostFS, layers []string, rel string) []string {
	var out []string
	parts := strings.Split(rel, "/")
	for _, l := range layers {
		p, stop := l, false
		present := true
		for _, c := range parts {
			p = filepath.Join(p, c)
			fi, err := fsys.Lstat(p)
			if err != nil {
				present = false
				break // missing here: the layers below may have it
			}
			if !fi.IsDir() {
				return out // a whiteout, a file or a symlink: hides what is below
			}
			if opaque(p) {
				stop = true
			}
		}
		if present {
			out = append(out, filepath.Join(l, rel))
		}
		if stop {
			return out
		}
	}
	return out
}

// opaque: the directory p is marked overlay-opaque (userxattr).
func opaque(p string) bool {
	b := make([]byte, 4)
	n, err := unix.Lgetxattr(p, "user.overlay.opaque", b)
	return err == nil && string(b[:n]) == "y"
}
