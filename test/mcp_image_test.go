package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// mcpServer drives a started `hutch mcp` over its stdio: initialize, then
// call(id, method, params) returns the answer with that id.
type mcpServer struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  *bufio.Reader
	stderr *strings.Builder
}

// startMCP starts cmd (a `hutch mcp`, possibly wrapped) and initializes
// the protocol; the server is stopped (stdin closed, waited for) when the
// test ends.
func startMCP(t *testing.T, cmd *exec.Cmd) *mcpServer {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	m := &mcpServer{t: t, cmd: cmd, stdin: stdin, lines: bufio.NewReader(stdout), stderr: &strings.Builder{}}
	cmd.Stderr = m.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.stop)
	m.call(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return m
}

// stop closes the server's stdin and waits for it to exit (once).
func (m *mcpServer) stop() {
	if m.stdin == nil {
		return
	}
	m.stdin.Close()
	m.stdin = nil
	done := make(chan error, 1)
	go func() { done <- m.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		m.cmd.Process.Kill()
		<-done
		m.t.Errorf("hutch mcp did not exit within 20s of its stdin closing")
	}
}

func (m *mcpServer) call(id int, method string, params any) map[string]any {
	m.t.Helper()
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
	if _, err := fmt.Fprintf(m.stdin, "%s\n", b); err != nil {
		m.t.Fatalf("write %s: %v; stderr:\n%s", method, err, m.stderr.String())
	}
	for {
		line, err := m.lines.ReadBytes('\n')
		if err != nil {
			m.stop() // its stderr is complete once it has been waited for
			m.t.Fatalf("read the answer to %s: %v; stderr:\n%s", method, err, m.stderr.String())
		}
		var a map[string]any
		if err := json.Unmarshal(line, &a); err != nil {
			m.t.Fatalf("answer to %s: %v: %q", method, err, line)
		}
		if a["id"] == float64(id) {
			return a
		}
	}
}

// runCommand calls run_command and returns its structured result (nil if
// there is none).
func (m *mcpServer) runCommand(id int, command string) (map[string]any, map[string]any) {
	m.t.Helper()
	res := m.call(id, "tools/call", map[string]any{"name": "run_command", "arguments": map[string]any{"command": command}})
	r, _ := res["result"].(map[string]any)
	sc, _ := r["structuredContent"].(map[string]any)
	return sc, res
}

// `hutch mcp` of a binary built by `make build` runs the MCP server image
// that binary carries (cmd/hutch/mcp_image.go) from a sealed memfd: the
// server answers a call, nobody can write its executable (not even its
// owner, unlike a file on disk), and a sandboxed command cannot read it.
func TestMCPImageSealed(t *testing.T) {
	ws := userDir(t)
	cmd := hutchCmd(opts{dir: ws}, "mcp", "--net", "none")
	m := startMCP(t, cmd)
	sc, res := m.runCommand(2, "echo ok; head -c 4 /proc/1/exe >/dev/null && echo READ-INIT-EXE")
	if sc == nil || sc["stdout"] != "ok\n" || !strings.Contains(fmt.Sprint(sc["stderr"]), "Permission denied") {
		t.Fatalf("run_command through the image: %v; stderr:\n%s", res, m.stderr.String())
	}

	exe := "/proc/" + strconv.Itoa(cmd.Process.Pid) + "/exe"
	target, err := os.Readlink(exe)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(target, "/memfd:hutch-mcp") {
		if os.Getenv("CI") != "" { // CI builds with make, which embeds the image
			t.Fatalf("the server's executable is %s, not the memfd image: the Makefile no longer builds %s with the mcpimage tag", target, hutchBin)
		}
		t.Skipf("the server's executable is %s, not the memfd image: %s was built without the mcpimage tag (make build embeds it)", target, hutchBin)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0)
	const want = unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if err != nil || seals&want != want {
		t.Errorf("seals of the server's image: %#x, %v; want %#x", seals, err, want)
	}
	if head, err := io.ReadAll(io.LimitReader(f, 4)); err != nil || string(head) != "\x7fELF" {
		t.Errorf("the image starts %q, %v; want an ELF header", head, err)
	}
	if w, err := os.OpenFile(exe, os.O_WRONLY, 0); err == nil {
		_, werr := w.Write([]byte("x"))
		w.Close()
		if werr == nil || !errors.Is(werr, unix.EPERM) {
			t.Errorf("writing the server's image as root: %v; want EPERM (sealed)", werr)
		}
	}
}

