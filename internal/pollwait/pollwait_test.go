package pollwait

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Readable parks until a pipe has data, reports a hang-up, and returns
// when the read deadline passes; the original descriptor keeps working.
func TestReadable(t *testing.T) {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	f, ok, err := File(p[0], "pipe")
	if err != nil || !ok {
		t.Fatalf("File of a pipe: ok %v, %v", ok, err)
	}
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}

	f.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := Readable(rc); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an empty pipe with a deadline: %v, want the deadline", err)
	}
	f.SetReadDeadline(time.Time{})

	time.AfterFunc(20*time.Millisecond, func() { unix.Write(p[1], []byte("x")) })
	rev, err := Readable(rc)
	if err != nil || rev&unix.POLLIN == 0 {
		t.Fatalf("after a write: revents %#x, %v", rev, err)
	}
	b := make([]byte, 1)
	if n, err := unix.Read(p[0], b); n != 1 || err != nil {
		t.Fatalf("read the original descriptor: %d, %v", n, err)
	}

	time.AfterFunc(20*time.Millisecond, func() { unix.Close(p[1]) })
	rev, err = Readable(rc)
	if err != nil || rev&unix.POLLHUP == 0 {
		t.Fatalf("after the writer closed: revents %#x, %v", rev, err)
	}
}

// A regular file cannot be registered with the poller: File says so.
func TestFileNotPollable(t *testing.T) {
	fd, err := unix.Open(t.TempDir(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f, ok, err := File(fd, "dir")
	if err != nil || ok || f != nil {
		t.Fatalf("File of a directory: %v %v %v, want not pollable", f, ok, err)
	}
}
