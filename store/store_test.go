package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestPutGetPrune(t *testing.T) {
	s := At(t.TempDir())
	ns := Namespace{Name: "t", Keep: 3}
	for i := range 5 {
		if err := s.Put(ns, fmt.Sprintf("k%d", i), []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		// Distinct modification times, oldest first.
		old := time.Now().Add(time.Duration(i-10) * time.Minute)
		os.Chtimes(s.Path(ns, fmt.Sprintf("k%d", i)), old, old)
	}
	ents, _ := os.ReadDir(filepath.Join(s.Dir(), "t"))
	if len(ents) != 3 {
		t.Fatalf("namespace holds %d entries, want its bound 3", len(ents))
	}
	for i, want := range []bool{false, false, true, true, true} {
		if got := s.Has(ns, fmt.Sprintf("k%d", i)); got != want {
			t.Errorf("k%d kept = %v, want %v (the oldest go first)", i, got, want)
		}
	}
	b, _, err := s.Get(ns, "k4")
	if err != nil || len(b) != 1 || b[0] != 4 {
		t.Fatalf("Get k4 = %v, %v", b, err)
	}
	if _, _, err := s.Get(ns, "k0"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Get of a pruned key: %v, want ErrNotExist", err)
	}
	fi, _ := os.Stat(s.Path(ns, "k4"))
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("entry mode %v, want 0600", fi.Mode().Perm())
	}
}

func TestKeys(t *testing.T) {
	s := At(t.TempDir())
	ns := Namespace{Name: "t", Keep: 2}
	for _, k := range []string{"", ".tmp-x", "../x", "a/b", "x y"} {
		if err := s.Put(ns, k, nil); err == nil {
			t.Errorf("Put(%q) accepted an invalid key", k)
		}
		if s.Path(ns, k) != "" {
			t.Errorf("Path(%q) is not empty", k)
		}
	}
}

func TestNoDirectory(t *testing.T) {
	s := At("")
	ns := Namespace{Name: "t", Keep: 2}
	if err := s.Put(ns, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Get(ns, "k"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a store without a directory keeps nothing: %v", err)
	}
	if !s.Once(ns, "k", nil) || !s.Once(ns, "k", nil) {
		t.Fatal("without a store every Once is the first")
	}
}

func TestOnce(t *testing.T) {
	s := At(t.TempDir())
	if !s.Once(Warned, "x", []byte("msg")) {
		t.Fatal("first Once is false")
	}
	if s.Once(Warned, "x", nil) {
		t.Fatal("second Once is true")
	}
}

func TestStaleTemporaryFiles(t *testing.T) {
	s := At(t.TempDir())
	ns := Namespace{Name: "t", Keep: 4}
	dir := filepath.Join(s.Dir(), "t")
	os.MkdirAll(dir, 0o700)
	stale, fresh := filepath.Join(dir, ".tmp-1"), filepath.Join(dir, ".tmp-2")
	os.WriteFile(stale, nil, 0o600)
	os.WriteFile(fresh, nil, 0o600)
	old := time.Now().Add(-2 * time.Hour)
	os.Chtimes(stale, old, old)
	if err := s.Put(ns, "k", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("a temporary file of a dead writer was kept")
	}
	if _, err := os.Stat(fresh); err != nil {
		t.Error("a temporary file of a live writer was removed")
	}
}

// A Put replaces an entry whole, in private modes, and leaves no temporary
// file; PutWith streams, with the mode asked for.
func TestPutReplaces(t *testing.T) {
	s := At(filepath.Join(t.TempDir(), "a", "b"))
	ns := Namespace{Name: "t", Keep: 4}
	for _, data := range []string{"one", "two, longer"} {
		if err := s.Put(ns, "f", []byte(data)); err != nil {
			t.Fatal(err)
		}
		if b, _, err := s.Get(ns, "f"); err != nil || string(b) != data {
			t.Fatalf("read back %q, %v; want %q", b, err, data)
		}
	}
	if err := s.PutWith(ns, "x", 0o500, func(f *os.File) error { _, err := f.WriteString("#!/bin/true\n"); return err }); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(s.Dir(), "t")
	fi, _ := os.Stat(s.Path(ns, "f"))
	xi, _ := os.Stat(s.Path(ns, "x"))
	di, _ := os.Stat(dir)
	if fi.Mode().Perm() != 0o600 || xi.Mode().Perm() != 0o500 || di.Mode().Perm() != 0o700 {
		t.Errorf("modes: file %v, executable %v, directory %v; want 0600, 0500 and 0700", fi.Mode().Perm(), xi.Mode().Perm(), di.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("%d entries, want 2 (temporary files left?)", len(ents))
	}
}
