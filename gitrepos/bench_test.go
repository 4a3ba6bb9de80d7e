package gitrepos

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// A check after a command reads again only the directories that changed:
// on a tree of 2,000 directories, a fraction of a walk.
func BenchmarkWatchCheck(b *testing.B) {
	ws := b.TempDir()
	for i := range 2000 {
		os.MkdirAll(filepath.Join(ws, fmt.Sprintf("d%02d", i%40), fmt.Sprintf("e%03d", i)), 0o755)
	}
	b.Run("find", func(b *testing.B) {
		for range b.N {
			Find(ws, DefaultBudget)
		}
	})
	b.Run("check", func(b *testing.B) {
		w := NewWatch(ws, Find(ws, DefaultBudget), nil, DefaultBudget)
		b.ResetTimer()
		for range b.N {
			w.Check()
		}
	})
}
