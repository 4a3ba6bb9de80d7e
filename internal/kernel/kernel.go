// Package kernel answers questions about the running kernel's version: the
// one place hutch reads uname(2) for it.
package kernel

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Release is the running kernel's release string ("6.18.0-1-amd64"), or
// "unknown" when uname fails.
var Release = sync.OnceValue(func() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
})

// Version is the running kernel's MAJOR.MINOR.PATCH, zeros where unknown.
var Version = sync.OnceValue(func() [3]int { return ParseVersion(Release()) })

// ParseVersion reads the leading MAJOR[.MINOR[.PATCH]] of a release string
// ("6.1.0-28-cloud-amd64" is 6, 1, 0); what does not parse is 0.
func ParseVersion(s string) [3]int {
	var v [3]int
	for i := 0; i < 3 && s != ""; i++ {
		j := 0
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		v[i], _ = strconv.Atoi(s[:j])
		if j >= len(s) || s[j] != '.' {
			break
		}
		s = s[j+1:]
	}
	return v
}

// AtLeast reports whether the running kernel is at least version min
// ("5.12", "6.3.1").
func AtLeast(min string) bool { return Compare(Version(), ParseVersion(min)) >= 0 }

// Compare orders two versions: -1, 0 or +1.
func Compare(a, b [3]int) int {
	for i := range 3 {
		if a[i] != b[i] {
			if a[i] < b[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// ProbeContext names what a probe of this host's abilities (can a sandbox
// make its namespaces, mount an overlay) holds for, so that its verdict
// can be kept and reused: the boot (its id), and the calling process's
// user and mount namespaces and seccomp mode — a container that shares
// hutch's cache or data directory with its host (a bind-mounted home) sees
// the host's boot id but has namespaces of its own, and often a seccomp
// filter that the host's processes do not have. "" when the boot id cannot
// be read: then nothing is to be kept.
func ProbeContext() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	ctx := strings.TrimSpace(string(b))
	for _, ns := range []string{"user", "mnt"} {
		var st unix.Stat_t
		if unix.Stat("/proc/self/ns/"+ns, &st) == nil {
			ctx += fmt.Sprintf("-%s%d", ns, st.Ino)
		}
	}
	if s, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(s), "\n") {
			if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
				ctx += "-seccomp" + strings.TrimSpace(v)
			}
		}
	}
	return ctx
}
