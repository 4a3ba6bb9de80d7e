package mounts

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func find(p *Plan, kind Kind, target string) *Step {
	for i := range p.Steps {
		if p.Steps[i].Kind == kind && p.Steps[i].Target == target {
			return &p.Steps[i]
		}
	}
	return nil
}

func TestBuildHostPlan(t *testing.T) {
	ws := t.TempDir()
	p, err := Build(&Spec{Tooling: "host", Workspace: ws, WorkspaceMount: "/workspace", Home: "/home/sandbox",
		TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20, UID: 1000, GID: 1000, User: "sandbox", Hostname: "hutch",
		ReadOnly: [][2]string{{"/etc/os-release", "/mnt/osr"}}})
	if err != nil {
		t.Fatal(err)
	}
	if s := find(p, Bind, "/usr"); s == nil || !s.ReadOnly || s.Source != "/usr" {
		t.Errorf("/usr is not a read-only bind: %+v", s)
	}
	// Merged-/usr hosts get symlinks, others read-only binds.
	if fi, err := os.Lstat("/bin"); err == nil && fi.Mode()&os.ModeSymlink != 0 {
		to, _ := os.Readlink("/bin")
		if s := find(p, Symlink, "/bin"); s == nil || s.Data != to {
			t.Errorf("/bin should be the symlink %q: %+v", to, s)
		}
	} else if s := find(p, Bind, "/bin"); s == nil || !s.ReadOnly {
		t.Errorf("/bin should be a read-only bind: %+v", s)
	}
	if s := find(p, Bind, "/workspace"); s == nil || s.ReadOnly || s.Source != ws {
		t.Errorf("workspace bind: %+v", s)
	}
	if s := find(p, Bind, "/mnt/osr"); s == nil || !s.ReadOnly {
		t.Errorf("extra read-only bind: %+v", s)
	}
	if s := find(p, Bind, "/etc"); s == nil || !s.ReadOnly || s.Source != "/etc" {
		t.Errorf("/etc is not the host's, read-only: %+v", s)
	}
	pw := find(p, Cover, "/etc/passwd")
	if pw == nil || !strings.Contains(pw.Data, "sandbox:x:1000:1000:") || strings.Contains(pw.Data, "/bin/bash\nroot") {
		t.Errorf("/etc/passwd: %+v", pw)
	}
	if find(p, MaskFile, "/etc/shadow") == nil {
		t.Error("/etc/shadow is not masked")
	}
	for _, secret := range []string{"/etc/shadow", "/etc/sudoers", "/etc/ssh", "/root", "/home", "/run/user"} {
		for _, s := range p.Steps {
			if s.Kind == Bind && (s.Source == secret || s.Target == secret) {
				t.Errorf("plan binds %s", secret)
			}
		}
	}
	if find(p, Seal, "/dev") == nil || find(p, Proc, "/proc") == nil || find(p, Devpts, "/dev/pts") == nil {
		t.Error("missing /dev seal, /proc or devpts")
	}
	if s := find(p, Tmpfs, "/tmp"); s == nil || s.Mode != 0o1777 || s.Size != 1<<20 {
		t.Errorf("/tmp: %+v", s)
	}
}

