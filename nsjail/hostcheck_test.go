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
		if got := procMountRefused.MatchString(msg); got != want {
			t.Errorf("procMountRefused(%q) = %v, want %v", msg, got, want)
		}
	}
}
