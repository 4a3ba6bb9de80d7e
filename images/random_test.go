package images

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	tr "github.com/hutchsandbox/hutch/internal/testregistry"
)

// Random stacks of small layers over a few names (directories, files,
// symlinks, whiteouts, opaque markers, in any order, the malformed
// included) show the same tree three ways: the flattened copy, the merged
// view the mount plan reads (mounts.ImageFS over the layers' overlay
// form), and a real overlay mount of them in a user namespace (where one
// can be made). A stack whose root is its flattened copy (a whiteout an
// overlay would list, OverlayLayers's LoneWhiteoutError) is counted; one
// the unpack refuses (an entry beneath a file of the same layer) is
// skipped; most are neither.
func TestRandomLayerStacks(t *testing.T) {
	r := rand.New(rand.NewPCG(20, 26))
	const cases = 200
	refused, mounted, noForm := 0, 0, 0
	canMount := true
	for i := range cases {
		switch checkRandomStack(t, fmt.Sprint("case ", i), r, canMount) {
		case stackRefused:
			refused++
		case stackMounted:
			mounted++
		case stackNoMount:
			canMount = false
		case stackNoForm:
			noForm++
		}
	}
	t.Logf("%d cases: %d refused by the unpack, %d whose root is the flattened copy (a lone whiteout, or no overlay form on this store's filesystem), %d also compared with an overlay mount", cases, refused, noForm, mounted)
	// (Where user xattrs are missing, most stacks have an opaque marker
	// and so no overlay form: 161 of 200 on the VM tier's tmpfs.)
	if compared := cases - refused - noForm; refused > cases/4 || compared < cases/10 {
		t.Errorf("%d of %d cases refused by the unpack, %d compared: the generator tests too little", refused, cases, compared)
	}
}

// FuzzLayerStacks is TestRandomLayerStacks's check on stacks from any
// seed: go test -fuzz FuzzLayerStacks ./images.
func FuzzLayerStacks(f *testing.F) {
	for _, seed := range []uint64{1, 2, 3} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, seed uint64) {
		checkRandomStack(t, fmt.Sprint("seed ", seed), rand.New(rand.NewPCG(seed, seed>>1)), true)
	})
}

// What checkRandomStack did with its stack.
const (
	stackCompared = iota // the flattened copy and mounts.ImageFS compared
	stackMounted         // and an overlay mount too
	stackNoMount         // no overlay can be mounted here
	stackRefused         // the unpack refused a layer
	stackNoForm          // the image's root is its flattened copy (OverlayLayers says why)
)

// userXattrs: the filesystem of dir takes user extended attributes (the
// opaque marker is one).
func userXattrs(dir string) bool {
	p := filepath.Join(dir, "tmp")
	err := unix.Setxattr(p, "user.hutch-test", []byte("y"), 0)
	unix.Removexattr(p, "user.hutch-test")
	return err == nil
}

// requireUserXattrs skips t where the store's filesystem takes no user
// extended attributes (a tmpfs before Linux 6.6): its layers with opaque
// directories have no overlay form there, by design.
func requireUserXattrs(t *testing.T, s *Store) {
	t.Helper()
	if !userXattrs(s.Dir) {
		t.Skipf("the store's filesystem (%s) takes no user extended attributes: a layer with an opaque directory has no overlay form here (TestMarkersRefused covers that)", s.Dir)
	}
}

// checkRandomStack stores a random stack of layers and compares its
// flattened copy with mounts.ImageFS's view of its layers and, with
// mount, with an overlay mount of them.
func checkRandomStack(t *testing.T, name string, r *rand.Rand, mount bool) int {
	t.Helper()
	var desc []string
	var layers []v1.Layer
	for l := range 2 + r.IntN(3) {
		es := randomEntries(r)
		var names []string
		for _, e := range es {
			names = append(names, describeEntry(e))
		}
		desc = append(desc, fmt.Sprintf("layer %d: %s", l, strings.Join(names, ", ")))
		layers = append(layers, tr.Layer(t, es...))
	}
	s, _ := Open(storeDir(t))
	rep, err := s.Add(context.Background(), tr.Image(t, v1.Config{}, layers...), AddOptions{Flatten: true})
	var ue *UnpackError
	if errors.As(err, &ue) {
		if testing.Verbose() {
			t.Logf("%s refused: %v", name, err)
		}
		return stackRefused
	}
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, strings.Join(desc, "\n"))
	}
	lowers, err := s.OverlayLayers(rep.Image)
	var ne *NotOverlayError
	var le *LoneWhiteoutError
	if errors.As(err, &ne) && !userXattrs(s.Dir) || errors.As(err, &le) {
		// (A store without user xattrs: an opaque marker refused; or a
		// whiteout an overlay would list: TestOverlayLayersLoneWhiteout.)
		return stackNoForm
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	flat := listTree(t, rep.Root)
	if view := listImageFS(t, lowers); view != flat {
		t.Errorf("%s: mounts.ImageFS shows\n%s\nthe flattened copy\n%s\n%s", name, view, flat, strings.Join(desc, "\n"))
		return stackCompared
	}
	if !mount || len(lowers) < 2 {
		return stackCompared
	}
	ov, ok := listOverlayMount(t, lowers)
	if !ok {
		return stackNoMount
	}
	if ov != flat {
		t.Errorf("%s: the overlay mount shows\n%s\nthe flattened copy\n%s\n%s", name, ov, flat, strings.Join(desc, "\n"))
	}
	return stackMounted
}

