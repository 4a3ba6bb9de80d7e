package test

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeHostPort is a port of the host's loopback that nothing listens on.
func freeHostPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// httpGet fetches url, retrying until it answers 200 or within passes.
func httpGet(t *testing.T, url string, within time.Duration) (string, error) {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second}
	deadline := time.Now().Add(within)
	for {
		resp, err := client.Get(url)
		if err == nil {
			b, rerr := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 && rerr == nil {
				return string(b), nil
			}
			err = fmt.Errorf("status %d, %v", resp.StatusCode, rerr)
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// eventsWith are the security log's events of rule with subject.
func eventsWith(t *testing.T, logPath, rule, subject string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range logEvents(t, logPath) {
		if ev["rule"] == rule && ev["subject"] == subject {
			out = append(out, ev)
		}
	}
	return out
}

// A dev server started in the background of a session is reached from the
// host through --publish; the detached server is listed, its output read,
// killed on request, and nothing of it or of the published port is left
// after the session stops. Every accepted connection is in the security
// log, and one that found nothing listening inside is logged as such.
func TestPublishDetachedServer(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "served-from-the-sandbox.txt"), "hi\n")
	logPath := filepath.Join(userDir(t), "security.log")
	hp := freeHostPort(t)
	name := startSession(t, ws, "--no-discover", "--security-log", logPath, "--publish", fmt.Sprintf("127.0.0.1:%d:8080", hp))
	pid := sessionPid(t, ws, name)

	r := hutch(t, opts{dir: ws}, "exec", "--detach", name, "--", "python3", "-m", "http.server", "8080")
	mustCode(t, r, 0)
	id := strings.TrimSpace(r.stdout)
	if id != "1" || !strings.Contains(r.stderr, "hutch session logs "+name+" 1") {
		t.Fatalf("exec --detach printed %q, stderr %q", r.stdout, r.stderr)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", hp)
	body, err := httpGet(t, url, 15*time.Second)
	if err != nil {
		t.Fatalf("GET %s: %v\nsession log:\n%s", url, err, hutch(t, opts{dir: ws}, "session", "logs", name, id).stderr)
	}
	if !strings.Contains(body, "served-from-the-sandbox.txt") {
		t.Errorf("the server's answer does not list the workspace:\n%s", body)
	}

	r = hutch(t, opts{dir: ws}, "session", "ps", name)
	mustCode(t, r, 0)
	if !regexpLine(r.stdout, `^1\s+running\s+.*python3 -m http\.server 8080$`) {
		t.Errorf("session ps:\n%s", r.stdout)
	}
	r = hutch(t, opts{dir: ws}, "session", "logs", name, id)
	mustCode(t, r, 0)
	if !strings.Contains(r.stderr, `"GET / HTTP/1.1" 200`) {
		t.Errorf("session logs: the server's log lacks the request:\nstdout %q\nstderr %q", r.stdout, r.stderr)
	}
	subject := fmt.Sprintf("publish 127.0.0.1:%d->8080", hp)
	// (Requests before the server was up are warnings, below.)
	accepted := withLevel(eventsWith(t, logPath, "network.publish", subject), "INFO")
	if len(accepted) == 0 || accepted[0]["kind"] != "network" {
		t.Fatalf("no security event for the accepted connection (%s): %v", subject, accepted)
	}
	if d, _ := accepted[0]["detail"].(map[string]any); d == nil || !strings.HasPrefix(fmt.Sprint(d["peer"]), "127.0.0.1:") || d["sandbox_port"] != float64(8080) || d["host_port"] != float64(hp) {
		t.Errorf("the accepted connection's event lacks the peer and ports: %v", accepted[0])
	}
	warned := len(withLevel(eventsWith(t, logPath, "network.publish", subject), "WARN"))

	r = hutch(t, opts{dir: ws}, "session", "kill", name, id)
	mustCode(t, r, 0)
	if !strings.Contains(r.stderr, "background command 1 killed (143)") {
		t.Errorf("session kill: %q", r.stderr)
	}
	r = hutch(t, opts{dir: ws}, "session", "ps", name)
	if !regexpLine(r.stdout, `^1\s+killed \(143\)\s+`) {
		t.Errorf("session ps after kill:\n%s", r.stdout)
	}
	// Nothing listens inside now: the connection is closed, and logged.
	if _, err := httpGet(t, url, 0); err == nil {
		t.Error("the server answered after it was killed")
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(withLevel(eventsWith(t, logPath, "network.publish", subject), "WARN")) == warned && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if evs := withLevel(eventsWith(t, logPath, "network.publish", subject), "WARN"); len(evs) == warned ||
		!strings.Contains(fmt.Sprint(evs[len(evs)-1]["msg"]), "nothing listens on that port inside the sandbox") {
		t.Errorf("no warning for a connection that found nothing listening: %v", evs)
	}
	r = hutch(t, opts{dir: ws}, "session", "kill", name, "9")
	if r.code != 1 || !strings.Contains(r.stderr, `no background command "9" in session `+name) {
		t.Errorf("kill of an unknown id: %d %q", r.code, r.stderr)
	}

	// Another detached command is killed with the session, whose port
	// closes.
	mustCode(t, hutch(t, opts{dir: ws}, "exec", "--detach", name, "--", "sleep", "3011"), 0)
	waitFor(t, func() bool { return len(processesWith("sleep\x003011")) > 0 }, "the detached sleep to start")
	mustCode(t, hutch(t, opts{dir: ws}, "session", "stop", name), 0)
	waitGone(t, "sleep\x003011", 5*time.Second)
	for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline.Add(5*time.Second)) {
		time.Sleep(20 * time.Millisecond)
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hp), time.Second); err == nil {
		c.Close()
		t.Error("the published port still listens after the session stopped")
	}
}

