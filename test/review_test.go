package test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// changeSetRE finds the change set id in hutch run --review's last line.
var changeSetRE = regexp.MustCompile(`kept in change set (\S+) `)

// reviewRun runs script with --review in workspace ws and returns the
// change set id it printed.
func reviewRun(t *testing.T, o opts, ws, script string) string {
	t.Helper()
	id, _ := reviewRunOut(t, o, ws, script)
	return id
}

// reviewRunOut is reviewRun that returns the command's stdout too.
func reviewRunOut(t *testing.T, o opts, ws, script string) (string, string) {
	t.Helper()
	o.dir = ws
	r := hutch(t, o, "run", "--review", "--no-discover", "--", "/bin/sh", "-c", script)
	mustCode(t, r, 0)
	m := changeSetRE.FindStringSubmatch(r.stderr)
	if m == nil {
		t.Fatalf("no change set id in stderr:\n%s", r.stderr)
	}
	return m[1], r.stdout
}

// changesDir is where hutch run as o keeps its change sets.
func changesDir(o opts) string {
	state := stateDir
	if o.root {
		state = filepath.Join(stateDir, "root")
	}
	return filepath.Join(state, "state", "hutch", "changes")
}

type diffJSON struct {
	ID      string `json:"id"`
	Changes []struct {
		Path, Op, Type, Refused, Conflict string
		Protected                         bool
		HardLink                          bool `json:"hard_link"`
	} `json:"changes"`
	Added, Modified, Deleted int
}

func diffOf(t *testing.T, o opts, id string) diffJSON {
	t.Helper()
	r := hutch(t, o, "diff", "--json", id)
	mustCode(t, r, 0)
	var d diffJSON
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("diff --json: %v\n%s", err, r.stdout)
	}
	return d
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(b)
}

// Review mode end to end: the command's writes do not reach the workspace;
// diff lists them (text and JSON, a unified diff for text); apply of one
// path, then of the rest; discard drops another run's.
func TestReviewDiffApplyDiscard(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "a.txt"), "one\ntwo\nthree\n")
		writeUserFile(t, filepath.Join(ws, "c.txt"), "gone\n")
		writeUserFile(t, filepath.Join(ws, "d", "x"), "x\n")
		ownTree(t, o, ws)
		id := reviewRun(t, o, ws, `echo four >> a.txt; echo new > n.txt; rm c.txt; mkdir e; echo y > e/y; cat a.txt`)
		if got := readFile(t, filepath.Join(ws, "a.txt")); got != "one\ntwo\nthree\n" {
			t.Errorf("the workspace's a.txt changed: %q", got)
		}
		for _, p := range []string{"n.txt", "e"} {
			if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
				t.Errorf("%s reached the workspace", p)
			}
		}
		if _, err := os.Lstat(filepath.Join(ws, "c.txt")); err != nil {
			t.Errorf("c.txt was deleted from the workspace: %v", err)
		}
		d := diffOf(t, o, id)
		got := map[string]string{}
		for _, c := range d.Changes {
			got[c.Path] = c.Op + " " + c.Type
		}
		want := map[string]string{"a.txt": "modified file", "n.txt": "added file", "c.txt": "deleted file", "e": "added dir", "e/y": "added file"}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("diff --json: %v, want %v", got, want)
		}
		o.dir = ws
		r := hutch(t, o, "diff", id)
		mustCode(t, r, 0)
		for _, w := range []string{"M  a.txt\n", "A  n.txt\n", "D  c.txt\n", "--- a/a.txt\n+++ b/a.txt\n", " three\n+four\n", "-gone\n"} {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("diff lacks %q:\n%s", w, r.stdout)
			}
		}
		// Partial apply: n.txt alone.
		r = hutch(t, o, "apply", id, "n.txt")
		mustCode(t, r, 0)
		if readFile(t, filepath.Join(ws, "n.txt")) != "new\n" || readFile(t, filepath.Join(ws, "a.txt")) != "one\ntwo\nthree\n" {
			t.Fatalf("apply n.txt: n.txt %q, a.txt %q", readFile(t, filepath.Join(ws, "n.txt")), readFile(t, filepath.Join(ws, "a.txt")))
		}
		if d := diffOf(t, o, id); len(d.Changes) != 4 {
			t.Errorf("after applying n.txt, %d changes left, want 4: %+v", len(d.Changes), d.Changes)
		}
		// The rest.
		r = hutch(t, o, "apply", id)
		mustCode(t, r, 0)
		if got := readFile(t, filepath.Join(ws, "a.txt")); got != "one\ntwo\nthree\nfour\n" {
			t.Errorf("a.txt after apply: %q", got)
		}
		if got := readFile(t, filepath.Join(ws, "e", "y")); got != "y\n" {
			t.Errorf("e/y after apply: %q", got)
		}
		if _, err := os.Lstat(filepath.Join(ws, "c.txt")); err == nil {
			t.Error("c.txt is still there after apply")
		}
		if _, err := os.Stat(filepath.Join(changesDir(o), id)); err == nil {
			t.Errorf("the applied change set %s is still there", id)
		}
		if r := hutch(t, o, "diff", id); r.code != 1 || !strings.Contains(r.stderr, "no such change set") {
			t.Errorf("diff of an applied change set: %d %s", r.code, r.stderr)
		}
		// Discard.
		id = reviewRun(t, o, ws, `echo discarded > a.txt; rm -r d`)
		r = hutch(t, o, "discard", id)
		mustCode(t, r, 0)
		if _, err := os.Stat(filepath.Join(changesDir(o), id)); err == nil {
			t.Errorf("the discarded change set %s is still there", id)
		}
		if got := readFile(t, filepath.Join(ws, "a.txt")); got != "one\ntwo\nthree\nfour\n" || readFile(t, filepath.Join(ws, "d", "x")) != "x\n" {
			t.Errorf("discard changed the workspace: a.txt %q", got)
		}
		// A command that writes nothing leaves no change set.
		o.dir = ws
		r = hutch(t, o, "run", "--review", "--no-discover", "--", "cat", "a.txt")
		mustCode(t, r, 0)
		if !strings.Contains(r.stderr, "changed nothing") {
			t.Errorf("a read-only command's review: %s", r.stderr)
		}
	})
}

