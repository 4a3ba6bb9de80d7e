package limits

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/plan"
)

func TestParseStatus(t *testing.T) {
	b := []byte("Name:\tpython3\nThreads:\t3\nVmRSS:\t  9000 kB\nRssAnon:\t  5000 kB\nRssFile:\t  3000 kB\nRssShmem:\t  1000 kB\nVmSwap:\t      24 kB\n")
	mem, threads := parseStatus(b)
	if mem != (5000+1000+24)<<10 || threads != 3 {
		t.Errorf("parseStatus = %d, %d", mem, threads)
	}
	// A zombie has no memory lines.
	if mem, threads := parseStatus([]byte("Name:\tsh\nState:\tZ (zombie)\nThreads:\t1\n")); mem != 0 || threads != 1 {
		t.Errorf("zombie: %d, %d", mem, threads)
	}
}

func TestParseRollup(t *testing.T) {
	b := []byte("00400000-7ffe [rollup]\nRss:  59508 kB\nPss:  55000 kB\nPss_Anon:  53976 kB\nPss_File:  1000 kB\nPss_Shmem:  24 kB\nSwapPss:  8 kB\n")
	if n, ok := parseRollup(b); !ok || n != (53976+24+8)<<10 {
		t.Errorf("parseRollup = %d, %v", n, ok)
	}
	// Before Linux 5.10: Pss, file pages included.
	if n, ok := parseRollup([]byte("Rss:  100 kB\nPss:  60 kB\nSwapPss:  4 kB\n")); !ok || n != 64<<10 {
		t.Errorf("old kernel: %d, %v", n, ok)
	}
	if _, ok := parseRollup(nil); ok {
		t.Error("empty rollup parsed")
	}
}

func TestParseStartTime(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	stat := "42 (a) b (c)) S 1 42 42 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10"
	if n, ok := parseStartTime([]byte(stat)); !ok || n != 987654 {
		t.Errorf("parseStartTime = %d, %v", n, ok)
	}
	if _, ok := parseStartTime([]byte("42 (x) S 1")); ok {
		t.Error("short stat parsed")
	}
}

// fakeProc is a directory laid out as the sandbox's procfs: one directory
// per pid with status, smaps_rollup, stat and ns/user.
type fakeProc struct {
	t   *testing.T
	dir string
}

type fakeTask struct {
	pid      int
	rssAnon  int64 // KiB, status
	pssAnon  int64 // KiB, smaps_rollup
	threads  int
	userNS   string
	start    uint64
	noRollup bool
}

func newFakeProc(t *testing.T, tasks ...fakeTask) *fakeProc {
	f := &fakeProc{t: t, dir: t.TempDir()}
	// Entries that are not processes, as in a real /proc.
	os.Mkdir(filepath.Join(f.dir, "acpi"), 0o755)
	os.WriteFile(filepath.Join(f.dir, "meminfo"), nil, 0o644)
	for _, k := range tasks {
		f.add(k)
	}
	return f
}

func (f *fakeProc) add(k fakeTask) {
	d := filepath.Join(f.dir, strconv.Itoa(k.pid))
	if err := os.MkdirAll(filepath.Join(d, "ns"), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if k.threads == 0 {
		k.threads = 1
	}
	if k.userNS == "" {
		k.userNS = "user:[2]"
	}
	if k.start == 0 {
		k.start = uint64(1000 + k.pid)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(d, name), []byte(s), 0o644); err != nil {
			f.t.Fatal(err)
		}
	}
	write("status", fmt.Sprintf("Name:\tx\nThreads:\t%d\nRssAnon:\t%d kB\nRssFile:\t500 kB\nRssShmem:\t0 kB\nVmSwap:\t0 kB\n", k.threads, k.rssAnon))
	if !k.noRollup {
		write("smaps_rollup", fmt.Sprintf("Rss: 1 kB\nPss: 1 kB\nPss_Anon: %d kB\nPss_Shmem: 0 kB\nSwapPss: 0 kB\n", k.pssAnon))
	}
	write("stat", fmt.Sprintf("%d (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 %d 0 %d 0 0", k.pid, k.threads, k.start))
	os.Remove(filepath.Join(d, "ns", "user"))
	if err := os.Symlink(k.userNS, filepath.Join(d, "ns", "user")); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fakeProc) remove(pid int) { os.RemoveAll(filepath.Join(f.dir, strconv.Itoa(pid))) }

