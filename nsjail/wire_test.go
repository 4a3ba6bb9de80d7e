package nsjail

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/cgroup"
	"github.com/hutchsandbox/hutch/mounts"
)

// The setup message as the Go encoder makes it, read by init.c's own parser
// (hutch_parse_setup): every field arrives where the init looks for it.
func TestSetupGoToC(t *testing.T) {
	plan := &mounts.Plan{RootSize: 1 << 20, Stage: "/run/stage", Steps: []mounts.Step{
		{Kind: mounts.Bind, Source: "/usr", Target: "usr", ReadOnly: true, Optional: true, Why: "tooling"},
		{Kind: mounts.File, Target: "/etc/../etc/hosts", Data: "127.0.0.1 localhost\n", Mode: 0o644},
		{Kind: mounts.Tmpfs, Target: "/tmp", Size: 512 << 20, Mode: 0o1777},
		{Kind: mounts.Protect, Target: "/workspace/.git/hooks", NoSymlinks: true},
		{Kind: mounts.Overlay, Target: "/workspace", Lower: []string{"/home/u/ws", "/l2"}, Upper: "/s/up", Work: "/s/work"},
	}}
	m := &message{Op: opSetup, ID: 7, Setup: &Setup{
		Sandbox: testSandbox(plan, "hutch", 1000, 1001, true), Seccomp: []byte{1}, Timing: true,
		Rlimits: []cgroup.Rlimit{{Resource: 7, Cur: 4096, Max: 4096}, {Resource: 9, Cur: ^uint64(0), Max: ^uint64(0)}},
	}}
	b, err := m.encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := cDescribe(b, nil)
	if err != nil {
		t.Fatalf("init.c cannot parse the Go setup: %v", err)
	}
	hint, _ := EncodePlanHint(plan)
	want := fmt.Sprintf(`id=7
flags=%d
hostname=hutch
uid=1000
gid=1001
ports=3128,1080,53
plan_at=%d
rlimit=7:4096:4096
rlimit=9:18446744073709551615:18446744073709551615
root_size=1048576
stage=/run/stage
step=1,3,0,0,bind,/usr,/usr,/run/stage/usr,,tooling
step=7,0,644,0,file,,/etc/hosts,/run/stage/etc/hosts,127.0.0.1 localhost
,
step=2,0,1777,536870912,tmpfs,,/tmp,/run/stage/tmp,,
step=14,4,0,0,protect,,/workspace/.git/hooks,/run/stage/workspace/.git/hooks,,
step=17,0,0,0,overlay,,/workspace,/run/stage/workspace,,
lower=/home/u/ws
lower=/l2
upper=/s/up
work=/s/work
`, setupSeccomp|setupProxy|setupTiming, len(b)-len(hint))
	if got != want {
		t.Errorf("init.c read:\n%s\nwant:\n%s", got, want)
	}

	// Without a proxy the ports are zero; too many rlimits are refused on
	// the Go side, a truncated message on the C side.
	b, _ = (&message{Op: opSetup, Setup: &Setup{Sandbox: testSandbox(plan, "h", 1, 1, false)}}).encode()
	if got, err := cDescribe(b, nil); err != nil || !strings.Contains(got, "ports=0,0,0\n") || !strings.Contains(got, "flags=0\n") {
		t.Errorf("no proxy: %q, %v", got, err)
	}
	if _, err := cDescribe(b[:len(b)-3], nil); err == nil || !strings.Contains(err.Error(), "malformed") {
		t.Errorf("a truncated setup parsed: %v", err)
	}
	many := make([]cgroup.Rlimit, maxRlimits+1)
	if _, err := (&message{Op: opSetup, Setup: &Setup{Sandbox: testSandbox(plan, "h", 1, 1, false), Rlimits: many}}).encode(); err == nil {
		t.Error("more rlimits than the init holds were encoded")
	}
}