// What a sandbox plants is shown and never applied: symlinks out of the
// workspace (absolute or through ..), a FIFO, a protected path created
// (git's hooks: applied with --allow-protected only); a hard link is
// applied as a copy; a path escaping the workspace is refused as an
// argument; a directory the host replaced by a symlink meanwhile is not
// written through.
func TestReviewPlantedTricks(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "a.txt"), "a\n")
		if out, err := exec.Command("git", "init", "-q", ws).CombinedOutput(); err != nil {
			t.Fatalf("git init: %v\n%s", err, out)
		}
		os.RemoveAll(filepath.Join(ws, ".git", "hooks"))
		ownTree(t, o, ws)
		outside := userDir(t)
		id, out := reviewRunOut(t, o, ws, `{ echo x >> .git/config; } 2>&1 | grep -q Read-only && echo CONFIG-READ-ONLY
ln -s /etc/passwd abs; ln -s ../../../../etc/shadow up; ln -s a.txt ok-link
mkfifo fifo; echo linked > h1; ln h1 h2
mkdir .git/hooks && printf '#!/bin/sh\necho pwned\n' > .git/hooks/post-checkout && chmod +x .git/hooks/post-checkout
mkdir sub; echo s > sub/f`)
		if !strings.Contains(out, "CONFIG-READ-ONLY") {
			t.Errorf("the protected .git/config is writable on top of the overlay: %q", out)
		}
		d := diffOf(t, o, id)
		by := map[string]int{}
		for i, c := range d.Changes {
			by[c.Path] = i
		}
		for _, p := range []string{"abs", "up", "fifo"} {
			if i, ok := by[p]; !ok || d.Changes[i].Refused == "" {
				t.Errorf("%s: not refused in the diff: %+v", p, d.Changes)
			}
		}
		if i, ok := by[".git/hooks/post-checkout"]; !ok || !d.Changes[i].Protected {
			t.Errorf(".git/hooks/post-checkout: not protected in the diff: %+v", d.Changes)
		}
		if i, ok := by["h1"]; !ok || !d.Changes[i].HardLink {
			t.Errorf("h1: not a hard link in the diff: %+v", d.Changes)
		}
		o.dir = ws
		if r := hutch(t, o, "apply", id, "../x"); r.code != 1 || !strings.Contains(r.stderr, "inside it") {
			t.Errorf("apply ../x: %d %s", r.code, r.stderr)
		}
		if r := hutch(t, o, "apply", id, "/etc/passwd"); r.code != 1 || !strings.Contains(r.stderr, "relative to the workspace") {
			t.Errorf("apply /etc/passwd: %d %s", r.code, r.stderr)
		}
		// The host replaces sub by a symlink to a directory outside.
		os.RemoveAll(filepath.Join(ws, "sub"))
		os.Symlink(outside, filepath.Join(ws, "sub"))
		os.Lchown(filepath.Join(ws, "sub"), testUID, testGID)
		r := hutch(t, o, "apply", id)
		if r.code != 3 {
			t.Fatalf("apply: exit %d, want 3 (some left)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
		}
		for _, p := range []string{"abs", "up", "fifo"} {
			if _, err := os.Lstat(filepath.Join(ws, p)); err == nil {
				t.Errorf("the planted %s reached the workspace", p)
			}
		}
		if _, err := os.Lstat(filepath.Join(ws, ".git", "hooks")); err == nil {
			t.Error("the protected .git/hooks was applied without --allow-protected")
		}
		if _, err := os.Lstat(filepath.Join(outside, "f")); err == nil {
			t.Error("apply wrote through the host's symlink sub to a directory outside the workspace")
		}
		if l, err := os.Readlink(filepath.Join(ws, "ok-link")); err != nil || l != "a.txt" {
			t.Errorf("the symlink inside the workspace was not applied: %q %v", l, err)
		}
		var st1, st2 syscall.Stat_t
		if syscall.Stat(filepath.Join(ws, "h1"), &st1) != nil || syscall.Stat(filepath.Join(ws, "h2"), &st2) != nil || st1.Ino == st2.Ino || st1.Nlink != 1 {
			t.Errorf("the hard links: h1 %+v h2 %+v, want two separate files", st1.Ino, st2.Ino)
		}
		if !strings.Contains(r.stderr, "refused") || !strings.Contains(r.stderr, "--allow-protected") {
			t.Errorf("apply does not say what it left and why:\n%s", r.stderr)
		}
		r = hutch(t, o, "apply", "--allow-protected", id, ".git")
		mustCode(t, r, 0)
		if got := readFile(t, filepath.Join(ws, ".git", "hooks", "post-checkout")); !strings.Contains(got, "pwned") {
			t.Errorf("--allow-protected did not apply the hook: %q", got)
		}
	})
}

