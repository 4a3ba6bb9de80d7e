package images

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
)

// Report says what adding an image did.
type Report struct {
	// Image is the stored image.
	Image *Image
	// Fetched are the layers transferred and unpacked; Present those the
	// store already had (not transferred).
	Fetched, Present []v1.Hash
	// Bytes transferred for the fetched layers (compressed).
	Bytes int64
	// Skipped are the entries the unpack could not make (device nodes),
	// over every layer of the image.
	Skipped []string
	// Root is the flattened tree ("" unless AddOptions.Flatten); RootTime
	// how long flattening took.
	Root     string
	RootTime time.Duration
}

// Progress receives the bytes read of each layer being fetched; nil
// reports nothing. It is called from several goroutines.
type Progress func(layer v1.Hash, done, total int64)

// AddOptions control how an image is stored.
type AddOptions struct {
	// Names are the index names to point at the image.
	Names []string
	// Index is the digest of the index the image was chosen from, if any.
	Index string
	// Progress, when set, is told each layer's progress.
	Progress Progress
	// Jobs is how many layers are fetched at once (default 4).
	Jobs int
	// NoUnpack stores the verified blobs only: the layers are unpacked
	// (and a flattened root built, where one is wanted) when a sandbox
	// first uses the image (OverlayLayers, Root).
	NoUnpack bool
	// Flatten builds the flattened root too (Report.Root): for where the
	// image's root cannot be overlays of its layers (Store.OverlayUsable
	// says no). Without it only the layers are unpacked, and Root builds
	// the flattened tree when it is first asked for, unless a layer could
	// not be given overlayfs's form (LayerMeta.OverlayWhy): the image then
	// needs the flattened tree wherever it runs, and Add builds it.
	// NoUnpack overrides it.
	Flatten bool

	// remoteBlobs: img's compressed layer streams check their digest and
	// size themselves when they end (remote.Image's do: go-containerregistry
	// wraps each blob in its verifying reader, and fails the read that
	// ends a blob whose content does not match), so the store does not
	// hash them a second time (a pass over every byte: ~15 ms a 20 MiB
	// pull here). TestPullRefusesCorruptBlob holds the library to it.
	remoteBlobs bool
}

