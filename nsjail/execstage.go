package nsjail

// The exec stage is C (execstage.c): it runs as a constructor before the Go
// runtime when the binary is started with argv[0] == execMagic, so a command
// costs one exec of hutch's binary but no Go runtime start.

// #cgo CFLAGS: -O2 -Wall
import "C"

// execMagic is argv[0] of the exec stage; must match HUTCH_EXEC_MAGIC.
const execMagic = "hutch:exec"

// sigTerminate asks an exec stage (the command's reaper) to kill the command
// and everything it started; must match HUTCH_SIG_TERMINATE.
const sigTerminate = 40

// Fixed descriptor numbers in the exec stage (see execstage.c).
const (
	execFDStatus   = 3
	execFDLandlock = 4
	execFDSeccomp  = 5
	execFDNotify   = 6
)
