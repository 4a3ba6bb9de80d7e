package nsjail

import (
	"os"
	"testing"
)

// The attribution walk reads a process's pid in its innermost namespace and
// its parent from /proc: checked on this test process (no nested pid
// namespace, so both are host pids) and its parent.
func TestFindAncestor(t *testing.T) {
	ns, ppid, ok := procStatusPids(os.Getpid())
	if !ok || ns != os.Getpid() || ppid != os.Getppid() {
		t.Fatalf("procStatusPids(self) = %d, %d, %v; want %d, %d, true", ns, ppid, ok, os.Getpid(), os.Getppid())
	}
	if got := findAncestor(os.Getpid(), map[int]string{os.Getppid(): "parent"}); got != "parent" {
		t.Errorf("the parent was not found")
	}
	if got := findAncestor(os.Getpid(), map[int]string{os.Getpid(): "self", os.Getppid(): "parent"}); got != "self" {
		t.Errorf("the nearest match must win")
	}
	if got := findAncestor(os.Getpid(), map[int]string{-5: "parent"}); got != "" {
		t.Errorf("no ancestor matches, got %v", got)
	}
	if _, _, ok := procStatusPids(-1); ok {
		t.Errorf("a missing process reads as found")
	}
}
