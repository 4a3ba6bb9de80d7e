package seclog

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// readLines returns the lines of path, or nil when it does not exist.
func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return lines
}

func record(l *Log, writer, i int) {
	NewRecorder(l, fmt.Sprintf("w%d", writer), []string{"cmd"}).Record(Event{
		Kind: KindSeccomp, Subject: "keyctl", Message: fmt.Sprintf("event %d of writer %d", i, writer), Level: slog.LevelWarn})
}

// The log is rotated by size: security.log.1 is the newest old file; only
// Keep old files stay.
func TestRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "security.log")
	l, err := OpenRotating(path, Rotation{MaxSize: 1000, Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 100 {
		record(l, 0, i)
	}
	var total int
	for _, name := range []string{"", ".1", ".2", ".3"} {
		lines := readLines(t, path+name)
		if len(lines) == 0 {
			t.Errorf("%s is missing or empty", path+name)
		}
		fi, _ := os.Stat(path + name)
		if name != "" && fi != nil && fi.Size() > 1000+400 {
			t.Errorf("%s has %d bytes, more than the limit and one record", path+name, fi.Size())
		}
		total += len(lines)
	}
	if _, err := os.Stat(path + ".4"); err == nil {
		t.Errorf("%s.4 exists: more than Keep old files", path)
	}
	// The newest event is last in the live file.
	if lines := readLines(t, path); len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "event 99 of writer 0") {
		t.Errorf("the live file does not end with the last event: %q", lines)
	}
	if total >= 100 {
		t.Errorf("%d events in 4 files of ~1000 bytes: nothing was dropped", total)
	}
}

const writers, events, maxSize = 8, 400, 8 << 10

// Several writers append concurrently, each with its own open file (flock
// and O_APPEND act per open file, so these are as separate processes, and
// one process's descriptor numbers are reused among them): no record is
// lost, torn or written twice, and rotation happens once per full file,
// not once per writer that notices it.
func TestRotationConcurrentWriters(t *testing.T) {
	path := filepath.Join(t.TempDir(), "security.log")
	var wg sync.WaitGroup
	for w := range writers {
		l, err := OpenRotating(path, Rotation{MaxSize: maxSize, Keep: 1000})
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range events {
				record(l, w, i)
			}
		}()
	}
	wg.Wait()
	checkRotated(t, path)
}

// The same with writers in processes of their own, as hutch runs are.
func TestRotationConcurrentProcesses(t *testing.T) {
	if w := os.Getenv("SECLOG_TEST_WRITER"); w != "" {
		var n int
		fmt.Sscan(w, &n)
		l, err := OpenRotating(os.Getenv("SECLOG_TEST_PATH"), Rotation{MaxSize: maxSize, Keep: 1000})
		if err != nil {
			t.Fatal(err)
		}
		for i := range events {
			record(l, n, i)
		}
		l.Close()
		return
	}
	path := filepath.Join(t.TempDir(), "security.log")
	var cmds []*exec.Cmd
	for w := range writers {
		cmd := exec.Command(os.Args[0], "-test.run=^TestRotationConcurrentProcesses$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("SECLOG_TEST_WRITER=%d", w), "SECLOG_TEST_PATH="+path)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	for _, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("writer: %v", err)
		}
	}
	checkRotated(t, path)
}

// checkRotated checks the log at path and its rotated files against what
// the writers wrote.
func checkRotated(t *testing.T, path string) {
	t.Helper()
	const max = maxSize
	seen := map[string]bool{}
	files := 0
	for n := 0; ; n++ {
		name := path
		if n > 0 {
			name = fmt.Sprintf("%s.%d", path, n)
		}
		lines := readLines(t, name)
		if lines == nil {
			break
		}
		files++
		fi, _ := os.Stat(name)
		if fi.Size() > max+writers*300 {
			t.Errorf("%s has %d bytes: more than the limit and one record per writer", name, fi.Size())
		}
		for _, line := range lines {
			var ev struct{ Msg string }
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("%s: a torn record: %q", name, line)
			}
			if seen[ev.Msg] {
				t.Errorf("%q written twice", ev.Msg)
			}
			seen[ev.Msg] = true
		}
	}
	if len(seen) != writers*events {
		t.Errorf("%d events in the files, want %d", len(seen), writers*events)
	}
	// ~100 bytes a record: about writers*events*100/max files; a rotation
	// per writer that noticed a full file would make many more, and
	// nearly empty ones.
	if want := writers * events * 100 / max; files > 2*want+2 {
		t.Errorf("%d files for %d events of ~100 bytes at %d bytes a file", files, writers*events, max)
	}
}
