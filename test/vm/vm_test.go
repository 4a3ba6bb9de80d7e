// Package vm is hutch's VM test tier: each test boots a real cgroup v2 host
// (Debian's cloud kernel 6.1, Landlock ABI 2) under qemu TCG with run.sh and
// runs a payload there as uid 1000. It needs HUTCH_VM=1, since it installs
// qemu as root and takes 5-20 s a boot; see docs/TESTING.md.
//
//	HUTCH_BIN=$PWD/bin/hutch HUTCH_VM=1 go test -count=1 -v ./test/vm/
package vm

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	gcrname "github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// vmTimeout is run.sh's hard limit on one qemu run, in seconds.
const vmTimeout = 300

// The smoke payload on each scenario run.sh knows.
var scenarios = []string{"delegated", "nodelegation", "nouserns"}

func TestVM(t *testing.T) {
	if os.Getenv("HUTCH_VM") != "1" {
		t.Skip("VM tier not requested: set HUTCH_VM=1 to boot a cgroup v2 host under qemu " +
			"(installs qemu-system-x86 with apt-get as root; 5-20 s a boot under TCG). See docs/TESTING.md.")
	}
	hutch := hutchBinary(t)

	// Install qemu and fetch the pinned packages once, outside the timings.
	start := time.Now()
	out, err := runSh(t, "--fetch-only")
	if skip := skipLine(out); skip != "" {
		t.Skip(skip)
	}
	if err != nil {
		t.Fatalf("run.sh --fetch-only: %v\n%s", err, out)
	}
	t.Logf("qemu and packages ready in %.1fs:\n%s", time.Since(start).Seconds(), strings.TrimSpace(out))

	images := smokeImages(t)
	for _, sc := range scenarios {
		t.Run(sc, func(t *testing.T) {
			boot(t, sc, sc, append([]string{hutch + ":/hutch", "smoke.sh:/smoke.sh"}, images...), "/bin/sh", "/smoke.sh")
		})
	}

	// A Debian system with systemd as pid 1 and a user manager: hutch,
	// started from a root-owned system service cgroup, gets a delegated
	// transient scope over D-Bus (systemd.sh, systemd-payload.sh).
	t.Run("systemd", func(t *testing.T) {
		start := time.Now()
		out, err := retryHung(t, "systemd", filepath.Join("cache", "logs", "systemd.log"), func(attempt int) (string, error) {
			return runScript(t, []string{"HUTCH_BIN=" + hutch, fmt.Sprintf("HUTCH_VM_ATTEMPT=%d", attempt)}, "systemd.sh", "--timeout", "150")
		})
		if skip := skipLine(out); skip != "" {
			t.Skip(skip)
		}
		t.Logf("go test wall time %.2fs; console log test/vm/cache/logs/systemd.log", time.Since(start).Seconds())
		if err != nil || !strings.Contains(out, "HUTCH-VM-RESULT: PASS") {
			t.Errorf("VM run failed (%v):\n%s", err, out)
		} else if testing.Verbose() {
			t.Logf("%s", out)
		}
	})

	// The landlock package's own tests (kernel tests included) on ABI 2.
	// TestKernelMissingPathSkipped expects /lib64 and /etc/ld.so.cache to
	// exist, as on a Debian host; the VM's busybox system has neither.
	t.Run("landlock-package", func(t *testing.T) {
		packageTests(t, "landlock", "delegated", "landlock", "^TestKernelMissingPathSkipped$")
	})
	// The image store's own tests on Linux 6.1 with the store on the
	// VM's tmpfs (no user extended attributes before 6.6: layers with an
	// opaque directory get no overlay form there): the markers, the
	// three views of random layer stacks, a store on an overlay. Those
	// that need a registry (Debian's docker-registry, not in the VM) skip.
	t.Run("images-package", func(t *testing.T) {
		packageTests(t, "images", "delegated", "images", "")
	})
	// The cgroup package's own tests on cgroup v2: the fork bomb, memory
	// hog, CPU throttling, kill, removal and reaping on cgroup2-delegated,
	// and TestV2MoveSelf (docs/RESOURCES.md); with nothing delegated, New
	// must fail with ErrUnavailable (TestUnavailableUnprivileged).
	for _, sc := range []string{"delegated", "nodelegation"} {
		t.Run("cgroup-package-"+sc, func(t *testing.T) {
			packageTests(t, "cgroup", sc, "cgroup-"+sc, "")
		})
	}
}

// smokeImages writes the docker-archive tarballs smoke.sh imports (run.sh's
// FILE:DEST arguments for them): img-plain, busybox and two layers that
// share /opt (the upper one whiting out a lower file and replacing
// another), and img-opaque, the same with an opaque directory in the upper
// layer.
func smokeImages(t *testing.T) []string {
	t.Helper()
	dir := t.TempDir()
	lower := tr.Layer(t,
		tr.Entry{Name: "opt/", Type: tar.TypeDir},
		tr.Entry{Name: "opt/f", Body: "lower\n"},
		tr.Entry{Name: "opt/gone", Body: "lower\n"},
		tr.Entry{Name: "opt/keep", Body: "keep\n"},
		tr.Entry{Name: "opt/opq/", Type: tar.TypeDir},
		tr.Entry{Name: "opt/opq/hidden", Body: "lower\n"})
	upper := []tr.Entry{
		{Name: "opt/", Type: tar.TypeDir},
		{Name: "opt/f", Body: "upper\n"},
		{Name: "opt/.wh.gone"}}
	var files []string
	for name, entries := range map[string][]tr.Entry{
		"plain":  upper,
		"opaque": append(slices.Clone(upper), tr.Entry{Name: "opt/opq/", Type: tar.TypeDir}, tr.Entry{Name: "opt/opq/.wh..wh..opq"}, tr.Entry{Name: "opt/opq/new", Body: "upper\n"}),
	} {
		img := tr.Image(t, v1.Config{Env: []string{"PATH=/bin"}}, tr.Busybox(t), lower, tr.Layer(t, entries...))
		ref, err := gcrname.NewTag("vm.test/" + name + ":1")
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, "img-"+name+".tar")
		if err := tarball.WriteToFile(f, ref, img); err != nil {
			t.Fatalf("write %s: %v", f, err)
		}
		files = append(files, f+":/img-"+name+".tar")
	}
	return files
}