// Add stores img: its manifest, config and every layer the store lacks,
// each checked against its digest (the compressed blob against the
// manifest's digest, the unpacked tar against the config's diff id)
// before it is kept; then (o.Flatten, or a layer without overlayfs's form)
// it builds the image's flattened root,
// and points the names at it. A layer already stored is not read from img
// at all.
func (s *Store) Add(ctx context.Context, img v1.Image, o AddOptions) (*Report, error) {
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	// Held until the names point at the image: a prune waits, and cannot
	// take the layers stored here before anything names them.
	defer unlock()
	rawManifest, err := img.RawManifest()
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	mDigest, _, err := v1.SHA256(bytes.NewReader(rawManifest))
	if err != nil {
		return nil, err
	}
	m, err := v1.ParseManifest(bytes.NewReader(rawManifest))
	if err != nil {
		return nil, fmt.Errorf("manifest %s: %w", mDigest, err)
	}
	if m.Config.Digest.Algorithm != "sha256" {
		return nil, fmt.Errorf("manifest %s: config digest %s: hutch verifies sha256 digests only", mDigest, m.Config.Digest)
	}
	// The config: from the store when it is there (a repeated pull
	// transfers nothing but the manifest).
	rawConfig, err := s.readBlob(m.Config.Digest)
	if err != nil {
		if rawConfig, err = img.RawConfigFile(); err != nil {
			return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
		}
		if got, _, _ := v1.SHA256(bytes.NewReader(rawConfig)); got != m.Config.Digest {
			return nil, fmt.Errorf("config %s: the content received has digest %s: refused", m.Config.Digest, got)
		}
	}
	cfg, err := v1.ParseConfigFile(bytes.NewReader(rawConfig))
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", m.Config.Digest, err)
	}
	ls, err := layersOf(m, cfg)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", mDigest, err)
	}
	rep := &Report{}
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	jobs := o.Jobs
	if jobs <= 0 {
		jobs = 4
	}
	g.SetLimit(jobs)
	done := map[v1.Hash]bool{}
	for _, l := range ls {
		if l.Digest.Algorithm != "sha256" || l.DiffID.Algorithm != "sha256" {
			return nil, fmt.Errorf("layer %s: hutch verifies sha256 digests only", l.Digest)
		}
		// A blob stored by a pull with NoUnpack is unpacked from the
		// store (below), not transferred again.
		if s.hasLayer(l.DiffID) || done[l.DiffID] || s.hasBlob(l.Digest) {
			rep.Present = append(rep.Present, l.Digest)
			continue
		}
		done[l.DiffID] = true
		g.Go(func() error {
			n, err := s.fetchLayer(gctx, img, l, o.NoUnpack, o.remoteBlobs, o.Progress)
			if err != nil {
				return err
			}
			mu.Lock()
			rep.Fetched = append(rep.Fetched, l.Digest)
			rep.Bytes += n
			mu.Unlock()
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	for _, b := range []struct {
		h v1.Hash
		b []byte
	}{{m.Config.Digest, rawConfig}, {mDigest, rawManifest}} {
		if _, err := os.Stat(s.blobPath(b.h)); err != nil {
			if err := writeAtomic(s.blobPath(b.h), b.b, s.tmpDir()); err != nil {
				return nil, err
			}
		}
	}
	stored := &Image{Digest: mDigest, Manifest: m, Config: cfg, Layers: ls}
	if !o.NoUnpack {
		for _, l := range ls {
			if !s.hasLayer(l.DiffID) {
				// Its blob was stored by a pull with NoUnpack.
				if err := s.unpackStored(ctx, l); err != nil {
					return nil, fmt.Errorf("image %s: %w", mDigest, err)
				}
			}
		}
		flatten := o.Flatten
		for _, l := range ls {
			meta, err := s.Meta(l)
			if err != nil {
				return nil, err
			}
			rep.Skipped = append(rep.Skipped, meta.Skipped...)
			// A layer without overlayfs's form (its markers refused here)
			// makes the image's root the flattened tree wherever it runs.
			flatten = flatten || meta.OverlayWhy != ""
		}
		if flatten {
			t0 := time.Now()
			if rep.Root, err = s.buildRoot(stored); err != nil {
				return nil, err
			}
			rep.RootTime = time.Since(t0)
		}
	}
	now := time.Now().UTC()
	if err := s.updateIndex(func(es []Entry) []Entry {
		for _, n := range o.Names {
			found := false
			for i := range es {
				if es[i].Name == n {
					es[i] = Entry{Name: n, Digest: mDigest.String(), Index: o.Index, Added: now}
					found = true
				}
			}
			if !found {
				es = append(es, Entry{Name: n, Digest: mDigest.String(), Index: o.Index, Added: now})
			}
		}
		return es
	}); err != nil {
		return nil, err
	}
	stored.Names = o.Names
	rep.Image = stored
	return rep, nil
}

// fetchLayer transfers l from img: into the blob store and, unless
// blobOnly, unpacked.
func (s *Store) fetchLayer(ctx context.Context, img v1.Image, l Layer, blobOnly, verified bool, progress Progress) (int64, error) {
	cl, err := img.LayerByDigest(l.Digest)
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	rc, err := cl.Compressed()
	if err != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Digest, err)
	}
	defer rc.Close()
	return s.storeLayer(ctx, rc, l, true, !blobOnly, verified, progress)
}

// unpackStored unpacks a layer whose blob the store has (pulled with
// --no-unpack), checking both digests again.
func (s *Store) unpackStored(ctx context.Context, l Layer) error {
	f, err := os.Open(s.blobPath(l.Digest))
	if err != nil {
		return fmt.Errorf("layer %s is missing from the store (pull the image again): %w", l.Digest, err)
	}
	defer f.Close()
	if _, err = s.storeLayer(ctx, f, l, false, true, false, nil); err != nil {
		// A blob that cannot be unpacked is dropped: the next pull
		// fetches it again.
		os.Remove(s.blobPath(l.Digest))
		return fmt.Errorf("%w (the stored blob was removed: pull the image again)", err)
	}
	return nil
}

