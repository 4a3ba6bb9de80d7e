package seclog

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Rotation says when the log file is rotated and how many old files stay.
type Rotation struct {
	// MaxSize is the size in bytes from which the file is rotated: the
	// next record goes to a fresh file. 0 means DefaultMaxSize.
	MaxSize int64
	// Keep is the number of old files kept: PATH.1 (the newest) to
	// PATH.Keep; the oldest beyond them is removed. 0 means DefaultKeep.
	Keep int
}

// The rotation of Open.
const (
	DefaultMaxSize = 10 << 20
	DefaultKeep    = 3
)

// rotatingFile appends to the log at path and rotates it by size. Several
// processes append to one log at once (each hutch run, session and MCP
// server opens it with O_APPEND), so rotation must not lose or duplicate
// their records:
//
//   - A record is one write(2) to an O_APPEND descriptor: records never
//     interleave, whoever else writes.
//   - Before each record, the writer checks the size of the file its own
//     descriptor refers to (fstat). Only a file at or over MaxSize is
//     rotated, and a file only grows, so every writer that still holds a
//     rotated file sees it full at its next record.
//   - Rotation holds flock(LOCK_EX) on that full file and renames it only
//     if it is still the one at path (same inode): of the writers that
//     noticed, the first renames PATH.(n-1) to PATH.n down to PATH to
//     PATH.1; the others find another file at path. Each then opens path
//     (creating it), so they all append to the new file.
//
// A file may so exceed MaxSize by a record per writer that appended while
// it filled. A writer that cannot rotate (a read-only directory) keeps
// appending to the file it has.
type rotatingFile struct {
	path string
	rot  Rotation

	mu sync.Mutex
	f  *os.File
}

func openRotating(path string, rot Rotation) (*rotatingFile, error) {
	if rot.MaxSize <= 0 {
		rot.MaxSize = DefaultMaxSize
	}
	if rot.Keep <= 0 {
		rot.Keep = DefaultKeep
	}
	f, err := openAppend(path)
	if err != nil {
		return nil, err
	}
	return &rotatingFile{path: path, rot: rot, f: f}, nil
}

func openAppend(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE|unix.O_CLOEXEC, 0o600)
}

// Write appends one record (slog's handlers write each record whole).
func (r *rotatingFile) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.rotateIfFull() // on failure, the record goes to the file there is
	return r.f.Write(b)
}

func (r *rotatingFile) rotateIfFull() error {
	fi, err := r.f.Stat()
	if err != nil || fi.Size() < r.rot.MaxSize {
		return err
	}
	// The lock is released before the file is closed, never through the
	// descriptor's number afterwards: another Log of this process may have
	// that number by then.
	fd := int(r.f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock %s: %w", r.path, err)
	}
	err = r.rotateLocked(fi)
	unix.Flock(fd, unix.LOCK_UN)
	if err != nil {
		return err
	}
	nf, err := openAppend(r.path)
	if err != nil {
		return err
	}
	old := r.f
	r.f = nf
	return old.Close()
}

// rotateLocked renames the full file (fi) to PATH.1, and the older ones up
// by one, unless another writer has done so already.
func (r *rotatingFile) rotateLocked(fi fs.FileInfo) error {
	cur, err := os.Stat(r.path)
	if err != nil || !os.SameFile(cur, fi) {
		return nil // rotated already: open what is at path now
	}
	for n := r.rot.Keep - 1; n >= 1; n-- {
		if err := os.Rename(fmt.Sprintf("%s.%d", r.path, n), fmt.Sprintf("%s.%d", r.path, n+1)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("rotate %s: %w", r.path, err)
		}
	}
	if err := os.Rename(r.path, r.path+".1"); err != nil {
		return fmt.Errorf("rotate %s: %w", r.path, err)
	}
	return nil
}

// Close closes the file.
func (r *rotatingFile) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.f.Close()
}