// A detached command survives the exec that started it; a process a
// normal exec leaves in the background does not.
func TestDetachOutlivesExec(t *testing.T) {
	ws := userDir(t)
	name := startSession(t, ws, "--no-discover")
	r := hutch(t, opts{dir: ws}, "exec", "--detach", name, "--", "sleep", "3012")
	mustCode(t, r, 0)
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "sleep 3013 & echo left")
	mustCode(t, r, 0)
	waitFor(t, func() bool { return len(processesWith("sleep\x003012")) > 0 }, "the detached sleep to start")
	time.Sleep(300 * time.Millisecond)
	if p := processesWith("sleep\x003013"); len(p) != 0 {
		t.Errorf("a non-detached background process outlived its exec: %v", p)
	}
	if p := processesWith("sleep\x003012"); len(p) != 1 {
		t.Errorf("the detached command did not outlive its exec: %v", p)
	}
	// Its own exec sees it: it is the session's.
	r = hutch(t, opts{dir: ws}, "exec", name, "--", "/bin/sh", "-c", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done")
	if !strings.Contains(r.stdout, "sleep 3012") {
		t.Errorf("the session's next command does not see the detached one:\n%s", r.stdout)
	}
	r = hutch(t, opts{dir: ws}, "session", "ps", name)
	if !regexpLine(r.stdout, `^1\s+running\s+.*sleep 3012$`) {
		t.Errorf("session ps:\n%s", r.stdout)
	}
	mustCode(t, hutch(t, opts{dir: ws}, "session", "kill", name, "1"), 0)
	waitGone(t, "sleep\x003012", 5*time.Second)
	// A detached command's --timeout ends it.
	mustCode(t, hutch(t, opts{dir: ws}, "exec", "--detach", "--timeout", "1s", name, "--", "sleep", "3014"), 0)
	waitFor(t, func() bool {
		return regexpLine(hutch(t, opts{dir: ws}, "session", "ps", name).stdout, `^2\s+timed out \(124\)\s+`)
	}, "the detached command's timeout")
	r = hutch(t, opts{dir: ws}, "exec", "--detach", "--fresh", name, "--", "true")
	if r.code != 125 || !strings.Contains(r.stderr, "--detach and --fresh cannot be combined") {
		t.Errorf("--detach --fresh: %d %q", r.code, r.stderr)
	}
}

