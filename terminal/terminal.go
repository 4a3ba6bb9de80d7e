// Package terminal relays a caller's terminal to the pseudo-terminal a
// sandboxed command runs on, as `docker run -it` and `podman run -it` do.
//
// A command started from a terminal does not get the caller's terminal
// itself: the sandbox's devpts is its own, so the caller's /dev/pts/N does
// not exist inside (ttyname fails, and reopening it through /dev/stdin is
// refused by Landlock), and handing the caller's terminal to sandboxed code
// would let it act on the caller's session. Instead the command gets a
// pseudo-terminal of the sandbox's own (nsjail.Sandbox.OpenPTY) as its
// controlling terminal, with the caller's modes and window size, and the
// caller's side relays bytes between its terminal and the master:
//
//   - the caller's terminal is in raw mode while the command runs, when its
//     standard input is the terminal and the caller is in the terminal's
//     foreground process group (a background job keeps its modes and
//     relays no input until it is brought to the foreground); the modes
//     are restored when the relay ends, on every path that returns, and
//     after a SIGKILL of the caller by a guard process (guard.c);
//   - ^C, ^Z, ^\ and ^D are bytes in raw mode: the pseudo-terminal's own
//     line discipline turns them into SIGINT, SIGTSTP, SIGQUIT for the
//     command's foreground process group, or an end of file;
//   - the window size is copied at the start and on every SIGWINCH (and
//     SIGCONT) the caller receives; the kernel then signals the command.
//
// Standard streams that are not terminals (pipes, files, sockets) are not
// relayed: they stay the caller's descriptors.
package terminal

