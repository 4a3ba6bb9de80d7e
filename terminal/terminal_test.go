package terminal

import (
	"bytes"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// pty makes a pseudo-terminal of the host's devpts: master (non-blocking)
// and slave.
func pty(t *testing.T) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatal(errno)
	}
	master, slave = os.NewFile(uintptr(m), "ptmx"), os.NewFile(s, "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

func TestFind(t *testing.T) {
	_, tty := pty(t)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if c := Find(r, w, w); c != nil {
		t.Errorf("pipes only: %+v, want nil", c)
	}
	for _, c := range []struct {
		in, out, err *os.File
		streams      [3]bool
		input        bool
		output       *os.File
	}{
		{tty, tty, tty, [3]bool{true, true, true}, true, tty},
		{r, tty, w, [3]bool{false, true, false}, false, tty},
		{tty, w, w, [3]bool{true, false, false}, true, tty}, // output redirected: the echo goes to the terminal
		{r, w, tty, [3]bool{false, false, true}, false, tty},
	} {
		got := Find(c.in, c.out, c.err)
		if got == nil || got.Streams != c.streams || (got.in != nil) != c.input || got.out != c.output || got.File() != tty {
			t.Errorf("Find(%s, %s, %s) = %+v", c.in.Name(), c.out.Name(), c.err.Name(), got)
		}
	}
}

// makeRaw is cfmakeraw(3).
func TestMakeRaw(t *testing.T) {
	_, tty := pty(t)
	cooked, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	raw := makeRaw(*cooked)
	if raw.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG|unix.IEXTEN) != 0 || raw.Oflag&unix.OPOST != 0 ||
		raw.Iflag&(unix.ICRNL|unix.IXON) != 0 || raw.Cflag&unix.CSIZE != unix.CS8 || raw.Cc[unix.VMIN] != 1 || raw.Cc[unix.VTIME] != 0 {
		t.Errorf("not raw: %+v", raw)
	}
	if raw.Cc[unix.VINTR] != cooked.Cc[unix.VINTR] || raw.Cflag&unix.CREAD != cooked.Cflag&unix.CREAD {
		t.Errorf("raw mode changed more than cfmakeraw does: %+v from %+v", raw, cooked)
	}
}

// The command's terminal starts with the caller's modes and window size.
func TestCopyModes(t *testing.T) {
	callerM, caller := pty(t)
	master, cmd := pty(t)
	want := unix.Winsize{Row: 42, Col: 123}
	if err := unix.IoctlSetWinsize(int(callerM.Fd()), unix.TIOCSWINSZ, &want); err != nil {
		t.Fatal(err)
	}
	tm, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
	tm.Cc[unix.VERASE] = 8 // ^H, not the default ^?
	tm.Lflag &^= unix.ECHOCTL
	if err := unix.IoctlSetTermios(int(caller.Fd()), unix.TCSETS, tm); err != nil {
		t.Fatal(err)
	}
	if err := CopyModes(master, caller); err != nil {
		t.Fatal(err)
	}
	got, _ := unix.IoctlGetTermios(int(cmd.Fd()), unix.TCGETS)
	ws, _ := unix.IoctlGetWinsize(int(cmd.Fd()), unix.TIOCGWINSZ)
	if *got != *tm || ws.Row != want.Row || ws.Col != want.Col {
		t.Errorf("the command's terminal has %+v %+v, want %+v %+v", *got, *ws, *tm, want)
	}
}

// Close copies what the command wrote last (up to the end of its
// terminal), then closes the master; with the slave still held elsewhere
// it returns within its bound.
func TestRelayDrains(t *testing.T) {
	callerM, caller := pty(t)
	master, cmd := pty(t)
	c := Find(nil, caller, nil)
	r, err := Start(c, master, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := bytes.Repeat([]byte("0123456789abcdef"), 1024) // more than one read
	var got bytes.Buffer
	done := make(chan struct{})
	go func() {
		// The caller's side: raw, so that the bytes come as they are.
		tm, _ := unix.IoctlGetTermios(int(caller.Fd()), unix.TCGETS)
		*tm = makeRaw(*tm)
		unix.IoctlSetTermios(int(caller.Fd()), unix.TCSETS, tm)
		defer close(done)
		buf := make([]byte, 4096)
		callerM.SetReadDeadline(time.Now().Add(10 * time.Second))
		for got.Len() < len(want) {
			n, err := callerM.Read(buf)
			got.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	time.Sleep(50 * time.Millisecond) // the caller's side is raw
	cmd.Write(want)
	cmd.Close() // the command is gone
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("the caller got %d of %d bytes", got.Len(), len(want))
	}
	if _, err := master.Write([]byte("x")); err == nil {
		t.Error("the master is still open after Close")
	}

	// Another process still holds the command's terminal: Close does not
	// wait for it beyond its bound.
	master2, held := pty(t)
	r, err = Start(c, master2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	r.Close()
	if d := time.Since(t0); d > 3*time.Second {
		t.Errorf("Close waited %s for a terminal still held", d)
	}
	held.Write([]byte("x"))
}

func TestGuardLayout(t *testing.T) {
	if !guardLayoutOK() {
		t.Fatalf("guard.c's struct termios is not the %d bytes the Go side writes", termiosLen)
	}
}
