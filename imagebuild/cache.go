package imagebuild

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/images"
)

// The step cache lives in the image store: build-cache.json maps a step's
// cache key to the manifest digest of the image the step made. An entry
// whose image the store no longer has (hutch image prune removes images no
// name points at) is a miss.
const cacheFile = "build-cache.json"

type cacheIndex struct {
	Steps map[string]string `json:"steps"`
}

// cacheGet is the image digest cached for key, or "".
func cacheGet(st *images.Store, key string) (string, error) {
	ix, err := readCache(st)
	if err != nil {
		return "", err
	}
	return ix.Steps[key], nil
}

func readCache(st *images.Store) (*cacheIndex, error) {
	ix := &cacheIndex{Steps: map[string]string{}}
	b, err := os.ReadFile(filepath.Join(st.Dir, cacheFile))
	if errors.Is(err, fs.ErrNotExist) {
		return ix, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build cache: %w", err)
	}
	if err := json.Unmarshal(b, ix); err != nil {
		return nil, fmt.Errorf("build cache %s: %w (remove it: the next build reruns every step)", filepath.Join(st.Dir, cacheFile), err)
	}
	if ix.Steps == nil {
		ix.Steps = map[string]string{}
	}
	return ix, nil
}

// cachePut records key -> digest, under the cache's lock, atomically.
func cachePut(st *images.Store, key, digest string) error {
	lf, err := os.OpenFile(filepath.Join(st.Dir, cacheFile+".lock"), os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("build cache lock: %w", err)
	}
	defer lf.Close()
	if err := unix.Flock(int(lf.Fd()), unix.LOCK_EX); err != nil {
		return fmt.Errorf("build cache lock: %w", err)
	}
	ix, err := readCache(st)
	if err != nil {
		return err
	}
	ix.Steps[key] = digest
	b, err := json.MarshalIndent(ix, "", "  ")
	if err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(st.Dir, cacheFile), filepath.Join(st.Dir, "tmp"), append(b, '\n'), 0o600); err != nil {
		return fmt.Errorf("build cache: %w", err)
	}
	return nil
}

// writeFileAtomic replaces path with b (mode perm) through a temporary
// file in tmpDir (on path's file system), renamed into place.
func writeFileAtomic(path, tmpDir string, b []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(tmpDir, "."+filepath.Base(path)+"-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), perm)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