import (
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// IsTerminal reports whether f is a terminal.
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// Caller is a caller's terminal, as found among its standard streams.
type Caller struct {
	// Streams says which of stdin, stdout and stderr are terminals: those
	// are the ones the command gets its pseudo-terminal for.
	Streams [3]bool
	// in is stdin when it is a terminal: the relay's input.
	in *os.File
	// out is where the command's terminal output goes: the first of
	// stdout, stderr and stdin that is a terminal (a command whose stdout
	// is redirected still echoes what is typed, as on the host).
	out *os.File
}

// Find returns the caller's terminal among its standard streams, or nil
// when none of them is a terminal.
func Find(stdin, stdout, stderr *os.File) *Caller {
	c := &Caller{}
	for i, f := range []*os.File{stdin, stdout, stderr} {
		c.Streams[i] = IsTerminal(f)
	}
	switch {
	case c.Streams[1]:
		c.out = stdout
	case c.Streams[2]:
		c.out = stderr
	case c.Streams[0]:
		c.out = stdin
	default:
		return nil
	}
	if c.Streams[0] {
		c.in = stdin
	}
	return c
}

// File is the caller's terminal whose modes and window size the command's
// terminal starts with.
func (c *Caller) File() *os.File {
	if c.in != nil {
		return c.in
	}
	return c.out
}

// CopyModes gives the pseudo-terminal behind master the modes and the
// window size of the terminal like (a caller's terminal, as it is before
// any raw mode: erase and interrupt characters, UTF-8 input, output
// processing).
func CopyModes(master, like *os.File) error {
	t, err := unix.IoctlGetTermios(int(like.Fd()), unix.TCGETS)
	if err != nil {
		return &os.PathError{Op: "read the terminal's modes", Path: like.Name(), Err: err}
	}
	// On a master, the termios and window size ioctls act on its slave.
	if err := unix.IoctlSetTermios(int(master.Fd()), unix.TCSETS, t); err != nil {
		return &os.PathError{Op: "set the command's terminal modes", Path: master.Name(), Err: err}
	}
	return copySize(master, like)
}

// copySize copies the window size of the terminal like to the pseudo-
// terminal behind master; the kernel sends SIGWINCH to the command's
// foreground process group when it changes.
func copySize(master, like *os.File) error {
	ws, err := unix.IoctlGetWinsize(int(like.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return &os.PathError{Op: "read the terminal's window size", Path: like.Name(), Err: err}
	}
	if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, ws); err != nil {
		return &os.PathError{Op: "set the command's window size", Path: master.Name(), Err: err}
	}
	return nil
}

// makeRaw is cfmakeraw(3): no input or output processing, no echo, no
// line editing, no signals from the keyboard, 8-bit characters, one byte a
// read.
func makeRaw(t unix.Termios) unix.Termios {
	t.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	t.Oflag &^= unix.OPOST
	t.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	t.Cflag &^= unix.CSIZE | unix.PARENB
	t.Cflag |= unix.CS8
	t.Cc[unix.VMIN] = 1
	t.Cc[unix.VTIME] = 0
	return t
}

// foreground reports whether this process is in the foreground process
// group of the terminal f (so that reading it or changing its modes does
// not stop it with SIGTTIN or SIGTTOU).
func foreground(f *os.File) bool {
	pg, err := unix.IoctlGetInt(int(f.Fd()), unix.TIOCGPGRP)
	return err == nil && pg == unix.Getpgrp()
}

// Relay copies bytes between a caller's terminal and a command's
// pseudo-terminal until Close.
type Relay struct {
	c      *Caller
	master *os.File
	// Executable is the binary the guard is started from (guard.c);
	// "" is /proc/self/exe.
	exe string

	mu     sync.Mutex
	saved  *unix.Termios // the caller's modes while they are raw, else nil
	rawSet bool          // takeInput ran in the foreground once
	guard  *guard
	input  bool // the input relay runs

	sigs    chan os.Signal
	stop    chan struct{} // closed by Close
	wakeR   *os.File      // readable when Close wants the input relay to stop
	wakeW   *os.File
	outDone chan struct{}
	inDone  chan struct{}
	wg      sync.WaitGroup
}

// Options configures a relay.
type Options struct {
	// Executable is the hutch binary that starts the guard restoring the
	// caller's terminal modes if the relaying process is killed; "" means
	// /proc/self/exe. The guard is a C constructor of this package, so any
	// binary that links package terminal is one.
	Executable string
}

// Start relays between the caller's terminal c and the pseudo-terminal
// master (whose slave the command has, or is about to get). It returns at
// once; Close ends it. Start does not close master; Close does.
func Start(c *Caller, master *os.File, o Options) (*Relay, error) {
	wr, ww, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	r := &Relay{c: c, master: master, exe: o.Executable, sigs: make(chan os.Signal, 4), stop: make(chan struct{}),
		wakeR: wr, wakeW: ww, outDone: make(chan struct{}), inDone: make(chan struct{})}
	signal.Notify(r.sigs, unix.SIGWINCH, unix.SIGCONT)
	r.takeInput()
	r.wg.Add(2)
	go r.output()
	go r.signals()
	return r, nil
}

// takeInput puts the caller's terminal in raw mode and starts relaying its
// input, when stdin is the terminal and this process is in its foreground
// (at the start, or on SIGCONT: a job brought to the foreground). A
// background job stays as it is: its terminal's modes are the foreground
// job's, and its reads would stop it.
func (r *Relay) takeInput() {
	in := r.c.in
	if in == nil || !foreground(in) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
		return
	default:
	}
	t, err := unix.IoctlGetTermios(int(in.Fd()), unix.TCGETS)
	if err != nil {
		return
	}
	raw := makeRaw(*t)
	if !r.rawSet {
		// The first time: the modes to restore are these. A terminal that
		// is raw already (the caller set it so) is left as it is.
		r.rawSet = true
		if *t != raw {
			saved := *t
			r.saved = &saved
			r.guard = startGuard(r.exe, in, &saved, &raw)
		}
	}
	if r.saved != nil {
		// Again after a SIGCONT: the shell may have set its own modes
		// while this job was stopped.
		if err := unix.IoctlSetTermios(int(in.Fd()), unix.TCSETS, &raw); err != nil {
			return
		}
	}
	if !r.input {
		r.input = true
		go r.inputLoop()
	}
}

