package test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// `hutch mcp` of a binary built by `make build` runs the MCP server image
// that binary carries (cmd/hutch/mcp_image.go) from a sealed memfd: the
// server answers a call, nobody can write its executable (not even its
// owner, unlike a file on disk), and a sandboxed command cannot read it.
func TestMCPImageSealed(t *testing.T) {
	ws := userDir(t)
	cmd := hutchCmd(opts{dir: ws}, "mcp", "--net", "none")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("hutch mcp did not exit within 20s of its stdin closing")
		}
	}()
	lines := bufio.NewReader(stdout)
	call := func(id int, method string, params any) map[string]any {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params})
		if _, err := fmt.Fprintf(stdin, "%s\n", b); err != nil {
			t.Fatalf("write %s: %v; stderr:\n%s", method, err, stderr.String())
		}
		for {
			line, err := lines.ReadBytes('\n')
			if err != nil {
				t.Fatalf("read the answer to %s: %v; stderr:\n%s", method, err, stderr.String())
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				t.Fatalf("answer to %s: %v: %q", method, err, line)
			}
			if m["id"] == float64(id) {
				return m
			}
		}
	}
	call(1, "initialize", map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{},
		"clientInfo": map[string]any{"name": "e2e", "version": "1"}})
	fmt.Fprintln(stdin, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	res := call(2, "tools/call", map[string]any{"name": "run_command", "arguments": map[string]any{
		"command": "echo ok; head -c 4 /proc/1/exe >/dev/null && echo READ-INIT-EXE"}})
	sc, _ := res["result"].(map[string]any)["structuredContent"].(map[string]any)
	if sc == nil || sc["stdout"] != "ok\n" || !strings.Contains(fmt.Sprint(sc["stderr"]), "Permission denied") {
		t.Fatalf("run_command through the image: %v; stderr:\n%s", res, stderr.String())
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