// storeLayer reads l's compressed blob from rc once: into the blob store
// (keepBlob) and, decompressed, into an unpacked tree (unpack); each is
// renamed into place only when the blob's digest and the tar's diff id
// are what the image says.
func (s *Store) storeLayer(ctx context.Context, rc io.Reader, l Layer, keepBlob, unpack, verified bool, progress Progress) (int64, error) {
	// A work directory for the tree; a blob alone is a temporary file
	// (every file made costs, on a slow file system).
	var work string
	var err error
	if unpack {
		if work, err = os.MkdirTemp(s.tmpDir(), "layer-"); err != nil {
			return 0, err
		}
		defer removeTree(work)
	}
	var blob io.Writer = io.Discard
	var blobFile *os.File
	if keepBlob {
		if blobFile, err = os.CreateTemp(s.tmpDir(), "blob-"); err != nil {
			return 0, err
		}
		defer func() {
			blobFile.Close()
			os.Remove(blobFile.Name()) // fails once renamed into place
		}()
		blob = blobFile
	}
	// The blob's digest: hashed here unless rc checks it itself
	// (verified: it then fails the read that ends a wrong blob).
	var blobHash hash.Hash
	var hashed io.Writer = io.Discard
	if !verified {
		blobHash = sha256.New()
		hashed = blobHash
	}
	var n atomic.Int64
	src := &countingReader{r: rc, f: func(k int64) { n.Add(k) }}
	if progress != nil {
		src.f = func(k int64) { progress(l.Digest, n.Add(k), l.Size) }
	}
	var (
		meta       *LayerMeta
		uerr, cerr error
	)
	diffHash := sha256.New()
	if unpack {
		pr, pw := io.Pipe()
		copyDone := make(chan error, 1)
		go func() {
			// The network side: blob file, digest, and the unpacker's pipe.
			_, err := io.Copy(io.MultiWriter(blob, hashed, pw), ctxReader{ctx, src})
			pw.CloseWithError(err)
			copyDone <- err
		}()
		meta, uerr = unpackStream(pr, diffHash, work, s.marks)
		if uerr != nil {
			// The rest of the blob, so that its digest says whether it is
			// the content that is wrong or the layer that is refused.
			io.Copy(io.Discard, pr)
		}
		cerr = <-copyDone
	} else {
		_, cerr = io.Copy(io.MultiWriter(blob, hashed), ctxReader{ctx, src})
	}
	if cerr != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Digest, cerr)
	}
	// (verified: rc's own check ended the copy with an error, cerr, had the
	// content been wrong.)
	if blobHash != nil {
		if got := "sha256:" + hex.EncodeToString(blobHash.Sum(nil)); got != l.Digest.String() {
			return 0, fmt.Errorf("layer %s: the content received has digest %s: refused (the registry, the archive or the store is corrupt, or was tampered with)", l.Digest, got)
		}
	}
	if uerr != nil {
		return 0, fmt.Errorf("layer %s: %w", l.Digest, uerr)
	}
	if unpack {
		if got := "sha256:" + hex.EncodeToString(diffHash.Sum(nil)); got != l.DiffID.String() {
			return 0, fmt.Errorf("layer %s: its uncompressed content has digest %s, the image's config says %s: refused", l.Digest, got, l.DiffID)
		}
	}
	if keepBlob {
		if err := blobFile.Close(); err != nil {
			return 0, err
		}
		if err := placeInto(blobFile.Name(), s.blobPath(l.Digest)); err != nil {
			return 0, err
		}
	}
	if !unpack {
		return n.Load(), nil
	}
	mb, _ := json.Marshal(meta)
	if err := os.WriteFile(filepath.Join(work, "meta.json"), mb, 0o600); err != nil {
		return 0, err
	}
	// The layer directory: fs/ and meta.json, renamed as one.
	layer := filepath.Join(work, "layer")
	if err := os.Mkdir(layer, 0o700); err != nil {
		return 0, err
	}
	for _, e := range []string{"fs", "meta.json"} {
		if err := os.Rename(filepath.Join(work, e), filepath.Join(layer, e)); err != nil {
			return 0, err
		}
	}
	if err := placeInto(layer, s.layerPath(l.DiffID)); err != nil && !errors.Is(err, fs.ErrExist) && !isNotEmpty(err) {
		return 0, fmt.Errorf("layer %s: store: %w", l.Digest, err)
	}
	return n.Load(), nil
}

// unpackStream decompresses r (gzip, zstd or a plain tar, by its magic),
// hashes the tar into diff and unpacks it into work/fs (its overlay
// markers made by marks).
func unpackStream(r io.Reader, diff hash.Hash, work string, marks markerOps) (*LayerMeta, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	magic, _ := br.Peek(4)
	var tr io.Reader = br
	switch {
	case len(magic) >= 2 && magic[0] == 0x1f && magic[1] == 0x8b:
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		tr = zr
	case len(magic) == 4 && bytes.Equal(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer zr.Close()
		tr = zr
	}
	meta, err := unpackLayer(io.TeeReader(tr, diff), work, marks)
	if err != nil {
		return nil, err
	}
	// Whatever is left of the compressed stream (gzip's trailer) is read
	// so that the blob's digest covers it.
	if _, err := io.Copy(io.Discard, br); err != nil {
		return nil, err
	}
	return meta, nil
}

func isNotEmpty(err error) bool {
	var le *os.LinkError
	return errors.As(err, &le) && (errors.Is(le.Err, fs.ErrExist) || le.Err.Error() == "directory not empty")
}

type countingReader struct {
	r io.Reader
	f func(int64)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if n > 0 {
		c.f(int64(n))
	}
	return n, err
}

// ctxReader stops reading when ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