// output copies what the command writes to its terminal to the caller's
// until the pseudo-terminal has no writer left (EIO) or Close's deadline.
// A write that fails (the caller's terminal hung up) drops the bytes but
// keeps reading, so that the command never blocks on a full terminal.
func (r *Relay) output() {
	defer r.wg.Done()
	defer close(r.outDone)
	buf := make([]byte, 32<<10)
	out, ok := r.c.out, true
	for {
		n, err := r.master.Read(buf)
		if n > 0 && ok {
			if _, werr := out.Write(buf[:n]); werr != nil {
				ok = false
			}
		}
		if err != nil {
			return
		}
	}
}

// inputLoop copies the caller's terminal input to the command's terminal.
// It waits in poll(2) with Close's wake-up pipe, never in a read, so that
// it reads nothing once Close is called (what the caller types afterwards
// is the shell's) and leaves the caller's descriptor blocking as it was.
func (r *Relay) inputLoop() {
	defer close(r.inDone)
	in := int(r.c.in.Fd())
	buf := make([]byte, 4096)
	p := []unix.PollFd{{Fd: int32(in), Events: unix.POLLIN}, {Fd: int32(r.wakeR.Fd()), Events: unix.POLLIN}}
	for {
		p[0].Revents, p[1].Revents = 0, 0
		if _, err := unix.Poll(p, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return
		}
		if p[1].Revents != 0 {
			return
		}
		if p[0].Revents == 0 {
			continue
		}
		n, err := unix.Read(in, buf)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if n <= 0 {
			return // the caller's terminal hung up, or is gone
		}
		if _, err := r.master.Write(buf[:n]); err != nil {
			return // the command's terminal has no reader left
		}
	}
}

// signals follows the caller's window size (SIGWINCH), and takes the
// input back when a stopped job is continued in the foreground (SIGCONT).
func (r *Relay) signals() {
	defer r.wg.Done()
	for {
		select {
		case <-r.stop:
			return
		case sig := <-r.sigs:
			_ = copySize(r.master, r.c.File())
			if sig == unix.SIGCONT {
				r.takeInput()
			}
		}
	}
}

// Close ends the relay once the command has ended: it copies what the
// command wrote last (until the pseudo-terminal reports that no process
// holds its slave any more, within a second should another process still
// hold it), stops relaying input, restores the caller's terminal modes
// and closes master.
func (r *Relay) Close() error {
	r.mu.Lock()
	select {
	case <-r.stop:
		r.mu.Unlock()
		return nil
	default:
	}
	close(r.stop)
	input := r.input
	r.mu.Unlock()
	signal.Stop(r.sigs)
	select {
	case <-r.outDone:
	case <-time.After(time.Second):
		_ = r.master.SetReadDeadline(time.Now())
	}
	r.wakeW.Write([]byte{0})
	if input {
		<-r.inDone
	}
	r.wg.Wait()
	err := r.restore()
	r.wakeR.Close()
	r.wakeW.Close()
	r.master.Close()
	return err
}

// restore gives the caller's terminal its modes back. SIGTTOU is ignored
// meanwhile: a job moved to the background restores its modes too (it set
// them), rather than stopping at its end.
func (r *Relay) restore() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.saved == nil {
		return nil
	}
	ignored := signal.Ignored(syscall.SIGTTOU)
	if !ignored {
		signal.Ignore(syscall.SIGTTOU)
	}
	err := unix.IoctlSetTermios(int(r.c.in.Fd()), unix.TCSETS, r.saved)
	if !ignored {
		signal.Reset(syscall.SIGTTOU)
	}
	r.saved = nil
	r.guard.release()
	if err != nil {
		return errors.Join(errors.New("restore the terminal's modes"), err)
	}
	return nil
}
