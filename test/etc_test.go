package test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// /etc is the host's, read-only, minus the mask: toolchains find their
// configuration (javac its java.security, git the system gitconfig),
// credentials and keys read empty, and the identity and network files are
// the sandbox's own. As root too, where the host's /etc/shadow would be
// readable without the mask.
func TestEtcIsTheHostsMinusTheMask(t *testing.T) {
	hostEntries, err := os.ReadDir("/etc")
	if err != nil {
		t.Fatal(err)
	}
	hostID, _ := os.ReadFile("/etc/machine-id")
	hostKeys, _ := filepath.Glob("/etc/ssh/ssh_host_*")
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		o.dir = ws
		r := hutch(t, o, "run", "--", "/bin/sh", "-c", `
ls -A /etc | wc -l
grep -c '^security.provider' /etc/java-17-openjdk/security/java.security
echo "shadow $(wc -c </etc/shadow) gshadow $(wc -c </etc/gshadow)"
echo "private $(ls -A /etc/ssl/private | wc -l)"
for k in /etc/ssh/ssh_host_*; do [ -s "$k" ] && echo "KEY READABLE $k"; done
echo "machine-id $(cat /etc/machine-id)"
echo "hostname $(cat /etc/hostname)"
grep -c '^nameserver 127.0.0.1$' /etc/resolv.conf
id -un
touch /etc/hutch-x 2>&1 | sed 's/.*: //'
echo "certs $(ls /etc/ssl/certs | wc -l)"
`)
		mustCode(t, r, 0)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if len(lines) < 10 {
			t.Fatalf("output:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
		// The host's entries, plus none of hutch's own: every synthesized
		// file covers one of the host's here.
		if want := len(hostEntries); lines[0] != strconv.Itoa(want) {
			t.Errorf("/etc has %s entries inside, the host's has %d", lines[0], want)
		}
		if lines[1] == "0" {
			t.Errorf("javac's java.security is not the host's: %s", lines[1])
		}
		for _, want := range []string{"shadow 0 gshadow 0", "private 0", "hostname hutch", "sandbox", "Read-only file system"} {
			if !strings.Contains(r.stdout, want+"\n") {
				t.Errorf("missing %q in:\n%s\nstderr:\n%s", want, r.stdout, r.stderr)
			}
		}
		if strings.Contains(r.stdout, "KEY READABLE") {
			t.Errorf("a host key is readable inside:\n%s", r.stdout)
		}
		if len(hostKeys) == 0 {
			t.Log("this host has no ssh host keys; their mask is checked by the unit tests only")
		}
		if id := strings.TrimSpace(string(hostID)); id != "" && strings.Contains(r.stdout, id) {
			t.Errorf("the host's machine-id is visible inside")
		}
		if !strings.Contains(r.stdout, "machine-id ") || len(strings.TrimSpace(strings.SplitN(strings.SplitN(r.stdout, "machine-id ", 2)[1], "\n", 2)[0])) != 32 {
			t.Errorf("no machine-id of the sandbox's own:\n%s", r.stdout)
		}
		if strings.Contains(r.stdout, "certs 0\n") {
			t.Errorf("the host's CA certificates are not visible")
		}
	})
}
