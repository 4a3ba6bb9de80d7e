package seccompprofiles

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/seclog"
)

// NotifyPair makes the socketpair over which a sandbox's exec stage (or a
// session's spawner) sends its seccomp listener: child goes to the sandbox,
// mine stays with the supervisor (ServeListener reads it).
func NotifyPair() (mine, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp notification socket: %w", err)
	}
	// Our end is read through the runtime's poller (ServeListener).
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("seccomp notification socket: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "seccomp-notify"), os.NewFile(uintptr(fds[1]), "seccomp-notify-child"), nil
}

// ServeListener receives the listener on sock (NotifyPair's mine) and
// answers its notifications until ctx ends or no process uses the filter
// any more. Every denial becomes a security event, recorded for the
// command recFor names from the calling thread's id as the supervisor sees
// it (one listener may serve many commands); so does every watched
// connection around the egress proxy (NetVerdict). It closes sock.
//
// proxyPorts, for a sandbox on the host's network (the landlock isolation),
// are the egress proxy's ports on the host's loopback: a loopback
// destination on any other port is a direct connection too.
func ServeListener(ctx context.Context, sock *os.File, f *Filter, profile string, recFor func(tid uint32) *seclog.Recorder, proxyPorts ...uint16) {
	defer sock.Close()
	buf := make([]byte, 8)
	oob := make([]byte, unix.CmsgSpace(4))
	var oobn int
	var err error
	rc, rerr := sock.SyscallConn()
	if rerr == nil {
		// Parked until the exec stage sends its listener (or fails and
		// the socket ends), not holding a thread in recvmsg.
		rerr = rc.Read(func(fd uintptr) bool {
			for {
				_, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
				if err != unix.EINTR {
					return err != unix.EAGAIN
				}
			}
		})
	}
	if rerr != nil || err != nil || oobn == 0 {
		return // the exec stage failed before loading the filter, or had none
	}
	scms, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(scms) == 0 {
		return
	}
	fds, err := unix.ParseUnixRights(&scms[0])
	if err != nil || len(fds) == 0 {
		return
	}
	lfd := fds[0]
	defer unix.Close(lfd)
	watch := func(n Notification, mem MemReader) Verdict {
		return netVerdict(recFor(n.Pid), n, mem, proxyPorts)
	}
	_ = ServeWatch(ctx, lfd, f, watch, func(d Denial, n Notification) {
		errno := unix.Errno(d.Errno)
		what := DescribeCall(d.Name, n.Args)
		recFor(n.Pid).Record(seclog.Event{
			Kind:    seclog.KindSeccomp,
			Rule:    "seccomp profile " + profile,
			Subject: what,
			Message: "blocked by seccomp policy: " + what,
			Hint:    denialHint(d.Name),
			Level:   slog.LevelWarn,
			Detail: map[string]any{
				"syscall": d.Name,
				"args":    argsHex(n.Args),
				"errno":   unix.ErrnoName(errno),
				"pid":     n.Pid,
				"reason":  d.Reason,
			},
		})
	})
}

// denialHint is what the caller is told to do about a denied call.
func denialHint(name string) string {
	if slices.Contains(PtraceCalls, name) {
		return PtraceHint
	}
	if name == "socket" || name == "listen" {
		return "only TCP through the egress proxy is allowed (in the landlock isolation, no unix, UDP or raw sockets: docs/ISOLATION.md); see docs/SECCOMP.md"
	}
	return "see docs/SECCOMP.md"
}

