package readfile

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestRead(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small")
	os.WriteFile(small, []byte("0123456789"), 0o644)
	if b, err := Read(small, "policy file", 10); err != nil || string(b) != "0123456789" {
		t.Errorf("Read(10 bytes, limit 10) = %q, %v", b, err)
	}
	_, err := Read(small, "policy file", 9)
	if want := "policy file " + small + " is larger than 9B, the most hutch reads"; err == nil || err.Error() != want {
		t.Errorf("Read(10 bytes, limit 9) error = %v; want %s", err, want)
	}
	if _, err := Read(filepath.Join(dir, "missing"), "policy file", 10); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) error = %v; want one wrapping ErrNotExist", err)
	}
}

// Special files are refused at once: /dev/zero would be read forever, a
// FIFO without a writer would block in open.
func TestReadRefusesSpecialFiles(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for path, kind := range map[string]string{"/dev/zero": "a character device", "/": "a directory", fifo: "a FIFO"} {
		done := make(chan error, 1)
		go func() { _, err := Read(path, "seccomp profile", 4<<20); done <- err }()
		select {
		case err := <-done:
			want := "seccomp profile " + path + " is " + kind + ", not a regular file: pass a file of at most 4MiB"
			if err == nil || err.Error() != want {
				t.Errorf("Read(%s) error = %v; want %s", path, err, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Read(%s) did not return within 10s", path)
		}
		if err := Check(path, "seccomp profile", 4<<20); err == nil || !strings.Contains(err.Error(), kind) {
			t.Errorf("Check(%s) = %v; want it refused as %s", path, err, kind)
		}
	}
	if err := Check("/nonexistent/x", "seccomp profile", 1); err != nil {
		t.Errorf("Check(missing) = %v; want nil", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{1 << 20: "1MiB", 4 << 20: "4MiB", 1500: "1500B", 2048: "2KiB", 0: "0B"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestReadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.json")
	_, err := Read(path, "seccomp profile", 1)
	if want := "seccomp profile " + path + ": no such file or directory"; err == nil || err.Error() != want || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read(missing) error = %v; want %s, wrapping ErrNotExist", err, want)
	}
}
