package nsjail

import (
	"bytes"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/plan"
)

func testSandbox(m *mounts.Plan, hostname string, uid, gid int, proxy bool) *plan.Sandbox {
	sb := &plan.Sandbox{Mounts: m, Identity: plan.Identity{Hostname: hostname, UID: uid, GID: gid}}
	if proxy {
		sb.Network.Proxy = &plan.Proxy{HTTP: 3128, SOCKS: 1080, DNS: 53}
	}
	return sb
}

// The plan hint is the setup's plan exactly as the setup carries it, at its
// end: the init compares the two byte for byte (init.c).
func TestPlanHintIsTheSetupsTail(t *testing.T) {
	plan := &mounts.Plan{RootSize: 4 << 20, Stage: "/tmp", Steps: []mounts.Step{
		{Kind: mounts.Bind, Source: "/usr", Target: "/usr", ReadOnly: true},
		{Kind: mounts.Bind, Source: "/home/u/proj", Target: "/workspace"},
		{Kind: mounts.Pin, Target: "/workspace/.git", NoSymlinks: true},
	}}
	setup, err := (&message{Op: opSetup, Setup: &Setup{Sandbox: testSandbox(plan, "h", 1000, 1000, false)}}).encode()
	if err != nil {
		t.Fatal(err)
	}
	hint, err := EncodePlanHint(plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(hint) == 0 || !bytes.HasSuffix(setup, hint) {
		t.Fatalf("hint (%d bytes) is not the setup's tail (%d bytes)", len(hint), len(setup))
	}
	other := *plan
	other.Stage = "/mnt"
	if h2, _ := EncodePlanHint(&other); bytes.Equal(h2, hint) {
		t.Error("two plans encode to one hint")
	}
}

// Every mount step kind has a number the C executor knows (1..HUTCH_STEP_KINDS).
func TestEveryStepKindIsNumbered(t *testing.T) {
	kinds := []mounts.Kind{mounts.Bind, mounts.Tmpfs, mounts.Proc, mounts.Devpts, mounts.Sysfs, mounts.Mkdir, mounts.File,
		mounts.Symlink, mounts.MaskFile, mounts.MaskDir, mounts.ReadOnly, mounts.Pin, mounts.Seal, mounts.Protect, mounts.Hide, mounts.Cover, mounts.Overlay}
	seen := map[uint32]bool{}
	for _, k := range kinds {
		n, ok := stepKinds[k]
		if !ok || n < 1 || n > maxStepKind || seen[n] {
			t.Errorf("kind %q: number %d (known %v)", k, n, ok)
		}
		seen[n] = true
	}
	if len(stepKinds) != len(kinds) {
		t.Errorf("stepKinds has %d entries, mounts has %d kinds", len(stepKinds), len(kinds))
	}
}

// A NUL byte cannot travel in a C string: the encoder refuses it instead of
// letting the init read a shorter argument.
func TestEncodeRefusesNUL(t *testing.T) {
	for _, sp := range []*Spawn{
		{Argv: []string{"sh", "-c", "a\x00b"}},
		{Argv: []string{"true"}, Env: []string{"X=\x00"}},
		{Argv: []string{"true"}, Cwd: "/work\x00space"},
	} {
		if _, err := encodePayload(sp); err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Errorf("spawn %q: err %v, want a NUL error", sp.Argv, err)
		}
	}
	if _, err := (&message{Op: opReady}).encode(); err == nil {
		t.Error("the supervisor encoded an init-only message")
	}
}

// The spawn and spawner requests carry their flags where init.c reads them:
// the first u32 after the header.
func TestEncodeSpawnerFlags(t *testing.T) {
	for _, c := range []struct {
		m    *message
		want uint32
	}{
		{&message{Op: opSpawn, Spawn: &Spawn{Argv: []string{"true"}, ViaSpawner: true}}, spawnViaSpawner},
		{&message{Op: opSpawn, Spawn: &Spawn{Argv: []string{"true"}, Notify: true}}, spawnNotify},
		{&message{Op: opSpawn, Spawn: &Spawn{Argv: []string{"true"}, Terminal: true, ViaSpawner: true}}, spawnTerminal | spawnViaSpawner},
		{&message{Op: opSpawner, SpawnerNotify: true}, spawnerNotify},
		{&message{Op: opSpawner}, 0},
	} {
		b, err := c.m.encode()
		if err != nil {
			t.Fatal(err)
		}
		d := &dec{b: b[16:]}
		if got := d.u32(); got != c.want || d.bad {
			t.Errorf("op %d: flags %d, want %d", c.m.Op, got, c.want)
		}
	}
}

// appendMsg builds an init -> supervisor message the way init.c does.
func appendMsg(op uint32, id uint64, fields ...any) []byte {
	e := &enc{}
	e.u32(op)
	e.u32(0)
	e.i64(int64(id))
	for _, f := range fields {
		switch v := f.(type) {
		case uint32:
			e.u32(v)
		case int64:
			e.i64(v)
		case string:
			e.str("field", v)
		}
	}
	return e.b
}