// On a host with vm.memfd_noexec = 2 the kernel refuses an executable
// memfd; `hutch mcp` then unpacks the image once into the cache directory
// (mode 0500, named by its hash; another build's copy removed), runs it
// from there, and reuses it. The
// sysctl is per pid namespace: as root, the test raises it in a child pid
// namespace of its own (with its own /proc, in a mount namespace of its
// own), then becomes the test user there to run hutch, so the host's value
// is never changed.
func TestMCPImageNoexecMemfd(t *testing.T) {
	if !asRoot {
		t.Skip("needs root: only root can raise vm.memfd_noexec, here in a child pid namespace")
	}
	b, err := os.ReadFile("/proc/sys/vm/memfd_noexec")
	if err != nil {
		t.Skipf("this kernel has no vm.memfd_noexec (Linux 6.3 and later): %v", err)
	}
	hostValue := strings.TrimSpace(string(b))
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Fatalf("unshare (util-linux) is needed: %v", err)
	}
	ws := userDir(t)
	cache := filepath.Join(stateDir, "cache", "hutch", "mcp")
	os.RemoveAll(cache)
	// A copy left by another build, which the first server replaces.
	if err := os.MkdirAll(cache, 0o700); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(cache, "hutch-mcp-0123456789abcdef0123456789abcdef")
	if err := os.WriteFile(stale, []byte("old build"), 0o500); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Dir(cache), cache, stale} {
		if err := os.Chown(p, testUID, testGID); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *mcpServer {
		cmd := hutchCmd(opts{dir: ws}, "mcp", "--net", "none")
		const script = `echo 2 > /proc/sys/vm/memfd_noexec || exit 97
u=$1 g=$2; shift 2
exec setpriv --reuid "$u" --regid "$g" --clear-groups -- "$@"`
		cmd.Args = append([]string{"unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--", "sh", "-c", script, "sh",
			strconv.Itoa(testUID), strconv.Itoa(testGID)}, cmd.Args...)
		cmd.Path = unshare
		cmd.SysProcAttr = nil // root, until setpriv
		return startMCP(t, cmd)
	}
	image := func() (string, uint64) {
		t.Helper()
		ents, err := os.ReadDir(cache)
		if err != nil || len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "hutch-mcp-") {
			t.Fatalf("%s holds %v (%v), want one hutch-mcp-HASH", cache, ents, err)
		}
		p := filepath.Join(cache, ents[0].Name())
		fi, err := os.Lstat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if fi.Mode() != 0o500 || int(st.Uid) != testUID {
			t.Errorf("%s: mode %v, owner %d; want -r-x------ and the user %d", p, fi.Mode(), st.Uid, testUID)
		}
		return p, st.Ino
	}
	// runsFrom reports whether a process runs the file at path.
	runsFrom := func(path string) bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/exe")
		for _, e := range procs {
			if l, err := os.Readlink(e); err == nil && l == path {
				return true
			}
		}
		return false
	}

	m := start()
	if sc, res := m.runCommand(2, "echo ok"); sc == nil || sc["stdout"] != "ok\n" {
		t.Fatalf("run_command with vm.memfd_noexec = 2: %v; stderr:\n%s", res, m.stderr.String())
	}
	path, ino := image()
	if !runsFrom(path) {
		t.Errorf("no process runs %s: the server did not start from the unpacked image", path)
	}
	m.stop()

	m = start()
	if sc, res := m.runCommand(2, "echo again"); sc == nil || sc["stdout"] != "again\n" {
		t.Fatalf("second run_command: %v; stderr:\n%s", res, m.stderr.String())
	}
	if _, ino2 := image(); ino2 != ino {
		t.Errorf("the second hutch mcp unpacked the image again (inode %d, was %d); want the first copy reused", ino2, ino)
	}
	m.stop()

	if b, _ := os.ReadFile("/proc/sys/vm/memfd_noexec"); strings.TrimSpace(string(b)) != hostValue {
		t.Errorf("the host's vm.memfd_noexec is %q after the test, was %q", strings.TrimSpace(string(b)), hostValue)
	}
}