// packageTests builds the tests of package pkg (static, CGO_ENABLED=0: the
// VM has no C library) and runs them in a VM of scenario, with the console
// in cache/logs/LOGNAME.log, skipping the tests that skip matches ("" skips
// none).
func packageTests(t *testing.T, pkg, scenario, logName, skip string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), pkg+".test")
	build := exec.Command("go", "test", "-c", "-o", bin, "../../"+pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the %s tests: %v\n%s", pkg, err, b)
	}
	command := []string{"/" + pkg + ".test", "-test.v", "-test.count=1"}
	if skip != "" {
		command = append(command, "-test.skip", skip)
	}
	boot(t, scenario, logName, []string{bin + ":/" + pkg + ".test"}, command...)
}

// boot runs one VM with run.sh and fails t unless the payload passed.
func boot(t *testing.T, scenario, logName string, files []string, command ...string) {
	t.Helper()
	log := filepath.Join("cache", "logs", logName+".log")
	args := []string{"--scenario", scenario, "--timeout", fmt.Sprint(vmTimeout), "--log", log}
	args = append(args, files...)
	args = append(args, "--")
	args = append(args, command...)
	start := time.Now()
	out, err := retryHung(t, scenario, log, func(int) (string, error) { return runSh(t, args...) })
	total := time.Since(start)
	if skip := skipLine(out); skip != "" {
		t.Skip(skip)
	}
	timing := "no timing line"
	if m := regexp.MustCompile(`(?m)^HUTCH-VM-TIMING: (.*)$`).FindStringSubmatch(out); m != nil {
		timing = m[1]
	}
	t.Logf("%s; go test wall time %.2fs; console log test/vm/%s", timing, total.Seconds(), log)
	if err != nil || !strings.Contains(out, "HUTCH-VM-RESULT: PASS") {
		t.Errorf("VM run failed (%v):\n%s", err, out)
		return
	}
	if testing.Verbose() {
		if b, err := os.ReadFile(log); err == nil {
			t.Logf("console:\n%s", strings.ReplaceAll(string(b), "\r", ""))
		}
	}
}

// retryHung runs one boot (attempt 1) and, when the guest gave no result
// at all, once more (attempt 2). Rarely (a few boots in a hundred here) the
// guest freezes at the payload's first hutch call: no output, both CPUs
// busy, not even the guest's own timeout fires. The retry is announced
// (HUTCH-VM-RETRY) and the hung console kept as NAME-hung.log beside log;
// a failed check is never retried. See docs/TESTING.md.
func retryHung(t *testing.T, scenario, log string, boot func(attempt int) (string, error)) (string, error) {
	t.Helper()
	out, err := boot(1)
	if !noGuestResult(out) {
		return out, err
	}
	hung := strings.TrimSuffix(log, ".log") + "-hung.log"
	if b, rerr := os.ReadFile(log); rerr == nil {
		_ = os.WriteFile(hung, b, 0o644)
	}
	t.Logf("HUTCH-VM-RETRY: scenario=%s: the guest gave no result; console kept in test/vm/%s; booting once more:\n%s", scenario, hung, out)
	return boot(2)
}

// noGuestResult reports whether run.sh saw no result from the guest at
// all (qemu timed out or the marker never came), as opposed to a payload
// that failed.
func noGuestResult(out string) bool {
	return strings.Contains(out, "HUTCH-VM-RESULT: FAIL") &&
		(strings.Contains(out, "qemu timed out") || strings.Contains(out, "no result marker"))
}

// runSh runs run.sh with args and returns its combined output. On the
// test's deadline it sends SIGTERM, so that run.sh's trap stops qemu.
func runSh(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runScript(t, nil, "run.sh", args...)
}

// runScript runs one of this directory's scripts with extra environment.
func runScript(t *testing.T, env []string, script string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), (vmTimeout+300)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 20 * time.Second
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	return b.String(), err
}

// skipLine returns run.sh's reason for not running, if it gave one.
func skipLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "SKIP: ") {
			return l
		}
	}
	return ""
}

// hutchBinary returns the hutch binary to test: HUTCH_BIN or bin/hutch. It
// must be static: the VM has no C library.
func hutchBinary(t *testing.T) string {
	t.Helper()
	p := os.Getenv("HUTCH_BIN")
	if p == "" {
		p = "../../bin/hutch"
	}
	p, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(p)
	if err != nil {
		t.Fatalf("no hutch binary to test (%v): run `make build`, or set HUTCH_BIN", err)
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			t.Fatalf("%s is dynamically linked; the VM has no C library: build it with `make build`", p)
		}
	}
	return p
}
