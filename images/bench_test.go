package images

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// hostTreeLayer is a layer of the host's tree dir (files and symlinks).
func hostTreeLayer(b *testing.B, dir string) v1.Layer {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return nil
		}
		h.Name = p[1:]
		tw.WriteHeader(h)
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err == nil {
				io.Copy(tw, f)
				f.Close()
			}
		}
		return nil
	})
	tw.Close()
	// Compressed once: the library takes a gzip stream as the blob.
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(buf.Bytes())
	zw.Close()
	raw := zbuf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil })
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkAdd stores an image of the host's Python library (a few
// thousand files) into an empty store on the test's temporary file
// system: decompression, both digests, the unpack and the flatten.
// HUTCH_BENCH_TREE picks another tree.
func BenchmarkAdd(b *testing.B) {
	tree := os.Getenv("HUTCH_BENCH_TREE")
	if tree == "" {
		tree = "/usr/lib/python3.11"
	}
	if _, err := os.Stat(tree); err != nil {
		b.Skipf("no %s to make an image of: %v", tree, err)
	}
	img, err := mutate.AppendLayers(empty.Image, hostTreeLayer(b, tree))
	if err != nil {
		b.Fatal(err)
	}
	// The compressed blob once, as a registry would hold it.
	if _, err := img.Digest(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := Open(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Add(context.Background(), img, AddOptions{Names: []string{"bench"}, Flatten: true}); err != nil {
			b.Fatal(err)
		}
	}
}