// watchdog returns a watchdog over f that records kills instead of
// signalling, not started (its looks are called by the test).
func (f *fakeProc) watchdog(cfg plan.Watchdog, killed *[]int) *watchdog {
	p, err := os.Open(f.dir)
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { p.Close() })
	w := &watchdog{cfg: cfg, proc: p, killed: map[int]uint64{}}
	w.kill = func(dirfd int) error {
		b, ok := readAt(dirfd, "stat", make([]byte, 512))
		if !ok {
			return unix.ESRCH
		}
		var pid int
		fmt.Sscan(string(b), &pid)
		*killed = append(*killed, pid)
		return nil
	}
	return w
}

func TestWatchdogPids(t *testing.T) {
	f := newFakeProc(t, fakeTask{pid: 1}, fakeTask{pid: 2}, fakeTask{pid: 17}, fakeTask{pid: 123})
	w := f.watchdog(plan.Watchdog{}, nil)
	pids, err := w.pids()
	slices.Sort(pids)
	if err != nil || !slices.Equal(pids, []int{1, 2, 17, 123}) {
		t.Errorf("pids = %v, %v", pids, err)
	}
	// Again: the directory is read from its start each time.
	if pids, _ := w.pids(); len(pids) != 4 {
		t.Errorf("second look: %v", pids)
	}
}

// The memory limit is the sandbox's proportional set size: processes that
// share their pages after a fork (status says 4 x 300 MiB) are not killed;
// above the limit, the largest are, until the rest fit, never the init.
func TestWatchdogMemory(t *testing.T) {
	const MiB = 1024 // KiB
	var killed []int
	f := newFakeProc(t,
		fakeTask{pid: 1, rssAnon: 900 * MiB, pssAnon: 900 * MiB}, // the init (never killed, however large)
		fakeTask{pid: 2, rssAnon: 300 * MiB, pssAnon: 75 * MiB},
		fakeTask{pid: 3, rssAnon: 300 * MiB, pssAnon: 75 * MiB},
		fakeTask{pid: 4, rssAnon: 300 * MiB, pssAnon: 75 * MiB},
		fakeTask{pid: 5, rssAnon: 300 * MiB, pssAnon: 75 * MiB},
	)
	w := f.watchdog(plan.Watchdog{MemoryBytes: 1300 << 20}, &killed)
	w.look()
	if len(killed) != 0 || w.ev.OOMKills != 0 || w.ev.MemoryPeak != 1200<<20 {
		t.Fatalf("shared pages: killed %v, events %+v", killed, w.ev)
	}
	f.add(fakeTask{pid: 6, rssAnon: 200 * MiB, pssAnon: 200 * MiB})
	f.add(fakeTask{pid: 7, rssAnon: 150 * MiB, pssAnon: 150 * MiB})
	w.look() // 1550 MiB: 6 goes (1350 MiB left), then 7 (1200 MiB)
	if !slices.Equal(killed, []int{6, 7}) || w.ev.OOMKills != 2 {
		t.Fatalf("over the limit: killed %v, events %+v", killed, w.ev)
	}
	// Killed and still exiting: neither counted nor killed again.
	w.look()
	if len(killed) != 2 {
		t.Errorf("killed again: %v", killed)
	}
	// Gone: forgotten. A new process under the same pid is another one.
	f.remove(6)
	w.look()
	if _, ok := w.killed[6]; ok {
		t.Error("a process gone is still remembered")
	}
	f.add(fakeTask{pid: 7, rssAnon: 150 * MiB, pssAnon: 150 * MiB, start: 99999})
	w.look()
	if !slices.Equal(killed, []int{6, 7, 7}) {
		t.Errorf("a reused pid: killed %v", killed)
	}
}

