// Package readfile reads the small files hutch is pointed at (a policy, a
// seccomp profile) with a size limit. The path comes from the user and may
// name anything: /dev/zero, a FIFO no one writes, a file of gigabytes.
// Reading one must neither hang nor take the memory of the machine, so
// Read refuses whatever is not a regular file of at most the limit, and
// says so naming the file and the limit.
package readfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"syscall"
)

// Read returns the contents of the regular file at path, refusing a file
// that is not regular (a device, a FIFO, a directory, a socket) and one of
// more than limit bytes. what names the file's role in errors ("policy
// file", "seccomp profile"). The file is opened non-blocking, so that a
// FIFO without a writer is refused instead of waiting for one, and at most
// limit+1 bytes are ever read, even from a file that grows meanwhile.
func Read(path, what string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, named(what, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, named(what, path, err)
	}
	if err := check(path, what, fi, limit); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, named(what, path, err)
	}
	if int64(len(b)) > limit {
		return nil, tooLarge(path, what, limit)
	}
	return b, nil
}

// Check refuses what Read would refuse without reading the file: a path
// that exists and is not a regular file of at most limit bytes. A missing
// file passes (whoever reads it later says so).
func Check(path, what string, limit int64) error {
	fi, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return named(what, path, err)
	}
	return check(path, what, fi, limit)
}

// named says "WHAT PATH: REASON", taking the reason out of an
// *fs.PathError (which would name the path again); errors.Is still sees
// the cause (fs.ErrNotExist, fs.ErrPermission).
func named(what, path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return fmt.Errorf("%s %s: %w", what, path, err)
}

func check(path, what string, fi fs.FileInfo, limit int64) error {
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s %s is %s, not a regular file: pass a file of at most %s", what, path, kind(fi.Mode()), Size(limit))
	}
	if fi.Size() > limit {
		return tooLarge(path, what, limit)
	}
	return nil
}

func tooLarge(path, what string, limit int64) error {
	return fmt.Errorf("%s %s is larger than %s, the most hutch reads", what, path, Size(limit))
}

// kind names a file type with its article.
func kind(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	}
	return "a special file"
}

// Size prints a limit in bytes the way hutch writes sizes: "1MiB", "4MiB",
// "1500B".
func Size(n int64) string {
	for _, u := range []struct {
		name  string
		shift uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if n > 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10) + "B"
}
