package seccompprofiles

import (
	"errors"
	"fmt"
	"runtime"
)

// Audit architecture values (linux/audit.h).
const (
	auditArchX86_64  = 0xc000003e
	auditArchI386    = 0x40000003
	auditArchAARCH64 = 0xc00000b7
	x32SyscallBit    = 0x40000000
)

// nativeAuditArch is the AUDIT_ARCH_* value of native syscalls.
func nativeAuditArch() (uint32, bool) {
	switch runtime.GOARCH {
	case "amd64":
		return auditArchX86_64, true
	case "arm64":
		return auditArchAARCH64, true
	}
	return 0, false
}

// seccompData mirrors struct seccomp_data.
type seccompData struct {
	nr   int32
	arch uint32
	ip   uint64
	args [6]uint64
}

func (d *seccompData) bytes() []byte {
	b := make([]byte, 64)
	nativeEndian.PutUint32(b[0:], uint32(d.nr))
	nativeEndian.PutUint32(b[4:], d.arch)
	nativeEndian.PutUint64(b[8:], d.ip)
	for i, a := range d.args {
		nativeEndian.PutUint64(b[16+8*i:], a)
	}
	return b
}

// evalBPF interprets a classic BPF seccomp program the way the kernel does
// and returns the filter's verdict (SECCOMP_RET_*), and the number of
// instructions it executed. It fails on what the kernel's checker would
// reject.
func evalBPF(prog []byte, d seccompData) (verdict uint32, steps int, err error) {
	data := d.bytes()
	n := len(prog) / 8
	var a, x uint32
	var mem [16]uint32
	for pc := 0; pc < n; pc++ {
		steps++
		ins := prog[pc*8:]
		code := nativeEndian.Uint16(ins[0:])
		jt, jf := int(ins[2]), int(ins[3])
		k := nativeEndian.Uint32(ins[4:])
		src := func() uint32 {
			if code&0x08 != 0 {
				return x
			}
			return k
		}
		switch code & 0x07 {
		case 0x00: // LD
			switch code &^ 0x07 {
			case 0x20: // W ABS
				if k%4 != 0 || int(k)+4 > len(data) {
					return 0, steps, fmt.Errorf("pc %d: bad load offset %d", pc, k)
				}
				a = nativeEndian.Uint32(data[k:])
			case 0x00: // W IMM
				a = k
			case 0x60: // W MEM
				a = mem[k]
			case 0x80: // W LEN
				a = uint32(len(data))
			default:
				return 0, steps, fmt.Errorf("pc %d: unsupported load %#x", pc, code)
			}
		case 0x01: // LDX
			switch code &^ 0x07 {
			case 0x00:
				x = k
			case 0x60:
				x = mem[k]
			case 0x80:
				x = uint32(len(data))
			default:
				return 0, steps, fmt.Errorf("pc %d: unsupported ldx %#x", pc, code)
			}
		case 0x02:
			mem[k] = a
		case 0x03:
			mem[k] = x
		case 0x04: // ALU
			v := src()
			switch code & 0xf0 {
			case 0x00:
				a += v
			case 0x10:
				a -= v
			case 0x20:
				a *= v
			case 0x30:
				if v == 0 {
					return 0, steps, nil // the kernel's verdict for division by zero
				}
				a /= v
			case 0x40:
				a |= v
			case 0x50:
				a &= v
			case 0x60:
				a <<= v
			case 0x70:
				a >>= v
			case 0x80:
				a = -a
			case 0x90:
				if v == 0 {
					return 0, steps, nil // the kernel's verdict for division by zero
				}
				a %= v
			case 0xa0:
				a ^= v
			default:
				return 0, steps, fmt.Errorf("pc %d: unsupported alu %#x", pc, code)
			}
		case 0x05: // JMP
			v := src()
			var cond bool
			switch code & 0xf0 {
			case 0x00:
				pc += int(k)
				continue
			case 0x10:
				cond = a == v
			case 0x20:
				cond = a > v
			case 0x30:
				cond = a >= v
			case 0x40:
				cond = a&v != 0
			default:
				return 0, steps, fmt.Errorf("pc %d: unsupported jump %#x", pc, code)
			}
			if cond {
				pc += jt
			} else {
				pc += jf
			}
		case 0x06: // RET
			if code&0x18 == 0x10 {
				return a, steps, nil
			}
			return k, steps, nil
		case 0x07:
			if code&0xf8 == 0x80 {
				a = x
			} else {
				x = a
			}
		}
	}
	return 0, steps, errors.New("program ran off its end")
}
