package test

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// origin serves a fixed body on the host's loopback.
func origin(t *testing.T, tls bool) (port int) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello from the origin, path %s", r.URL.Path)
	})
	var s *httptest.Server
	if tls {
		s = httptest.NewTLSServer(h)
	} else {
		s = httptest.NewServer(h)
	}
	t.Cleanup(s.Close)
	return s.Listener.Addr().(*net.TCPAddr).Port
}

func netRun(t *testing.T, ws, logPath string, args []string, script string) result {
	t.Helper()
	a := append([]string{"run", "--security-log", logPath, "--no-discover"}, args...)
	a = append(a, "--", "/bin/sh", "-c", script)
	return hutch(t, opts{dir: ws}, a...)
}

func hasEvent(evs []map[string]any, kind, subject, level string) bool {
	for _, ev := range evs {
		if ev["kind"] == kind && ev["subject"] == subject && ev["level"] == level {
			return true
		}
	}
	return false
}

// An allowlisted destination is reached through the proxy, over plain
// HTTP (absolute-URI forwarding) and HTTPS (CONNECT); the allowed
// connection is logged at info level.
func TestProxyAllowsAllowlisted(t *testing.T) {
	ws := userDir(t)
	logPath := filepath.Join(userDir(t), "sec.log")
	hp, sp := origin(t, false), origin(t, true)
	r := netRun(t, ws, logPath, []string{
		"--allow", fmt.Sprintf("origin.test:%d=127.0.0.1", hp),
		"--allow", fmt.Sprintf("secure.test:%d=127.0.0.1", sp),
	}, fmt.Sprintf(`curl -sS http://origin.test:%d/plain; echo; curl -sSk https://secure.test:%d/tls; echo; curl -sS --socks5-hostname 127.0.0.1:1080 http://origin.test:%d/socks`, hp, sp, hp))
	mustCode(t, r, 0)
	for _, want := range []string{"path /plain", "path /tls", "path /socks"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("missing %q:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
		}
	}
	if strings.Contains(r.stderr, "blocked") {
		t.Errorf("unexpected block:\n%s", r.stderr)
	}
	if evs := logEvents(t, logPath); !hasEvent(evs, "network", fmt.Sprintf("secure.test:%d", sp), "INFO") {
		t.Errorf("allowed connection not logged: %v", evs)
	}
}

