package images

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Removed says what Remove or Prune deleted.
type Removed struct {
	// Names removed from the index.
	Names []string
	// Images, Layers and Blobs deleted (digests), Bytes freed (file sizes).
	Images, Layers, Blobs []string
	Bytes                 int64
}

// Remove deletes the names that ref stands for (every name of the image
// when ref is a digest), then everything no remaining name uses. A sandbox
// still running on the image loses its files: hutch does not track which
// images running sandboxes use.
func (s *Store) Remove(ref string) (*Removed, error) {
	img, err := s.Lookup(ref)
	if err != nil {
		return nil, err
	}
	r, err := ParseRef(ref)
	byName := err == nil && !isDigestRef(ref)
	var gone []string
	if err := s.updateIndex(func(es []Entry) []Entry {
		out := es[:0]
		for _, e := range es {
			if (byName && e.Name == r.Name()) || (!byName && e.Digest == img.Digest.String()) {
				gone = append(gone, e.Name)
				continue
			}
			out = append(out, e)
		}
		return out
	}); err != nil {
		return nil, err
	}
	rm, err := s.Prune()
	if rm != nil {
		rm.Names = gone
	}
	return rm, err
}

func isDigestRef(ref string) bool { return len(ref) > 7 && ref[:7] == "sha256:" }

// Prune deletes every image, layer and blob that no name in the index
// uses, and what interrupted pulls left in tmp/. It waits for pulls and
// imports in progress to end.
func (s *Store) Prune() (*Removed, error) {
	unlock, err := s.lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	es, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	keepImages, keepLayers, keepBlobs := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for _, e := range es {
		h, err := v1.NewHash(e.Digest)
		if err != nil {
			continue
		}
		img, err := s.load(h)
		if err != nil {
			continue // a broken image keeps nothing: pull it again
		}
		keepImages[h.Hex] = true
		keepBlobs[h.Hex] = true
		keepBlobs[img.Manifest.Config.Digest.Hex] = true
		for _, l := range img.Layers {
			keepBlobs[l.Digest.Hex] = true
			keepLayers[l.DiffID.Hex] = true
		}
	}
	rm := &Removed{}
	sweep := func(dir string, keep map[string]bool, into *[]string) error {
		ents, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // nothing was ever put there
		}
		if err != nil {
			return fmt.Errorf("image store: %w", err)
		}
		for _, d := range ents {
			if keep[d.Name()] {
				continue
			}
			p := filepath.Join(dir, d.Name())
			rm.Bytes += du(p)
			if err := removeTree(p); err != nil {
				return fmt.Errorf("image store: remove %s: %w", p, err)
			}
			if into != nil {
				*into = append(*into, "sha256:"+d.Name())
			}
		}
		return nil
	}
	if err := sweep(filepath.Join(s.Dir, "roots", "sha256"), keepImages, &rm.Images); err != nil {
		return rm, err
	}
	if err := sweep(filepath.Join(s.Dir, "layers", "sha256"), keepLayers, &rm.Layers); err != nil {
		return rm, err
	}
	// The images deleted are those whose manifests go, flattened root or
	// not (an image whose root is its layers has none).
	blobs := filepath.Join(s.Dir, "blobs", "sha256")
	if ents, err := os.ReadDir(blobs); err == nil {
		for _, d := range ents {
			if keepBlobs[d.Name()] || keepImages[d.Name()] || slices.Contains(rm.Images, "sha256:"+d.Name()) {
				continue
			}
			if fi, err := d.Info(); err != nil || fi.Size() > maxManifest {
				continue // a layer
			}
			if _, err := s.load(v1.Hash{Algorithm: "sha256", Hex: d.Name()}); err == nil {
				rm.Images = append(rm.Images, "sha256:"+d.Name())
			}
		}
	}
	if err := sweep(blobs, keepBlobs, &rm.Blobs); err != nil {
		return rm, err
	}
	if err := sweep(s.tmpDir(), nil, nil); err != nil {
		return rm, err
	}
	return rm, nil
}

// du is the bytes of the files beneath p (a hard-linked file counts once
// per name: an upper bound).
func du(p string) int64 {
	var n int64
	filepath.Walk(p, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

// maxManifest bounds the blobs Prune reads to tell an image's manifest
// from a layer: the OCI distribution spec's 4 MiB, which registries
// enforce for manifests.
const maxManifest = 4 << 20
