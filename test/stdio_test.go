package test

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// asTestUser runs f on a thread whose file system ids are the test user's,
// so that what f creates (a pipe's inode) is the test user's, as when the
// caller's shell makes it.
func asTestUser(f func()) {
	if !asRoot {
		f()
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	unix.Setfsgid(testGID)
	unix.Setfsuid(testUID)
	defer unix.Setfsgid(0)
	defer unix.Setfsuid(0)
	f()
}

// stdioKind makes a kind of standard stream for one run: the end the
// command gets, and how to read what reached it afterwards.
type stdioKind struct {
	name string
	make func(t *testing.T) (end *os.File, read func() string)
}

func stdioKinds(ws, outside string) []stdioKind {
	file := func(dir string) func(t *testing.T) (*os.File, func() string) {
		return func(t *testing.T) (*os.File, func() string) {
			p := filepath.Join(dir, fmt.Sprintf("out-%d", time.Now().UnixNano()))
			writeUserFile(t, p, "")
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			return f, func() string { b, _ := os.ReadFile(p); return string(b) }
		}
	}
	return []stdioKind{
		{"pipe", func(t *testing.T) (*os.File, func() string) {
			var r, w *os.File
			var err error
			asTestUser(func() { r, w, err = os.Pipe() })
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			done := make(chan struct{})
			go func() { io.Copy(&got, r); r.Close(); close(done) }()
			return w, func() string { <-done; return got.String() }
		}},
		{"file in the workspace", file(ws)},
		{"file outside the workspace", file(outside)},
		{"socket", func(t *testing.T) (*os.File, func() string) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			r := os.NewFile(uintptr(fds[0]), "socket")
			var got bytes.Buffer
			done := make(chan struct{})
			go func() { io.Copy(&got, r); r.Close(); close(done) }()
			return os.NewFile(uintptr(fds[1]), "socket"), func() string { <-done; return got.String() }
		}},
	}
}

// runWithStdout runs cmd with stdout end (closed after the start) and
// returns its exit code, stderr and what reached the stream.
func runWithStdout(t *testing.T, cmd *exec.Cmd, end *os.File, read func() string) (int, string, string) {
	t.Helper()
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = end, &errb
	err := cmd.Start()
	end.Close()
	if err != nil {
		t.Fatal(err)
	}
	code := 0
	if err := cmd.Wait(); err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatal(err)
		}
		code = ee.ExitCode()
	}
	return code, errb.String(), read()
}

// hostSh is sh -c script on the host, as the test user.
func hostSh(script string) *exec.Cmd {
	cmd := exec.Command("sh", "-c", script)
	if asRoot {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID), NoSetGroups: true}}
	}
	return cmd
}

// A command's /dev/stdout and /proc/self/fd/1 reach what its stdout is, as
// they do on the host: a pipe, a file in the workspace or outside it (the
// caller's `>> /tmp/log`: its own Landlock rule), a socket (which the
// kernel reopens nowhere: ENXIO on the host too). Sessions' commands
// (`hutch exec`, the fast C path) the same, but for a file outside the
// workspace (docs/POLICY.md).
func TestStdioReopen(t *testing.T) {
	ws, outside := userDir(t), userDir(t)
	const script = `echo a; echo b >>/dev/stdout; echo c >>/proc/self/fd/1`
	name := startSession(t, ws)
	for _, k := range stdioKinds(ws, outside) {
		end, read := k.make(t)
		hcode, herr, hout := runWithStdout(t, hostSh(script), end, read)
		for _, via := range [][]string{{"run", "--"}, {"exec", name, "--"}} {
			if via[0] == "exec" && k.name == "file outside the workspace" {
				continue
			}
			end, read := k.make(t)
			code, errs, out := runWithStdout(t, hutchCmd(opts{dir: ws}, append(via, "sh", "-c", script)...), end, read)
			errs = strings.TrimSpace(strings.Join(slices.DeleteFunc(strings.Split(errs, "\n"), func(l string) bool { return strings.HasPrefix(l, "hutch: warning") }), "\n"))
			if code != hcode || out != hout || errs != strings.TrimSpace(herr) {
				t.Errorf("%s, stdout a %s: exit %d, %q reached it, stderr %q; on the host: exit %d, %q, stderr %q",
					via[0], k.name, code, out, errs, hcode, hout, herr)
			}
		}
	}
	// /dev/stdin of a file the caller opened outside the workspace.
	in := filepath.Join(outside, "in")
	writeUserFile(t, in, "from the host\n")
	f, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := hutch(t, opts{dir: ws, stdin: f}, "run", "--", "sh", "-c", "cat /dev/stdin")
	mustCode(t, r, 0)
	if r.stdout != "from the host\n" {
		t.Errorf("/dev/stdin of a host file read %q", r.stdout)
	}
}