func TestBuildRejectsBadTooling(t *testing.T) {
	_, err := Build(&Spec{Tooling: "docker:alpine", Workspace: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), `want "host" or "rootfs:DIR"`) {
		t.Errorf("err = %v", err)
	}
	_, err = Build(&Spec{Tooling: "rootfs:/nonexistent/root", Workspace: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "tooling rootfs /nonexistent/root") {
		t.Errorf("err = %v", err)
	}
}

func TestInspectProtected(t *testing.T) {
	t.Run("existing", func(t *testing.T) {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
		os.WriteFile(filepath.Join(ws, ".git", "config"), nil, 0o644)
		pr, err := InspectProtected(ws, "/workspace", []string{".git/hooks", ".git/config"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range pr.Steps {
			got = append(got, string(s.Kind)+" "+s.Target)
			if !s.NoSymlinks {
				t.Errorf("%s must resolve without symlinks", s.Target)
			}
		}
		want := "pin /workspace/.git,protect /workspace/.git/hooks,protect /workspace/.git/config"
		if strings.Join(got, ",") != want {
			t.Errorf("steps %v, want %s", got, want)
		}
		if len(pr.Missing) != 0 {
			t.Errorf("existing paths listed missing: %v", pr.Missing)
		}
	})
	t.Run("missing", func(t *testing.T) {
		// Nothing is made on the host: missing paths are listed, for the
		// check after a command, and get no step.
		ws := t.TempDir()
		os.Mkdir(filepath.Join(ws, "sub"), 0o755)
		pr, err := InspectProtected(ws, "/workspace", []string{".git/hooks", ".git/config", "sub/.git/config"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(pr.Missing, ",") != ".git,sub/.git" {
			t.Errorf("missing %v, want .git and sub/.git", pr.Missing)
		}
		if len(pr.Steps) != 0 {
			t.Errorf("steps %+v, want none: the parents of missing paths are not pinned", pr.Steps)
		}
		if ents, _ := os.ReadDir(ws); len(ents) != 1 {
			t.Errorf("InspectProtected changed the workspace: %v", ents)
		}
	})
	t.Run("found, not protectable", func(t *testing.T) {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, "sub", ".git"), 0o755)
		os.Symlink("/tmp", filepath.Join(ws, "sub", ".git", "hooks"))
		pr, err := InspectProtected(ws, "/workspace", nil, []string{"sub/.git/hooks"}, nil)
		if err != nil || len(pr.Unprotected) != 1 || !strings.Contains(pr.Unprotected[0], "symlink") || len(pr.Steps) != 0 {
			t.Errorf("a found path behind a symlink: %+v, %v", pr, err)
		}
	})
	t.Run("git-file", func(t *testing.T) {
		// A worktree's .git is a file pointing at the real git dir: it is
		// itself protected, read-only.
		ws := t.TempDir()
		os.WriteFile(filepath.Join(ws, ".git"), []byte("gitdir: /elsewhere\n"), 0o644)
		pr, err := InspectProtected(ws, "/workspace", []string{".git/hooks"}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(pr.Steps) != 1 || pr.Steps[0].Kind != Protect || pr.Steps[0].Target != "/workspace/.git" {
			t.Errorf("steps %+v", pr.Steps)
		}
	})
	t.Run("symlink", func(t *testing.T) {
		ws := t.TempDir()
		os.Symlink("/etc", filepath.Join(ws, ".git"))
		_, err := InspectProtected(ws, "/workspace", []string{".git/hooks"}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "protected path .git/hooks: .git is a symlink") {
			t.Errorf("err = %v", err)
		}
	})
	t.Run("hidden", func(t *testing.T) {
		ws := t.TempDir()
		os.MkdirAll(filepath.Join(ws, ".git", "hooks"), 0o755)
		os.MkdirAll(filepath.Join(ws, ".cache", "hutch"), 0o700)
		os.WriteFile(filepath.Join(ws, ".state"), nil, 0o644)
		pr, err := InspectProtected(ws, "/workspace", []string{".git/hooks", ".git/hooks/"}, nil, []string{".cache/hutch"})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range pr.Steps {
			got = append(got, string(s.Kind)+" "+s.Target)
		}
		want := "pin /workspace/.git,pin /workspace/.cache,protect /workspace/.git/hooks,hide /workspace/.cache/hutch"
		if strings.Join(got, ",") != want {
			t.Errorf("steps %v, want %s", got, want)
		}
		_, err = InspectProtected(ws, "/workspace", nil, nil, []string{".state/hutch"})
		if err == nil || !strings.Contains(err.Error(), ".state is not a directory") {
			t.Errorf("a file on the way to a hidden directory: err = %v", err)
		}
		os.Symlink("/tmp", filepath.Join(ws, "link"))
		_, err = InspectProtected(ws, "/workspace", nil, nil, []string{"link/hutch"})
		if err == nil || !strings.Contains(err.Error(), "link is a symlink") {
			t.Errorf("a symlink on the way to a hidden directory: err = %v", err)
		}
	})
	t.Run("escape", func(t *testing.T) {
		_, err := InspectProtected(t.TempDir(), "/workspace", []string{"../x"}, nil, nil)
		if err == nil || !strings.Contains(err.Error(), "want a path relative to the workspace") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestPickStageAvoidsBindSources(t *testing.T) {
	p := &Plan{Steps: []Step{{Kind: Bind, Source: "/tmp", Target: "/workspace"}}}
	st, err := pickStage(OS, p)
	if err != nil {
		t.Skipf("no second candidate on this host: %v", err)
	}
	if st == "/tmp" {
		t.Errorf("stage /tmp chosen although the workspace is /tmp")
	}
	p = &Plan{Steps: []Step{{Kind: Bind, Source: "/tmp/ws", Target: "/workspace"}}}
	if st, _ := pickStage(OS, p); st != "/tmp" {
		t.Errorf("stage %q, want /tmp (a workspace below /tmp does not contain it)", st)
	}
}
