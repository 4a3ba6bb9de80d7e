package test

import (
	"strings"
	"testing"
)

// loopbackScript exercises the sandbox's own loopback as tests and dev
// servers do: an ephemeral port (bind to port 0), a fixed port, IPv6
// loopback, and an HTTP round trip through the proxy environment (NO_PROXY
// keeps loopback off the proxy). A direct connection outside is refused,
// and hutch says so.
const loopbackScript = `
import socket, threading, http.server, urllib.request, errno
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen()
port = s.getsockname()[1]
c = socket.create_connection(("127.0.0.1", port)); a, _ = s.accept()
c.sendall(b"ping"); print("ephemeral", a.recv(4).decode(), port > 0)
f = socket.socket(); f.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
f.bind(("127.0.0.1", 8080)); f.listen()
socket.create_connection(("localhost", 8080)); print("fixed 8080 ok")
s6 = socket.socket(socket.AF_INET6); s6.bind(("::1", 0)); s6.listen()
socket.create_connection(("::1", s6.getsockname()[1])); print("ipv6 ok")
srv = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
threading.Thread(target=srv.serve_forever, daemon=True).start()
r = urllib.request.urlopen("http://127.0.0.1:%d/" % srv.server_address[1], timeout=10)
print("http", r.status)
try:
    socket.create_connection(("192.0.2.1", 80), timeout=5); print("outside reachable")
except OSError as e:
    print("outside", errno.errorcode.get(e.errno, e))
`

var loopbackWant = []string{"ephemeral ping True", "fixed 8080 ok", "ipv6 ok", "http 200", "outside EACCES"}

// The sandbox's loopback is its own: any bind and connect on it works,
// ephemeral ports included, in a one-off run and in a session, while the
// network namespace keeps everything else out of reach.
func TestLoopbackIsTheSandboxs(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		o.dir = ws
		check := func(what string, r result) {
			t.Helper()
			mustCode(t, r, 0)
			for _, want := range loopbackWant {
				if !strings.Contains(r.stdout, want) {
					t.Errorf("%s: missing %q in:\n%s\nstderr:\n%s", what, want, r.stdout, r.stderr)
				}
			}
			if msg := "hutch: network blocked by policy: direct connection to 192.0.2.1:80"; !strings.Contains(r.stderr, msg) {
				t.Errorf("%s: the refused connection outside is not explained (%q) in stderr:\n%s", what, msg, r.stderr)
			}
		}
		check("run", hutch(t, o, "run", "--", "python3", "-c", loopbackScript))
		name := startSessionWith(t, o)
		check("session exec", hutch(t, o, "exec", name, "--", "python3", "-c", loopbackScript))
	})
}
