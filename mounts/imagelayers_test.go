package mounts

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// ImageFS.Dirs stacks, top first, the layers whose directory shows: a
// whiteout or a file cuts off what is below, an opaque directory (itself
// or a parent) contributes and cuts off the rest, a missing one is
// skipped.
func TestImageFSDirs(t *testing.T) {
	d := t.TempDir()
	mk := func(p string) {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"l0/usr/lib", "l1/usr", "l2/usr/lib", "l3/usr/lib", "l4/usr/lib", "l5/usr/lib"} {
		mk(p)
	}
	// l3: usr is opaque (usr/lib's parent): l4 and l5 are hidden for usr/lib.
	if err := unix.Setxattr(filepath.Join(d, "l3/usr"), "user.overlay.opaque", []byte("y"), 0); err != nil {
		t.Skipf("user xattrs: %v", err)
	}
	rel := func(ls []string) string {
		var out []string
		for _, l := range ls {
			r, _ := filepath.Rel(d, l)
			out = append(out, r)
		}
		return strings.Join(out, " ")
	}
	layers := func(ns ...string) []string {
		var out []string
		for _, n := range ns {
			out = append(out, filepath.Join(d, n))
		}
		return out
	}
	if got := rel((&ImageFS{Layers: layers("l0", "l1", "l2", "l3", "l4", "l5")}).Dirs("usr/lib")); got != "l0/usr/lib l2/usr/lib l3/usr/lib" {
		t.Errorf("opaque parent: %s", got)
	}
	// l6: usr/lib a whiteout; nothing below shows.
	mk("l6/usr")
	if err := unix.Mknod(filepath.Join(d, "l6/usr/lib"), unix.S_IFCHR|0o600, 0); err != nil {
		t.Fatal(err)
	}
	if got := rel((&ImageFS{Layers: layers("l0", "l6", "l2")}).Dirs("usr/lib")); got != "l0/usr/lib" {
		t.Errorf("whiteout: %s", got)
	}
	if got := rel((&ImageFS{Layers: layers("l4", "l5")}).Dirs("usr")); got != "l4/usr l5/usr" {
		t.Errorf("plain: %s", got)
	}
}

