package images

import (
	"fmt"
	"io"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/partial"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Get reads a stored image by its manifest digest, whether or not a name
// points at it (an image build's intermediate images have none).
func (s *Store) Get(digest v1.Hash) (*Image, error) { return s.load(digest) }

// V1Image is img as the library's v1.Image, read from the store's blobs:
// what an image build appends its layers to. Every layer's compressed blob
// must be in the store (it is, after a pull or import; Store.Add checks
// each again when the result is stored).
func (s *Store) V1Image(img *Image) (v1.Image, error) {
	rawManifest, err := s.readBlob(img.Digest)
	if err != nil {
		return nil, fmt.Errorf("image %s: manifest: %w", img.Digest, err)
	}
	rawConfig, err := s.readBlob(img.Manifest.Config.Digest)
	if err != nil {
		return nil, fmt.Errorf("image %s: config: %w", img.Digest, err)
	}
	for _, l := range img.Layers {
		if !s.hasBlob(l.Digest) {
			return nil, fmt.Errorf("image %s: layer %s is missing from the store (pull the image again)", img.Digest, l.Digest)
		}
	}
	return partial.CompressedToImage(&storedImage{s: s, img: img, manifest: rawManifest, config: rawConfig})
}

// storedImage is partial.CompressedImageCore over the store's blobs.
type storedImage struct {
	s                *Store
	img              *Image
	manifest, config []byte
}

func (i *storedImage) RawConfigFile() ([]byte, error) { return i.config, nil }
func (i *storedImage) RawManifest() ([]byte, error)   { return i.manifest, nil }
func (i *storedImage) MediaType() (types.MediaType, error) {
	if i.img.Manifest.MediaType != "" {
		return i.img.Manifest.MediaType, nil
	}
	return types.OCIManifestSchema1, nil
}

func (i *storedImage) LayerByDigest(h v1.Hash) (partial.CompressedLayer, error) {
	for _, l := range i.img.Layers {
		if l.Digest == h {
			return &storedLayer{s: i.s, l: l}, nil
		}
	}
	if h == i.img.Manifest.Config.Digest {
		return partial.ConfigLayer(i)
	}
	return nil, fmt.Errorf("image %s has no layer %s", i.img.Digest, h)
}

// storedLayer is partial.CompressedLayer over a stored blob.
type storedLayer struct {
	s *Store
	l Layer
}

func (l *storedLayer) Digest() (v1.Hash, error) { return l.l.Digest, nil }
func (l *storedLayer) Size() (int64, error)     { return l.l.Size, nil }
func (l *storedLayer) MediaType() (types.MediaType, error) {
	return types.MediaType(l.l.MediaType), nil
}
func (l *storedLayer) Compressed() (io.ReadCloser, error) {
	return os.Open(l.s.blobPath(l.l.Digest))
}
