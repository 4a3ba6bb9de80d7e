package nsjail

import "testing"

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
