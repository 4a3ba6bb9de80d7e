package review

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/pmezard/go-difflib/difflib"
	"golang.org/x/sys/unix"
)

// Operations of a change.
const (
	Added    = "added"
	Modified = "modified"
	Deleted  = "deleted"
)

// Types of what a change leaves at its path (a deletion: what it removes).
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeFIFO    = "fifo"
	TypeSocket  = "socket"
	TypeDevice  = "device"
)

// Change is one change of a change set, as Diff finds it.
type Change struct {
	// Path is relative to the workspace, with "/" between its names.
	Path string `json:"path"`
	// Op is Added, Modified or Deleted.
	Op string `json:"op"`
	// Type is what the path holds after the change (Type*), or what a
	// deletion removes.
	Type string `json:"type"`
	// Mode is the permission bits after the change (files, directories).
	Mode uint32 `json:"mode,omitempty"`
	// OldMode is the host's when it differs (a mode change).
	OldMode uint32 `json:"old_mode,omitempty"`
	// Size is the file's size after the change.
	Size int64 `json:"size,omitempty"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
	// Replaced: a directory the sandbox removed and made again; the
	// host's entries it does not have again are deleted (listed too).
	Replaced bool `json:"replaced,omitempty"`
	// HardLink: the sandbox's file has other names; applied as a copy.
	HardLink bool `json:"hard_link,omitempty"`
	// Protected: a protected path (Meta.Protected, git's configuration
	// and hooks); applied only with ApplyOptions.AllowProtected.
	Protected bool `json:"protected,omitempty"`
	// Refused says why Apply never applies this change ("" when it may).
	Refused string `json:"refused,omitempty"`
	// Conflict says how the host's file changed after the sandbox took
	// its copy ("" when it did not); Apply does not overwrite it.
	Conflict string `json:"conflict,omitempty"`

	// since is when the sandbox's copy was made (the upper entry's birth
	// time, else the change set's creation): a host file changed at or
	// after it is a conflict.
	since time.Time
	// whiteout: the upper entry is a whiteout (a deletion); opaqueDel: a
	// deletion implied by a replaced directory (no upper entry).
	whiteout, opaqueDel bool
}

// Result is a change set's changes.
type Result struct {
	ID        string   `json:"id"`
	Workspace string   `json:"workspace"`
	Session   string   `json:"session,omitempty"`
	Upper     string   `json:"upper"`
	Changes   []Change `json:"changes"`
	Added     int      `json:"added"`
	Modified  int      `json:"modified"`
	Deleted   int      `json:"deleted"`
	// Pending counts the changes Apply would apply as it is asked now
	// (no conflict, not refused, not protected).
	Pending int `json:"pending"`
}

// DiffOptions narrows a Diff.
type DiffOptions struct {
	// Paths, when given, keep the changes at or beneath them (relative to
	// the workspace).
	Paths []string
}

// Diff walks the change set's upper layer beside the host workspace and
// returns the changes, parents before children. It only reads; it may run
// while the change set's sandbox runs (what a command writes meanwhile may
// or may not be seen).
func Diff(c *ChangeSet, o DiffOptions) (*Result, error) {
	paths, err := cleanPaths(o.Paths)
	if err != nil {
		return nil, err
	}
	w := &walker{c: c, prot: c.Meta.Protected}
	up, err := unix.Open(c.Upper(), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("change set %s: open its upper layer: %w", c.Meta.ID, err)
	}
	defer unix.Close(up)
	low, err := unix.Open(c.Meta.Workspace, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("change set %s: open the workspace %s: %w", c.Meta.ID, c.Meta.Workspace, err)
	}
	defer unix.Close(low)
	if err := w.dir(up, low, "", false, c.Meta.Created); err != nil {
		return nil, fmt.Errorf("change set %s: %w", c.Meta.ID, err)
	}
	r := &Result{ID: c.Meta.ID, Workspace: c.Meta.Workspace, Session: c.Meta.Session, Upper: c.Upper()}
	for _, ch := range w.out {
		if len(paths) > 0 && !underAnyPath(ch.Path, paths) {
			continue
		}
		switch ch.Op {
		case Added:
			r.Added++
		case Modified:
			r.Modified++
		case Deleted:
			r.Deleted++
		}
		if ch.Refused == "" && ch.Conflict == "" && !ch.Protected {
			r.Pending++
		}
		r.Changes = append(r.Changes, ch)
	}
	if r.Changes == nil {
		r.Changes = []Change{}
	}
	return r, nil
}

// cleanPaths checks paths given on the command line: relative to the
// workspace, without "..".
func cleanPaths(in []string) ([]string, error) {
	var out []string
	for _, p := range in {
		c := path.Clean(strings.TrimPrefix(p, "./"))
		if p == "" || path.IsAbs(p) || c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("path %q: want a path relative to the workspace, inside it", p)
		}
		if c == "." {
			return nil, nil // the whole workspace
		}
		out = append(out, c)
	}
	return out, nil
}

func underAnyPath(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// walker is one Diff's walk.
type walker struct {
	c    *ChangeSet
	prot []string
	out  []Change
}

// entry is what one name in a directory of a layer is.
type entry struct {
	ok    bool
	st    unix.Statx_t
	since time.Time
}

func (e entry) typ() uint32 { return uint32(e.st.Mode) & unix.S_IFMT }

func statAt(dfd int, name string) entry {
	var e entry
	if dfd < 0 {
		return e
	}
	err := unix.Statx(dfd, name, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_SYNC_AS_STAT,
		unix.STATX_BASIC_STATS|unix.STATX_BTIME, &e.st)
	e.ok = err == nil
	return e
}

func ts(t unix.StatxTimestamp) time.Time { return time.Unix(t.Sec, int64(t.Nsec)) }

// changedSince reports whether the host's entry e changed at or after t.
func changedSince(e entry, t time.Time) bool { return e.ok && !ts(e.st.Ctime).Before(t) }

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return TypeFile
	case unix.S_IFDIR:
		return TypeDir
	case unix.S_IFLNK:
		return TypeSymlink
	case unix.S_IFIFO:
		return TypeFIFO
	case unix.S_IFSOCK:
		return TypeSocket
	}
	return TypeDevice
}

// isWhiteout reports whether an upper entry is overlayfs's mark of a
// deletion: a 0/0 character device, or (Linux 6.7) an empty file with the
// whiteout xattr.
func isWhiteout(dfd int, name string, e entry) bool {
	switch e.typ() {
	case unix.S_IFCHR:
		return e.st.Rdev_major == 0 && e.st.Rdev_minor == 0
	case unix.S_IFREG:
		return e.st.Size == 0 && hasXattr(dfd, name, "user.overlay.whiteout", "")
	}
	return false
}

// hasXattr reports whether the entry name of dfd has the xattr, with the
// value want when want is not "".
func hasXattr(dfd int, name, attr, want string) bool {
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 16)
	n, err := unix.Getxattr(fmt.Sprintf("/proc/self/fd/%d", fd), attr, buf)
	if err != nil {
		return false
	}
	return want == "" || string(buf[:n]) == want
}

// opaque reports whether an upper directory hides the lower one's entries.
func opaque(dfd int, name string) bool { return hasXattr(dfd, name, "user.overlay.opaque", "y") }

// dir walks the upper directory up beside the host's low (-1: none), at rel.
// replaced: up is opaque, so the host's entries it lacks are deleted.
func (w *walker) dir(up, low int, rel string, replaced bool, since time.Time) error {
	f := os.NewFile(uintptr(dupCloexec(up)), rel)
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("read %s of the upper layer: %w", orDot(rel), err)
	}
	sort.Strings(names)
	for _, n := range names {
		if err := w.one(up, low, rel, n); err != nil {
			return err
		}
	}
	if replaced && low >= 0 {
		lf := os.NewFile(uintptr(dupCloexec(low)), rel)
		lnames, _ := lf.Readdirnames(-1)
		lf.Close()
		sort.Strings(lnames)
		have := map[string]bool{}
		for _, n := range names {
			have[n] = true
		}
		for _, n := range lnames {
			if have[n] {
				continue
			}
			le := statAt(low, n)
			if !le.ok {
				continue
			}
			p := join(rel, n)
			ch := Change{Path: p, Op: Deleted, Type: typeName(uint32(le.st.Mode)), since: since, opaqueDel: true}
			w.finish(&ch, le)
			w.out = append(w.out, ch)
		}
	}
	return nil
}

func dupCloexec(fd int) int {
	n, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1
	}
	return n
}

func orDot(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}

func join(rel, n string) string {
	if rel == "" {
		return n
	}
	return rel + "/" + n
}

// one is the entry n of the upper directory up.
func (w *walker) one(up, low int, rel, n string) error {
	p := join(rel, n)
	ue := statAt(up, n)
	if !ue.ok {
		return nil // gone meanwhile (a running sandbox)
	}
	since := w.c.Meta.Created
	if ue.st.Mask&unix.STATX_BTIME != 0 {
		since = ts(ue.st.Btime)
	}
	le := statAt(low, n)
	umode := uint32(ue.st.Mode)
	ch := Change{Path: p, Type: typeName(umode), Mode: umode & 0o7777, since: since}
	switch {
	case isWhiteout(up, n, ue):
		if !le.ok {
			return nil // the sandbox made and removed it
		}
		ch.Op, ch.Type, ch.Mode, ch.whiteout = Deleted, typeName(uint32(le.st.Mode)), 0, true
	case ue.typ() == unix.S_IFDIR:
		repl := opaque(up, n)
		sub, err := unix.Openat(up, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil // replaced meanwhile
		}
		defer unix.Close(sub)
		lsub := -1
		if le.ok && le.typ() == unix.S_IFDIR && low >= 0 {
			if fd, err := unix.Openat(low, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				lsub = fd
				defer unix.Close(lsub)
			}
		}
		switch {
		case !le.ok:
			ch.Op = Added
		case le.typ() != unix.S_IFDIR:
			ch.Op = Modified // a file the sandbox replaced by a directory
		case repl:
			ch.Op, ch.Replaced = Modified, true
		case uint32(le.st.Mode)&0o7777 != ch.Mode:
			ch.Op, ch.OldMode = Modified, uint32(le.st.Mode)&0o7777
		}
		if ch.Op != "" {
			w.finish(&ch, le)
			w.out = append(w.out, ch)
		}
		return w.dir(sub, lsub, p, repl && lsub >= 0, since)
	case ue.typ() == unix.S_IFREG:
		ch.Size = int64(ue.st.Size)
		ch.HardLink = ue.st.Nlink > 1
		switch {
		case !le.ok:
			ch.Op = Added
		case le.typ() != unix.S_IFREG:
			ch.Op = Modified
		case uint32(le.st.Mode)&0o7777 != ch.Mode:
			ch.Op, ch.OldMode = Modified, uint32(le.st.Mode)&0o7777
		case le.st.Size != ue.st.Size || le.st.Mtime != ue.st.Mtime && !sameContent(up, low, n):
			ch.Op = Modified
		default:
			// Copied up, not changed. (Same size and modification time
			// are taken as unchanged without reading: a sandbox that set
			// the time back hides its change from the diff, and what is
			// not listed is never applied.)
			return nil
		}
	case ue.typ() == unix.S_IFLNK:
		t, err := readlinkAt(up, n)
		if err != nil {
			return nil
		}
		ch.Target, ch.Mode = t, 0
		if le.ok && le.typ() == unix.S_IFLNK {
			if lt, err := readlinkAt(low, n); err == nil && lt == t {
				return nil
			}
		}
		ch.Op = Added
		if le.ok {
			ch.Op = Modified
		}
	default:
		ch.Op = Added
		if le.ok {
			ch.Op = Modified
		}
	}
	w.finish(&ch, le)
	w.out = append(w.out, ch)
	return nil
}

// finish sets what Apply makes of ch: protected, refused, a conflict.
func (w *walker) finish(ch *Change, le entry) {
	ch.Protected = Protected(ch.Path, w.prot)
	ch.Refused = refusal(ch)
	if ch.Op != Added && changedSince(le, ch.since) {
		ch.Conflict = "the host's " + ch.Path + " changed after the sandbox took its copy (at " + ts(le.st.Ctime).Format(time.RFC3339) + ")"
	} else if ch.Op == Added && le.ok {
		ch.Conflict = "the host made " + ch.Path + " after the sandbox saw the workspace"
	}
}

// refusal says why Apply never applies ch, or "".
func refusal(ch *Change) string {
	if ch.Op == Deleted {
		return ""
	}
	switch ch.Type {
	case TypeFIFO, TypeSocket, TypeDevice:
		return "a " + ch.Type + " is never applied to the workspace"
	case TypeSymlink:
		if path.IsAbs(ch.Target) {
			return "a symlink to the absolute path " + ch.Target + " (inside the sandbox and on the host it leads to different places) is never applied"
		}
		if t := path.Clean(path.Join(path.Dir(ch.Path), ch.Target)); t == ".." || strings.HasPrefix(t, "../") {
			return "a symlink leading out of the workspace (" + ch.Target + ") is never applied"
		}
	}
	return ""
}

// Protected reports whether rel is a protected path: one of prot or beneath
// one, a .git entry itself (a repository planted, or its gitdir pointer),
// or what git executes in a git directory (its configuration, hooks, and
// commondir, which names another git directory).
func Protected(rel string, prot []string) bool {
	if underAnyPath(rel, prot) {
		return true
	}
	parts := strings.Split(rel, "/")
	for i, p := range parts {
		if p != ".git" {
			continue
		}
		if i == len(parts)-1 {
			return true
		}
		switch parts[i+1] {
		case "config", "config.worktree", "hooks", "commondir":
			return true
		}
	}
	return false
}

func readlinkAt(dfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}

// openFile opens the regular file name of dfd for reading, refusing
// anything else (a FIFO swapped in does not block: O_NONBLOCK).
func openFile(dfd int, name string) (*os.File, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, errors.New("not a regular file")
	}
	return os.NewFile(uintptr(fd), name), nil
}

func sameContent(up, low int, n string) bool {
	a, err := openFile(up, n)
	if err != nil {
		return false
	}
	defer a.Close()
	b, err := openFile(low, n)
	if err != nil {
		return false
	}
	defer b.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, ea := io.ReadFull(a, ba)
		nb, eb := io.ReadFull(b, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if ea != nil || eb != nil {
			return ea == eb || (errors.Is(ea, io.ErrUnexpectedEOF) || errors.Is(ea, io.EOF)) && (errors.Is(eb, io.ErrUnexpectedEOF) || errors.Is(eb, io.EOF))
		}
	}
}

// MaxDiffSize is the largest file whose contents a text diff shows.
const MaxDiffSize = 4 << 20

// TextDiff is the unified diff of one change of c (regular files; ""
// for others), or a line saying why there is none (binary, too large).
func TextDiff(c *ChangeSet, ch Change) string {
	t, err := NewTexts(c)
	if err != nil {
		return ""
	}
	defer t.Close()
	return t.Diff(ch)
}

// Texts makes the text diffs of one change set, its layers opened once.
type Texts struct{ ws, up int }

// NewTexts opens c's workspace and upper layer for Diff; Close them.
func NewTexts(c *ChangeSet) (*Texts, error) {
	ws, err := unix.Open(c.Meta.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open the workspace %s: %w", c.Meta.Workspace, err)
	}
	up, err := unix.Open(c.Upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(ws)
		return nil, fmt.Errorf("open the upper layer of %s: %w", c.Meta.ID, err)
	}
	return &Texts{ws: ws, up: up}, nil
}

// Close releases the layers.
func (t *Texts) Close() {
	unix.Close(t.ws)
	unix.Close(t.up)
}

// Diff is TextDiff of ch.
func (t *Texts) Diff(ch Change) string {
	old, oerr := readBeneath(t.ws, ch.Path)
	var cur []byte
	var cerr error
	if ch.Op != Deleted && ch.Type == TypeFile {
		cur, cerr = readBeneath(t.up, ch.Path)
	}
	if ch.Type != TypeFile || oerr != nil && ch.Op == Modified || cerr != nil {
		return ""
	}
	if binary(old) || binary(cur) {
		return fmt.Sprintf("Binary files a/%s and b/%s differ\n", ch.Path, ch.Path)
	}
	if len(old) > MaxDiffSize || len(cur) > MaxDiffSize {
		return fmt.Sprintf("(%s: larger than %d bytes, diff not shown)\n", ch.Path, MaxDiffSize)
	}
	from, to := "a/"+ch.Path, "b/"+ch.Path
	switch ch.Op {
	case Added:
		from, old = "/dev/null", nil
	case Deleted:
		to, cur = "/dev/null", nil
	}
	s, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: lines(old), B: lines(cur),
		FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		return ""
	}
	return s
}

// lines splits b after each newline; a last line without one gets git's
// marker.
func lines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	ls := strings.SplitAfter(string(b), "\n")
	if ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	} else {
		ls[len(ls)-1] += "\n\\ No newline at end of file\n"
	}
	return ls
}

func binary(b []byte) bool {
	return bytes.IndexByte(b[:min(len(b), 8000)], 0) >= 0
}

// readBeneath reads the regular file rel beneath the directory root
// without following a symlink on the way.
func readBeneath(root int, rel string) ([]byte, error) {
	fd, err := unix.Openat2(root, rel, &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_NONBLOCK | unix.O_CLOEXEC | unix.O_NOCTTY,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), rel)
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	return io.ReadAll(io.LimitReader(f, MaxDiffSize+1))
}