// With ImageLayers, Build reads the image's root through an ImageFS (its
// Root never exists): a top-level directory two layers make is a
// read-only overlay of them (its Source the merged entry, for the plan's
// view), one a single layer makes is a bind of that layer's, a top-level
// file the topmost layer's, a symlink made anew; /etc is an entry like the
// others, and the mask and synthesized files are planned from the merged
// /etc (a whited-out file is not there).
func TestBuildImageLayers(t *testing.T) {
	d := t.TempDir()
	for _, p := range []string{"top/usr/bin", "top/bin", "top/etc", "low/usr/lib", "low/etc"} {
		if err := os.MkdirAll(filepath.Join(d, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for f, body := range map[string]string{"low/etc/os-release": "ID=x\n", "low/etc/passwd": "root:x:0:0::/root:/bin/sh\n", "low/etc/shadow": "x\n", "top/vmlinuz": "k", "low/vmlinuz": "old"} {
		if err := os.WriteFile(filepath.Join(d, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("usr/lib", filepath.Join(d, "low/lib")); err != nil {
		t.Fatal(err)
	}
	// top whites out low's /etc/shadow.
	if err := unix.Mknod(filepath.Join(d, "top/etc/shadow"), unix.S_IFCHR|0o600, 0); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(d, "merged") // never made
	p, err := Build(&Spec{Tooling: "rootfs:" + root, Workspace: t.TempDir(), WorkspaceMount: "/workspace",
		Home: "/home/u", UID: 1000, GID: 1000, User: "u", Hostname: "h",
		ImageLayers: []string{filepath.Join(d, "top"), filepath.Join(d, "low")}})
	if err != nil {
		t.Fatal(err)
	}
	steps := map[string]*Step{}
	var covers, masks []string
	for i := range p.Steps {
		s := &p.Steps[i]
		switch s.Kind {
		case Cover:
			covers = append(covers, s.Target)
		case MaskFile:
			masks = append(masks, s.Target)
		default:
			steps[s.Target] = s
		}
		if s.Kind == Bind && strings.HasPrefix(s.Source, root) {
			t.Errorf("%+v: binds the merged tree, which is not on the host", s)
		}
	}
	overlay := func(target string, lowers ...string) {
		t.Helper()
		s := steps[target]
		if s == nil || s.Kind != Overlay || s.Upper != "" || s.Source != root+target || strings.Join(s.Lower, ":") != lowerDirs(d, lowers...) {
			t.Errorf("%s: %+v, want a read-only overlay of %v", target, s, lowers)
		}
	}
	bind := func(target, src string) {
		t.Helper()
		if s := steps[target]; s == nil || s.Kind != Bind || s.Source != filepath.Join(d, src) || !s.ReadOnly {
			t.Errorf("%s: %+v, want a read-only bind of %s", target, s, src)
		}
	}
	overlay("/usr", "top/usr", "low/usr")
	overlay("/etc", "top/etc", "low/etc")
	bind("/bin", "top/bin")
	bind("/vmlinuz", "top/vmlinuz")
	if s := steps["/lib"]; s == nil || s.Kind != Symlink || s.Data != "usr/lib" {
		t.Errorf("/lib: %+v, want the symlink made anew", s)
	}
	if !slices.Contains(covers, "/etc/passwd") {
		t.Errorf("covered files %v: want /etc/passwd (the low layer's, synthesized)", covers)
	}
	if slices.Contains(masks, "/etc/shadow") {
		t.Errorf("masked files %v: /etc/shadow is whited out in the top layer, not in the merged /etc", masks)
	}
}

// ImageFS shows what an overlay of its layers shows: names listed once,
// the topmost's entry, whiteouts hiding and not listed, a file in an
// upper layer hiding a lower directory, a lower file under an upper
// directory hidden; symlinks resolved inside the root by StatIn.
func TestImageFSMerge(t *testing.T) {
	d := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"top/a", "low/a", "low/b/deep", "low/c", "mid/a"} {
		must(os.MkdirAll(filepath.Join(d, p), 0o755))
	}
	must(os.WriteFile(filepath.Join(d, "top/a/f"), []byte("top"), 0o644))
	must(os.WriteFile(filepath.Join(d, "low/a/f"), []byte("low"), 0o644))
	must(os.WriteFile(filepath.Join(d, "low/a/g"), []byte("low"), 0o644))
	must(os.WriteFile(filepath.Join(d, "mid/b"), []byte("file over dir"), 0o644))
	must(os.WriteFile(filepath.Join(d, "mid/c"), nil, 0o644))
	must(unix.Mknod(filepath.Join(d, "top/c"), unix.S_IFCHR|0o600, 0)) // a whiteout of c
	must(os.Symlink("/a/f", filepath.Join(d, "top/abs")))
	must(os.Symlink("../a/g", filepath.Join(d, "mid/a/rel")))
	must(os.WriteFile(filepath.Join(d, "low/a/sub"), nil, 0o644))
	must(os.MkdirAll(filepath.Join(d, "top/a/sub"), 0o755)) // a directory over a lower file
	root := filepath.Join(d, "merged")
	f := &ImageFS{Root: root, Layers: []string{filepath.Join(d, "top"), filepath.Join(d, "mid"), filepath.Join(d, "low")}}
	names, err := f.ReadDirNames(root)
	must(err)
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "a abs b" {
		t.Errorf("root lists %q, want \"a abs b\" (c whited out)", got)
	}
	names, err = f.ReadDirNames(root + "/a")
	must(err)
	slices.Sort(names)
	if got := strings.Join(names, " "); got != "f g rel sub" {
		t.Errorf("/a lists %q", got)
	}
	if fi, err := f.Lstat(root + "/b"); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("/b: %v %v, want mid's file (it hides low's directory)", fi, err)
	}
	if _, err := f.Lstat(root + "/b/deep"); err == nil {
		t.Error("/b/deep shows through mid's file")
	}
	if _, err := f.Lstat(root + "/c"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("/c: %v, want not found (whited out)", err)
	}
	if fi, err := f.Lstat(root + "/a/sub"); err != nil || !fi.IsDir() {
		t.Errorf("/a/sub: %v %v, want top's directory", fi, err)
	}
	if r, err := f.Real(root + "/a/f"); err != nil || r != filepath.Join(d, "top/a/f") {
		t.Errorf("Real /a/f = %q %v, want top's", r, err)
	}
	if to, err := f.Readlink(root + "/a/rel"); err != nil || to != "../a/g" {
		t.Errorf("Readlink /a/rel = %q %v", to, err)
	}
	for _, p := range []string{"/abs", "/a/rel"} {
		fi, err := StatIn(f, root, p)
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("StatIn %s: %v %v, want the file it leads to inside the root", p, fi, err)
		}
	}
	if f.Dirs("a") == nil || len(f.Dirs("a")) != 3 || f.Dirs("b") != nil {
		t.Errorf("Dirs a = %v, b = %v", f.Dirs("a"), f.Dirs("b"))
	}
}

// A build step's root on the parent's layers (BuildRoot.Layers): Root is
// the merged tree, never on the host; each top-level directory is an
// overlay of every layer's directory that makes it (a whiteout cutting
// off the layers below), topmost first, under the step's Upper/NAME and
// Work/NAME; a whited-out directory is not there; a top-level file is a
// read-only bind of the topmost layer's, a symlink made anew; Dirs lists
// the merged directories with the topmost layer's mode.
func TestBuildImageBuildRootLayers(t *testing.T) {
	d := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{"top/usr", "top/opt", "top/var", "mid/usr/lib", "low/usr/bin", "low/etc", "low/var/lib", "low/home/u", "low/proc", "low/tmp"} {
		must(os.MkdirAll(filepath.Join(d, p), 0o755))
	}
	must(os.Chmod(filepath.Join(d, "top/usr"), 0o750))
	must(os.WriteFile(filepath.Join(d, "top/vmlinuz"), []byte("top"), 0o644))
	must(os.WriteFile(filepath.Join(d, "low/vmlinuz"), []byte("low"), 0o644))
	must(os.Symlink("usr/bin", filepath.Join(d, "low/bin")))
	// Whiteouts: top's hides low's /home, mid's low's /var (top's shows).
	must(unix.Mknod(filepath.Join(d, "top/home"), unix.S_IFCHR|0o600, 0))
	must(unix.Mknod(filepath.Join(d, "mid/var"), unix.S_IFCHR|0o600, 0))
	root := filepath.Join(d, "merged") // never made
	layer := t.TempDir()
	b := &BuildRoot{Root: root, Upper: filepath.Join(layer, "upper"), Work: filepath.Join(layer, "work"),
		Layers: []string{filepath.Join(d, "top"), filepath.Join(d, "mid"), filepath.Join(d, "low")}}
	p, err := Build(&Spec{Tooling: "host", Workspace: t.TempDir(), WorkspaceMount: "/workspace", Home: "/root",
		TmpSize: 1 << 20, HomeSize: 1 << 20, ShmSize: 1 << 20, UID: 0, GID: 0, User: "root", Hostname: "hutch", Build: b})
	must(err)
	steps := map[string]*Step{}
	for i := range p.Steps {
		s := &p.Steps[i]
		steps[s.Target] = s
		for _, src := range s.Sources() {
			if strings.HasPrefix(src, root) {
				t.Errorf("%+v: reads the merged tree, which is not on the host", s)
			}
		}
	}
	overlay := func(target string, lowers ...string) {
		t.Helper()
		s := steps[target]
		if s == nil || s.Kind != Overlay || strings.Join(s.Lower, ":") != lowerDirs(d, lowers...) ||
			s.Upper != filepath.Join(b.Upper, target) || s.Work != filepath.Join(b.Work, target) {
			t.Errorf("%s: %+v, want an overlay of %v under the step's upper and work directories", target, s, lowers)
		}
	}
	overlay("/usr", "top/usr", "mid/usr", "low/usr")
	overlay("/opt", "top/opt")
	overlay("/etc", "low/etc")
	overlay("/var", "top/var")
	if s := steps["/vmlinuz"]; s == nil || s.Kind != Bind || s.Source != filepath.Join(d, "top/vmlinuz") || !s.ReadOnly {
		t.Errorf("/vmlinuz: %+v, want a read-only bind of the top layer's", s)
	}
	if s := steps["/bin"]; s == nil || s.Kind != Symlink || s.Data != "usr/bin" {
		t.Errorf("/bin: %+v, want the symlink made anew", s)
	}
	for _, target := range []string{"/home", "/home/u"} {
		if s := steps[target]; s != nil {
			t.Errorf("%s: %+v, whited out in the top layer", target, s)
		}
	}
	for _, target := range []string{"/proc", "/tmp"} {
		if s := steps[target]; s != nil && s.Kind == Overlay {
			t.Errorf("hutch's own %s is overlaid", target)
		}
	}
	dirs, err := b.Dirs(nil)
	must(err)
	var names []string
	for _, fi := range dirs {
		names = append(names, fi.Name())
		if fi.Name() == "usr" && fi.Mode().Perm() != 0o750 {
			t.Errorf("Dirs: /usr mode %v, want the top layer's 0750", fi.Mode())
		}
	}
	if got := strings.Join(names, " "); got != "etc opt usr var" {
		t.Errorf("Dirs = %q, want \"etc opt usr var\" (the merged top-level directories but hutch's own)", got)
	}

	// More layers make a directory than one overlay stacks: refused,
	// naming the directory and the way out.
	var many []string
	for i := 0; i <= MaxImageLower; i++ {
		l := filepath.Join(d, "many", fmt.Sprint(i))
		must(os.MkdirAll(filepath.Join(l, "usr"), 0o755))
		many = append(many, l)
	}
	_, err = Build(&Spec{Tooling: "host", Workspace: t.TempDir(), WorkspaceMount: "/workspace", Home: "/root",
		Build: &BuildRoot{Root: root, Upper: b.Upper, Work: b.Work, Layers: many}})
	if err == nil || !strings.Contains(err.Error(), "/usr") || !strings.Contains(err.Error(), "HUTCH_IMAGE_ROOT=flattened") {
		t.Errorf("%d layers making /usr: %v, want an error naming /usr and HUTCH_IMAGE_ROOT=flattened", len(many), err)
	}
}

// lowerDirs are the directories rels beneath d, joined with ":" as an
// overlay step's Lower is compared.
func lowerDirs(d string, rels ...string) string {
	var out []string
	for _, r := range rels {
		out = append(out, filepath.Join(d, r))
	}
	return strings.Join(out, ":")
}
