package cgroup

import (
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Tests that need no cgroup: names, words, rlimits, parsing and the cgroup
// v2 placement logic on a fake tree.

func TestLeafName(t *testing.T) {
	n := leafName(1234, 98765, "run-1")
	if n != "hutch-1234-98765-run-1" {
		t.Fatalf("leafName = %q", n)
	}
	pid, start, name, ok := parseLeafName(n)
	if !ok || pid != 1234 || start != 98765 || name != "run-1" {
		t.Fatalf("parseLeafName(%q) = %d %d %q %v", n, pid, start, name, ok)
	}
	for _, bad := range []string{
		"hutch-test.scope", // the VM tier's scope: not ours
		"hutch-1-2-x.scope",
		"hutch-1-2-",
		"hutch-1-2",
		"hutch-x-2-a",
		"hutch-0-2-a",
		"hutch--2-a",
		"hutch-1--a",
		"hutchx-1-2-a",
		"user@1000.service",
		"hutch-1-2-" + strings.Repeat("a", 65),
	} {
		if _, _, _, ok := parseLeafName(bad); ok {
			t.Errorf("parseLeafName(%q) accepted", bad)
		}
	}
	for _, bad := range []string{"", "a/b", "a.b", "..", "a b", strings.Repeat("x", 65)} {
		if validName(bad) {
			t.Errorf("validName(%q) = true", bad)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for n, want := range map[int64]string{
		512 << 20: "512MiB", 1 << 30: "1GiB", 1536 << 10: "1536KiB", 3 << 40: "3TiB",
		1000000: "1000000B", 0: "0B", 1536 << 20: "1536MiB",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestMessages(t *testing.T) {
	user := Limits{MemoryBytes: 512 << 20, Pids: 256, CPUs: 0.5}
	e := Events{OOMKills: 1, PidsMaxHits: 3, CPUThrottled: 14, CPUThrottledUsec: 1200000}
	got := e.Messages(user)
	want := []string{
		"hutch: killed: memory limit 512MiB exceeded",
		"hutch: process limit 256 reached: 3 forks refused",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Messages = %q, want %q", got, want)
	}
	if got := (Events{PidsMaxHits: 1}).Messages(user); !slices.Equal(got, []string{"hutch: process limit 256 reached: 1 fork refused"}) {
		t.Errorf("Messages = %q", got)
	}
	if got := (Events{}).Messages(user); len(got) != 0 {
		t.Errorf("no events: Messages = %q", got)
	}
	if got, want := e.CPUNote(user), "hutch: cpu limit 0.5 cores: throttled 1.2s in 14 periods"; got != want {
		t.Errorf("CPUNote = %q, want %q", got, want)
	}
	if got := (Events{}).CPUNote(user); got != "" {
		t.Errorf("CPUNote without throttling = %q", got)
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, l := range []Limits{{MemoryBytes: -1}, {Pids: -1}, {CPUs: -0.5}} {
		if err := l.validate(); err == nil {
			t.Errorf("%+v: no error", l)
		}
	}
	if cpuQuota(0.5) != 50000 || cpuQuota(2) != 200000 || cpuQuota(0.001) != 1000 {
		t.Errorf("cpuQuota: %d %d %d", cpuQuota(0.5), cpuQuota(2), cpuQuota(0.001))
	}
}

func TestRlimits(t *testing.T) {
	got := Rlimits(Limits{MemoryBytes: 4 << 30, Pids: 256, CPUs: 2}, 1<<30, 1024)
	want := []Rlimit{
		{unix.RLIMIT_NOFILE, 1024, 1024},
		{unix.RLIMIT_FSIZE, 1 << 30, 1 << 30},
		{unix.RLIMIT_NPROC, 256, 256},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Rlimits = %v, want %v", got, want)
	}
	// Memory is the watchdog's (package limits): no per-process rlimit.
	if r := Rlimits(Limits{MemoryBytes: 64 << 20}, 0, 0); len(r) != 0 {
		t.Errorf("no limits: %v", r)
	}
	if c := CPUTime(10); c.Name() != "RLIMIT_CPU" || c.Cur != 10 || c.Max != 11 {
		t.Errorf("CPUTime: %v", c)
	}
}

func TestParseMountinfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "mountinfo")
	os.WriteFile(p, []byte(`24 30 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
30 24 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
33 24 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw,nosuid shared:15 - cgroup cgroup rw,cpu,cpuacct
34 24 0:30 / /sys/fs/cgroup/memory rw,nosuid shared:16 - cgroup cgroup rw,memory
35 24 0:31 / /mnt/with\040space rw - ext4 /dev/sda1 rw
`), 0o644)
	ms, err := parseMountinfo(p)
	if err != nil || len(ms) != 5 {
		t.Fatalf("parseMountinfo: %v %v", ms, err)
	}
	if m, ok := findV1Mount(ms, "cpu"); !ok || m.point != "/sys/fs/cgroup/cpu,cpuacct" || m.root != "/docker/abc" {
		t.Errorf("cpu mount: %+v %v", m, ok)
	}
	if _, ok := findV1Mount(ms, "pids"); ok {
		t.Errorf("found a pids mount")
	}
	if ms[4].point != "/mnt/with space" {
		t.Errorf("unescape: %q", ms[4].point)
	}
	if got := relToMount("/docker/abc/x", "/docker/abc"); got != "/x" {
		t.Errorf("relToMount = %q", got)
	}
	if got := relToMount("/docker/abcd", "/docker/abc"); got != "/docker/abcd" {
		t.Errorf("relToMount prefix = %q", got)
	}
	if got := relToMount("/a", "/"); got != "/a" {
		t.Errorf("relToMount root = %q", got)
	}
}

// fakeCgroup makes a directory that looks like a cgroup v2 cgroup.
func fakeCgroup(t *testing.T, dir, controllers, subtree string, pids ...int) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var procs []string
	for _, p := range pids {
		procs = append(procs, strconv.Itoa(p))
	}
	for f, v := range map[string]string{
		"cgroup.controllers":     controllers,
		"cgroup.subtree_control": subtree,
		"cgroup.procs":           strings.Join(procs, "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestPlanV2(t *testing.T) {
	self := os.Getpid()
	foreign := 1
	if parentPid(1) == self || self == 1 {
		t.Skip("cannot find a foreign pid")
	}
	all := "cpuset cpu io memory pids"
	t.Run("parent with controllers enabled", func(t *testing.T) {
		m := t.TempDir()
		fakeCgroup(t, m, all, all)
		fakeCgroup(t, m+"/user.slice", all, "memory pids")
		fakeCgroup(t, m+"/user.slice/app.slice", "memory pids", "memory pids")
		fakeCgroup(t, m+"/user.slice/app.slice/term.scope", "memory pids", "", foreign, self)
		plan, tried, why := planV2(m, "/user.slice/app.slice/term.scope", "")
		if plan == nil || plan.base != m+"/user.slice/app.slice" || plan.moveSelf || !slices.Equal(plan.ctrls, []string{"memory", "pids"}) {
			t.Fatalf("plan %+v, why %q, tried %q", plan, why, tried)
		}
		if len(tried) != 2 || !strings.Contains(tried[0], "no-internal-process") {
			t.Errorf("tried: %q", tried)
		}
	})
	t.Run("own cgroup holding only hutch", func(t *testing.T) {
		m := t.TempDir()
		fakeCgroup(t, m, all, all)
		fakeCgroup(t, m+"/svc", all, "", self)
		plan, tried, _ := planV2(m, "/svc", "")
		if plan == nil || plan.base != m+"/svc" || !plan.moveSelf || !slices.Equal(plan.ctrls, []string{"memory", "pids", "cpu"}) {
			t.Fatalf("plan %+v, tried %q", plan, tried)
		}
	})
	t.Run("after moving into the supervisor leaf", func(t *testing.T) {
		m := t.TempDir()
		fakeCgroup(t, m, all, all)
		fakeCgroup(t, m+"/svc", all, "memory pids cpu")
		leaf := "/svc/" + leafName(self, startTime(self), supervisorName)
		fakeCgroup(t, m+leaf, "memory pids cpu", "", self)
		plan, tried, _ := planV2(m, leaf, "")
		if plan == nil || plan.base != m+"/svc" || plan.moveSelf {
			t.Fatalf("plan %+v, tried %q", plan, tried)
		}
	})
	t.Run("nothing usable", func(t *testing.T) {
		m := t.TempDir()
		fakeCgroup(t, m, all, "cpu")
		fakeCgroup(t, m+"/a", "cpu", "")
		fakeCgroup(t, m+"/a/b", "", "", foreign)
		plan, tried, why := planV2(m, "/a/b", "")
		if plan != nil || len(tried) != 3 || !strings.Contains(why, "/a/b") {
			t.Fatalf("plan %+v, why %q, tried %q", plan, why, tried)
		}
		t.Logf("why: %s", why)
	})
	t.Run("parent option", func(t *testing.T) {
		m := t.TempDir()
		fakeCgroup(t, m, all, all)
		fakeCgroup(t, m+"/mine", all, "memory pids cpu")
		fakeCgroup(t, m+"/other", all, "", foreign)
		plan, _, why := planV2(m, "/other", "/mine")
		if plan == nil || plan.base != m+"/mine" {
			t.Fatalf("plan %+v, why %q", plan, why)
		}
	})
}

func TestProbe(t *testing.T) {
	h := Probe()
	t.Logf("Probe:\n%s", h)
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("JSON: %s", b)
	if h.Backend == "" || h.Reason == "" || h.Mode == "" {
		t.Errorf("incomplete: %+v", h)
	}
	if h.Backend == BackendRlimit && len(h.Where) > 0 {
		t.Errorf("rlimit with places: %v", h.Where)
	}
	if h.Backend != BackendRlimit && !slices.Contains(h.Controllers, "memory") {
		t.Errorf("backend %s without memory: %v", h.Backend, h.Controllers)
	}
}

func TestUserBus(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "bus")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("unix socket: %v", err)
	}
	defer l.Close()
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path="+sock+",guid=1234")
	if got := userBus(os.Getuid()); got != sock {
		t.Errorf("userBus from DBUS_SESSION_BUS_ADDRESS = %q, want %q", got, sock)
	}
	t.Setenv("DBUS_SESSION_BUS_ADDRESS", "")
	t.Setenv("XDG_RUNTIME_DIR", dir)
	if got := userBus(os.Getuid()); got != sock {
		t.Errorf("userBus from XDG_RUNTIME_DIR = %q, want %q", got, sock)
	}
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	if got := userBus(os.Getuid()); got != "" {
		t.Errorf("userBus without a socket = %q", got)
	}
}

func TestParseProcCgroup(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "cgroup")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1, v2, err := parseProcCgroup(write("12:pids:/user.slice/u\n5:cpu,cpuacct:/a\n1:name=systemd:/s\n0::/user.slice/x.scope\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"pids": "/user.slice/u", "cpu": "/a", "cpuacct": "/a", "name=systemd": "/s"}
	if !reflect.DeepEqual(v1, want) || v2 != "/user.slice/x.scope" {
		t.Fatalf("got %v %q, want %v %q", v1, v2, want, "/user.slice/x.scope")
	}
	// A pure v2 host: no v1 entries.
	v1, v2, err = parseProcCgroup(write("0::/\n"))
	if err != nil || len(v1) != 0 || v2 != "/" {
		t.Fatalf("v2 only: got %v %q %v", v1, v2, err)
	}
	// A path may contain ':'.
	_, v2, err = parseProcCgroup(write("0::/a:b\n"))
	if err != nil || v2 != "/a:b" {
		t.Fatalf("colon in path: got %q %v", v2, err)
	}
	if _, _, err = parseProcCgroup(write("garbage\n")); err == nil || !strings.Contains(err.Error(), "garbage") {
		t.Fatalf("malformed line: err %v", err)
	}
}

func TestHostMode(t *testing.T) {
	m := hostMode()
	var st unix.Statfs_t
	switch err := unix.Statfs("/sys/fs/cgroup", &st); {
	case err != nil:
		if m != modeNone {
			t.Fatalf("no /sys/fs/cgroup but mode %q", m)
		}
	case st.Type == unix.CGROUP2_SUPER_MAGIC:
		if m != modeV2 {
			t.Fatalf("/sys/fs/cgroup is cgroup2 but mode %q", m)
		}
	default:
		if m != modeV1 && m != modeHybrid {
			t.Fatalf("/sys/fs/cgroup is not cgroup2 but mode %q", m)
		}
	}
	// The mode agrees with what /proc/self/cgroup lists.
	v1, v2, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if m == modeV2 && len(v1) > 0 {
		t.Fatalf("mode v2 but v1 hierarchies %v", v1)
	}
	if (m == modeV1 || m == modeHybrid) && len(v1) == 0 {
		t.Fatalf("mode %s but no v1 hierarchy in /proc/self/cgroup (v2 %q)", m, v2)
	}
}
