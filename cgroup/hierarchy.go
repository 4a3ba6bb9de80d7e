package cgroup

import (
	"errors"
	"fmt"
	"io/fs"

	cgroups "github.com/containerd/cgroups/v3"
)

// Host cgroup layouts, as Host.Mode spells them.
const (
	modeV2     = "v2"     // one cgroup v2 hierarchy at /sys/fs/cgroup
	modeHybrid = "hybrid" // v1 controllers, and a v2 hierarchy at /sys/fs/cgroup/unified
	modeV1     = "v1"     // v1 controllers only
	modeNone   = "none"   // nothing mounted at /sys/fs/cgroup
)

// hostMode tells the host's cgroup layout, as containerd's cgroups.Mode
// does: from the file system types of /sys/fs/cgroup and
// /sys/fs/cgroup/unified.
func hostMode() string {
	switch cgroups.Mode() {
	case cgroups.Unified:
		return modeV2
	case cgroups.Hybrid:
		return modeHybrid
	case cgroups.Legacy:
		return modeV1
	}
	return modeNone
}

// parseProcCgroup reads /proc/PID/cgroup ("ID:CONTROLLERS:PATH" per line)
// with containerd's parser: the v1 path of each controller (named
// hierarchies keep their "name=" key), and the v2 path (the line with no
// controllers), "" when there is none.
func parseProcCgroup(p string) (v1 map[string]string, v2 string, err error) {
	v1, v2, err = cgroups.ParseCgroupFileUnified(p)
	if err != nil {
		if pe := (*fs.PathError)(nil); !errors.As(err, &pe) {
			err = fmt.Errorf("%s: %w", p, err) // a malformed line
		}
		return nil, "", err
	}
	return v1, v2, nil
}
