package cgroup

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Host cgroup layouts, as Host.Mode spells them.
const (
	modeV2     = "v2"     // one cgroup v2 hierarchy at /sys/fs/cgroup
	modeHybrid = "hybrid" // v1 controllers, and a v2 hierarchy at /sys/fs/cgroup/unified
	modeV1     = "v1"     // v1 controllers only
	modeNone   = "none"   // nothing mounted at /sys/fs/cgroup
)

// hostMode tells the host's cgroup layout from the file system types of
// /sys/fs/cgroup and /sys/fs/cgroup/unified.
func hostMode() string {
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		return modeNone
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return modeV2
	}
	if err := unix.Statfs("/sys/fs/cgroup/unified", &st); err == nil && st.Type == unix.CGROUP2_SUPER_MAGIC {
		return modeHybrid
	}
	return modeV1
}

// parseProcCgroup reads /proc/PID/cgroup ("ID:CONTROLLERS:PATH" per line):
// the v1 path of each controller (named hierarchies keep their "name="
// key), and the v2 path (the line with no controllers), "" when there is
// none.
func parseProcCgroup(p string) (v1 map[string]string, v2 string, err error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, "", err
	}
	defer f.Close()
	v1 = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			return nil, "", fmt.Errorf("%s: malformed line %q (want ID:CONTROLLERS:PATH)", p, sc.Text())
		}
		if parts[1] == "" {
			v2 = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			v1[c] = parts[2]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, "", fmt.Errorf("read %s: %w", p, err)
	}
	return v1, v2, nil
}

// writeLimit writes one control file of dir, naming the file and the value
// on failure.
func writeLimit(dir, file, value string) error {
	if err := writeString(filepath.Join(dir, file), value); err != nil {
		return fmt.Errorf("cgroup: write %s to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

// readUint reads a file holding one number; "max" reads as 0.
func readUint(p string) (uint64, error) {
	s, err := readString(p)
	if err != nil {
		return 0, err
	}
	if s == "max" {
		return 0, nil
	}
	var v uint64
	if _, err := fmt.Sscan(s, &v); err != nil {
		return 0, fmt.Errorf("%s: not a number: %q", p, s)
	}
	return v, nil
}
