package hutch

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/seccompprofiles"
	"github.com/hutchsandbox/hutch/seclog"
)

// Destination of a watched connect or sendto.
type sockDest struct {
	family int
	addr   netip.Addr
	port   int
}

// parseSockaddr decodes an AF_INET or AF_INET6 sockaddr; other families
// report ok=false.
func parseSockaddr(b []byte) (sockDest, bool) {
	if len(b) < 2 {
		return sockDest{}, false
	}
	fam := int(binary.LittleEndian.Uint16(b[:2]))
	switch fam {
	case unix.AF_INET:
		if len(b) < 8 {
			return sockDest{}, false
		}
		return sockDest{fam, netip.AddrFrom4([4]byte(b[4:8])), int(binary.BigEndian.Uint16(b[2:4]))}, true
	case unix.AF_INET6:
		if len(b) < 24 {
			return sockDest{}, false
		}
		return sockDest{fam, netip.AddrFrom16([16]byte(b[8:24])), int(binary.BigEndian.Uint16(b[2:4]))}, true
	}
	return sockDest{}, false
}

// netWatcher decides on the connect and sendto calls that the seccomp
// filter hands the supervisor. Loopback (the sandbox's own, where the
// egress proxy listens) and non-IP sockets continue; any other destination
// could only be a direct connection around the proxy: it fails with EACCES
// and becomes a security event. The network namespace, which has no route
// out, is what enforces this; the watch makes the attempt visible.
func netWatcher(rec *seclog.Recorder) func(seccompprofiles.Notification, seccompprofiles.MemReader) seccompprofiles.Verdict {
	return func(n seccompprofiles.Notification, mem seccompprofiles.MemReader) seccompprofiles.Verdict {
		ptr, size, proto := n.Args[1], n.Args[2], "TCP connection"
		if n.Syscall == unix.SYS_SENDTO {
			ptr, size, proto = n.Args[4], n.Args[5], "UDP datagram"
		}
		if size > 128 {
			size = 128
		}
		b, ok := mem(ptr, int(size))
		if !ok {
			return seccompprofiles.Verdict{Continue: true}
		}
		d, ok := parseSockaddr(b)
		if !ok {
			return seccompprofiles.Verdict{Continue: true}
		}
		a := d.addr.Unmap()
		if a.IsLoopback() || a.IsUnspecified() {
			return seccompprofiles.Verdict{Continue: true}
		}
		if n.Syscall == unix.SYS_CONNECT {
			proto = "direct connection"
		}
		dest := netip.AddrPortFrom(a, uint16(d.port)).String()
		rec.Record(seclog.Event{
			Kind:    seclog.KindNetwork,
			Rule:    "network: default deny (only the egress proxy is reachable)",
			Subject: "direct " + dest,
			Message: fmt.Sprintf("network blocked by policy: %s to %s (only the egress proxy is reachable)", proto, dest),
			Level:   slog.LevelWarn,
			Detail:  map[string]any{"destination": dest, "syscall": syscallName(n.Syscall), "pid": n.Pid},
		})
		return seccompprofiles.Verdict{Errno: int(unix.EACCES)}
	}
}

func syscallName(nr int32) string {
	switch nr {
	case unix.SYS_CONNECT:
		return "connect"
	case unix.SYS_SENDTO:
		return "sendto"
	}
	return strconv.Itoa(int(nr))
}
