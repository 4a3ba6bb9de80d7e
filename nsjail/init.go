package nsjail

import (
	"strconv"

	"github.com/hutchsandbox/hutch/cgroup"
)

// The init is C (init.c, mounts.c, execstage.c): a constructor that takes
// over the re-executed binary before the Go runtime starts when argv[0] is
// initMagic. A sandbox so costs one Go runtime start (the supervisor's),
// and a command costs a fork in C.

// #cgo CFLAGS: -O2 -Wall
import "C"

// initMagic is argv[0] of the init; must match HUTCH_INIT_MAGIC.
const initMagic = "hutch:init"

// sigTerminate asks a command's reaper to kill the command and everything
// it started; must match HUTCH_SIG_TERMINATE in execstage.c.
const sigTerminate = 40

// formatRlimits renders the limits for the exec stage: "RES:CUR:MAX,..."
// with -1 for RLIM_INFINITY.
func formatRlimits(rl []cgroup.Rlimit) string {
	var b []byte
	for i, r := range rl {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, int64(r.Resource), 10)
		for _, v := range []uint64{r.Cur, r.Max} {
			b = append(b, ':')
			if v == ^uint64(0) {
				b = append(b, "-1"...)
			} else {
				b = strconv.AppendUint(b, v, 10)
			}
		}
	}
	return string(b)
}