// DescribeCall names a denied call precisely where one syscall covers
// several operations (an ioctl request, namespace flags, a signal to pid 1).
func DescribeCall(name string, a [6]uint64) string {
	switch name {
	case "ioctl":
		switch uint32(a[1]) {
		case unix.TIOCSTI:
			return "ioctl TIOCSTI (terminal input injection)"
		case unix.TIOCLINUX:
			return "ioctl TIOCLINUX"
		}
	case "clone", "unshare", "setns":
		flags := a[0]
		if name == "setns" {
			flags = a[1]
		}
		var ns []string
		for _, f := range []struct {
			bit  uint64
			name string
		}{{unix.CLONE_NEWUSER, "CLONE_NEWUSER"}, {unix.CLONE_NEWNS, "CLONE_NEWNS"}, {unix.CLONE_NEWPID, "CLONE_NEWPID"},
			{unix.CLONE_NEWNET, "CLONE_NEWNET"}, {unix.CLONE_NEWIPC, "CLONE_NEWIPC"}, {unix.CLONE_NEWUTS, "CLONE_NEWUTS"},
			{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {unix.CLONE_NEWTIME, "CLONE_NEWTIME"}} {
			if flags&f.bit != 0 {
				ns = append(ns, f.name)
			}
		}
		if len(ns) > 0 {
			return name + " " + strings.Join(ns, "|")
		}
	case "socket":
		return "socket " + socketFamily(a[0]) + " " + socketType(a[1])
	case "kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_send_signal":
		if a[0] == 1 {
			return name + " of the sandbox's init (pid 1)"
		}
	}
	return name
}

func argsHex(a [6]uint64) string {
	s := make([]string, len(a))
	for i, v := range a {
		s[i] = fmt.Sprintf("%#x", v)
	}
	return strings.Join(s, ",")
}

// NetVerdict decides on a connect or sendto that the filter's network
// watch hands the supervisor. Loopback (the sandbox's own, where the egress
// proxy listens) and non-IP sockets continue; any other destination could
// only be a direct connection around the proxy: it fails with EACCES and
// becomes a security event on rec. The network namespace, which has no
// route out, is what enforces this; the watch makes the attempt visible.
func NetVerdict(rec *seclog.Recorder, n Notification, mem MemReader) Verdict {
	return netVerdict(rec, n, mem, nil)
}

// netVerdict is NetVerdict; with proxyPorts (a sandbox on the host's
// network) loopback continues only to those ports, where Landlock lets the
// call through, and any other loopback destination is reported and fails
// (Landlock would fail it too).
func netVerdict(rec *seclog.Recorder, n Notification, mem MemReader, proxyPorts []uint16) Verdict {
	ptr, size, proto := n.Args[1], n.Args[2], "TCP connection"
	if n.Syscall == unix.SYS_SENDTO {
		ptr, size, proto = n.Args[4], n.Args[5], "UDP datagram"
	}
	if size > 128 {
		size = 128
	}
	b, ok := mem(ptr, int(size))
	if !ok {
		return Verdict{Continue: true}
	}
	addr, port, ok := parseSockaddr(b)
	if !ok {
		return Verdict{Continue: true}
	}
	a := addr.Unmap()
	if (a.IsLoopback() || a.IsUnspecified()) && (proxyPorts == nil || slices.Contains(proxyPorts, port)) {
		return Verdict{Continue: true}
	}
	if n.Syscall == unix.SYS_CONNECT {
		proto = "direct connection"
	}
	dest := netip.AddrPortFrom(a, port).String()
	rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    "network: default deny (only the egress proxy is reachable)",
		Subject: "direct " + dest,
		Message: fmt.Sprintf("network blocked by policy: %s to %s (only the egress proxy is reachable)", proto, dest),
		Level:   slog.LevelWarn,
		Detail:  map[string]any{"destination": dest, "syscall": syscallName(n.Syscall), "pid": n.Pid},
	})
	return Verdict{Errno: int(unix.EACCES)}
}

// parseSockaddr decodes an AF_INET or AF_INET6 sockaddr; other families
// report ok=false.
func parseSockaddr(b []byte) (netip.Addr, uint16, bool) {
	if len(b) < 2 {
		return netip.Addr{}, 0, false
	}
	switch int(binary.LittleEndian.Uint16(b[:2])) {
	case unix.AF_INET:
		if len(b) < 8 {
			return netip.Addr{}, 0, false
		}
		return netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]), true
	case unix.AF_INET6:
		if len(b) < 24 {
			return netip.Addr{}, 0, false
		}
		return netip.AddrFrom16([16]byte(b[8:24])), binary.BigEndian.Uint16(b[2:4]), true
	}
	return netip.Addr{}, 0, false
}

// socketFamily names a socket(2) address family.
func socketFamily(f uint64) string {
	switch f {
	case unix.AF_UNIX:
		return "AF_UNIX"
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	case unix.AF_NETLINK:
		return "AF_NETLINK"
	case unix.AF_PACKET:
		return "AF_PACKET"
	case unix.AF_VSOCK:
		return "AF_VSOCK"
	}
	return fmt.Sprintf("family %d", f)
}

// socketType names a socket(2) type, without its flags.
func socketType(t uint64) string {
	switch t & 0xf {
	case unix.SOCK_STREAM:
		return "SOCK_STREAM"
	case unix.SOCK_DGRAM:
		return "SOCK_DGRAM"
	case unix.SOCK_RAW:
		return "SOCK_RAW"
	case unix.SOCK_SEQPACKET:
		return "SOCK_SEQPACKET"
	}
	return fmt.Sprintf("type %d", t&0xf)
}
