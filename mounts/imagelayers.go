package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// MaxImageLower is the most layers an overlay of an image's directory
// stacks (ImageFS.Lowers: the executor's limit, HUTCH_MAX_LOWER; Docker's
// overlay2 stops at 128 layers too).
const MaxImageLower = 128

// Lowers are the lower layers of an overlay that shows the merged
// directory rel (Dirs), refused when more than MaxImageLower make it;
// what names the directory's use in the error.
func (f *ImageFS) Lowers(rel, what string) ([]string, error) {
	lowers := f.Dirs(rel)
	if len(lowers) > MaxImageLower {
		return nil, fmt.Errorf("%s /%s: %d of the image's layers make it, more than the %d an overlay stacks (HUTCH_IMAGE_ROOT=flattened uses a flattened copy instead)", what, rel, len(lowers), MaxImageLower)
	}
	return lowers, nil
}

// imageEntry adds the image's entry rel (a top-level entry, /etc or
// /var/lib) from img: a directory that two or more layers make is a
// read-only overlay of those layers' directories; a directory one layer
// makes is a read-only bind of that layer's, a file a read-only bind of
// the topmost layer's, a symlink made anew. The overlay step's Source is
// the merged entry beneath img.Root, which the plan's view reads (through
// img) like a read-only bind's and the executor ignores.
func imageEntry(img *ImageFS, p *Plan, rel, why string) error {
	src := filepath.Join(img.Root, rel)
	fi, err := img.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", why, "/"+rel, err)
	}
	switch {
	case fi.IsDir():
		lowers, err := img.Lowers(rel, why)
		if err != nil {
			return err
		}
		if len(lowers) == 1 {
			p.Add(Step{Kind: Bind, Source: lowers[0], Target: "/" + rel, ReadOnly: true, Optional: true, Why: why + " (its one layer's)"})
		} else {
			p.Add(Step{Kind: Overlay, Source: src, Target: "/" + rel, Lower: lowers, Why: why + " (overlay of the image's layers)"})
		}
	case fi.Mode()&os.ModeSymlink != 0:
		to, err := img.Readlink(src)
		if err != nil {
			return fmt.Errorf("%s /%s: %w", why, rel, err)
		}
		p.Add(Step{Kind: Symlink, Target: "/" + rel, Data: to})
	case fi.Mode().IsRegular():
		real, err := img.Real(src)
		if err != nil {
			return fmt.Errorf("%s /%s: %w", why, rel, err)
		}
		p.Add(Step{Kind: Bind, Source: real, Target: "/" + rel, ReadOnly: true, Optional: true, Why: why})
	}
	return nil
}