// A host file changed after the sandbox took its copy is a conflict: apply
// leaves it, and says so.
func TestReviewConflict(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "a.txt"), "base\n")
		writeUserFile(t, filepath.Join(ws, "b.txt"), "base\n")
		ownTree(t, o, ws)
		id := reviewRun(t, o, ws, `echo sandbox > a.txt; echo sandbox > b.txt`)
		time.Sleep(20 * time.Millisecond) // beyond the coarse clock's tick
		if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("host\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		o.dir = ws
		r := hutch(t, o, "apply", id)
		if r.code != 3 || !strings.Contains(r.stderr, "conflict") {
			t.Fatalf("apply: exit %d, want 3 with a conflict\n%s", r.code, r.stderr)
		}
		if got := readFile(t, filepath.Join(ws, "a.txt")); got != "host\n" {
			t.Errorf("the host's a.txt was overwritten: %q", got)
		}
		if got := readFile(t, filepath.Join(ws, "b.txt")); got != "sandbox\n" {
			t.Errorf("b.txt, no conflict, was not applied: %q", got)
		}
		if d := diffOf(t, o, id); len(d.Changes) != 1 || d.Changes[0].Conflict == "" {
			t.Errorf("the conflict is not left in the change set: %+v", d.Changes)
		}
	})
}

// SIGKILL in the middle of an apply leaves every file old or new (a
// temporary file only under apply's recognizable name), and the next apply
// finishes the job and removes the temporary files.
func TestReviewApplyKilled(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		const n = 4000
		for i := 0; i < n; i++ {
			if err := os.WriteFile(filepath.Join(ws, fmt.Sprintf("f%04d", i)), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ownTree(t, o, ws)
		id := reviewRun(t, o, ws, `for f in f*; do echo new > $f; done`)
		o.dir = ws
		cmd := hutchCmd(o, "apply", id)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it a moment after the first file is new: in the middle of
		// some later one.
		killed := false
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
			if readFile(t, filepath.Join(ws, "f0000")) == "new\n" {
				time.Sleep(25 * time.Millisecond)
				cmd.Process.Signal(syscall.SIGKILL)
				killed = true
				break
			}
		}
		cmd.Wait()
		if !killed {
			t.Fatal("apply did not start within 30s")
		}
		check := func(allowTemp bool) (newCount int) {
			ents, err := os.ReadDir(ws)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".hutch-apply-") && allowTemp {
					continue
				}
				switch got := readFile(t, filepath.Join(ws, e.Name())); got {
				case "new\n":
					newCount++
				case "old\n":
				default:
					t.Errorf("%s: %q, neither old nor new", e.Name(), got)
				}
			}
			if len(ents) > n && !allowTemp {
				t.Errorf("%d entries in the workspace, want %d", len(ents), n)
			}
			return newCount
		}
		got := check(true)
		t.Logf("killed with %d of %d files applied", got, n)
		if got == n {
			t.Skipf("apply finished (%d files) before the kill landed; nothing to check of a kill mid-way", n)
		}
		r := hutch(t, o, "apply", id)
		mustCode(t, r, 0)
		if got := check(false); got != n {
			t.Errorf("after the second apply %d of %d files are new", got, n)
		}
	})
}

