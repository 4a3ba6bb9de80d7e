package seccompprofiles

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The kernel tests re-execute the test binary as a child that loads a
// compiled filter on its (locked) thread with a raw seccomp(2), exactly as
// hutch's exec stage does, then probes it.
const (
	childModeEnv   = "HUTCH_SECCOMP_TEST_CHILD"
	childBPFEnv    = "HUTCH_SECCOMP_TEST_BPF"
	childNotifyEnv = "HUTCH_SECCOMP_TEST_NOTIFY"
	childScriptEnv = "HUTCH_SECCOMP_TEST_SCRIPT"
	childSockFd    = 3 // ExtraFiles[0]: the socket the listener fd goes over
)

func TestMain(m *testing.M) {
	if mode := os.Getenv(childModeEnv); mode != "" {
		os.Exit(runChild(mode))
	}
	os.Exit(m.Run())
}

// runChild runs in the re-executed test binary.
func runChild(mode string) int {
	runtime.LockOSThread() // the filter applies to this thread only; probes run here too
	bpf, err := os.ReadFile(os.Getenv(childBPFEnv))
	if err != nil {
		fmt.Println("child-error", err)
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Println("child-error no_new_privs:", err)
		return 2
	}
	flags := uintptr(0)
	notify := os.Getenv(childNotifyEnv) == "1"
	if notify {
		flags |= unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
	}
	prog := unix.SockFprog{Len: uint16(len(bpf) / 8), Filter: (*unix.SockFilter)(unsafe.Pointer(&bpf[0]))}
	r, _, e := unix.RawSyscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(bpf)
	if e != 0 {
		fmt.Println("load-failed", int(e))
		return 3
	}
	if notify {
		if err := unix.Sendmsg(childSockFd, []byte{'L'}, unix.UnixRights(int(r)), nil, 0); err != nil {
			fmt.Println("child-error sendmsg:", err)
			return 2
		}
		unix.Close(int(r))
	}
	switch mode {
	case "probe":
		runProbes()
		return 0
	case "exec":
		err := syscall.Exec("/bin/sh", []string{"sh", "-c", os.Getenv(childScriptEnv)}, os.Environ())
		fmt.Println("child-error exec:", err)
		return 2
	case "x32":
		// getpid through the x32 ABI: another ABI than the filter's.
		unix.RawSyscall(unix.SYS_GETPID|0x40000000, 0, 0, 0)
		fmt.Println("x32 syscall survived")
		return 0
	case "hold":
		// Keep the filter alive until the parent closes the socket.
		var b [1]byte
		unix.Read(childSockFd, b[:])
		return 0
	}
	fmt.Println("child-error unknown mode", mode)
	return 2
}

// probe is a raw syscall issued by the child, chosen so that the kernel
// itself would answer something else than the filter's errno (a bad
// pointer, a bad signal number, a non-terminal fd), whoever runs the test.
type probe struct {
	name string
	nr   uintptr
	args [6]uintptr
}

func childProbes() []probe {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		panic(err)
	}
	var c byte = 'x'
	var termios [64]byte
	badPtr := uintptr(1)
	return []probe{
		{"getpid", unix.SYS_GETPID, [6]uintptr{}},
		{"keyctl", unix.SYS_KEYCTL, [6]uintptr{0 /* KEYCTL_GET_KEYRING_ID */, ^uintptr(2) /* KEY_SPEC_SESSION_KEYRING */, 0}},
		{"clone3", unix.SYS_CLONE3, [6]uintptr{0, 0}},
		{"unshare-user", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
		{"unshare-none", unix.SYS_UNSHARE, [6]uintptr{0}},
		{"clone-newuser", unix.SYS_CLONE, [6]uintptr{unix.CLONE_NEWUSER | unix.CLONE_THREAD}},
		{"ioctl-tiocsti-hi", unix.SYS_IOCTL, [6]uintptr{uintptr(p[0]), 1<<32 | tiocsti, uintptr(unsafe.Pointer(&c))}},
		{"ioctl-tcgets", unix.SYS_IOCTL, [6]uintptr{uintptr(p[0]), tcgets, uintptr(unsafe.Pointer(&termios[0]))}},
		{"personality-query", unix.SYS_PERSONALITY, [6]uintptr{0xffffffff}},
		{"personality-norandom", unix.SYS_PERSONALITY, [6]uintptr{0x0040000}},
		{"kill-1", unix.SYS_KILL, [6]uintptr{1, 9999}},
		{"kill-self", unix.SYS_KILL, [6]uintptr{uintptr(os.Getpid()), 0}},
		{"mount", unix.SYS_MOUNT, [6]uintptr{badPtr, badPtr, badPtr, 0, 0}},
		{"setns", unix.SYS_SETNS, [6]uintptr{^uintptr(0), 0}},
		{"ptrace", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_ATTACH, 0x7ffffff0}},
		{"bpf", unix.SYS_BPF, [6]uintptr{9999, 0, 0}},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{badPtr, 0, ^uintptr(0), ^uintptr(0), 0}},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uintptr{1, badPtr}},
		{"socket-vsock", unix.SYS_SOCKET, [6]uintptr{unix.AF_VSOCK, unix.SOCK_STREAM, 0}},
		{"unknown-1000", 1000, [6]uintptr{}},
	}
}

