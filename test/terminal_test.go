package test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// onPTY is hutch started on a pseudo-terminal the test made: the terminal
// is hutch's stdin, stdout, stderr and controlling terminal, and hutch is
// its foreground process group, as from an interactive shell.
type onPTY struct {
	master, slave *os.File
	cmd           *exec.Cmd
	before        *unix.Termios // the terminal's modes before hutch started
	mu            sync.Mutex
	out           bytes.Buffer
	exited        chan struct{}
	err           error
}

// openPTY makes a pseudo-terminal of the host's devpts with a window size.
func openPTY(t *testing.T, rows, cols uint16) (master, slave *os.File) {
	t.Helper()
	m, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlSetPointerInt(m, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	s, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(m), unix.TIOCGPTPEER, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC)
	if errno != 0 {
		t.Fatal(errno)
	}
	if err := unix.IoctlSetWinsize(m, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols}); err != nil {
		t.Fatal(err)
	}
	master, slave = os.NewFile(uintptr(m), "ptmx"), os.NewFile(s, "pts")
	t.Cleanup(func() { master.Close(); slave.Close() })
	return master, slave
}

// startOnPTY starts hutch with args on a new pseudo-terminal of rows x cols.
func startOnPTY(t *testing.T, o opts, rows, cols uint16, args ...string) *onPTY {
	t.Helper()
	return startCmdOnPTY(t, hutchCmd(o, args...), rows, cols)
}

// startCmdOnPTY starts cmd on a new pseudo-terminal of rows x cols.
func startCmdOnPTY(t *testing.T, cmd *exec.Cmd, rows, cols uint16) *onPTY {
	t.Helper()
	p := &onPTY{exited: make(chan struct{}), cmd: cmd}
	p.master, p.slave = openPTY(t, rows, cols)
	var err error
	if p.before, err = unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS); err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = p.slave, p.slave, p.slave
	if p.cmd.SysProcAttr == nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	p.cmd.SysProcAttr.Setsid, p.cmd.SysProcAttr.Setctty, p.cmd.SysProcAttr.Ctty = true, true, 0
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := p.master.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

// output is what hutch wrote on the terminal so far, lines ending in \n.
func (p *onPTY) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.ReplaceAll(p.out.String(), "\r\n", "\n")
}

// waitFor waits until the terminal shows s.
func (p *onPTY) waitFor(t *testing.T, s string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.output(), s) {
		if time.Now().After(deadline) {
			t.Fatalf("the terminal did not show %q within 30 s; it shows:\n%s", s, p.output())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits for hutch's exit code.
func (p *onPTY) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("hutch did not exit within 60 s; the terminal shows:\n%s", p.output())
	}
	time.Sleep(50 * time.Millisecond) // the last bytes reach the reader
	if p.err != nil {
		if ee, ok := p.err.(*exec.ExitError); ok {
			return ee.ExitCode()
		}
		t.Fatal(p.err)
	}
	return 0
}

// modes is the terminal's modes now.
func (p *onPTY) modes(t *testing.T) *unix.Termios {
	t.Helper()
	m, err := unix.IoctlGetTermios(int(p.slave.Fd()), unix.TCGETS)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// restored fails the test unless the terminal has its modes of before.
func (p *onPTY) restored(t *testing.T) {
	t.Helper()
	if now := p.modes(t); *now != *p.before {
		t.Errorf("the terminal's modes were not restored:\nbefore %+v\nafter  %+v", *p.before, *now)
	}
}

// ttyScript is what a command started from a terminal expects of it: a
// terminal name, stdin and stdout terminals, /dev/stderr that opens, the
// caller's window size, /dev/tty (its controlling terminal).
const ttyScript = `tty; test -t 0 && echo tty-in; test -t 1 && echo tty-out; echo x >/dev/stderr; echo size $(stty size); echo y >/dev/tty && echo ctty`

// usableTerminal checks a run of ttyScript on a 33x101 terminal: exit 0,
// what it shows, the terminal's modes of before.
func usableTerminal(t *testing.T, p *onPTY) {
	t.Helper()
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d, want 0; the terminal shows:\n%s", code, p.output())
	}
	out := p.output()
	for _, want := range []string{"\n/dev/pts/", "tty-in\n", "tty-out\n", "\nx\n", "size 33 101\n", "\ny\nctty\n"} {
		if !strings.Contains("\n"+out, want) {
			t.Errorf("the terminal does not show %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not a tty") || strings.Contains(out, "denied") {
		t.Errorf("the command found no usable terminal:\n%s", out)
	}
	p.restored(t)
}

// A command started from a terminal finds one: a /dev/pts name, isatty on
// its stdio, /dev/stderr and /dev/tty that open, the caller's window size;
// the caller's terminal modes are as before afterwards.
func TestTerminalRun(t *testing.T) {
	ws := userDir(t)
	usableTerminal(t, startOnPTY(t, opts{dir: ws}, 33, 101, "run", "--", "sh", "-c", ttyScript))
}

// The same with hutch run as root (the sandbox's uid maps to root outside).
func TestTerminalRunAsRoot(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skipf("needs root; this suite runs as uid %d", os.Getuid())
	}
	cmd := exec.Command(hutchBin, "run", "--", "sh", "-c", ttyScript)
	cmd.Dir = userDir(t)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "XDG_CACHE_HOME=" + filepath.Join(stateDir, "rootcache")}
	usableTerminal(t, startCmdOnPTY(t, cmd, 33, 101))
}

