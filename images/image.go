package images

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// Image is a stored image: its manifest, config and layers.
type Image struct {
	// Names are the index's names for it.
	Names []string
	// Digest is the manifest's digest: what identifies the image.
	Digest v1.Hash
	// Manifest and Config as stored.
	Manifest *v1.Manifest
	Config   *v1.ConfigFile
	// Layers, bottom to top.
	Layers []Layer
}

// Layer is one layer of an image.
type Layer struct {
	// Digest is the compressed blob's, DiffID the uncompressed tar's.
	Digest, DiffID v1.Hash
	// Size is the compressed size.
	Size int64
	// MediaType of the blob.
	MediaType string
}

// NotFoundError says that a reference is not in the store.
type NotFoundError struct{ Ref string }

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("image %s is not in hutch's image store (hutch image pull %s, or hutch image import FILE)", e.Ref, e.Ref)
}

// ParseRef parses an image reference as a registry would name it
// (registry/repo:tag, registry/repo@sha256:..., docker.io by default).
func ParseRef(ref string) (name.Reference, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return nil, fmt.Errorf("image reference %q: %w (want REGISTRY/REPOSITORY:TAG or REGISTRY/REPOSITORY@sha256:HEX)", ref, err)
	}
	return r, nil
}

// Lookup finds ref in the store: a name (as ParseRef gives it, the tag
// defaulting to latest), a name@digest, or a manifest digest "sha256:HEX"
// (a unique prefix of at least 12 hex digits also does).
func (s *Store) Lookup(ref string) (*Image, error) {
	es, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	var digest string
	if strings.HasPrefix(ref, "sha256:") {
		hex := strings.TrimPrefix(ref, "sha256:")
		for _, e := range es {
			if strings.HasPrefix(strings.TrimPrefix(e.Digest, "sha256:"), hex) && len(hex) >= 12 {
				if digest != "" && digest != e.Digest {
					return nil, fmt.Errorf("image %s: more than one stored image has that digest prefix; give more digits", ref)
				}
				digest = e.Digest
			}
		}
	} else {
		r, err := ParseRef(ref)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.Name == r.Name() {
				digest = e.Digest
			}
		}
		if d, ok := r.(name.Digest); ok && digest == "" {
			// Pulled by another name, or by tag: the same manifest.
			for _, e := range es {
				if (e.Digest == d.DigestStr() || e.Index == d.DigestStr()) && sameRepo(e.Name, d.Context().Name()) {
					digest = e.Digest
				}
			}
		}
	}
	if digest == "" {
		return nil, &NotFoundError{Ref: ref}
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, fmt.Errorf("image store index: %w", err)
	}
	img, err := s.load(h)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		if e.Digest == digest {
			img.Names = append(img.Names, e.Name)
		}
	}
	return img, nil
}

// sameRepo: name (a stored name) belongs to repository repo.
func sameRepo(stored, repo string) bool {
	return strings.HasPrefix(stored, repo+":") || strings.HasPrefix(stored, repo+"@")
}

// load reads a stored image by manifest digest.
func (s *Store) load(h v1.Hash) (*Image, error) {
	mb, err := s.readBlob(h)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("image %s: its manifest is missing from the store (hutch image prune, then pull it again)", h)
	}
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(mb))
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", h, err)
	}
	cb, err := s.readBlob(m.Config.Digest)
	if err != nil {
		return nil, fmt.Errorf("image %s: config %s: %w", h, m.Config.Digest, err)
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(cb))
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", h, err)
	}
	ls, err := layersOf(m, cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", h, err)
	}
	return &Image{Digest: h, Manifest: m, Config: cfg, Layers: ls}, nil
}

// layersOf pairs the manifest's layer blobs with the config's diff ids.
func layersOf(m *v1.Manifest, cfg *v1.ConfigFile) ([]Layer, error) {
	if len(m.Layers) != len(cfg.RootFS.DiffIDs) {
		return nil, fmt.Errorf("the manifest lists %d layers and the config %d diff ids", len(m.Layers), len(cfg.RootFS.DiffIDs))
	}
	ls := make([]Layer, len(m.Layers))
	for i, d := range m.Layers {
		ls[i] = Layer{Digest: d.Digest, DiffID: cfg.RootFS.DiffIDs[i], Size: d.Size, MediaType: string(d.MediaType)}
	}
	return ls, nil
}

// LayerDirs are the unpacked trees of img's layers, bottom to top: the
// lower directories an overlay mount of the image would stack (each
// layer's whiteouts and opaque directories are in its LayerMeta). The
// flattened Root is built from them.
func (s *Store) LayerDirs(img *Image) []string {
	ds := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		ds[i] = filepath.Join(s.layerPath(l.DiffID), "fs")
	}
	return ds
}

// LayerMeta is what unpacking a layer recorded beside its tree.
type LayerMeta struct {
	// Whiteouts are the paths this layer deletes from the layers below
	// (".wh.NAME" entries); Opaque the directories whose lower content it
	// hides (".wh..wh..opq").
	Whiteouts []string `json:"whiteouts,omitempty"`
	Opaque    []string `json:"opaque,omitempty"`
	// Skipped are entries a rootless unpack cannot make (device nodes) or
	// does not keep, each with the reason.
	Skipped []string `json:"skipped,omitempty"`
	// Files, Bytes: what the tree holds.
	Files int   `json:"files"`
	Bytes int64 `json:"bytes"`
	// OverlayForm: fs/ carries overlayfs's markers as well (each whiteout
	// a 0/0 character device, each opaque directory, and each directory
	// that replaces a whiteout of its own name, marked user.overlay.opaque
	// = "y"), so that fs/ is an overlay lower layer as it is. OverlayWhy
	// says why the unpack could not make them (this filesystem or kernel
	// refused): fs/ then holds no marker at all.
	//
	// Invariant: a layer unpacked by this hutch has exactly one of the two
	// set; neither is a layer stored by an earlier hutch (no markers: its
	// overlay form is ovl/, see OverlayLayers). The flattener reads fs/
	// the same in every case: it takes whiteouts and opaque directories
	// from the lists above and passes over character devices.
	OverlayForm bool   `json:"overlay_form,omitempty"`
	OverlayWhy  string `json:"overlay_why,omitempty"`
}

// Meta reads a stored layer's LayerMeta.
func (s *Store) Meta(l Layer) (*LayerMeta, error) {
	b, err := os.ReadFile(filepath.Join(s.layerPath(l.DiffID), "meta.json"))
	if err != nil {
		return nil, fmt.Errorf("layer %s: %w", l.DiffID, err)
	}
	var m LayerMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("layer %s: meta.json: %w", l.DiffID, err)
	}
	return &m, nil
}

// hasBlob: the store has blob h.
func (s *Store) hasBlob(h v1.Hash) bool {
	_, err := os.Stat(s.blobPath(h))
	return err == nil
}

// hasLayer: the layer is unpacked in the store.
func (s *Store) hasLayer(diffID v1.Hash) bool {
	_, err := os.Stat(filepath.Join(s.layerPath(diffID), "meta.json"))
	return err == nil
}