// A spawn request as the Go encoder makes it, read by init.c's parser (the
// init's and every reaper's).
func TestSpawnGoToC(t *testing.T) {
	sp := &Spawn{Argv: []string{"sh", "-c", "echo ü"}, Env: []string{"A=1", "B="}, Cwd: "/workspace/sub", Notify: true, Terminal: true}
	b, err := (&message{Op: opSpawn, ID: 12, Spawn: sp}).encode()
	if err != nil {
		t.Fatal(err)
	}
	payload, err := encodePayload(sp)
	if err != nil {
		t.Fatal(err)
	}
	got, err := cDescribe(b, payload)
	want := fmt.Sprintf("id=12\nflags=%d\ncwd=/workspace/sub\narg=sh\narg=-c\narg=echo ü\nenv=A=1\nenv=B=\n", spawnNotify|spawnTerminal)
	if err != nil || got != want {
		t.Errorf("init.c read %q, %v; want %q", got, err, want)
	}
	if _, err := cDescribe(b, payload[:len(payload)-1]); err == nil {
		t.Error("a truncated payload parsed")
	}
	if _, err := cDescribe(b, append(payload, 0)); err == nil {
		t.Error("a payload with trailing bytes parsed")
	}
	// A command line far beyond what one control message holds.
	big := &Spawn{Argv: []string{"echo", strings.Repeat("x", 128<<10), strings.Repeat("y", 128<<10)}, Env: []string{"Z=" + strings.Repeat("z", 100<<10)}}
	for range 8 {
		big.Argv = append(big.Argv, strings.Repeat("w", 100<<10))
	}
	if payload, err = encodePayload(big); err != nil {
		t.Fatal(err)
	}
	if got, err := cDescribe(b, payload); err != nil || strings.Count(got, "arg=") != len(big.Argv) {
		t.Errorf("a %d-byte payload: %d args read, %v", len(payload), strings.Count(got, "arg="), err)
	}
}

// What init.c's encoders send, read by the Go decoder.
func TestMessagesCToGo(t *testing.T) {
	m, err := decode(cSample(opReady))
	if err != nil || len(m.Timing) != 2 || m.Timing[0] != (Stage{"@entered", 123456789}) || m.Timing[1] != (Stage{"mounts.pivot", 42}) || m.Hint != hintUnused {
		t.Errorf("ready: %+v, %v", m, err)
	}
	m, err = decode(cSample(opFail))
	if err != nil || m.Errno != 28 || m.Step != failNamespaces || m.Error != "create the namespaces: no space left on device" {
		t.Errorf("fail: %+v, %v", m, err)
	}
	m, err = decode(cSample(opStarted))
	if err != nil || m.ID != 7 || m.Pid != 42 {
		t.Errorf("started: %+v, %v", m, err)
	}
	for _, op := range []uint32{opSpawnErr, opExit, opSpawnerReply, opSocketReply} {
		m, err = decode(cSample(op))
		if err != nil || m.Op != op || m.ID != 9 || m.Status != 0x0900 || m.Code != 127 || m.Errno != 2 || m.Error != "execute the command" || !m.Alone || m.Leftover != 33 {
			t.Errorf("op %d: %+v, %v", op, m, err)
		}
	}
}

// A socket request as the Go encoder makes it, read by init.c's parser;
// one with trailing bytes or an unknown family is refused.
func TestSocketGoToC(t *testing.T) {
	for fam, name := range map[uint32]string{socketInet: "inet", socketInet6: "inet6"} {
		b, err := (&message{Op: opSocket, ID: 31, Family: fam}).encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := cDescribeSocket(b)
		if want := "id=31\nfamily=" + name + "\n"; err != nil || got != want {
			t.Errorf("init.c read %q, %v; want %q", got, err, want)
		}
		if _, err := cDescribeSocket(append(b, 0)); err == nil {
			t.Error("a socket request with a trailing byte parsed")
		}
	}
	b, _ := (&message{Op: opSocket, Family: 9}).encode()
	if _, err := cDescribeSocket(b); err == nil {
		t.Error("a socket request of family 9 parsed")
	}
}
