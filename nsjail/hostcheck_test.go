package nsjail

import "testing"

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