// A review session's changes go to one change set named after it: diff
// works while it runs, apply waits for it to stop, and hutch run --json
// reports a one-off run's pending changes.
func TestReviewSession(t *testing.T) {
	eachUser(t, func(t *testing.T, o opts) {
		ws := userDir(t)
		writeUserFile(t, filepath.Join(ws, "a.txt"), "a\n")
		ownTree(t, o, ws)
		o.dir = ws
		name := startSessionWith(t, o, "--review", "--no-discover")
		mustCode(t, hutch(t, o, "exec", name, "--", "/bin/sh", "-c", "echo one > one.txt"), 0)
		mustCode(t, hutch(t, o, "exec", name, "--", "/bin/sh", "-c", "echo two > two.txt; cat one.txt"), 0)
		if _, err := os.Lstat(filepath.Join(ws, "one.txt")); err == nil {
			t.Fatal("a review session wrote the workspace")
		}
		if d := diffOf(t, o, name); d.Added != 2 {
			t.Errorf("diff of the running session: %+v", d)
		}
		if r := hutch(t, o, "apply", name); r.code != 1 || !strings.Contains(r.stderr, "in use by the running session "+name) {
			t.Errorf("apply while the session runs: %d %s", r.code, r.stderr)
		}
		mustCode(t, hutch(t, o, "session", "stop", name), 0)
		mustCode(t, hutch(t, o, "apply", name), 0)
		if readFile(t, filepath.Join(ws, "one.txt")) != "one\n" || readFile(t, filepath.Join(ws, "two.txt")) != "two\n" {
			t.Error("the session's changes were not applied")
		}
		r := hutch(t, o, "run", "--review", "--json", "--no-discover", "--", "/bin/sh", "-c", "echo j > j.txt")
		mustCode(t, r, 0)
		var res struct {
			Pending *struct {
				ID    string   `json:"id"`
				Added int      `json:"added"`
				Paths []string `json:"paths"`
			} `json:"pending_changes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || res.Pending == nil || res.Pending.Added != 1 || fmt.Sprint(res.Pending.Paths) != "[j.txt]" {
			t.Errorf("run --json --review: %v %s", err, r.stdout)
		} else {
			mustCode(t, hutch(t, o, "discard", res.Pending.ID), 0)
		}
	})
}

// hutch mcp --review: run_command's result lists the pending changes of the
// server's session, its description says applying is the user's step, and
// no call applies them.
func TestReviewMCP(t *testing.T) {
	ws := userDir(t)
	writeUserFile(t, filepath.Join(ws, "a.txt"), "a\n")
	m := startMCP(t, hutchCmd(opts{dir: ws}, "mcp", "--review", "--net", "none"))
	tools := m.call(2, "tools/list", map[string]any{})
	if !strings.Contains(fmt.Sprint(tools), "Applying is the user's step") {
		t.Errorf("run_command's description does not say review mode: %v", tools)
	}
	sc, res := m.runCommand(3, "echo b > b.txt; echo aa > a.txt")
	if sc == nil {
		t.Fatalf("run_command: %v", res)
	}
	pc, _ := sc["pending_changes"].(map[string]any)
	if pc == nil || pc["added"] != float64(1) || pc["modified"] != float64(1) || fmt.Sprint(pc["paths"]) != "[a.txt b.txt]" {
		t.Fatalf("pending_changes: %v", sc)
	}
	sc, _ = m.runCommand(4, "cat a.txt")
	if sc["stdout"] != "aa\n" {
		t.Errorf("a later call does not see the session's own change: %v", sc)
	}
	if readFile(t, filepath.Join(ws, "a.txt")) != "a\n" {
		t.Error("the MCP server's command wrote the workspace")
	}
	id, _ := pc["id"].(string)
	m.stop()
	r := hutch(t, opts{dir: ws}, "diff", "--stat", id)
	mustCode(t, r, 0)
	if !strings.Contains(r.stdout, "A  b.txt") {
		t.Errorf("the MCP session's change set after the server ended:\n%s", r.stdout)
	}
	mustCode(t, hutch(t, opts{dir: ws}, "discard", id), 0)
}

// hutch doctor runs a real review sandbox: on this host (overlayfs in a user
// namespace) it says review mode works, and its probe leaves no change set.
func TestReviewDoctor(t *testing.T) {
	ws := userDir(t)
	r := hutch(t, opts{dir: ws}, "doctor", "--json")
	mustCode(t, r, 0)
	var d struct {
		Overlayfs string `json:"overlayfs"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(d.Overlayfs, "ok: review mode") {
		t.Errorf("doctor on review mode: %q", d.Overlayfs)
	}
	r = hutch(t, opts{dir: ws}, "changes", "--json")
	mustCode(t, r, 0)
	if strings.Contains(r.stdout, "hutch-doctor-review") {
		t.Errorf("doctor's probe left its change set:\n%s", r.stdout)
	}
}