// ^C typed on the terminal interrupts the command (exit 130): the caller's
// terminal is raw while it runs, the command's own terminal makes the byte
// a SIGINT for its foreground process group; the modes come back after.
func TestTerminalInterrupt(t *testing.T) {
	ws := userDir(t)
	p := startOnPTY(t, opts{dir: ws}, 24, 80, "run", "--", "sh", "-c", "echo ready; sleep 30; echo not-interrupted")
	p.waitFor(t, "ready")
	if m := p.modes(t); m.Lflag&(unix.ICANON|unix.ECHO|unix.ISIG) != 0 {
		t.Errorf("the caller's terminal is not raw while the command runs: lflag %#x", m.Lflag)
	}
	start := time.Now()
	p.master.Write([]byte{3})
	code := p.wait(t)
	if code != 130 || time.Since(start) > 20*time.Second || strings.Contains(p.output(), "not-interrupted") {
		t.Fatalf("exit %d after %s, want 130 at once; the terminal shows:\n%s", code, time.Since(start), p.output())
	}
	p.restored(t)
}

// A change of the caller's window size reaches the command (SIGWINCH, and
// the new size), as a pager or an editor needs.
func TestTerminalWindowSize(t *testing.T) {
	ws := userDir(t)
	p := startOnPTY(t, opts{dir: ws}, 24, 80, "run", "--", "sh", "-c",
		`trap 'echo resized $(stty size); exit 7' WINCH; echo size $(stty size); while :; do sleep 0.05; done`)
	p.waitFor(t, "size 24 80")
	if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 50, Col: 120}); err != nil {
		t.Fatal(err)
	}
	if code := p.wait(t); code != 7 || !strings.Contains(p.output(), "resized 50 120") {
		t.Fatalf("exit %d, want 7 with the new size; the terminal shows:\n%s", code, p.output())
	}
	p.restored(t)
}

// Input typed on the terminal reaches the command through /dev/tty (as a
// pager reads its keys), line by line as the command's terminal edits it,
// and ^D ends it.
func TestTerminalInput(t *testing.T) {
	ws := userDir(t)
	p := startOnPTY(t, opts{dir: ws}, 24, 80, "run", "--", "sh", "-c", `echo ready; while read l </dev/tty; do echo "got:$l"; done; echo eof`)
	p.waitFor(t, "ready")
	p.master.Write([]byte("one\rtwx\x7fo\r\x04"))
	if code := p.wait(t); code != 0 {
		t.Fatalf("exit %d; the terminal shows:\n%s", code, p.output())
	}
	out := p.output()
	if !strings.Contains(out, "got:one\n") || !strings.Contains(out, "got:two\n") || !strings.Contains(out, "eof") {
		t.Errorf("the input did not reach the command as typed:\n%s", out)
	}
	p.restored(t)
}

// The same through `hutch exec` into a session (the Go client: the C fast
// path leaves a terminal to it).
func TestTerminalExec(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws)
	usableTerminal(t, startOnPTY(t, opts{dir: ws}, 33, 101, "exec", name, "--", "sh", "-c", ttyScript))

	// Twice more, so that the spawner (and a reaper made ahead) start the
	// command: ^C and the window size reach it the same way.
	for i := 0; i < 2; i++ {
		p := startOnPTY(t, opts{dir: ws}, 24, 80, "exec", name, "--", "sh", "-c",
			`trap 'echo resized $(stty size)' WINCH; echo ready; while :; do sleep 0.05; done`)
		p.waitFor(t, "ready")
		if err := unix.IoctlSetWinsize(int(p.master.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Row: 40, Col: 90}); err != nil {
			t.Fatal(err)
		}
		p.waitFor(t, "resized 40 90")
		p.master.Write([]byte{3})
		if code := p.wait(t); code != 130 {
			t.Fatalf("exec %d: exit %d, want 130; the terminal shows:\n%s", i, code, p.output())
		}
		p.restored(t)
	}
	// The session still runs commands without a terminal.
	r := hutch(t, opts{dir: ws}, "exec", name, "--", "sh", "-c", "test -t 0 || echo no-tty")
	mustCode(t, r, 0)
	if r.stdout != "no-tty\n" {
		t.Errorf("exec without a terminal printed %q", r.stdout)
	}
}

// When hutch is killed (SIGKILL), its guard restores the terminal's modes.
func TestTerminalModesAfterSIGKILL(t *testing.T) {
	ws := userDir(t)
	p := startOnPTY(t, opts{dir: ws}, 24, 80, "run", "--", "sh", "-c", "echo ready; sleep 30")
	p.waitFor(t, "ready")
	if m := p.modes(t); m.Lflag&unix.ICANON != 0 {
		t.Fatalf("the terminal is not raw while the command runs")
	}
	p.cmd.Process.Signal(syscall.SIGKILL)
	p.wait(t)
	deadline := time.Now().Add(5 * time.Second)
	for *p.modes(t) != *p.before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	p.restored(t)
}

// A command on a terminal whose spawner is gone starts the direct way, on
// the same terminal (the supervisor sends its slave again).
func TestTerminalExecSpawnerGone(t *testing.T) {
	ws := userDir(t)
	name := sessionWithoutSpawner(t, ws)
	usableTerminal(t, startOnPTY(t, opts{dir: ws}, 33, 101, "exec", name, "--", "sh", "-c", ttyScript))
}
