package memfd

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestNoExec(t *testing.T) {
	fd, err := NoExec("test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	probe, err := unix.MemfdCreate("probe", unix.MFD_CLOEXEC|unix.MFD_NOEXEC_SEAL)
	if err != nil {
		t.Skipf("this kernel has no MFD_NOEXEC_SEAL (Linux 6.3): %v", err)
	}
	unix.Close(probe)
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil || seals&unix.F_SEAL_EXEC == 0 {
		t.Errorf("seals %#x, %v: want F_SEAL_EXEC", seals, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&0o111 != 0 {
		t.Errorf("mode %#o, %v: want no execute bits", st.Mode, err)
	}
}
