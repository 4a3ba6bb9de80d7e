package seccompprofiles

import (
	"slices"

	"golang.org/x/sys/unix"
)

// HostNetworkComment marks the socket rule HostNetwork adds; a denial
// names it.
const HostNetworkComment = "hutch: the landlock isolation shares the host's network: only TCP sockets (which Landlock restricts to the egress proxy's ports) and NETLINK_ROUTE sockets (reading the host's interfaces) can be made; UDP, raw, packet and SCTP sockets would reach the network around the proxy, and unix sockets the host's services (D-Bus, ssh-agent, docker.sock), which Landlock cannot restrict"

// HostNetwork returns a copy of p for a sandbox that shares the host's
// network namespace (the landlock isolation): socket(2) is allowed only
// for TCP over IPv4 and IPv6 (protocol 0 or IPPROTO_TCP; Landlock's TCP
// rules then restrict connect and bind) and for NETLINK_ROUTE; any other
// socket fails with EACCES. socketpair(2) is untouched: a pair of
// connected unix sockets reaches nothing outside.
func HostNetwork(p *Profile) *Profile {
	q := p.Clone()
	for i := range q.Syscalls {
		r := &q.Syscalls[i]
		if r.Action != ActAllow {
			continue
		}
		if j := slices.Index(r.Names, "socket"); j >= 0 {
			r.Names = slices.Delete(slices.Clone(r.Names), j, j+1)
		}
		if r.Name == "socket" {
			r.Name = ""
		}
	}
	q.Syscalls = slices.DeleteFunc(q.Syscalls, func(r Syscall) bool { return r.Name == "" && len(r.Names) == 0 })
	const typeMask = 0xf // SOCK_NONBLOCK and SOCK_CLOEXEC are flags above it
	for _, family := range []uint64{unix.AF_INET, unix.AF_INET6} {
		for _, proto := range []uint64{0, unix.IPPROTO_TCP} {
			q.Syscalls = append(q.Syscalls, Syscall{Names: []string{"socket"}, Action: ActAllow,
				Args: []Arg{
					{Index: 0, Value: family, Op: "SCMP_CMP_EQ"},
					{Index: 1, Value: typeMask, ValueTwo: unix.SOCK_STREAM, Op: "SCMP_CMP_MASKED_EQ"},
					{Index: 2, Value: proto, Op: "SCMP_CMP_EQ"},
				},
				Comment: "hutch: TCP sockets, restricted by Landlock to the egress proxy"})
		}
	}
	q.Syscalls = append(q.Syscalls, Syscall{Names: []string{"socket"}, Action: ActAllow,
		Args: []Arg{
			{Index: 0, Value: unix.AF_NETLINK, Op: "SCMP_CMP_EQ"},
			{Index: 2, Value: unix.NETLINK_ROUTE, Op: "SCMP_CMP_EQ"},
		},
		Comment: "hutch: NETLINK_ROUTE sockets (getifaddrs); changing the host's network needs capabilities the command lacks"})
	eacces := uint(unix.EACCES)
	q.Syscalls = append(q.Syscalls, Syscall{Names: []string{"socket"}, Action: ActErrno, ErrnoRet: &eacces, Comment: HostNetworkComment})
	return q
}
