package terminal

// #cgo CFLAGS: -O2 -Wall
// #include "guard.h"
import "C"

import (
	"encoding/hex"
	"os"
	"os/exec"
	"unsafe"

	"golang.org/x/sys/unix"
)

// guard is a process that restores the caller's terminal modes should the
// relaying process die without doing so itself (SIGKILL, a crash): it
// holds the terminal and the read end of a pipe whose write end only the
// relaying process holds. At that pipe's end it restores the saved modes,
// if the terminal still has the raw modes the relay set (a terminal that
// someone else has changed since is left alone); a byte on the pipe
// (release) means the relay restored them itself. It is this package's C
// constructor (guard.c) in a new process of the hutch binary.
type guard struct {
	w   *os.File
	cmd *exec.Cmd
}

// termiosLen is the size of the kernel's struct termios, what TCGETS and
// TCSETS copy (unix.Termios goes on with the speeds of struct termios2).
var termiosLen = int(unsafe.Offsetof(unix.Termios{}.Ispeed))

// guardLayoutOK reports whether guard.c reads the modes as this side
// writes them (the kernel's struct termios, both sides).
func guardLayoutOK() bool { return int(C.hutch_guard_termios_len()) == termiosLen }

// startGuard starts the guard of the terminal tty, whose modes are saved
// and set to raw now. nil when it cannot (the terminal is restored on every
// other path anyway).
func startGuard(exe string, tty *os.File, saved, raw *unix.Termios) *guard {
	if !guardLayoutOK() {
		return nil
	}
	if exe == "" {
		exe = "/proc/self/exe"
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil
	}
	defer r.Close()
	enc := func(t *unix.Termios) string {
		return hex.EncodeToString(unsafe.Slice((*byte)(unsafe.Pointer(t)), termiosLen))
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{C.HUTCH_GUARD_MAGIC, enc(saved), enc(raw)},
		Env:        []string{},
		Stdin:      tty,
		ExtraFiles: []*os.File{r},
	}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil
	}
	go cmd.Wait() //nolint:errcheck // reaped; it reports nothing
	return &guard{w: w, cmd: cmd}
}

// release tells the guard that the modes are restored, and lets it go.
func (g *guard) release() {
	if g == nil {
		return
	}
	g.w.Write([]byte{1})
	g.w.Close()
}