// Without smaps_rollup (Linux < 4.14), status's sum is the measure.
func TestWatchdogMemoryNoRollup(t *testing.T) {
	var killed []int
	f := newFakeProc(t, fakeTask{pid: 1, rssAnon: 10}, fakeTask{pid: 2, rssAnon: 100 << 10, noRollup: true})
	w := f.watchdog(plan.Watchdog{MemoryBytes: 64 << 20}, &killed)
	w.look()
	if !slices.Equal(killed, []int{2}) {
		t.Errorf("killed %v", killed)
	}
}

// RLIMIT_NPROC counts threads in the commands' user namespace: the init is
// outside; in a session each namespace counts alone.
func TestWatchdogNproc(t *testing.T) {
	f := newFakeProc(t,
		fakeTask{pid: 1, userNS: "user:[1]"},
		fakeTask{pid: 2, userNS: "user:[2]"},
		fakeTask{pid: 3, threads: 3, userNS: "user:[2]"},
	)
	w := f.watchdog(plan.Watchdog{Nproc: 5}, nil)
	w.look()
	if w.ev.PidsReached != 0 {
		t.Fatalf("4 of 5: %+v", w.ev)
	}
	f.add(fakeTask{pid: 4, userNS: "user:[3]"})
	w.look()
	if w.ev.PidsReached != 1 {
		t.Errorf("5 of 5 in a one-off sandbox: %+v", w.ev)
	}
	w.cfg.PerNamespace = true
	w.look()
	if w.ev.PidsReached != 1 {
		t.Errorf("4 and 1 in two namespaces counted together: %+v", w.ev)
	}
}

// A command that left a tree at the limit behind reached it, whatever the
// looks saw; one below it did not.
func TestWatchdogLeft(t *testing.T) {
	w := newFakeProc(t, fakeTask{pid: 1, userNS: "user:[1]"}).watchdog(plan.Watchdog{Nproc: 67}, nil)
	w.left(64)
	if w.ev.PidsReached != 0 {
		t.Fatalf("64 left of 67: %+v", w.ev)
	}
	w.left(65)
	if w.ev.PidsReached != 1 {
		t.Errorf("65 left of 67 (with the command and its reaper, the limit): %+v", w.ev)
	}
	w = newFakeProc(t).watchdog(plan.Watchdog{MemoryBytes: 1 << 30}, nil)
	if w.left(1000); w.ev.PidsReached != 0 {
		t.Errorf("no process limit: %+v", w.ev)
	}
}

// The real procfs of this process's pid namespace: the parsers fit what
// the kernel writes.
func TestWatchdogRealProc(t *testing.T) {
	p, err := os.Open("/proc")
	if err != nil {
		t.Skip(err)
	}
	defer p.Close()
	w := &watchdog{proc: p, killed: map[int]uint64{}}
	pids, err := w.pids()
	if err != nil || !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("pids: %d of them, self missing or %v", len(pids), err)
	}
	buf := make([]byte, 8192)
	me, ok := w.status(os.Getpid(), buf)
	if !ok || me.threads < 1 || me.mem <= 0 {
		t.Errorf("own status: %+v", me)
	}
	if s, ok := w.startTime(os.Getpid(), buf); !ok || s == 0 {
		t.Errorf("own start time: %d %v", s, ok)
	}
	b, ok := readAt(int(p.Fd()), strconv.Itoa(os.Getpid())+"/smaps_rollup", buf)
	// status's counters are kept per CPU and folded in batches: they may
	// lag what smaps_rollup walks by a few pages.
	if n, ok2 := parseRollup(b); ok && (!ok2 || n <= 0 || n > me.mem+4<<20) {
		t.Errorf("own smaps_rollup: %d (status says %d)", n, me.mem)
	}
}
