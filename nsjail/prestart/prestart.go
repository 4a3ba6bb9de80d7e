// Package prestart starts the sandbox's init of `hutch run` before the Go
// runtime: a C constructor (prestart.c) clones the init into its new
// namespaces as the process starts, so that the init's clone and exec overlap
// with the Go runtime's start, the CLI and the planning. Only the hutch
// command imports it (for `hutch run`); programs that embed hutch launch
// their inits the usual way. HUTCH_NO_PRESTART=1 turns it off.
package prestart

// #cgo CFLAGS: -O2 -Wall
// extern int hutch_prestart_pid;
// extern int hutch_prestart_ctrl;
// extern long long hutch_prestart_forked_ns;
// extern char hutch_prestart_hint[4096];
// static void hutch_prestart_forget(void) { hutch_prestart_pid = 0; hutch_prestart_ctrl = -1; }
import "C"

import (
	"os"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/nsjail"
)

// Take returns the init the constructor started, or nil when it started
// none. The first call takes it; later calls return nil. The caller passes
// it to the sandbox launch (which adopts or discards it) and, on every path
// that launches nothing, calls its Discard.
func Take() *nsjail.Prestarted {
	pid, ctrl := int(C.hutch_prestart_pid), int(C.hutch_prestart_ctrl)
	if pid <= 0 || ctrl < 0 {
		return nil
	}
	C.hutch_prestart_forget()
	return &nsjail.Prestarted{
		Pid:      pid,
		Control:  os.NewFile(uintptr(ctrl), "control"),
		Forked:   unix.NsecToTimespec(int64(C.hutch_prestart_forked_ns)),
		PlanHint: C.GoString(&C.hutch_prestart_hint[0]),
	}
}
