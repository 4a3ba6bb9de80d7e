package mounts

import (
	"os"
	"path/filepath"
	"testing"
)

// In review mode the workspace is an overlay at its mount point, its
// writable layer the change set's; the protected paths still follow it,
// and the root is not staged beneath any layer.
func TestBuildReviewOverlay(t *testing.T) {
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644)
	prot, err := InspectProtected(ws, "/workspace", []string{".git/config"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cs := t.TempDir()
	p, err := Build(&Spec{Tooling: "host", Workspace: ws, WorkspaceMount: "/workspace", Home: "/home/sandbox", Protected: prot,
		TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20, UID: 1000, GID: 1000, User: "sandbox", Hostname: "hutch",
		Review: &Layer{Upper: filepath.Join(cs, "upper"), Work: filepath.Join(cs, "work")}})
	if err != nil {
		t.Fatal(err)
	}
	if s := find(p, Bind, "/workspace"); s != nil {
		t.Errorf("the workspace is bound read-write in review mode: %+v", s)
	}
	ov := -1
	for i, s := range p.Steps {
		if s.Kind == Overlay && s.Target == "/workspace" {
			ov = i
			if len(s.Lower) != 1 || s.Lower[0] != ws || s.Upper != filepath.Join(cs, "upper") || s.Work != filepath.Join(cs, "work") {
				t.Errorf("overlay step: %+v", s)
			}
		}
	}
	if ov < 0 {
		t.Fatalf("no overlay at /workspace: %+v", p.Steps)
	}
	protected := false
	for i, s := range p.Steps {
		if s.Kind == Protect && s.Target == "/workspace/.git/config" {
			protected = i > ov
		}
	}
	if !protected {
		t.Error(".git/config is not protected on top of the overlay")
	}
	if got := (Step{Kind: Overlay, Lower: []string{"/a", "/b"}, Upper: "/u", Work: "/w"}).Sources(); len(got) != 4 {
		t.Errorf("Sources: %v", got)
	}
	// A lower layer that holds a staging candidate keeps the root off it
	// (the overlay would show the half-built root).
	p, err = Build(&Spec{Tooling: "host", Workspace: "/tmp", WorkspaceMount: "/workspace", Home: "/home/sandbox",
		TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20, UID: 1000, GID: 1000, User: "sandbox", Hostname: "hutch",
		Review: &Layer{Upper: filepath.Join(cs, "upper"), Work: filepath.Join(cs, "work")}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Stage == "/tmp" {
		t.Error("the root is staged on /tmp, the overlay's lower layer")
	}
}
