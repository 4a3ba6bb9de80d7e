package mounts

import (
	"os"
	"path/filepath"
	"strings"
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

// An image build step's root: each top-level directory of the image but
// hutch's own is an overlay with the step's upper and work directories;
// symlinks are recreated; /etc is the image's (no mask, no synthesized
// files) and there is no HOME tmpfs, whose mount points would land in the
// step's layer.
func TestBuildImageBuildRoot(t *testing.T) {
	root, ws, layer := t.TempDir(), t.TempDir(), t.TempDir()
	for _, d := range []string{"usr", "etc", "var", "proc", "tmp", "root"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
	}
	os.WriteFile(filepath.Join(root, "etc", "passwd"), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644)
	os.Symlink("usr/bin", filepath.Join(root, "bin"))
	b := &BuildRoot{Root: root, Upper: filepath.Join(layer, "upper"), Work: filepath.Join(layer, "work")}
	p, err := Build(&Spec{Tooling: "host", Workspace: ws, WorkspaceMount: "/workspace", Home: "/root",
		TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20, UID: 0, GID: 0, User: "root", Hostname: "hutch", Build: b})
	if err != nil {
		t.Fatal(err)
	}
	infos, err := b.Dirs(nil)
	if err != nil || len(infos) != 4 {
		t.Fatalf("BuildRoot.Dirs: %v %v", infos, err)
	}
	for _, fi := range infos {
		d := fi.Name()
		found := false
		for _, s := range p.Steps {
			if s.Kind == Overlay && s.Target == "/"+d {
				found = s.Lower[0] == filepath.Join(root, d) && s.Upper == filepath.Join(b.Upper, d) && s.Work == filepath.Join(b.Work, d)
			}
		}
		if !found {
			t.Errorf("no overlay of /%s: %+v", d, p.Steps)
		}
	}
	if s := find(p, Symlink, "/bin"); s == nil || s.Data != "usr/bin" {
		t.Errorf("/bin: %+v", s)
	}
	for _, s := range p.Steps {
		switch {
		case s.Kind == Overlay && (s.Target == "/proc" || s.Target == "/tmp"):
			t.Errorf("hutch's own %s is overlaid", s.Target)
		case s.Target == "/root" && s.Kind == Tmpfs, strings.HasPrefix(s.Target, "/etc/") || strings.HasPrefix(s.Target, "/var/"):
			t.Errorf("a step beneath the image's overlaid trees: %+v", s)
		}
	}
}