// hutch run --publish forwards the port for the run's duration.
func TestRunPublish(t *testing.T) {
	ws := userDir(t)
	hp := freeHostPort(t)
	script := "python3 -m http.server 8081 >/dev/null 2>&1 & while [ ! -e /workspace/done ]; do sleep 0.1; done; echo finished"
	cmd := hutchCmd(opts{dir: ws}, "run", "--no-discover", "--publish", fmt.Sprintf("%d:8081", hp), "--", "/bin/sh", "-c", script)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		cmd.Process.Kill()
		<-done
	}()
	body, err := httpGet(t, fmt.Sprintf("http://127.0.0.1:%d/", hp), 45*time.Second) // (python3 starts slowly on a loaded machine)
	if err != nil {
		t.Fatalf("GET through hutch run --publish: %v\nstderr: %s", err, errb.String())
	}
	if !strings.Contains(body, "Directory listing") {
		t.Errorf("answer: %s", body)
	}
	writeUserFile(t, filepath.Join(ws, "done"), "")
	select {
	case err := <-done:
		done <- err
		if err != nil || out.String() != "finished\n" {
			t.Fatalf("hutch run: %v, stdout %q, stderr %q", err, out.String(), errb.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("hutch run did not end")
	}
	if c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", hp), time.Second); err == nil {
		c.Close()
		t.Error("the published port still listens after hutch run ended")
	}
}

// Bad --publish values are refused with 125, naming the flag and what is
// valid; so is a host port that is taken. A good one runs.
func TestPublishFlagErrors(t *testing.T) {
	ws := userDir(t)
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	bp := busy.Addr().(*net.TCPAddr).Port
	for _, c := range []struct{ value, want string }{
		{"8080", `--publish "8080": want [ADDR:]HOSTPORT:PORT`},
		{"0:8080", `--publish "0:8080": the host's port "0": want a number 1..65535`},
		{"8080:70000", `--publish "8080:70000": the sandbox's port "70000": want a number 1..65535`},
		{"localhost:8080:8080", `--publish "localhost:8080:8080": address "localhost": want an IP address`},
		{"::1:8080:8080", "write an IPv6 address in brackets"},
		{"18080:3128", `--publish "18080:3128": network.publish[0].sandbox_port: 3128 is where hutch's egress proxy listens`},
		{fmt.Sprintf("%d:8080", bp), fmt.Sprintf("network.publish[0]: listen on 127.0.0.1:%d: address already in use (another process, or another sandbox, listens there: pick another host port)", bp)},
	} {
		for _, cmd := range [][]string{{"run", "--publish", c.value, "--", "true"}, {"session", "start", "--name", "bad-publish", "--publish", c.value}} {
			r := hutch(t, opts{dir: ws}, cmd...)
			if r.code != 125 || !strings.Contains(r.stderr, c.want) || r.stdout != "" {
				t.Errorf("hutch %v: exit %d, stdout %q, stderr %q; want 125 and %q", cmd, r.code, r.stdout, r.stderr, c.want)
			}
		}
	}
	// A session that could not start leaves neither its socket nor its log.
	if left, _ := filepath.Glob(filepath.Join(stateDir, "hutch", "bad-publish.*")); len(left) != 0 {
		t.Errorf("a session that did not start left %v", left)
	}
	r := hutch(t, opts{dir: ws}, "run", "--no-discover", "--publish", fmt.Sprintf("[::1]:%d:8080", freeHostPort(t)), "--publish", fmt.Sprintf("%d:8080", freeHostPort(t)), "--", "true")
	mustCode(t, r, 0)
	r = hutch(t, opts{dir: ws}, "plan", "--json", "--publish", "0.0.0.0:18080:8080")
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, `"publish": [`) || !strings.Contains(r.stdout, `"host_address": "0.0.0.0"`) || !strings.Contains(r.stdout, `"sandbox_port": 8080`) {
		t.Errorf("hutch plan --json does not show the published port:\n%s", r.stdout)
	}
}

// regexpLine reports whether a line of s matches the pattern.
func regexpLine(s, pattern string) bool {
	return regexp.MustCompile("(?m)" + pattern).MatchString(s)
}

// withLevel are the events of evs at level.
func withLevel(evs []map[string]any, level string) []map[string]any {
	var out []map[string]any
	for _, ev := range evs {
		if ev["level"] == level {
			out = append(out, ev)
		}
	}
	return out
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
