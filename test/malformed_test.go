package test

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// malformed is one bad input: hutch with args must exit with code and
// print want on stderr (a substring: the message naming the file, key or
// flag and what would be valid), nothing on stdout, and leave the
// workspace as it found it.
type malformed struct {
	name string
	args []string
	code int
	want string
}

// TestMalformedInput is the table of issue 18: policy files, flags, seccomp
// profiles and session names that hutch must refuse clearly, with the
// documented exit status (README, exit status: 125 for run and exec setup
// errors; 1 for policy check and show; 2 for policy check and session stop
// used wrongly).
func TestMalformedInput(t *testing.T) {
	ws := userDir(t)
	dir := userDir(t) // the policy files and profiles
	session := startSession(t, ws, "--no-discover")
	file := func(name, content string) string {
		path := filepath.Join(dir, name)
		writeUserFile(t, path, content)
		return path
	}
	_ = file
	run := func(args ...string) []string { return append([]string{"run", "--no-discover"}, args...) }
	exec := func(args ...string) []string { return append(append([]string{"exec"}, args...), session, "--", "true") }

	const timeoutWant = `must be at least 1ms, e.g. 30s or 10m`
	const cwdWant = `resolves to %s, outside /workspace: commands run in the workspace; pass a directory relative to /workspace (e.g. "src") or an absolute path below it`
	cwd := func(c, to string) string { return `cwd "` + c + `" ` + strings.Replace(cwdWant, "%s", to, 1) }
	const nameWant = `want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit`

	cases := []malformed{
		// --timeout: non-positive and sub-millisecond timeouts, run and exec alike.
		{"run --timeout -1s", run("--timeout", "-1s", "--", "true"), 125, `hutch: --timeout -1s: ` + timeoutWant},
		{"run --timeout 0s", run("--timeout", "0s", "--", "true"), 125, `hutch: --timeout 0s: ` + timeoutWant},
		{"run --timeout 999us", run("--timeout", "999us", "--", "true"), 125, `hutch: --timeout 999us: ` + timeoutWant},
		{"exec --timeout -1s", exec("--timeout", "-1s"), 125, `hutch: --timeout -1s: ` + timeoutWant},
		{"exec --timeout 0s", exec("--timeout", "0s"), 125, `hutch: --timeout 0s: ` + timeoutWant},
		{"exec --timeout 999us", exec("--timeout", "999us"), 125, `hutch: --timeout 999us: ` + timeoutWant},
		{"exec --json --timeout 0", exec("--json", "--timeout", "0"), 125, `hutch: --timeout 0: ` + timeoutWant},

		// --cwd outside the workspace: the message of MCP's cwd.
		{"run --cwd ../..", run("--cwd", "../..", "--", "true"), 125, "hutch: " + cwd("../..", "/")},
		{"run --cwd /etc", run("--cwd", "/etc", "--", "true"), 125, "hutch: " + cwd("/etc", "/etc")},
		{"run --json --cwd /workspace/../tmp", run("--json", "--cwd", "/workspace/../tmp", "--", "true"), 125, "hutch: " + cwd("/workspace/../tmp", "/tmp")},
		{"exec --cwd ../..", exec("--cwd", "../.."), 125, "hutch: " + cwd("../..", "/")},
		{"exec --cwd /etc", exec("--cwd", "/etc"), 125, "hutch: " + cwd("/etc", "/etc")},
		{"exec --fresh --cwd ..", exec("--fresh", "--cwd", ".."), 125, "hutch: " + cwd("..", "/")},

		// Session names: "" is refused by start as by exec and stop.
		{"session start --name ''", []string{"session", "start", "--name", ""}, 125, `hutch: session name "": ` + nameWant},
		{"exec ''", []string{"exec", "", "--", "true"}, 125, `hutch: session name "": ` + nameWant},
		{"session stop ''", []string{"session", "stop", ""}, 1, `hutch: session name "": ` + nameWant},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := listDir(t, ws)
			r := hutch(t, opts{dir: ws}, tc.args...)
			if r.code == 0 && len(tc.args) > 1 && tc.args[0] == "session" && tc.args[1] == "start" {
				hutch(t, opts{dir: ws}, "session", "stop", strings.TrimSpace(r.stdout)) // started after all
			}
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) || r.stdout != "" {
				t.Errorf("hutch %q: exit %d, stdout %q, stderr:\n%s\nwant exit %d, no stdout, stderr with:\n%s", tc.args, r.code, r.stdout, r.stderr, tc.code, tc.want)
			}
			if after := listDir(t, ws); !slices.Equal(before, after) {
				t.Errorf("hutch %q left the workspace changed: %q, was %q", tc.args, after, before)
			}
		})
	}
}

// listDir lists dir's entries, recursively.
func listDir(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && path != dir {
			names = append(names, strings.TrimPrefix(path, dir+"/"))
		}
		return nil
	})
	return names
}

// A session's server refuses a bad exec request itself, whatever client
// sent it: a negative timeout is not quietly replaced by the policy's.
func TestSessionRefusesBadExecRequest(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws, "--no-discover")
	sock := filepath.Join(stateDir, "hutch", name+".sock")
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial the session socket: %v", err)
	}
	defer c.Close()
	devnull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer devnull.Close()
	fd := int(devnull.Fd())
	req := `{"op":"exec","argv":["/bin/sh","-c","sleep 1"],"timeout_ms":-5}`
	if _, _, err := c.WriteMsgUnix([]byte(req), syscall.UnixRights(fd, fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	buf := make([]byte, 1<<16)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("read the reply: %v", err)
	}
	want := `{"op":"error","exit_code":0,"error":"exec request: timeout_ms -5: want a whole number of milliseconds, at least 1, or 0 for the policy's timeout"}`
	if got := string(buf[:n]); got != want {
		t.Errorf("reply %s\nwant %s", got, want)
	}

	// A cwd outside the workspace is refused by the session itself (the
	// Go API, hutch.Session.Exec), with the message of the CLI and MCP.
	c2, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		t.Fatalf("dial the session socket: %v", err)
	}
	defer c2.Close()
	req = `{"op":"exec","argv":["/bin/sh","-c","pwd"],"cwd":"/etc"}`
	if _, _, err := c2.WriteMsgUnix([]byte(req), syscall.UnixRights(fd, fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	c2.SetReadDeadline(time.Now().Add(20 * time.Second))
	var replies []string
	for len(replies) < 2 {
		n, err := c2.Read(buf)
		if err != nil {
			t.Fatalf("read the reply: %v (so far %q)", err, replies)
		}
		replies = append(replies, string(buf[:n]))
	}
	if !strings.Contains(replies[1], `"op":"exit","exit_code":125,"messages":["hutch: cwd \"/etc\" resolves to /etc, outside /workspace`) {
		t.Errorf("replies %q; want exit 125 refusing the cwd", replies)
	}
}
