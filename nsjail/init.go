package nsjail

// The init is C (init.c, mounts.c, execstage.c): a constructor that takes
// over the re-executed binary before the Go runtime starts when argv[0] is
// initMagic. A sandbox so costs one Go runtime start (the supervisor's),
// and a command costs a fork in C.

/*
#cgo CFLAGS: -O2 -Wall
#include "hutch_init.h"
static const char *hutch_init_magic(void) { return HUTCH_INIT_MAGIC; }
static const char *hutch_init_no_namespaces(void) { return HUTCH_INIT_NO_NAMESPACES; }
static const char *hutch_probe_magic(void) { return HUTCH_PROBE_MAGIC; }
*/
import "C"

// initMagic is argv[0] of the init.
var initMagic = C.GoString(C.hutch_init_magic())

// probeMagic is argv[0] of the user namespace probe (probe.c).
var probeMagic = C.GoString(C.hutch_probe_magic())

// noNamespacesArg is argv[1] of an init started without namespaces.
var noNamespacesArg = C.GoString(C.hutch_init_no_namespaces())

// sigTerminate asks a command's reaper to kill the command and everything
// it started.
const sigTerminate = int(C.HUTCH_SIG_TERMINATE)
