package nsjail

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/store"
)

// TestProcMountRefused: the init's report of a refused procfs (the mount
// plan's proc step, as nsjail/mounts.c words it) is recognised, and no
// other step's.
func TestProcMountRefused(t *testing.T) {
	for msg, want := range map[string]bool{
		"build the sandbox's root filesystem: proc /proc (procfs of the sandbox's pid namespace): operation not permitted": true,
		"proc /proc (procfs of the sandbox's pid namespace): operation not permitted":                                      true,
		"build the sandbox's root filesystem: proc /proc (procfs of the sandbox's pid namespace): no such device":          false,
		"build the sandbox's root filesystem: tmpfs /tmp (scratch): operation not permitted":                               false,
		"build the sandbox's root filesystem: bind /usr/proc /x (tooling): operation not permitted":                        false,
	} {
		if got := procMountRefused().MatchString(msg); got != want {
			t.Errorf("procMountRefused(%q) = %v, want %v", msg, got, want)
		}
	}
}

// The probe of sandbox.isolation = "auto" runs the real steps in the real
// namespaces: on a host where they can be made (this one, as root and as a
// user) it finds nothing in the way. (Where they cannot, inside a container
// with Docker's default seccomp profile, test/landlock_mode_test.go's
// container check sees auto fall back.)
func TestProbeUserNamespaces(t *testing.T) {
	if p := CheckUserNamespaces(); p != nil {
		t.Skipf("user namespaces are off here: %v", p)
	}
	if got := ProbeUserNamespaces(); got != "" {
		t.Errorf("ProbeUserNamespaces() = %q on a host that makes sandboxes", got)
	}
}

// The overlay probe mounts a real overlay in the real namespaces: on this
// host it shows the second directory's file through the first; with a
// second directory that does not exist it says what failed.
func TestProbeOverlay(t *testing.T) {
	if p := CheckUserNamespaces(); p != nil {
		t.Skipf("user namespaces are off here: %v", p)
	}
	dir := t.TempDir()
	lower1, lower2 := filepath.Join(dir, "l1"), filepath.Join(dir, "l2")
	for _, d := range []string{lower1, lower2} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(lower2, "probe"), []byte("probe\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := ProbeOverlay(lower1, lower2); got != "" {
		t.Errorf("ProbeOverlay() = %q on a host that mounts overlays in user namespaces", got)
	}
	if _, err := os.Stat(filepath.Join(lower1, "probe")); err == nil {
		t.Errorf("the probe's overlay shows outside its mount namespace")
	}
	missing := filepath.Join(dir, "missing")
	if got := ProbeOverlay(lower1, missing); got == "" || !strings.Contains(got, missing) {
		t.Errorf("ProbeOverlay with a missing lower directory = %q, want why naming it", got)
	}
	// No file to show: the check after the mount fails.
	os.Remove(filepath.Join(lower2, "probe"))
	if got := ProbeOverlay(lower1, lower2); !strings.Contains(got, "probe") || !strings.Contains(got, "through the overlay") {
		t.Errorf("ProbeOverlay without the probe file = %q, want the failed stat", got)
	}
}

// probeOnce keeps a successful probe for the boot (a second call, and a
// second process with the same store, do not probe again), keeps no
// failure (every call probes until it succeeds), and keeps nothing when
// the boot is unknown.
func TestProbeOnce(t *testing.T) {
	st := store.At(t.TempDir())
	calls, answer := 0, "user namespaces are disabled"
	probe := func() string { calls++; return answer }
	boot := func() string { return "b1" }
	p := probeOnce(st, "userns", probe, boot)
	if p() == "" || p() == "" || calls != 2 {
		t.Fatalf("a failing probe: %d calls, want 2 (a failure is not kept)", calls)
	}
	answer = ""
	if p() != "" || p() != "" || probeOnce(st, "userns", probe, boot)() != "" || calls != 3 {
		t.Errorf("a succeeding probe: %d calls, want 3 (kept after the first)", calls)
	}
	other := func() string { return "b2" }
	probeOnce(st, "userns", probe, other)()
	if calls != 4 {
		t.Errorf("another boot: %d calls, want it probed again", calls)
	}
	unknown := func() string { return "" }
	probeOnce(st, "userns", probe, unknown)()
	probeOnce(st, "userns", probe, unknown)()
	if calls != 6 {
		t.Errorf("an unknown boot: %d calls, want every call probed", calls)
	}
}
