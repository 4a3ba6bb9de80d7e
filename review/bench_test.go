package review

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkDiff15000 is Diff of a change set of 15,000 files (in 150
// directories): added ones, and modified ones of another size.
func BenchmarkDiff15000(b *testing.B) {
	for _, mod := range []bool{false, true} {
		name := "added"
		if mod {
			name = "modified"
		}
		b.Run(name, func(b *testing.B) {
			ws := b.TempDir()
			c, err := Create(b.TempDir(), "b", Meta{Workspace: ws, Created: time.Now()})
			if err != nil {
				b.Fatal(err)
			}
			for i := 0; i < 15000; i++ {
				rel := fmt.Sprintf("d%03d/f%05d.c", i/100, i)
				if mod {
					os.MkdirAll(filepath.Join(ws, filepath.Dir(rel)), 0o755)
					os.WriteFile(filepath.Join(ws, rel), []byte("old\n"), 0o644)
				}
				os.MkdirAll(filepath.Join(c.Upper(), filepath.Dir(rel)), 0o755)
				os.WriteFile(filepath.Join(c.Upper(), rel), []byte("int f(void) { return 1; }\n"), 0o644)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				d, err := Diff(c, DiffOptions{})
				if err != nil || len(d.Changes) < 15000 {
					b.Fatalf("%v, %d changes", err, len(d.Changes))
				}
			}
		})
	}
}
