package test

import (
	"archive/zip"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The realistic suite: real projects, as a new user runs them, with the
// default policy, as the unprivileged user (the rlimit backend here) and as
// root (cgroup v1). Each project's tests open a server on an ephemeral
// loopback port, the everyday thing that broke before the sandbox's
// loopback was its own. Traffic stays on loopback: the Go module proxy is
// the test's own, on the host, reached through hutch's egress proxy under
// a pinned name, as a team's internal mirror would be.

// goProxy serves a Go module proxy (the GOPROXY file layout over HTTP) with
// one module, example.test/greet v1.0.0, and returns its port.
func goProxy(t *testing.T) int {
	t.Helper()
	dir := t.TempDir()
	v := filepath.Join(dir, "example.test", "greet", "@v")
	if err := os.MkdirAll(v, 0o755); err != nil {
		t.Fatal(err)
	}
	const mod = "module example.test/greet\n\ngo 1.21\n"
	files := map[string]string{
		"list":        "v1.0.0\n",
		"v1.0.0.info": `{"Version":"v1.0.0","Time":"2026-01-01T00:00:00Z"}`,
		"v1.0.0.mod":  mod,
	}
	for n, c := range files {
		if err := os.WriteFile(filepath.Join(v, n), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Create(filepath.Join(v, "v1.0.0.zip"))
	if err != nil {
		t.Fatal(err)
	}
	zw := zip.NewWriter(f)
	for n, c := range map[string]string{
		"go.mod":   mod,
		"greet.go": "// Package greet greets.\npackage greet\n\n// Hello is a greeting.\nfunc Hello(name string) string { return \"hello, \" + name }\n",
	} {
		w, err := zw.Create("example.test/greet@v1.0.0/" + n)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(c))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	srv := httptest.NewServer(http.FileServer(http.Dir(dir)))
	t.Cleanup(srv.Close)
	return srv.Listener.Addr().(*net.TCPAddr).Port
}

// goProject writes a module that needs example.test/greet and whose test
// serves HTTP on an ephemeral port (net/http/httptest).
func goProject(t *testing.T, dir string) {
	t.Helper()
	write := func(n, c string) { writeUserFile(t, filepath.Join(dir, n), c) }
	write("go.mod", "module example.test/app\n\ngo 1.21\n\nrequire example.test/greet v1.0.0\n")
	write("main.go", `package main

import (
	"fmt"

	"example.test/greet"
)

func main() { fmt.Println(greet.Hello("sandbox")) }
`)
	write("main_test.go", `package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"example.test/greet"
)

func TestServe(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, greet.Hello("test")) }))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "hello, test" {
		t.Fatalf("got %q", b)
	}
}
`)
}

// A Go module with a dependency from a module proxy: go test (with an
// httptest server) and go build in a workspace that is a git repository
// (the binary stamped with its revision), and go build in one that is not
// (no stamp, no error). The second skips go test: compiling net/http for
// it again, cold, costs 20 s and tests nothing new.
func TestRealisticGoModule(t *testing.T) {
	if _, err := os.Stat("/usr/local/go/bin/go"); err != nil {
		t.Fatalf("the host's Go toolchain is expected at /usr/local/go: %v", err)
	}
	port := goProxy(t)
	eachUser(t, func(t *testing.T, o opts) {
		for _, withGit := range []bool{true, false} {
			t.Run(fmt.Sprintf("git=%v", withGit), func(t *testing.T) {
				ws := userDir(t)
				goProject(t, ws)
				if withGit {
					gitRepo(t, ws)
				}
				ownTree(t, o, ws)
				o.dir = ws
				o.timeout = 3 * time.Minute // a cold build of net/http, on a machine that may be busy
				script := "go build -o app . && ./app && go version -m app | grep -c vcs.revision"
				want := []string{"hello, sandbox\n"}
				if withGit {
					script = "go test ./... && " + script
					want = append(want, "ok  \texample.test/app", "\n1\n")
				} else {
					want = append(want, "\n0\n")
				}
				r := hutch(t, o, "run", "--allow", fmt.Sprintf("goproxy.test:%d=127.0.0.1", port), "--", "/bin/sh", "-c", fmt.Sprintf(`
export PATH=/usr/local/go/bin:$PATH GOTOOLCHAIN=local GOPROXY=http://goproxy.test:%d GOSUMDB=off GOFLAGS=-mod=mod
%s`, port, script))
				mustCode(t, r, map[bool]int{true: 0, false: 1}[withGit]) // grep -c finds none without git
				for _, w := range want {
					if !strings.Contains(r.stdout, w) {
						t.Errorf("missing %q in:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
					}
				}
				if strings.Contains(r.stderr, "blocked") {
					t.Errorf("something was blocked:\n%s", r.stderr)
				}
			})
		}
	})
}

// gitRepo makes dir a git repository with one commit.
func gitRepo(t *testing.T, dir string) {
	t.Helper()
	for _, args := range [][]string{
		{"init", "-q"}, {"add", "-A"},
		{"-c", "user.name=t", "-c", "user.email=t@example.test", "commit", "-qm", "init"},
	} {
		cmd := exec.Command("git", append([]string{"-c", "safe.directory=*"}, args...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
}

// An npm project with a local dependency: npm install, then npm test,
// whose test opens an HTTP server on an ephemeral port and fetches from it.
func TestRealisticNpmProject(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Fatalf("npm is a test dependency (make deps-test installs it): %v", err)
	}
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		write := func(n, c string) { writeUserFile(t, filepath.Join(ws, n), c) }
		write("greet/package.json", `{"name":"greet","version":"1.0.0","main":"index.js"}`)
		write("greet/index.js", "exports.hello = (n) => `hello, ${n}`;\n")
		write("package.json", `{"name":"app","version":"1.0.0","private":true,"scripts":{"test":"node --test"},"dependencies":{"greet":"file:./greet"}}`)
		write("test/server.test.js", `const test = require('node:test');
const assert = require('node:assert');
const http = require('node:http');
const { hello } = require('greet');
test('serves on an ephemeral port', async () => {
  const srv = http.createServer((req, res) => res.end(hello('npm')));
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const res = await fetch('http://127.0.0.1:' + srv.address().port + '/');
  assert.strictEqual(await res.text(), 'hello, npm');
  srv.close();
});
`)
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--", "/bin/sh", "-c", "npm install --no-audit --no-fund --offline && npm test")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "# pass 1") {
			t.Errorf("npm test did not pass:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
}

// A Python project whose unittest serves HTTP on an ephemeral port, and a
// C project built and tested with make and gcc.
func TestRealisticPythonAndMake(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		write := func(n, c string) { writeUserFile(t, filepath.Join(ws, n), c) }
		write("py/test_server.py", `import http.server, threading, unittest, urllib.request

class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"hello, python")
    def log_message(self, *a): pass

class ServerTest(unittest.TestCase):
    def test_serve(self):
        srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        with urllib.request.urlopen("http://127.0.0.1:%d/" % srv.server_address[1], timeout=10) as r:
            self.assertEqual(r.read(), b"hello, python")
        srv.shutdown()
`)
		write("c/Makefile", "CFLAGS = -O2 -Wall\n\nall: greet\n\ngreet: greet.o main.o\n\t$(CC) -o $@ $^\n\ntest: greet\n\t./greet make | grep -q 'hello, make' && echo c-tests-ok\n\nclean:\n\trm -f greet *.o\n")
		write("c/greet.c", "#include <stdio.h>\nvoid greet(const char *n) { printf(\"hello, %s\\n\", n); }\n")
		write("c/main.c", "void greet(const char *);\nint main(int c, char **v) { greet(c > 1 ? v[1] : \"world\"); return 0; }\n")
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--", "/bin/sh", "-c", "cd py && python3 -m unittest -v 2>&1 | tail -1 && cd ../c && make -s test")
		mustCode(t, r, 0)
		for _, w := range []string{"OK\n", "c-tests-ok\n"} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("missing %q in:\n%s\nstderr:\n%s", w, r.stdout, r.stderr)
			}
		}
	})
}

// A Java project: javac (which reads the JDK's configuration in /etc),
// jar, and java -jar, under the default limits.
func TestRealisticJava(t *testing.T) {
	if _, err := exec.LookPath("javac"); err != nil {
		t.Fatalf("a JDK is a test dependency (make deps-test installs default-jdk-headless): %v", err)
	}
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "src", "app", "Greet.java"), "package app;\n\npublic class Greet {\n  static String hello(String n) { return \"hello, \" + n; }\n}\n")
		writeUserFile(t, filepath.Join(ws, "src", "app", "Main.java"), "package app;\n\npublic class Main {\n  public static void main(String[] a) { System.out.println(Greet.hello(\"java\")); }\n}\n")
		ownTree(t, o, ws)
		o.dir = ws
		r := hutch(t, o, "run", "--", "/bin/sh", "-c", "javac -d out src/app/*.java && jar --create --file app.jar --main-class app.Main -C out . && java -jar app.jar")
		mustCode(t, r, 0)
		if !strings.Contains(r.stdout, "hello, java\n") {
			t.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})
}
