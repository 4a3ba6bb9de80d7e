package hutch_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// TestMain keeps this package's sandboxes' persistent caches (one per
// temporary workspace) out of the user's own cache directory: they would
// outlive the test run there.
func TestMain(m *testing.M) {
	os.Exit(withTempCache(m))
}

func withTempCache(m *testing.M) int {
	dir, err := os.MkdirTemp("", "hutch-test-cache-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer removeTree(dir)
	os.Setenv("XDG_CACHE_HOME", dir)
	return m.Run()
}

// removeTree removes dir, read-only trees included (Go's module cache).
func removeTree(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(dir)
}
