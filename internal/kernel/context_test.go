package kernel

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// TestHelperProbeContext prints ProbeContext for TestProbeContext's child.
func TestHelperProbeContext(t *testing.T) {
	if os.Getenv("HUTCH_TEST_PRINT_PROBE_CONTEXT") != "1" {
		t.Skip("the helper of TestProbeContext (run by it in new namespaces)")
	}
	os.Stdout.WriteString(ProbeContext())
}

// ProbeContext names the boot and the caller's namespaces and seccomp
// mode: the same for two processes of the host, another in new user and
// mount namespaces (as a container's process has).
func TestProbeContext(t *testing.T) {
	here := ProbeContext()
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skipf("no boot id here: %v", err)
	}
	if !strings.HasPrefix(here, strings.TrimSpace(string(boot))+"-user") || !strings.Contains(here, "-mnt") || !strings.Contains(here, "-seccomp") {
		t.Fatalf("ProbeContext() = %q, want the boot id, the user and mount namespaces and the seccomp mode", here)
	}
	child := func(attr *syscall.SysProcAttr) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProbeContext$")
		cmd.Env = append(os.Environ(), "HUTCH_TEST_PRINT_PROBE_CONTEXT=1")
		cmd.SysProcAttr = attr
		out, err := cmd.Output()
		if err != nil {
			t.Skipf("start the helper (%+v): %v", attr, err)
		}
		return strings.TrimSuffix(strings.TrimSpace(string(out)), "PASS")
	}
	if got := strings.TrimSpace(child(nil)); got != here {
		t.Errorf("another process of the host: %q, want %q", got, here)
	}
	ns := &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	if got := strings.TrimSpace(child(ns)); got == here || !strings.HasPrefix(got, strings.TrimSpace(string(boot))) {
		t.Errorf("a process in new user and mount namespaces: %q, want the same boot and another context than %q", got, here)
	}
}
