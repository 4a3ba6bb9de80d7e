package seccompprofiles

import (
	"slices"

	"golang.org/x/sys/unix"
)

// QuietPrefix starts the comment of an SCMP_ACT_ERRNO rule that stays
// plain errno with Options.Notify, as an ENOSYS fallback does: a refusal
// so routine that reporting it would bury the denials that matter.
const QuietPrefix = "hutch: quiet: "

// UnixSocketComment marks HostNetwork's unix socket rule. It is quiet:
// glibc tries nscd's and systemd-userdb's sockets on every user lookup (id,
// ls -l, git) and falls back to the files, as it does in a namespace
// sandbox, where those sockets do not exist and nothing is reported either.
const UnixSocketComment = QuietPrefix + "the landlock isolation refuses unix sockets: Landlock cannot restrict connecting to the host's pathname sockets (D-Bus, ssh-agent, docker.sock)"

// HostNetworkComment marks the socket rule HostNetwork adds; a denial
// names it.
const HostNetworkComment = "hutch: the landlock isolation shares the host's network: only TCP sockets (which Landlock restricts to the egress proxy's ports) and NETLINK_ROUTE sockets (reading the host's interfaces) can be made; UDP, raw, packet and SCTP sockets would reach the network around the proxy, and unix sockets the host's services (D-Bus, ssh-agent, docker.sock), which Landlock cannot restrict"

// ListenComment marks HostNetwork's listen rule.
const ListenComment = "hutch: the landlock isolation shares the host's network: listen(2) on a socket that bind(2) (denied by Landlock) did not bind would listen on an ephemeral port of every host address"

// FastOpenComment marks HostNetwork's TCP Fast Open rules.
const FastOpenComment = "hutch: the landlock isolation shares the host's network: TCP Fast Open (MSG_FASTOPEN) connects without connect(2), which Landlock's TCP rules do not see"

// HostNetwork returns a copy of p for a sandbox that shares the host's
// network namespace (the landlock isolation): socket(2) is allowed only
// for TCP over IPv4 and IPv6 (protocol 0 or IPPROTO_TCP; Landlock's TCP
// rules then restrict connect and bind) and for NETLINK_ROUTE; any other
// socket fails with EACCES, as do listen(2) (an unbound socket would
// listen on every host address) and TCP Fast Open sends (a connect that
// Landlock does not see). socketpair(2) is untouched: a pair of
// connected unix sockets reaches nothing outside.
func HostNetwork(p *Profile) *Profile {
	q := p.Clone()
	for i := range q.Syscalls {
		r := &q.Syscalls[i]
		if r.Comment == WatchComment && slices.Contains(r.Names, "sendto") {
			// The watch answers by letting the call continue, which the
			// caller can race (it may rewrite the address after the
			// check): a Fast Open send must meet the errno rule below
			// instead, so the watch takes only the others.
			r.Args = append(slices.Clone(r.Args), Arg{Index: 3, Value: unix.MSG_FASTOPEN, ValueTwo: 0, Op: "SCMP_CMP_MASKED_EQ"})
		}
		if r.Action != ActAllow {
			continue
		}
		for _, name := range []string{"socket", "listen"} {
			if j := slices.Index(r.Names, name); j >= 0 {
				r.Names = slices.Delete(slices.Clone(r.Names), j, j+1)
			}
			if r.Name == name {
				r.Name = ""
			}
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
	q.Syscalls = append(q.Syscalls,
		Syscall{Names: []string{"socket"}, Action: ActErrno, ErrnoRet: &eacces, Comment: UnixSocketComment,
			Args: []Arg{{Index: 0, Value: unix.AF_UNIX, Op: "SCMP_CMP_EQ"}}},
		Syscall{Names: []string{"socket"}, Action: ActErrno, ErrnoRet: &eacces, Comment: HostNetworkComment},
		Syscall{Names: []string{"listen"}, Action: ActErrno, ErrnoRet: &eacces, Comment: ListenComment},
		// TCP Fast Open connects from sendto/sendmsg, which Landlock's TCP
		// connect rule does not see (Linux 6.18, ABI 7: measured).
		Syscall{Names: []string{"sendto"}, Action: ActErrno, ErrnoRet: &eacces, Comment: FastOpenComment,
			Args: []Arg{{Index: 3, Value: unix.MSG_FASTOPEN, ValueTwo: unix.MSG_FASTOPEN, Op: "SCMP_CMP_MASKED_EQ"}}},
		Syscall{Names: []string{"sendmsg"}, Action: ActErrno, ErrnoRet: &eacces, Comment: FastOpenComment,
			Args: []Arg{{Index: 2, Value: unix.MSG_FASTOPEN, ValueTwo: unix.MSG_FASTOPEN, Op: "SCMP_CMP_MASKED_EQ"}}},
		Syscall{Names: []string{"sendmmsg"}, Action: ActErrno, ErrnoRet: &eacces, Comment: FastOpenComment,
			Args: []Arg{{Index: 3, Value: unix.MSG_FASTOPEN, ValueTwo: unix.MSG_FASTOPEN, Op: "SCMP_CMP_MASKED_EQ"}}},
	)
	return q
}
