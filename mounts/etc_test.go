package mounts

import (
	"slices"
	"strings"
	"testing"
)

// etcHost is a host whose /etc has what the mask and the synthesized files
// meet in the field: secrets, symlinks into /run and /usr, a loop.
var etcHost = MemFS{
	"/usr/bin/sh":                       {File: true},
	"/usr/lib/hosts.default":            {File: true},
	"/bin":                              {Link: "usr/bin"},
	"/etc/passwd":                       {File: true},
	"/etc/group":                        {Link: "group.real"},
	"/etc/group.real":                   {File: true},
	"/etc/hosts":                        {Link: "/usr/lib/hosts.default"},
	"/etc/resolv.conf":                  {Link: "../run/systemd/resolve/stub-resolv.conf"},
	"/etc/machine-id":                   {Link: "loop"},
	"/etc/loop":                         {Link: "machine-id"},
	"/etc/shadow":                       {File: true},
	"/etc/ssl/private/key.pem":          {File: true},
	"/etc/ssl/certs/ca.pem":             {File: true},
	"/etc/ssh/ssh_config":               {File: true},
	"/etc/ssh/ssh_host_ed25519_key":     {File: true},
	"/etc/ssh/ssh_host_ed25519_key.pub": {File: true},
	"/etc/java-17-openjdk/security/java.security": {File: true},
	"/etc/sudoers.d":                        {Link: "/usr/share/sudoers.d"},
	"/run/systemd/resolve/stub-resolv.conf": {File: true}, // the host's, not the sandbox's
	"/home/u/ws/main.go":                    {File: true},
	"/tmp":                                  {},
	"/dev/null":                             {File: true},
}

func etcPlan(t *testing.T, fsys MemFS, tooling string) *Plan {
	t.Helper()
	p, err := Build(&Spec{Tooling: tooling, Workspace: "/home/u/ws", WorkspaceMount: "/workspace", Home: "/home/sandbox",
		UID: 1000, GID: 1000, User: "sandbox", Hostname: "hutch", FS: fsys})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func steps(p *Plan, prefix string) []string {
	var out []string
	for _, s := range p.Steps {
		if strings.HasPrefix(s.Why, prefix) {
			out = append(out, string(s.Kind)+" "+s.Target)
		}
	}
	return out
}

// The host's /etc is bound as a whole; each synthesized file lands where
// its path resolves inside the sandbox, and the mask covers what exists.
func TestEtcHost(t *testing.T) {
	p := etcPlan(t, etcHost, "host")
	if s := find(p, Bind, "/etc"); s == nil || !s.ReadOnly || s.Source != "/etc" {
		t.Fatalf("/etc: %+v", s)
	}
	for _, s := range p.Steps {
		if s.Kind == Bind && strings.HasPrefix(s.Target, "/etc/") {
			t.Errorf("an /etc entry is bound on its own: %+v", s)
		}
	}
	want := []string{
		"cover /etc/passwd",
		"cover /etc/group.real",                      // through a relative symlink
		"cover /usr/lib/hosts.default",               // through an absolute one, into the tooling
		"file /run/systemd/resolve/stub-resolv.conf", // into hutch's own root
		// machine-id: a loop, left alone; hostname: the host has none.
	}
	if got := steps(p, "synthesized"); !slices.Equal(got, want) {
		t.Errorf("synthesized:\n got %q\nwant %q", got, want)
	}
	if want := []string{"/etc/passwd", "/etc/group.real", "/usr/lib/hosts.default", "/run/systemd/resolve/stub-resolv.conf"}; !slices.Equal(p.Synthesized, want) {
		t.Errorf("Synthesized %q, want %q", p.Synthesized, want)
	}
	wantMask := []string{
		"mask-file /etc/shadow",
		"mask-file /etc/ssh/ssh_host_ed25519_key",
		"mask-file /etc/ssh/ssh_host_ed25519_key.pub",
		"mask-dir /etc/ssl/private",
		// sudoers.d leads to /usr/share/sudoers.d, which does not exist.
	}
	if got := steps(p, "masked /etc"); !slices.Equal(got, wantMask) {
		t.Errorf("masks:\n got %q\nwant %q", got, wantMask)
	}
	// The resolv.conf in hutch's root is readable under Landlock (the rest
	// are under /etc's and the tooling's grants).
	if s := find(p, File, "/run/systemd/resolve/stub-resolv.conf"); s == nil || !strings.HasPrefix(s.Data, "nameserver 127.0.0.1") {
		t.Errorf("resolv.conf: %+v", s)
	}
	// The mask and the synthesized files come after every mount they may
	// lead into (/run, the tooling) and before the workspace.
	at := func(kind Kind, target string) int {
		return slices.IndexFunc(p.Steps, func(s Step) bool { return s.Kind == kind && s.Target == target })
	}
	if f, run, ws := at(File, "/run/systemd/resolve/stub-resolv.conf"), at(Mkdir, "/run"), at(Bind, "/workspace"); !(run < f && f < ws) {
		t.Errorf("order: /run %d, resolv.conf %d, workspace %d", run, f, ws)
	}
}

// A tree without /etc gets one of hutch's own, with every synthesized file.
func TestEtcRootfsWithoutEtc(t *testing.T) {
	p := etcPlan(t, MemFS{"/srv/root/usr/bin/app": {File: true}, "/tmp": {}, "/dev/null": {File: true}}, "rootfs:/srv/root")
	if find(p, Mkdir, "/etc") == nil || find(p, Bind, "/etc") != nil {
		t.Fatal("no /etc of hutch's own")
	}
	for _, n := range EtcSynthesized {
		if find(p, File, "/etc/"+n) == nil {
			t.Errorf("/etc/%s is not synthesized", n)
		}
	}
}

// A rootfs's /etc symlinks resolve inside the sandbox, never on the host:
// an absolute link leads into the rootfs's tree, not the host's.
func TestEtcRootfsSymlinks(t *testing.T) {
	p := etcPlan(t, MemFS{
		"/srv/root/usr/bin/sh":         {File: true},
		"/srv/root/usr/lib/os-release": {File: true},
		"/srv/root/etc/passwd":         {Link: "/usr/lib/passwd"}, // missing in the rootfs
		"/srv/root/etc/hosts":          {Link: "/etc/../../../usr/lib/os-release"},
		"/usr/lib/passwd":              {File: true}, // the host's: must not count
		"/tmp":                         {},
		"/dev/null":                    {File: true},
	}, "rootfs:/srv/root")
	if want, got := []string{"cover /usr/lib/os-release"}, steps(p, "synthesized"); !slices.Equal(got, want) {
		t.Errorf("synthesized %q, want %q", got, want)
	}
}

// The machine-id is the workspace's, not random (plans are compared) and
// not the host's.
func TestMachineID(t *testing.T) {
	a, b := machineID("/home/u/a"), machineID("/home/u/b")
	if len(a) != 32 || a == b || a != machineID("/home/u/a") || strings.Trim(a, "0123456789abcdef") != "" {
		t.Errorf("machine ids %q %q", a, b)
	}
}