func TestDecodeInitMessages(t *testing.T) {
	m, err := decode(appendMsg(opExit, 3, int64(9), int64(127), int64(2), "execute the command", uint32(1), uint32(12)))
	if err != nil || m.Op != opExit || m.ID != 3 || m.Status != 9 || m.Code != 127 || m.Errno != 2 || m.Error != "execute the command" || !m.Alone || m.Leftover != 12 {
		t.Errorf("exit: %+v, %v", m, err)
	}
	m, err = decode(appendMsg(opReady, 0, uint32(2), "init.net", int64(150), "mounts.steps", int64(2400), uint32(hintUsed)))
	if err != nil || len(m.Timing) != 2 || m.Timing[1] != (Stage{"mounts.steps", 2400}) || hintState(m.Hint) != "used" {
		t.Errorf("ready: %+v, %v", m, err)
	}
	m, err = decode(appendMsg(opStarted, 5, int64(42)))
	if err != nil || m.Pid != 42 {
		t.Errorf("started: %+v, %v", m, err)
	}
	// The spawner's reply has the spawn error's fields (init.c writes it
	// with the same calls).
	m, err = decode(appendMsg(opSpawnerReply, 0, int64(0), int64(125), int64(0), "create the commands' user namespace: x", uint32(0), uint32(0)))
	if err != nil || m.Op != opSpawnerReply || m.Code != 125 || m.Error != "create the commands' user namespace: x" {
		t.Errorf("spawner reply: %+v, %v", m, err)
	}
	m, err = decode(appendMsg(opSpawnErr, 7, int64(0), int64(codeNoSpawner), int64(0), "the session's spawner is gone", uint32(0), uint32(0)))
	if err != nil || m.Code != codeNoSpawner {
		t.Errorf("no spawner: %+v, %v", m, err)
	}
	for name, b := range map[string][]byte{
		"short header":  {1, 0, 0},
		"unknown op":    appendMsg(99, 0),
		"truncated":     appendMsg(opExit, 1, int64(0)),
		"string length": append(appendMsg(opFail, 0, int64(0), failOther), 0xff, 0xff, 0, 0, 'x'),
		"no final NUL":  append(appendMsg(opFail, 0, int64(0), failOther), 1, 0, 0, 0, 'x', 'y'),
		"NUL inside":    append(appendMsg(opFail, 0, int64(0), failOther), 2, 0, 0, 0, 'x', 0, 0),
		"fail, no step": appendMsg(opFail, 0, int64(28)),
	} {
		if _, err := decode(b); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

// Whatever the init sends, decoding returns an error or a message; it never
// panics or reads past the packet.
func FuzzDecode(f *testing.F) {
	f.Add(appendMsg(opExit, 3, int64(9), int64(127), int64(2), "x", uint32(0)))
	f.Add(appendMsg(opReady, 0, uint32(1), "a", int64(1)))
	f.Add(appendMsg(opFail, 0, int64(28), failNamespaces, "setup failed"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = decode(b)
	})
}

// An init's failure gets namespace-limit advice only when it is an ENOSPC
// from creating namespaces, as the FAIL message says (errno and the kind of
// step, not the wording); other failures pass unchanged.
func TestDiagnoseInitFailure(t *testing.T) {
	dec := func(errno int64, step uint32, msg string) *message {
		m, err := decode(appendMsg(opFail, 0, errno, step, msg))
		if err != nil || m.Op != opFail || m.Errno != int(errno) || m.Step != step || m.Error != msg {
			t.Fatalf("decode a FAIL: %+v, %v", m, err)
		}
		return m
	}
	plain := "start the sandbox's init: write /proc/self/uid_map: operation not permitted"
	if got := diagnoseInitFailure(dec(int64(unix.EPERM), failOther, plain)); got != plain {
		t.Errorf("diagnoseInitFailure(%q) = %q, want it unchanged", plain, got)
	}
	full := "build: no space left on device"
	if got := diagnoseInitFailure(dec(int64(unix.ENOSPC), failOther, full)); got != full {
		t.Errorf("an ENOSPC that is not about namespaces got advice: %q", got)
	}
	ns := "start the sandbox's init: create the mount, network, IPC, UTS and cgroup namespaces: no space left on device"
	if got := diagnoseInitFailure(dec(int64(unix.EPERM), failNamespaces, ns)); got != ns {
		t.Errorf("a namespace failure other than ENOSPC got advice: %q", got)
	}
	ovl := "build the sandbox's root filesystem: overlay /opt (tooling rootfs (overlay of the image's layers)): mount overlayfs (upper none): invalid argument"
	if got := diagnoseInitFailure(dec(int64(unix.EINVAL), failOther, ovl)); !strings.HasPrefix(got, ovl+": ") || !strings.Contains(got, "HUTCH_IMAGE_ROOT=flattened") {
		t.Errorf("a refused overlay of an image's layers: %q, want the way out (HUTCH_IMAGE_ROOT=flattened)", got)
	}
	got := diagnoseInitFailure(dec(int64(unix.ENOSPC), failNamespaces, "any wording"))
	if !strings.HasPrefix(got, "any wording: ") || !strings.Contains(got, "raise it") || !strings.Contains(got, "user.max_") {
		t.Errorf("diagnoseInitFailure of an ENOSPC creating namespaces = %q, want the limit named and how to raise it", got)
	}
}
