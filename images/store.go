// Package images is hutch's image store: OCI and Docker images pulled from a
// registry or imported from an archive, kept by digest, and unpacked
// rootless into layer trees that are overlayfs lower layers as they are
// (OverlayLayers): a sandbox's root (tooling "image:REF") is read-only
// overlays of them, or, where overlayfs cannot be mounted in a user
// namespace (OverlayUsable), the layers flattened into one read-only tree
// (Root). docs/IMAGES.md describes the layout and the trust model.
//
// The store's layout, beneath its directory (DefaultDir):
//
//	blobs/sha256/HEX         manifests, configs and compressed layers, each
//	                         verified against its digest before it is renamed
//	                         into place
//	layers/sha256/DIFFID/    one unpacked layer: fs/ (the tree, with overlayfs's
//	                         markers: 0/0 character devices for whiteouts,
//	                         user.overlay.opaque on opaque directories),
//	                         meta.json (its whiteouts, opaque directories,
//	                         what was skipped, whether fs/ has the markers);
//	                         ovl/ only for a layer unpacked by an earlier
//	                         hutch, without markers (its overlay form, made
//	                         on first use: see OverlayLayers)
//	roots/sha256/MANIFEST/BUILD/
//	                         an image's layers flattened, bottom to top, where
//	                         one was asked for (each build at a new BUILD
//	                         name root-*: see Root; never at LayeredRoot)
//	index.json               names (registry/repo:tag, registry/repo@digest)
//	                         to manifest digests
//	overlay-probe.json       whether overlayfs mounts here, for this boot
//	                         (OverlayUsable)
//	tmp/                     work in progress (renamed into place when done)
//	lock                     flock: shared while adding, exclusive to collect
//
// Invariants: every entry under blobs/, layers/ and roots/ is complete (made
// under tmp/ and renamed); a layer is stored once however many images use it;
// nothing in the store is owned by another user or carries set-id bits.
package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/hostdirs"
)

// DefaultDir is images/ in hutch's data directory (hostdirs.Data), or ""
// when there is none.
func DefaultDir() string {
	if d := hostdirs.Data(); d != "" {
		return filepath.Join(d, "images")
	}
	return ""
}

// Store is an image store in a directory.
type Store struct {
	// Dir is the store's directory.
	Dir string
	// marks make the overlay markers of the layers this Store unpacks;
	// the zero value is the real system calls (a test replaces them to
	// play a filesystem that refuses them).
	marks markerOps
}

// ErrNoStore is returned by OpenDefault when hutch has no data directory.
var ErrNoStore = errors.New("hutch has no data directory for its image store (set XDG_DATA_HOME or HOME)")

// OpenDefault opens the store in DefaultDir.
func OpenDefault() (*Store, error) {
	d := DefaultDir()
	if d == "" {
		return nil, ErrNoStore
	}
	return Open(d)
}

// LookupDefault finds ref in the store in DefaultDir without creating
// the store: a store that does not exist has no image.
func LookupDefault(ref string) (*Store, *Image, error) {
	d := DefaultDir()
	if d == "" {
		return nil, nil, ErrNoStore
	}
	if _, err := os.Stat(d); errors.Is(err, fs.ErrNotExist) {
		return nil, nil, &NotFoundError{Ref: ref}
	}
	s, err := Open(d)
	if err != nil {
		return nil, nil, err
	}
	img, err := s.Lookup(ref)
	return s, img, err
}

// Open opens (creating it, 0700) the store in dir. Its other directories
// are made when something is first put there (placeInto).
func Open(dir string) (*Store, error) {
	for _, d := range []string{"", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image store %s: %w", dir, err)
		}
	}
	return &Store{Dir: dir}, nil
}

// placeInto renames from to dst, making dst's parent directory first
// when it is missing.
func placeInto(from, dst string) error {
	err := os.Rename(from, dst)
	if errors.Is(err, fs.ErrNotExist) {
		if merr := os.MkdirAll(filepath.Dir(dst), 0o700); merr != nil {
			return merr
		}
		err = os.Rename(from, dst)
	}
	return err
}