func runProbes() {
	for _, p := range childProbes() {
		_, _, e := unix.Syscall6(p.nr, p.args[0], p.args[1], p.args[2], p.args[3], p.args[4], p.args[5])
		fmt.Printf("probe %s %d\n", p.name, int(e))
	}
}

// wantProbe is the errno each probe must get through the default filter
// (0: the syscall ran, whatever it returned).
var wantProbe = map[string]unix.Errno{
	"getpid":               0,
	"keyctl":               unix.EPERM,
	"clone3":               unix.ENOSYS,
	"unshare-user":         unix.EPERM,
	"unshare-none":         0,
	"clone-newuser":        unix.EPERM,
	"ioctl-tiocsti-hi":     unix.EPERM,
	"ioctl-tcgets":         unix.ENOTTY,
	"personality-query":    0,
	"personality-norandom": unix.EPERM,
	"kill-1":               unix.EPERM,
	"kill-self":            0,
	"mount":                unix.EPERM,
	"setns":                unix.EPERM,
	"ptrace":               unix.EPERM,
	"bpf":                  unix.EPERM,
	"perf_event_open":      unix.EPERM,
	"io_uring_setup":       unix.EPERM,
	"socket-vsock":         unix.EPERM,
	"unknown-1000":         unix.ENOSYS,
}

// notifiedProbes are the probes the supervisor must see with Notify, and
// the syscall name it must report.
var notifiedProbes = map[string]string{
	"keyctl": "keyctl", "unshare-user": "unshare", "clone-newuser": "clone",
	"ioctl-tiocsti-hi": "ioctl", "personality-norandom": "personality", "kill-1": "kill",
	"mount": "mount", "setns": "setns", "ptrace": "ptrace", "bpf": "bpf",
	"perf_event_open": "perf_event_open", "io_uring_setup": "io_uring_setup",
	"socket-vsock": "socket", "unknown-1000": "syscall_1000",
}

type child struct {
	cmd    *exec.Cmd
	out    *bytes.Buffer
	sock   int // parent's end of the socketpair
	cancel context.CancelFunc
}

