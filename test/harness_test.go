// Package test holds hutch's end-to-end tests: they drive the built binary
// (HUTCH_BIN, or a fresh build) against the real kernel, as an unprivileged
// user. When the suite runs as root (CI), hutch runs as uid/gid 65534.
package test

import (
	"bytes"
	"context"
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
)

var (
	hutchBin string // a copy of the binary the test user can execute
	stateDir string // XDG state and cache home of the test user
	testUID  = os.Getuid()
	testGID  = os.Getgid()
	asRoot   = os.Getuid() == 0
)

func TestMain(m *testing.M) {
	if os.Getenv(subreaperEnv) == "1" {
		os.Exit(subreaperMain(os.Args[1:]))
	}
	code, err := setup()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e setup:", err)
		os.Exit(1)
	}
	if code < 0 {
		code = m.Run()
	}
	// The suite's own directories go; a failed test's workspace is
	// t.TempDir's to remove.
	os.RemoveAll(filepath.Dir(hutchBin))
	// The caches hold read-only trees (Go's module cache), which a
	// suite not run as root cannot remove before making them writable.
	filepath.WalkDir(stateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
	os.RemoveAll(stateDir)
	os.Exit(code)
}

func setup() (int, error) {
	src := os.Getenv("HUTCH_BIN")
	dir, err := os.MkdirTemp("", "hutch-e2e-bin-")
	if err != nil {
		return 0, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return 0, err
	}
	dst := filepath.Join(dir, "hutch")
	if src == "" {
		cmd := exec.Command("go", "build", "-o", dst, "../cmd/hutch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, fmt.Errorf("build hutch: %v\n%s", err, out)
		}
	} else {
		b, err := os.ReadFile(src)
		if err != nil {
			return 0, fmt.Errorf("HUTCH_BIN: %w", err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			return 0, err
		}
	}
	hutchBin = dst
	if asRoot {
		testUID, testGID = 65534, 65534
	}
	stateDir, err = os.MkdirTemp("", "hutch-e2e-state-")
	if err != nil {
		return 0, err
	}
	os.Chmod(stateDir, 0o755)
	if err := os.Chown(stateDir, testUID, testGID); err != nil {
		return 0, err
	}
	if asRoot {
		// hutch as root (opts.root) keeps its state apart, root-owned.
		if err := os.Mkdir(filepath.Join(stateDir, "root"), 0o700); err != nil {
			return 0, err
		}
	}
	rt := filepath.Join(stateDir, "run")
	if err := os.Mkdir(rt, 0o700); err != nil {
		return 0, err
	}
	if err := os.Chown(rt, testUID, testGID); err != nil {
		return 0, err
	}
	// Warm hutch's per-user caches (the compiled seccomp filter, the
	// one-time best-effort warning) so that no test depends on running
	// first.
	// HUTCH_E2E_ISOLATION=landlock: a host without user namespaces (a
	// container), where only the landlock isolation's tests apply.
	warmArgs := []string{"run", "--no-discover"}
	if iso := os.Getenv("HUTCH_E2E_ISOLATION"); iso != "" {
		warmArgs = append(warmArgs, "--isolation", iso)
	}
	warm := hutchCmd(opts{dir: stateDir}, append(warmArgs, "--", "true")...)
	if out, err := warm.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("warm-up run failed: %v\n%s", err, out)
	}
	return -1, nil
}

// userDir makes a temporary directory owned by the test user.
func userDir(t *testing.T) string {
	t.Helper()
	d := t.TempDir()
	// t.TempDir's parent is 0700 root-owned: make the chain traversable.
	for p := d; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	if err := os.Chown(d, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	return d
}

// ownTree gives dir and everything beneath it to the user hutch runs as
// under o: root for o.root (whose sandbox has no capability to write
// another user's files), else the test user.
func ownTree(t *testing.T, o opts, dir string) {
	t.Helper()
	uid, gid := testUID, testGID
	if o.root {
		uid, gid = 0, 0
	}
	if err := filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		t.Fatal(err)
	}
}

// writeUserFile writes a file owned by the test user.
func writeUserFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(path, testUID, testGID); err != nil {
		t.Fatal(err)
	}
	os.Chown(filepath.Dir(path), testUID, testGID)
}

// result of one hutch invocation.
type result struct {
	code           int
	stdout, stderr string
	elapsed        time.Duration
}

// opts for one hutch invocation.
type opts struct {
	dir        string    // working directory of hutch (the default workspace)
	stdin      io.Reader // default: empty
	env        []string  // extra environment for hutch itself
	extraFiles []*os.File
	timeout    time.Duration
	root       bool // run hutch as root (only when the suite runs as root)
}

// eachUser runs f once as the unprivileged test user (the rlimit backend
// here: nothing is delegated to it) and, when the suite runs as root (CI),
// once as root (the cgroup v1 backend on this host), with o.root set.
func eachUser(t *testing.T, f func(t *testing.T, o opts)) {
	t.Helper()
	t.Run("user", func(t *testing.T) { f(t, opts{}) })
	t.Run("root", func(t *testing.T) {
		if !asRoot {
			t.Skipf("hutch as root needs the suite to run as root; it runs as uid %d", os.Getuid())
		}
		f(t, opts{root: true})
	})
}

// hutchCmd prepares hutch with args as the test user.
func hutchCmd(o opts, args ...string) *exec.Cmd {
	cmd := exec.Command(hutchBin, args...)
	cmd.Dir = o.dir
	home := "/nonexistent"
	state := stateDir
	if o.root {
		state = filepath.Join(stateDir, "root")
	}
	cmd.Env = append([]string{"PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + home, "LANG=C.UTF-8",
		"XDG_STATE_HOME=" + filepath.Join(state, "state"), "XDG_CACHE_HOME=" + filepath.Join(state, "cache"), "XDG_DATA_HOME=" + filepath.Join(state, "data"),
		"XDG_RUNTIME_DIR=" + state}, o.env...)
	cmd.Stdin = o.stdin
	cmd.ExtraFiles = o.extraFiles
	if asRoot && !o.root {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(testUID), Gid: uint32(testGID), NoSetGroups: true}}
	}
	return cmd
}

// hutch runs the binary and returns its exit code and output.
func hutch(t *testing.T, o opts, args ...string) result {
	t.Helper()
	if o.timeout == 0 {
		o.timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	cmd := hutchCmd(o, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatalf("start hutch: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		cmd.Process.Kill()
		<-done
		t.Fatalf("hutch %v did not finish within %s; stderr so far:\n%s", args, o.timeout, errb.String())
	}
	r := result{stdout: out.String(), stderr: errb.String(), elapsed: time.Since(start)}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("hutch %v: %v", args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// sandboxSh runs a shell script in a fresh sandbox with workspace ws.
func sandboxSh(t *testing.T, ws, script string, extra ...string) result {
	t.Helper()
	args := append([]string{"run"}, extra...)
	args = append(args, "--", "/bin/sh", "-c", script)
	return hutch(t, opts{dir: ws}, args...)
}

func mustCode(t *testing.T, r result, want int) {
	t.Helper()
	if r.code != want {
		t.Fatalf("exit code %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, want, r.stdout, r.stderr)
	}
}

// processesWith lists host pids whose command line contains marker.
func processesWith(marker string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		if strings.Contains(string(b), marker) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits (bounded) until no process carries marker.
func waitGone(t *testing.T, marker string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		pids := processesWith(marker)
		if len(pids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes with %q still alive after %s: %v", marker, within, pids)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func uniqueMarker(t *testing.T) string {
	return fmt.Sprintf("hutchmark%d%d", os.Getpid(), time.Now().UnixNano())
}
