package images

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImportOptions control an import.
type ImportOptions struct {
	// Tag names the image (a reference as ParseRef reads it); empty: the
	// names the archive gives (docker-archive RepoTags, an OCI layout's
	// org.opencontainers.image.ref.name), else the image is known by its
	// digest only.
	Tag      string
	Progress Progress
	// Flatten: see AddOptions.
	Flatten bool
}

// Import stores the image in path: a docker-archive tarball (docker save)
// or an OCI image layout directory. Every blob is checked against its
// digest as a pulled one is.
func (s *Store) Import(ctx context.Context, path string, o ImportOptions) (*Report, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	var (
		img   v1.Image
		names []string
		index string
	)
	if fi.IsDir() {
		img, names, index, err = fromLayout(path)
	} else {
		img, names, err = fromDockerArchive(path)
	}
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	if o.Tag != "" {
		r, err := ParseRef(o.Tag)
		if err != nil {
			return nil, fmt.Errorf("--tag: %w", err)
		}
		names = []string{r.Name()}
	}
	rep, err := s.Add(ctx, img, AddOptions{Names: names, Index: index, Progress: o.Progress, Flatten: o.Flatten})
	if err != nil {
		return nil, fmt.Errorf("import %s: %w", path, err)
	}
	return rep, nil
}

func fromDockerArchive(path string) (v1.Image, []string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, nil, fmt.Errorf("not a docker-archive tarball (docker save) nor an OCI layout directory: %w", err)
	}
	if len(m) != 1 {
		return nil, nil, fmt.Errorf("the archive holds %d images; hutch imports archives of one image", len(m))
	}
	img, err := tarball.ImageFromPath(path, nil)
	if err != nil {
		return nil, nil, err
	}
	var names []string
	for _, t := range m[0].RepoTags {
		if r, err := name.ParseReference(t); err == nil {
			names = append(names, r.Name())
		}
	}
	return img, names, nil
}

// fromLayout picks the image for this platform from an OCI layout.
func fromLayout(dir string) (v1.Image, []string, string, error) {
	if _, err := os.Stat(filepath.Join(dir, "oci-layout")); err != nil {
		return nil, nil, "", fmt.Errorf("not an OCI image layout (no oci-layout file): %w", err)
	}
	ix, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, nil, "", err
	}
	im, err := ix.IndexManifest()
	if err != nil {
		return nil, nil, "", err
	}
	for _, d := range im.Manifests {
		var names []string
		if n := d.Annotations["org.opencontainers.image.ref.name"]; n != "" {
			if r, err := name.ParseReference(n); err == nil {
				names = append(names, r.Name())
			}
		}
		switch {
		case d.MediaType.IsImage():
			if d.Platform != nil && !platformMatches(d.Platform) {
				continue
			}
			img, err := ix.Image(d.Digest)
			return img, names, "", err
		case d.MediaType.IsIndex():
			sub, err := ix.ImageIndex(d.Digest)
			if err != nil {
				return nil, nil, "", err
			}
			sm, err := sub.IndexManifest()
			if err != nil {
				return nil, nil, "", err
			}
			for _, sd := range sm.Manifests {
				if sd.MediaType.IsImage() && (sd.Platform == nil || platformMatches(sd.Platform)) {
					img, err := sub.Image(sd.Digest)
					return img, names, d.Digest.String(), err
				}
			}
		}
	}
	return nil, nil, "", errors.New("the layout holds no image for linux/" + runtime.GOARCH)
}

func platformMatches(p *v1.Platform) bool {
	return p.OS == "linux" && p.Architecture == runtime.GOARCH
}