func (s *Store) blobPath(h v1.Hash) string {
	return filepath.Join(s.Dir, "blobs", h.Algorithm, h.Hex)
}

func (s *Store) layerPath(diffID v1.Hash) string {
	return filepath.Join(s.Dir, "layers", diffID.Algorithm, diffID.Hex)
}

func (s *Store) rootPath(manifest v1.Hash) string {
	return filepath.Join(s.Dir, "roots", manifest.Algorithm, manifest.Hex)
}

// lock takes the store's lock, shared (adding) or exclusive (collecting);
// the returned function releases it.
func (s *Store) lock(exclusive bool) (func(), error) {
	f, err := os.OpenFile(filepath.Join(s.Dir, "lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("image store lock: %w", err)
	}
	how := unix.LOCK_SH
	if exclusive {
		how = unix.LOCK_EX
	}
	if err := unix.Flock(int(f.Fd()), how); err != nil {
		f.Close()
		return nil, fmt.Errorf("image store lock: %w", err)
	}
	return func() { f.Close() }, nil
}

// Entry is one name in the index.
type Entry struct {
	// Name is the full reference: registry/repository:tag or @digest.
	Name string `json:"name"`
	// Digest is the image manifest's digest.
	Digest string `json:"digest"`
	// Index is the digest of the multi-platform index the manifest was
	// chosen from, when there was one.
	Index string `json:"index,omitempty"`
	// Added is when the name was pulled or imported.
	Added time.Time `json:"added"`
}

type indexFile struct {
	Images []Entry `json:"images"`
}

func (s *Store) readIndex() ([]Entry, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("image store index: %w", err)
	}
	var ix indexFile
	if err := json.Unmarshal(b, &ix); err != nil {
		return nil, fmt.Errorf("image store index %s: %w", filepath.Join(s.Dir, "index.json"), err)
	}
	return ix.Images, nil
}

// writeIndex replaces index.json atomically. The caller holds the lock
// (shared is enough: updateIndex serializes writers with a lock of its own).
func (s *Store) writeIndex(es []Entry) error {
	sort.Slice(es, func(i, j int) bool { return es[i].Name < es[j].Name })
	b, err := json.MarshalIndent(indexFile{Images: es}, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(s.Dir, "index.json"), append(b, '\n'), s.tmpDir())
}

// updateIndex applies f to the index under the index's own lock.
func (s *Store) updateIndex(f func([]Entry) []Entry) error {
	lf, err := os.OpenFile(filepath.Join(s.Dir, "index.lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("image store index lock: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("image store index lock: %w", err)
	}
	es, err := s.readIndex()
	if err != nil {
		return err
	}
	return s.writeIndex(f(es))
}

func (s *Store) tmpDir() string { return filepath.Join(s.Dir, "tmp") }

// writeAtomic writes b to path through a temporary file in tmp.
func writeAtomic(path string, b []byte, tmp string) error {
	f, err := os.CreateTemp(tmp, "write-")
	if err != nil {
		return err
	}
	if _, err = f.Write(b); err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err == nil {
		err = placeInto(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// List returns the index's names, sorted.
func (s *Store) List() ([]Entry, error) { return s.readIndex() }

// readBlob reads a stored blob and checks its digest again (blobs read
// back are small: manifests and configs).
func (s *Store) readBlob(h v1.Hash) ([]byte, error) {
	b, err := os.ReadFile(s.blobPath(h))
	if err != nil {
		return nil, err
	}
	if got, _, _ := v1.SHA256(strings.NewReader(string(b))); got != h {
		return nil, fmt.Errorf("stored blob %s has digest %s: the store was changed outside hutch; hutch image rm it and pull again", h, got)
	}
	return b, nil
}
