package seccompprofiles

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// HostNetwork's socket rules on the real kernel, with and without
// notification (whose network watch shares sendto with the TCP Fast Open
// rule): TCP and NETLINK_ROUTE sockets and socketpair work; UDP, raw,
// unix, packet, SCTP and MPTCP sockets, listen and TCP Fast Open sends
// fail with EACCES.
func TestKernelHostNetwork(t *testing.T) {
	script := `python3 -c '
import errno, socket
def try_(name, f):
    try:
        f(); print(name, "ok")
    except OSError as e:
        print(name, errno.errorcode.get(e.errno, e.errno))
try_("tcp4", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC))
try_("tcp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP))
try_("netlink-route", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0))
try_("socketpair", lambda: socket.socketpair())
try_("udp4", lambda: socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK))
try_("udp6", lambda: socket.socket(socket.AF_INET6, socket.SOCK_DGRAM))
try_("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, 1))
try_("unix", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM))
try_("unix-dgram", lambda: socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM))
try_("packet", lambda: socket.socket(17, socket.SOCK_RAW, 0))
try_("netlink-diag", lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 4))
try_("sctp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 132))
try_("mptcp", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262))
s = socket.socket()
try_("listen", lambda: s.listen(1))
s = socket.socket()
try_("fastopen", lambda: s.sendto(b"x", socket.MSG_FASTOPEN, ("127.0.0.1", 9)))
'`
	want := map[string]string{"tcp4": "ok", "tcp6": "ok", "netlink-route": "ok", "socketpair": "ok",
		"udp4": "EACCES", "udp6": "EACCES", "raw": "EACCES", "unix": "EACCES", "unix-dgram": "EACCES", "packet": "EACCES",
		"netlink-diag": "EACCES", "sctp": "EACCES", "mptcp": "EACCES", "listen": "EACCES", "fastopen": "EACCES"}
	for _, notify := range []bool{false, true} {
		t.Run(fmt.Sprintf("notify=%v", notify), func(t *testing.T) {
			p := Default()
			if notify {
				p = WatchNetwork(p)
			}
			f, err := Compile(HostNetwork(p), Options{Notify: notify})
			if err != nil {
				t.Fatal(err)
			}
			if notify && !f.Notify {
				t.Skipf("seccomp user notification unavailable: %s", f.NotifyUnavailable)
			}
			c := startChild(t, "exec", f, childScriptEnv+"="+script)
			var mu sync.Mutex
			reported := map[string]bool{}
			served := make(chan struct{})
			if notify {
				fd := c.listener(t)
				watch := func(n Notification, mem MemReader) Verdict { return Verdict{Continue: true} }
				go func() {
					defer close(served)
					ServeWatch(context.Background(), fd, f, watch, func(d Denial, n Notification) {
						mu.Lock()
						reported[DescribeCall(d.Name, n.Args)] = true
						mu.Unlock()
					})
				}()
			} else {
				close(served)
			}
			if err := c.cmd.Wait(); err != nil {
				t.Fatalf("python under the filter: %v\n%s", err, c.out)
			}
			<-served
			// Unix sockets are refused quietly (glibc's every user lookup
			// tries some); the others are reported.
			if notify && (reported["socket AF_UNIX SOCK_STREAM"] || !reported["socket AF_INET SOCK_DGRAM"] || !reported["listen"]) {
				t.Errorf("reported %v: want socket AF_INET SOCK_DGRAM and listen, not socket AF_UNIX", reported)
			}
			got := map[string]string{}
			for _, line := range strings.Split(c.out.String(), "\n") {
				if k, v, ok := strings.Cut(line, " "); ok {
					got[k] = v
				}
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("%s: %q, want %q", k, got[k], v)
				}
			}
		})
	}
}