// randomEntries is a small layer's entries over the names a, b, c (two
// levels deep).
func randomEntries(r *rand.Rand) []tr.Entry {
	name := func() string {
		n := []string{"a", "b", "c"}[r.IntN(3)]
		if r.IntN(2) == 0 {
			n += "/" + []string{"a", "b", "c"}[r.IntN(3)]
		}
		return n
	}
	var es []tr.Entry
	nonDir := map[string]bool{} // this layer's files and symlinks
	for range 2 + r.IntN(6) {
		n := name()
		k := r.IntN(10)
		if nonDir[filepath.Dir(n)] || k == 9 && nonDir[n] {
			continue // beneath a file of the same layer: the unpack refuses the layer
		}
		switch {
		case k < 3:
			es = append(es, tr.Entry{Name: n + "/", Type: tar.TypeDir})
		case k < 6:
			es = append(es, tr.Entry{Name: n, Body: fmt.Sprintf("%s %d\n", n, r.IntN(1000))})
			nonDir[n] = true
		case k < 7:
			es = append(es, tr.Entry{Name: n, Type: tar.TypeSymlink, Linkname: []string{"a", "../b", "/c"}[r.IntN(3)]})
			nonDir[n] = true
		case k < 9:
			es = append(es, tr.Entry{Name: filepath.Join(filepath.Dir(n), ".wh."+filepath.Base(n))})
		default:
			es = append(es, tr.Entry{Name: filepath.Join(n, ".wh..wh..opq")})
		}
	}
	return es
}

func describeEntry(e tr.Entry) string {
	switch e.Type {
	case tar.TypeDir:
		return e.Name
	case tar.TypeSymlink:
		return e.Name + " -> " + e.Linkname
	}
	return e.Name
}

// listTree lists the tree at dir in listImageFS's form, sorted: a line
// per entry with its path ("." the root), type (d, f, l, p; c for a device,
// ? for anything else), permissions and size.
func listTree(t *testing.T, dir string) string {
	t.Helper()
	out, err := treeListing(dir)
	if err != nil {
		t.Fatalf("list %s: %v", dir, err)
	}
	return out
}

func treeListing(dir string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel != "." {
			rel = "./" + rel
		}
		lines = append(lines, listLine(rel, fi))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n", err
}

// listLine is one entry of a listing.
func listLine(rel string, fi fs.FileInfo) string {
	kind := map[fs.FileMode]string{0: "f", fs.ModeDir: "d", fs.ModeSymlink: "l", fs.ModeNamedPipe: "p", fs.ModeDevice | fs.ModeCharDevice: "c"}[fi.Mode().Type()]
	if kind == "" {
		kind = "?"
	}
	mode := uint32(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	if fi.IsDir() {
		// (A directory's size is its filesystem's: tmpfs counts its
		// entries, so a merged directory and its copy differ.)
		return fmt.Sprintf("%s %s %o", rel, kind, mode)
	}
	return fmt.Sprintf("%s %s %o %d", rel, kind, mode, fi.Size())
}

// TestHelperListOverlay is listOverlayMount's child: in its own user and
// mount namespaces it mounts a read-only overlay of the layers
// HUTCH_TEST_LIST_OVERLAY names (colon-separated, topmost first) as a
// sandbox does and prints its listing.
func TestHelperListOverlay(t *testing.T) {
	lowers := os.Getenv("HUTCH_TEST_LIST_OVERLAY")
	if lowers == "" {
		t.Skip("the helper of listOverlayMount (run by it in new namespaces)")
	}
	mnt := os.Getenv("HUTCH_TEST_LIST_AT")
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("overlay", mnt, "overlay", unix.MS_RDONLY, "lowerdir="+lowers+",userxattr,index=off"); err != nil {
		os.Stdout.WriteString("NO-OVERLAY: " + err.Error())
		return
	}
	out, err := treeListing(mnt)
	if err != nil {
		out = fmt.Sprintf("(the overlay could not be listed: %v)\n%s", err, out)
	}
	os.Stdout.WriteString("LISTING\n" + out)
}

// inNamespaces is this test binary running only the test helper (a
// TestHelper... that does its work when env tells it to) in new user and
// mount namespaces, the caller's ids mapped to 0 as a sandbox's init has
// them.
func inNamespaces(helper string, env ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^"+helper+"$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}}
	return cmd
}

// listOverlayMount lists a read-only overlay of lowers mounted in a user
// namespace as a sandbox mounts it (by TestHelperListOverlay, a child of
// this test binary); false when none can be mounted here.
func listOverlayMount(t *testing.T, lowers []string) (string, bool) {
	t.Helper()
	out, err := inNamespaces("TestHelperListOverlay", "HUTCH_TEST_LIST_OVERLAY="+strings.Join(lowers, ":"), "HUTCH_TEST_LIST_AT="+t.TempDir()).Output()
	s := string(out)
	if err != nil || strings.HasPrefix(s, "NO-OVERLAY") {
		t.Logf("no overlay mount in a user namespace here: %v %s", err, s)
		return "", false
	}
	_, listing, ok := strings.Cut(s, "LISTING\n")
	if !ok {
		return "(no listing)\n" + s, true
	}
	// (The test binary's own last line, PASS, after the listing.)
	return strings.TrimSuffix(listing, "PASS\n"), true
}