// startChild re-executes the test binary in mode with f's BPF.
func startChild(t *testing.T, mode string, f *Filter, env ...string) *child {
	t.Helper()
	bpfPath := filepath.Join(t.TempDir(), "filter.bpf")
	if err := os.WriteFile(bpfPath, f.BPF, 0o600); err != nil {
		t.Fatal(err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), childModeEnv+"="+mode, childBPFEnv+"="+bpfPath)
	if f.Notify {
		cmd.Env = append(cmd.Env, childNotifyEnv+"=1")
	}
	cmd.Env = append(cmd.Env, env...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	childEnd := os.NewFile(uintptr(pair[1]), "child-sock")
	cmd.ExtraFiles = []*os.File{childEnd}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	childEnd.Close()
	c := &child{cmd: cmd, out: out, sock: pair[0], cancel: cancel}
	t.Cleanup(func() {
		cancel()
		unix.Close(c.sock)
		_ = cmd.Wait()
	})
	return c
}

// listener receives the listener fd the child sends.
func (c *child) listener(t *testing.T) int {
	t.Helper()
	tv := unix.Timeval{Sec: 20}
	if err := unix.SetsockoptTimeval(c.sock, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	var n, oobn int
	var err error
	for {
		// SO_RCVTIMEO makes signals (the Go runtime's preemption) interrupt
		// the wait despite SA_RESTART.
		n, oobn, _, _, err = unix.Recvmsg(c.sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil || n == 0 {
		c.cancel() // it may be blocked in a notification nobody serves
		_ = c.cmd.Wait()
		t.Fatalf("no listener fd from the child (err %v); child output:\n%s", err, c.out)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control messages: %v %v", msgs, err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v %v", fds, err)
	}
	t.Cleanup(func() { unix.Close(fds[0]) })
	return fds[0]
}

// results waits for the child and parses its probe lines.
func (c *child) results(t *testing.T) map[string]unix.Errno {
	t.Helper()
	err := c.cmd.Wait()
	got := map[string]unix.Errno{}
	sc := bufio.NewScanner(bytes.NewReader(c.out.Bytes()))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "load-failed" {
			if n, _ := strconv.Atoi(f[1]); unix.Errno(n) == unix.ENOSYS {
				t.Skip("the kernel has no seccomp(2) (ENOSYS)")
			}
			t.Fatalf("seccomp(SECCOMP_SET_MODE_FILTER) failed in the child: %v", unix.Errno(mustAtoi(f[1])))
		}
		if len(f) == 3 && f[0] == "probe" {
			got[f[1]] = unix.Errno(mustAtoi(f[2]))
		}
	}
	if err != nil {
		t.Fatalf("child: %v; output:\n%s", err, c.out)
	}
	return got
}

func mustAtoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func checkProbes(t *testing.T, got map[string]unix.Errno) {
	t.Helper()
	for name, want := range wantProbe {
		e, ok := got[name]
		switch {
		case !ok:
			t.Errorf("probe %s did not run", name)
		case want == 0 && e != 0 && name != "getpid" && name != "personality-query":
			// The syscall ran: any kernel answer but the filter's.
			if e == unix.EPERM || e == unix.ENOSYS {
				t.Errorf("probe %s: %v, want it to reach the kernel", name, e)
			}
		case want == 0 && (name == "getpid" || name == "personality-query") && e != 0:
			t.Errorf("probe %s: %v, want success", name, e)
		case want != 0 && e != want:
			t.Errorf("probe %s: %v (%d), want %v", name, e, int(e), want)
		}
	}
}

func TestKernelDefaultFilter(t *testing.T) {
	f := compileDefault(t, false)
	c := startChild(t, "probe", f)
	checkProbes(t, c.results(t))
}

type reports struct {
	mu   sync.Mutex
	list []string
	n    []Notification
}

func (r *reports) add(d Denial, n Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, fmt.Sprintf("%s %d", d.Name, d.Errno))
	r.n = append(r.n, n)
}

func TestKernelNotify(t *testing.T) {
	f := compileDefault(t, true)
	if !f.Notify {
		t.Skipf("seccomp user notification unavailable: %s", f.NotifyUnavailable)
	}
	c := startChild(t, "probe", f)
	fd := c.listener(t)
	rep := &reports{}
	served := make(chan error, 1)
	go func() { served <- Serve(context.Background(), fd, f, rep.add) }()

	got := c.results(t)
	checkProbes(t, got) // the supervisor answered every notified probe with the right errno

	// The child has exited: Serve returns by itself.
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after the filtered process exited")
	}

	rep.mu.Lock()
	defer rep.mu.Unlock()
	want := map[string]bool{}
	for probeName, sys := range notifiedProbes {
		want[fmt.Sprintf("%s %d", sys, wantProbe[probeName])] = true
	}
	seen := map[string]bool{}
	for _, r := range rep.list {
		seen[r] = true
		if strings.HasPrefix(r, "clone3 ") {
			t.Errorf("the quiet fallback clone3 was reported: %q", r)
		}
	}
	for w := range want {
		if !seen[w] {
			t.Errorf("no report %q; reports: %q", w, rep.list)
		}
	}
	for i, n := range rep.n {
		if int(n.Pid) != c.cmd.Process.Pid {
			t.Errorf("report %q: pid %d, want %d", rep.list[i], n.Pid, c.cmd.Process.Pid)
		}
		if rep.list[i] == "keyctl 1" && int32(n.Args[1]) != -3 {
			t.Errorf("keyctl args %#x", n.Args)
		}
	}
}

