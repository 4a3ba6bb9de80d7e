package seccompprofiles

import (
	"encoding/binary"
	"fmt"
	"testing"
)

// bpfSteps is the instruction count of the last runBPF, for cost checks.
var bpfSteps int

// runBPF evaluates a filter for one syscall, failing the test on a program
// the kernel would reject.
func runBPF(t testing.TB, prog []byte, d seccompData) uint32 {
	t.Helper()
	v, steps, err := evalBPF(prog, d)
	if err != nil {
		t.Fatalf("%v\n%s", err, disasm(prog))
	}
	bpfSteps = steps
	return v
}

// disasm is for failure messages.
func disasm(prog []byte) string {
	s := ""
	for i := 0; i+8 <= len(prog); i += 8 {
		s += fmt.Sprintf("%4d: code=%#04x jt=%d jf=%d k=%#x\n", i/8,
			binary.LittleEndian.Uint16(prog[i:]), prog[i+2], prog[i+3], binary.LittleEndian.Uint32(prog[i+4:]))
	}
	return s
}
