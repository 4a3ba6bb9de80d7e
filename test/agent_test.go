package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// For ordinary commands, what the caller gets from hutch run — stdout,
// stderr, exit status — is byte-identical to running them on the host.
func TestIdentityWithHost(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "data.txt"), "alpha\nbeta\ngamma\n")
	cases := []string{
		`echo hello world`,
		`printf 'tab\tnewline\n\x01\xff binary\n'`,
		`cat data.txt | sort -r | tr a-z A-Z`,
		`wc -l < data.txt`,
		`seq 1 2000`,
		`echo to stderr >&2; echo to stdout`,
		`exit 7`,
		`false`,
		`sh -c 'kill -TERM $$'`,
		`ls nonexistent-file`,
		`grep -c beta data.txt`,
		`awk '{ print NR": "$0 }' data.txt`,
		`python3 -c 'import sys; print("py", sys.argv); sys.exit(3)'`,
		`head -c 100000 /dev/zero | od -An -c | tail -2`,
		`for i in 1 2 3; do echo $i; sleep 0.01; done`,
	}
	for _, script := range cases {
		host := exec.Command("/bin/sh", "-c", script)
		host.Dir = ws
		host.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8", "HOME=/home/sandbox"}
		if asRoot {
			host.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID), NoSetGroups: true}}
		}
		var ho, he bytes.Buffer
		host.Stdout, host.Stderr = &ho, &he
		code := 0
		if err := host.Run(); err != nil {
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else {
				t.Fatalf("host %q: %v", script, err)
			}
		}
		r := hutch(t, opts{dir: ws}, "run", "--", "/bin/sh", "-c", script)
		if r.code != code || r.stdout != ho.String() || r.stderr != he.String() {
			t.Errorf("%q differs:\nhost    exit %d stdout %q stderr %q\nsandbox exit %d stdout %q stderr %q",
				script, code, trim(ho.String()), he.String(), r.code, trim(r.stdout), r.stderr)
		}
	}
}

func trim(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}

// run --json and exec --json print the run_command result object.
func TestJSONResults(t *testing.T) {
	ws := userDir(t)
	type result struct {
		Stdout          string   `json:"stdout"`
		Stderr          string   `json:"stderr"`
		ExitCode        int      `json:"exit_code"`
		TimedOut        bool     `json:"timed_out"`
		StdoutTruncated bool     `json:"stdout_truncated"`
		Events          []string `json:"policy_events"`
		SandboxID       string   `json:"sandbox_id"`
	}
	check := func(r struct {
		code           int
		stdout, stderr string
	}, what string) result {
		var res result
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
			t.Fatalf("%s: not JSON: %v\n%s\n%s", what, err, r.stdout, r.stderr)
		}
		if res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 || r.code != 3 || res.SandboxID == "" {
			t.Errorf("%s: %+v (hutch exit %d)", what, res, r.code)
		}
		if len(res.Events) != 1 || !strings.Contains(res.Events[0], "destination evil.example:443 not allowlisted") {
			t.Errorf("%s: events %q", what, res.Events)
		}
		return res
	}
	script := `echo out; echo err >&2; curl -sS https://evil.example/ >/dev/null 2>&1; exit 3`
	r := hutch(t, opts{dir: ws}, "run", "--json", "--no-discover", "--", "/bin/sh", "-c", script)
	check(struct {
		code           int
		stdout, stderr string
	}{r.code, r.stdout, r.stderr}, "run --json")
	name := startSession(t, ws, "--no-discover")
	r = hutch(t, opts{dir: ws}, "exec", "--json", name, "--", "/bin/sh", "-c", script)
	check(struct {
		code           int
		stdout, stderr string
	}{r.code, r.stdout, r.stderr}, "exec --json")
}

// Normal development work in a session: a Go module built and tested, gcc,
// make, git, python3, and a module download through the proxy.
func TestSessionDevWorkloads(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "mod", "go.mod"), "module example.com/m\n\ngo 1.21\n\nrequire example.com/dep v1.0.0\n")
	writeUserFile(t, filepath.Join(ws, "mod", "m.go"), "package m\n\nimport \"example.com/dep\"\n\nfunc Add(a, b int) int { return dep.Sum(a, b) }\n")
	writeUserFile(t, filepath.Join(ws, "mod", "m_test.go"), "package m\n\nimport \"testing\"\n\nfunc TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal(\"bad\")\n\t}\n}\n")
	writeUserFile(t, filepath.Join(ws, "c", "hello.c"), "#include <stdio.h>\nint main(void) { puts(\"hello from make\"); return 0; }\n")
	writeUserFile(t, filepath.Join(ws, "c", "Makefile"), "hello: hello.c\n\tcc -O1 -o /tmp/hello hello.c\n\t/tmp/hello\n")
	writeUserFile(t, filepath.Join(ws, "s.py"), "import json, threading\nprint(json.dumps({'ok': True}))\n")
	srv := moduleProxy(t, "example.com/dep", "v1.0.0", map[string]string{"dep.go": "package dep\n\nfunc Sum(a, b int) int { return a + b }\n"})
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	name := startSession(t, ws, "--no-discover", "--allow", fmt.Sprintf("modproxy.test:%d=127.0.0.1", port))
	steps := []struct{ script, want string }{
		{fmt.Sprintf(`cd mod && GOFLAGS=-mod=mod GOTOOLCHAIN=local GOSUMDB=off GOPROXY=http://modproxy.test:%d /usr/local/go/bin/go test ./... 2>&1 | tail -1`, port), "ok  \texample.com/m"},
		{`cd mod && GOFLAGS=-mod=mod GOTOOLCHAIN=local GOPROXY=off /usr/local/go/bin/go build -o /tmp/m.a . && echo built-again-from-cache`, "built-again-from-cache"},
		{`make -s -C c`, "hello from make"},
		{`cd /tmp && git init -q r && cd r && git config user.email a@b.c && git config user.name s && echo x > f && git add f && git commit -qm one && git rev-list --count HEAD`, "1"},
		{`python3 s.py`, `{"ok": true}`},
	}
	for _, s := range steps {
		r := hutch(t, opts{dir: ws, timeout: 3 * 60e9}, "exec", name, "--", "/bin/sh", "-c", s.script)
		if r.code != 0 || !strings.Contains(r.stdout, s.want) {
			t.Errorf("%q in a session: exit %d\nstdout %s\nstderr %s", s.script, r.code, r.stdout, r.stderr)
		}
	}
}

// moduleProxy serves one Go module version over the GOPROXY protocol.
func moduleProxy(t *testing.T, mod, ver string, files map[string]string) *httptest.Server {
	var zb bytes.Buffer
	zw := newZip(&zb)
	gomod := "module " + mod + "\n\ngo 1.21\n"
	zw.add(mod+"@"+ver+"/go.mod", gomod)
	for n, b := range files {
		zw.add(mod+"@"+ver+"/"+n, b)
	}
	zw.close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/" + mod + "/@v/list":
			fmt.Fprintln(w, ver)
		case "/" + mod + "/@v/" + ver + ".info":
			fmt.Fprintf(w, `{"Version":%q,"Time":"2024-01-01T00:00:00Z"}`, ver)
		case "/" + mod + "/@v/" + ver + ".mod":
			fmt.Fprint(w, gomod)
		case "/" + mod + "/@v/" + ver + ".zip":
			w.Write(zb.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}