func TestKernelExecShell(t *testing.T) {
	for _, notify := range []bool{false, true} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			f := compileDefault(t, notify)
			if notify && !f.Notify {
				t.Skipf("seccomp user notification unavailable: %s", f.NotifyUnavailable)
			}
			script := `
				set -e
				ls / >/dev/null
				x=$(echo sub | cat)
				sleep 0.01 &
				wait
				echo "shell ok $x"
				if command -v unshare >/dev/null; then
					if unshare -U true 2>/dev/null; then echo "unshare allowed"; else echo "unshare refused"; fi
				else
					echo "unshare refused (no unshare binary)"
				fi`
			c := startChild(t, "exec", f, childScriptEnv+"="+script)
			rep := &reports{}
			served := make(chan error, 1)
			if notify {
				fd := c.listener(t)
				go func() { served <- Serve(context.Background(), fd, f, rep.add) }()
			}
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("shell under the filter: %v\n%s", err, c.out)
			}
			out := c.out.String()
			if !strings.Contains(out, "shell ok sub\n") || !strings.Contains(out, "unshare refused") {
				t.Errorf("shell output:\n%s", out)
			}
			if notify {
				if err := <-served; err != nil {
					t.Errorf("Serve: %v", err)
				}
				rep.mu.Lock()
				defer rep.mu.Unlock()
				if !strings.Contains(out, "no unshare binary") && !contains(rep.list, "unshare 1") {
					t.Errorf("reports %q lack the unshare denial", rep.list)
				}
				for _, r := range rep.list {
					if strings.HasPrefix(r, "clone3") {
						t.Errorf("quiet fallback reported: %q", rep.list)
					}
				}
			}
		})
	}
}

func TestKernelForeignABIKills(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the x32 ABI exists on amd64 only; running on " + runtime.GOARCH)
	}
	f := compileDefault(t, false)
	c := startChild(t, "x32", f)
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child: %v, want death by SIGSYS; output:\n%s", err, c.out)
	}
	ws := ee.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != unix.SIGSYS {
		t.Errorf("child status %v, want killed by SIGSYS; output:\n%s", ws, c.out)
	}
}

func TestServeStopsOnCancel(t *testing.T) {
	f := compileDefault(t, true)
	if !f.Notify {
		t.Skipf("seccomp user notification unavailable: %s", f.NotifyUnavailable)
	}
	c := startChild(t, "hold", f)
	fd := c.listener(t)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, fd, f, nil) }()
	select {
	case err := <-served:
		t.Fatalf("Serve returned early: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-served:
		if err != context.Canceled {
			t.Errorf("Serve: %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	// Release the child.
	unix.Close(c.sock)
	c.sock = -1
	if err := c.cmd.Wait(); err != nil {
		t.Errorf("child: %v\n%s", err, c.out)
	}
}

func TestServeRejectsClosedFd(t *testing.T) {
	f := compileDefault(t, false)
	const fd = 1 << 20 // not open
	done := make(chan error, 1)
	go func() { done <- Serve(context.Background(), fd, f, nil) }()
	select {
	case err := <-done:
		if err == nil {
			t.Error("Serve on a closed fd returned nil")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve on a closed fd blocked")
	}
}

// One Serve per listener, concurrently: each answers and reports its own
// sandbox's denials.
func TestKernelNotifyConcurrentListeners(t *testing.T) {
	f := compileDefault(t, true)
	if !f.Notify {
		t.Skipf("seccomp user notification unavailable: %s", f.NotifyUnavailable)
	}
	const n = 3
	children := make([]*child, n)
	reps := make([]*reports, n)
	served := make([]chan error, n)
	for i := range n {
		children[i] = startChild(t, "probe", f)
		fd := children[i].listener(t)
		reps[i] = &reports{}
		served[i] = make(chan error, 1)
		go func(i int) { served[i] <- Serve(context.Background(), fd, f, reps[i].add) }(i)
	}
	for i, c := range children {
		checkProbes(t, c.results(t))
		if err := <-served[i]; err != nil {
			t.Errorf("Serve %d: %v", i, err)
		}
		reps[i].mu.Lock()
		if !contains(reps[i].list, "keyctl 1") {
			t.Errorf("listener %d: reports %q lack keyctl", i, reps[i].list)
		}
		for _, nt := range reps[i].n {
			if int(nt.Pid) != c.cmd.Process.Pid {
				t.Errorf("listener %d reported pid %d, its child is %d", i, nt.Pid, c.cmd.Process.Pid)
			}
		}
		reps[i].mu.Unlock()
	}
}