// A destination that is not allowlisted gets the 403 with the policy's
// words, one stderr line per destination with its count, and a WARN event.
func TestProxyBlocksNotAllowlisted(t *testing.T) {
	ws := userDir(t)
	logPath := filepath.Join(userDir(t), "sec.log")
	r := netRun(t, ws, logPath, nil, `curl -sS https://evil.example/ 2>&1; curl -sS https://evil.example/again 2>&1; curl -s -D - http://evil.example/x`)
	mustCode(t, r, 0)
	for _, want := range []string{
		"CONNECT tunnel failed, response 403",
		"HTTP/1.1 403",
		"X-Hutch-Block: network.allow",
		"hutch: network blocked by policy: destination evil.example:80 is not allowlisted. Do not retry or work around this; if the task needs it, ask the user to add it to the policy's network allowlist.",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, want := range []string{
		"hutch: network blocked by policy: destination evil.example:443 not allowlisted (2 attempts)",
		"hutch: network blocked by policy: destination evil.example:80 not allowlisted (1 attempt)",
	} {
		if !strings.Contains(r.stderr, want+"\n") {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	if !hasEvent(logEvents(t, logPath), "network", "evil.example:443", "WARN") {
		t.Error("blocked attempt not in the security log")
	}
}

// A name allowlisted without the explicit address must not lead to the
// host's loopback: the proxy resolves it and refuses the internal address.
func TestProxyRefusesNameResolvingToLoopback(t *testing.T) {
	ws := userDir(t)
	logPath := filepath.Join(userDir(t), "sec.log")
	hp := origin(t, false)
	r := netRun(t, ws, logPath, []string{"--allow", fmt.Sprintf("localhost:%d", hp)},
		fmt.Sprintf(`curl -s --noproxy '' -x http://127.0.0.1:3128 http://localhost:%d/secret`, hp))
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "hello from the origin") {
		t.Fatalf("the host's loopback was reached through an allowlisted name:\n%s", r.stdout)
	}
	if !strings.Contains(r.stdout, "resolves to internal address 127.0.0.1") {
		t.Errorf("refusal does not explain the internal address:\n%s", r.stdout)
	}
}

// Package installs work through the proxy: `go mod download` from a tiny
// module proxy and `npm install` from a tiny registry, both served by the
// test on the host's loopback and allowlisted by name with pinned address.
func TestPackageInstallsThroughProxy(t *testing.T) {
	mod := "example.com/hello"
	ver := "v1.0.0"
	var zb bytes.Buffer
	zw := zip.NewWriter(&zb)
	for name, body := range map[string]string{"go.mod": "module " + mod + "\n\ngo 1.21\n", "hello.go": "package hello\n\nfunc Hello() string { return \"hi\" }\n"} {
		w, _ := zw.Create(mod + "@" + ver + "/" + name)
		w.Write([]byte(body))
	}
	zw.Close()
	var tb bytes.Buffer
	gz := gzip.NewWriter(&tb)
	tw := tar.NewWriter(gz)
	pj := `{"name":"hutch-demo-pkg","version":"1.0.0","main":"index.js"}`
	for name, body := range map[string]string{"package/package.json": pj, "package/index.js": "module.exports = 42;\n"} {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	sum := sha1.Sum(tb.Bytes())
	var port int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/" + mod + "/@v/list":
			fmt.Fprintln(w, ver)
		case "/" + mod + "/@v/" + ver + ".info":
			fmt.Fprintf(w, `{"Version":%q,"Time":"2024-01-01T00:00:00Z"}`, ver)
		case "/" + mod + "/@v/" + ver + ".mod":
			fmt.Fprintf(w, "module %s\n\ngo 1.21\n", mod)
		case "/" + mod + "/@v/" + ver + ".zip":
			w.Write(zb.Bytes())
		case "/hutch-demo-pkg":
			json.NewEncoder(w).Encode(map[string]any{
				"name": "hutch-demo-pkg", "dist-tags": map[string]string{"latest": "1.0.0"},
				"versions": map[string]any{"1.0.0": map[string]any{"name": "hutch-demo-pkg", "version": "1.0.0",
					"dist": map[string]string{"tarball": fmt.Sprintf("http://registry.test:%d/hutch-demo-pkg/-/hutch-demo-pkg-1.0.0.tgz", port), "shasum": hex.EncodeToString(sum[:])}}},
			})
		case "/hutch-demo-pkg/-/hutch-demo-pkg-1.0.0.tgz":
			w.Write(tb.Bytes())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	port = srv.Listener.Addr().(*net.TCPAddr).Port

	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "app", "go.mod"), "module example.com/app\n\ngo 1.21\n")
	writeUserFile(t, filepath.Join(ws, "web", "package.json"), `{"name":"web","version":"0.0.0","private":true}`)
	logPath := filepath.Join(userDir(t), "sec.log")
	script := fmt.Sprintf(`set -e
export PATH=/usr/local/go/bin:$PATH GOFLAGS=-mod=mod GOTOOLCHAIN=local GOSUMDB=off GONOSUMDB=* GOPROXY=http://modproxy.test:%[1]d
cd /workspace/app && go mod download -json %[2]s@%[3]s | grep -c '"Zip"' && go get %[2]s@%[3]s 2>&1 | tail -1 && grep -c %[2]s go.mod
echo go-install-ok
if command -v npm >/dev/null; then
  cd /workspace/web && npm install --no-audit --no-fund --registry http://registry.test:%[1]d/ hutch-demo-pkg 2>&1 | tail -2
  node -e 'console.log("npm-module", require("hutch-demo-pkg"))'
fi`, port, mod, ver)
	r := hutch(t, opts{dir: ws, timeout: 3 * 60e9}, "run", "--security-log", logPath, "--no-discover",
		"--allow", fmt.Sprintf("modproxy.test:%d=127.0.0.1", port),
		"--allow", fmt.Sprintf("registry.test:%d=127.0.0.1", port),
		"--", "/bin/sh", "-c", script)
	mustCode(t, r, 0)
	t.Logf("install output:\n%s", r.stdout)
	if !strings.Contains(r.stdout, "go-install-ok") {
		t.Errorf("go mod download through the proxy failed:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if _, err := exec.LookPath("npm"); err == nil {
		if !strings.Contains(r.stdout, "npm-module 42") {
			t.Errorf("npm install through the proxy failed:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	} else {
		t.Logf("npm is not installed on this host: the npm half was not run")
	}
}

// DNS inside is answered by hutch with REFUSED, and the lookup is logged;
// a direct connection around the proxy is refused and reported.
func TestDNSAndDirectConnectionsBlocked(t *testing.T) {
	ws := userDir(t)
	probeIn(t, ws)
	logPath := filepath.Join(userDir(t), "sec.log")
	r := netRun(t, ws, logPath, nil, `getent hosts exfil-data.example; echo getent=$?; ./probe direct:80`)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "getent=2") || !strings.Contains(r.stdout, "direct:80 EACCES") {
		t.Errorf("stdout:\n%s", r.stdout)
	}
	for _, want := range []string{
		"hutch: DNS lookup of exfil-data.example refused",
		"hutch: network blocked by policy: direct connection to 203.0.113.1:80 (only the egress proxy is reachable) (1 attempt)",
	} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	evs := logEvents(t, logPath)
	if !hasEvent(evs, "network", "direct 203.0.113.1:80", "WARN") || !hasEvent(evs, "network", "exfil-data.example", "WARN") {
		t.Errorf("events missing from the security log: %v", evs)
	}
}

// --net none: no proxy, no proxy variables, nothing leaves.
func TestNetNone(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "run", "--net", "none", "--", "/bin/sh", "-c", `env | grep -ci proxy; curl -sS --max-time 2 http://127.0.0.1:3128/ 2>&1 | head -1`)
	if !strings.HasPrefix(r.stdout, "0\n") || !strings.Contains(r.stdout, "curl: (7)") {
		t.Errorf("--net none:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
}
