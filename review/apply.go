package review

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// TempPrefix starts the name of the temporary file Apply renames over a
// changed file: it exists for the moment between linking the new file into
// the directory and renaming it over the old one. One left by a killed
// Apply is removed by the next Apply or Discard of the change set (the
// journal names it).
const TempPrefix = ".hutch-apply-"

// ApplyOptions says what Apply applies.
type ApplyOptions struct {
	// Paths, when given, apply only the changes at or beneath them
	// (relative to the workspace). A directory the sandbox replaced is
	// applied whole, and the new directories above a change with it.
	Paths []string
	// AllowProtected applies changes to protected paths too.
	AllowProtected bool
	// Wait is how long to wait for the change set's sandbox to end (a
	// session just stopped) before refusing.
	Wait time.Duration
}

// Skipped is a change Apply left in the change set, and why.
type Skipped struct {
	Change
	Why string `json:"why"`
}

// Outcome is what Apply did.
type Outcome struct {
	Applied []Change  `json:"applied"`
	Skipped []Skipped `json:"skipped"`
	// Left counts the changes still in the change set; 0 means Apply
	// removed it.
	Left int `json:"left"`
}

// journalRec is one line of the journal: before a file or symlink is
// renamed into the workspace, its inode and the temporary name it has until
// then. A later Apply that finds Ino at Path knows the change was applied
// and only its removal from the upper layer was lost; one that finds Temp
// removes it.
type journalRec struct {
	Path string `json:"path"`
	Ino  uint64 `json:"ino"`
	Temp string `json:"temp,omitempty"`
}

// Apply applies the change set's changes to its workspace, safely against
// what the sandbox planted (see docs/REVIEW.md): refused changes are never
// applied, protected ones only with AllowProtected, a host file that
// changed after the sandbox took its copy is a conflict and stays. Every
// file reaches the workspace whole (written elsewhere, renamed into place),
// every path is resolved beneath the workspace without following symlinks,
// and a journal lets the next Apply finish what a killed one began. Applied
// changes leave the change set; an empty change set is removed.
func Apply(c *ChangeSet, o ApplyOptions) (*Outcome, error) {
	l, err := c.LockWithin(o.Wait)
	if err != nil {
		return nil, err
	}
	defer l.Unlock()
	a := &applier{c: c, o: o, done: map[string]bool{}, skipped: map[string]bool{}}
	if a.ws, err = unix.Open(c.Meta.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("apply change set %s: open the workspace %s: %w", c.Meta.ID, c.Meta.Workspace, err)
	}
	defer unix.Close(a.ws)
	if a.up, err = unix.Open(c.Upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("apply change set %s: open its upper layer: %w", c.Meta.ID, err)
	}
	defer unix.Close(a.up)
	if err := a.recover(); err != nil {
		return nil, err
	}
	d, err := Diff(c, DiffOptions{})
	if err != nil {
		return nil, err
	}
	sel, err := selectChanges(d.Changes, o.Paths)
	if err != nil {
		return nil, err
	}
	jf, err := os.OpenFile(a.journal(), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("apply change set %s: journal: %w", c.Meta.ID, err)
	}
	a.j = bufio.NewWriter(jf)
	out := &Outcome{Applied: []Change{}, Skipped: []Skipped{}}
	for _, ch := range sel {
		why, err := a.one(ch)
		if err != nil {
			jf.Close()
			return nil, fmt.Errorf("apply change set %s: %s: %w", c.Meta.ID, ch.Path, err)
		}
		if why != "" {
			a.skipped[ch.Path] = true
			out.Skipped = append(out.Skipped, Skipped{Change: ch, Why: why})
			continue
		}
		a.done[ch.Path] = true
		out.Applied = append(out.Applied, ch)
	}
	a.dirs = map[string]bool{}
	for _, ch := range d.Changes {
		if ch.Type == TypeDir && ch.Op != Deleted {
			a.dirs[ch.Path] = true
		}
	}
	a.settleReplaced(sel)
	a.pruneUpper("", a.up)
	jf.Close()
	os.Remove(a.journal())
	left, err := Diff(c, DiffOptions{})
	if err != nil {
		return nil, err
	}
	out.Left = len(left.Changes)
	if out.Left == 0 {
		if err := c.remove(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// selectChanges keeps the changes at or beneath paths, with each replaced
// directory above one (applied whole) and the added directories above one.
func selectChanges(all []Change, paths []string) ([]Change, error) {
	ps, err := cleanPaths(paths)
	if err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, ch := range all {
		if !underAnyPath(ch.Path, ps) {
			continue
		}
		want[ch.Path] = true
		for d := path.Dir(ch.Path); d != "."; d = path.Dir(d) {
			want[d] = true
		}
	}
	// A replaced directory goes whole: its children were made anew.
	var whole []string
	for _, ch := range all {
		if ch.Replaced && want[ch.Path] {
			whole = append(whole, ch.Path)
		}
	}
	var out []Change
	for _, ch := range all {
		if want[ch.Path] || underAnyPath(ch.Path, whole) {
			out = append(out, ch)
		}
	}
	return out, nil
}

// applier is one Apply's state.
type applier struct {
	c       *ChangeSet
	o       ApplyOptions
	ws, up  int // O_PATH descriptors of the workspace and the upper layer
	j       *bufio.Writer
	done    map[string]bool
	skipped map[string]bool
	// dirs are the directories that are a change of their own.
	dirs map[string]bool
}

func (a *applier) journal() string { return filepath.Join(a.c.Dir, "journal") }

var how = func(flags uint64) *unix.OpenHow {
	return &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
}

// openDir opens the directory rel beneath root, following no symlink.
func openDir(root int, rel string) (int, error) {
	if rel == "." || rel == "" {
		rel = "."
	}
	return unix.Openat2(root, rel, how(unix.O_PATH|unix.O_DIRECTORY))
}

// cleanWorkspace removes the temporary files a killed Apply left in the
// workspace (the journal names them).
func (c *ChangeSet) cleanWorkspace() {
	a := &applier{c: c, ws: -1, up: -1}
	var err error
	if a.ws, err = unix.Open(c.Meta.Workspace, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return
	}
	defer unix.Close(a.ws)
	if a.up, err = unix.Open(c.Upper(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err != nil {
		return
	}
	defer unix.Close(a.up)
	a.recover()
}

// recover finishes what a killed Apply began: a temporary file it left is
// removed, a change it renamed into place leaves the upper layer.
func (a *applier) recover() error {
	f, err := os.Open(a.journal())
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("apply change set %s: journal: %w", a.c.Meta.ID, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r journalRec
		if json.Unmarshal(sc.Bytes(), &r) != nil || cleanRel(r.Path) != nil {
			continue // a line cut short by the kill
		}
		dir, name := path.Split(r.Path)
		pfd, err := openDir(a.ws, dir)
		if err != nil {
			continue
		}
		if r.Temp != "" && strings.HasPrefix(r.Temp, TempPrefix) && !strings.Contains(r.Temp, "/") {
			unix.Unlinkat(pfd, r.Temp, 0)
		}
		var st unix.Stat_t
		if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Ino == r.Ino {
			a.removeUpper(r.Path)
		}
		unix.Close(pfd)
	}
	f.Close()
	return os.Remove(a.journal())
}

func cleanRel(p string) error {
	if p == "" || path.IsAbs(p) || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") {
		return fmt.Errorf("bad path %q", p)
	}
	return nil
}

// removeUpper removes an applied file, symlink or whiteout from the upper
// layer.
func (a *applier) removeUpper(rel string) {
	dir, name := path.Split(rel)
	pfd, err := openDir(a.up, dir)
	if err != nil {
		return
	}
	defer unix.Close(pfd)
	unix.Unlinkat(pfd, name, 0)
}

// one applies ch; it returns why it did not ("" when it did), or an error
// that stops the Apply (the journal and the upper layer keep the rest).
func (a *applier) one(ch Change) (string, error) {
	if ch.Refused != "" {
		return "refused: " + ch.Refused, nil
	}
	if ch.Protected && !a.o.AllowProtected {
		return "a protected path: applied only with --allow-protected", nil
	}
	for d := path.Dir(ch.Path); d != "."; d = path.Dir(d) {
		if a.skipped[d] {
			return "its directory " + d + " was not applied", nil
		}
	}
	dir, name := path.Split(ch.Path)
	pfd, err := openDir(a.ws, dir)
	if err != nil {
		return fmt.Sprintf("its directory %s cannot be opened in the workspace without following a symlink: %v", orDot(strings.TrimSuffix(dir, "/")), err), nil
	}
	defer unix.Close(pfd)
	host := statAt(pfd, name)
	// The host's state now, against what the sandbox saw.
	switch {
	case ch.Op == Added && host.ok && !(ch.Type == TypeDir && host.typ() == unix.S_IFDIR):
		return "conflict: the host made " + ch.Path + " after the sandbox saw the workspace", nil
	case ch.Op == Modified && !host.ok:
		return "conflict: the host removed " + ch.Path + " after the sandbox took its copy", nil
	case ch.Op != Added && host.ok && host.typ() != unix.S_IFDIR && changedSince(host, ch.since):
		return "conflict: the host's " + ch.Path + " changed after the sandbox took its copy", nil
	case ch.Op == Deleted && !host.ok:
		a.finishUpper(ch)
		return "", nil // gone already
	}
	if host.ok && host.typ() == unix.S_IFDIR && (ch.Op == Deleted || ch.Type != TypeDir) {
		if p, changed := treeChangedSince(pfd, name, ch.since); changed {
			return "conflict: the host's " + path.Join(ch.Path, p) + " changed after the sandbox removed its directory", nil
		}
	}
	if ch.Op == Deleted {
		if err := removeEntry(pfd, name, host); err != nil {
			return "", err
		}
		a.finishUpper(ch)
		return "", nil
	}
	if host.ok && (host.typ() == unix.S_IFDIR) != (ch.Type == TypeDir) {
		// A type change: the host's entry goes first (checked above).
		if err := removeEntry(pfd, name, host); err != nil {
			return "", err
		}
		host.ok = false
	}
	switch ch.Type {
	case TypeDir:
		if !host.ok {
			if err := unix.Mkdirat(pfd, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return "", fmt.Errorf("mkdir: %w", err)
			}
		}
		if err := unix.Fchmodat(pfd, name, ch.Mode&0o777, unix.AT_SYMLINK_NOFOLLOW); err != nil && !errors.Is(err, unix.EOPNOTSUPP) {
			return "", fmt.Errorf("chmod: %w", err)
		}
		return "", nil
	case TypeFile:
		return a.file(ch, pfd, name, host.ok)
	case TypeSymlink:
		return a.symlink(ch, pfd, name)
	}
	return "refused: a " + ch.Type + " is never applied to the workspace", nil
}

// finishUpper drops an applied change from the upper layer (directories
// go when empty, at the end).
func (a *applier) finishUpper(ch Change) {
	if !ch.opaqueDel {
		a.removeUpper(ch.Path)
	}
}

// treeChangedSince reports a non-directory beneath the directory name of
// pfd that changed at or after t (the host's work a deletion would lose),
// with its path relative to name.
func treeChangedSince(pfd int, name string, t time.Time) (string, bool) {
	sub, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", false
	}
	f := os.NewFile(uintptr(sub), name)
	defer f.Close()
	names, _ := f.Readdirnames(-1)
	for _, n := range names {
		e := statAt(sub, n)
		if e.typ() == unix.S_IFDIR {
			if p, ok := treeChangedSince(sub, n, t); ok {
				return path.Join(n, p), true
			}
		} else if changedSince(e, t) {
			return n, true
		}
	}
	return "", false
}

// removeEntry removes the host's entry name of pfd: a directory with all it
// holds, never following a symlink.
func removeEntry(pfd int, name string, e entry) error {
	if e.typ() != unix.S_IFDIR {
		if err := unix.Unlinkat(pfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove: %w", err)
		}
		return nil
	}
	sub, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open to remove: %w", err)
	}
	f := os.NewFile(uintptr(sub), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return fmt.Errorf("read to remove: %w", err)
	}
	for _, n := range names {
		if err := removeEntry(sub, n, statAt(sub, n)); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove directory: %w", err)
	}
	return nil
}

// file puts the sandbox's file ch into the directory pfd as name: its bytes
// go into an unnamed file there (O_TMPFILE) that is linked in whole, under
// name when nothing is there, else under a temporary name renamed over it.
// A hard link in the upper layer becomes a copy.
func (a *applier) file(ch Change, pfd int, name string, exists bool) (string, error) {
	dir, _ := path.Split(ch.Path)
	ufd, err := openDir(a.up, dir)
	if err != nil {
		return "", fmt.Errorf("open its directory in the upper layer: %w", err)
	}
	src, err := openFile(ufd, name)
	unix.Close(ufd)
	if err != nil {
		return "refused: the sandbox's " + ch.Path + " is no longer a regular file", nil
	}
	defer src.Close()
	var sst unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &sst); err != nil {
		return "", err
	}
	mode := sst.Mode & 0o777 // never setuid, setgid or sticky
	tmp := TempPrefix + strconv.FormatUint(sst.Ino, 36) + "-" + strconv.Itoa(os.Getpid())
	named := false
	fd, err := unix.Openat(pfd, ".", unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, mode)
	if err != nil {
		// No O_TMPFILE here: a named temporary file, journaled first.
		if err := a.record(journalRec{Path: ch.Path, Temp: tmp}); err != nil {
			return "", err
		}
		if fd, err = unix.Openat(pfd, tmp, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode); err != nil {
			return "", fmt.Errorf("create %s: %w", tmp, err)
		}
		named = true
	}
	dst := os.NewFile(uintptr(fd), tmp)
	defer dst.Close()
	if _, err := io.Copy(dst, src); err != nil {
		if named {
			unix.Unlinkat(pfd, tmp, 0)
		}
		return "", fmt.Errorf("write: %w", err)
	}
	unix.Fchmod(fd, mode)
	unix.UtimesNanoAt(fd, "", []unix.Timespec{sst.Atim, sst.Mtim}, unix.AT_EMPTY_PATH)
	var dstSt unix.Stat_t
	if err := unix.Fstat(fd, &dstSt); err != nil {
		return "", err
	}
	if !named {
		if err := a.record(journalRec{Path: ch.Path, Ino: dstSt.Ino, Temp: tmp}); err != nil {
			return "", err
		}
		from := fmt.Sprintf("/proc/self/fd/%d", fd)
		if !exists {
			err := unix.Linkat(unix.AT_FDCWD, from, pfd, name, unix.AT_SYMLINK_FOLLOW)
			if errors.Is(err, unix.EEXIST) {
				return "conflict: the host made " + ch.Path + " while it was applied", nil
			}
			if err != nil {
				return "", fmt.Errorf("link into place: %w", err)
			}
			a.removeUpper(ch.Path)
			return "", nil
		}
		if err := unix.Linkat(unix.AT_FDCWD, from, pfd, tmp, unix.AT_SYMLINK_FOLLOW); err != nil {
			return "", fmt.Errorf("link %s: %w", tmp, err)
		}
	} else if err := a.record(journalRec{Path: ch.Path, Ino: dstSt.Ino, Temp: tmp}); err != nil {
		return "", err
	}
	return a.renameIn(ch, pfd, tmp, name)
}

// symlink makes the sandbox's symlink (one that stays in the workspace) at
// name under a temporary name renamed into place.
func (a *applier) symlink(ch Change, pfd int, name string) (string, error) {
	tmp := TempPrefix + "l-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(int64(len(a.done)), 36)
	if err := a.record(journalRec{Path: ch.Path, Temp: tmp}); err != nil {
		return "", err
	}
	if err := unix.Symlinkat(ch.Target, pfd, tmp); err != nil {
		return "", fmt.Errorf("symlink: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return "", err
	}
	if err := a.record(journalRec{Path: ch.Path, Ino: st.Ino, Temp: tmp}); err != nil {
		return "", err
	}
	return a.renameIn(ch, pfd, tmp, name)
}

// renameIn renames the journaled temporary tmp over name and drops the
// change from the upper layer.
func (a *applier) renameIn(ch Change, pfd int, tmp, name string) (string, error) {
	if err := unix.Renameat(pfd, tmp, pfd, name); err != nil {
		unix.Unlinkat(pfd, tmp, 0)
		return "", fmt.Errorf("rename into place: %w", err)
	}
	a.removeUpper(ch.Path)
	return "", nil
}

// record appends r to the journal and writes it out before the change it
// announces is made (a kill loses no line that was written; a power cut is
// not guarded against: the journal is not synced).
func (a *applier) record(r journalRec) error {
	b, _ := json.Marshal(r)
	a.j.Write(append(b, '\n'))
	if err := a.j.Flush(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	return nil
}

// settleReplaced makes each applied replaced directory an ordinary one in
// the upper layer: the host's entries whose deletion was not applied get a
// whiteout, then the directory's opaque mark goes (the host's directory now
// holds what the sandbox made of it).
func (a *applier) settleReplaced(sel []Change) {
	for _, ch := range sel {
		if !ch.Replaced || !a.done[ch.Path] {
			continue
		}
		ufd, err := openDir(a.up, ch.Path)
		if err != nil {
			continue
		}
		ok := true
		for _, d := range sel {
			if d.opaqueDel && path.Dir(d.Path) == ch.Path && !a.done[d.Path] {
				if unix.Mknodat(ufd, path.Base(d.Path), unix.S_IFCHR|0o600, 0) != nil {
					ok = false
				}
			}
		}
		if ok {
			unix.Removexattr(fmt.Sprintf("/proc/self/fd/%d", ufd), "user.overlay.opaque")
		}
		unix.Close(ufd)
	}
}

// pruneUpper removes the upper layer's directories left empty whose own
// change (if any) was applied, deepest first.
func (a *applier) pruneUpper(rel string, dfd int) {
	fd, err := unix.Openat(dfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	f := os.NewFile(uintptr(fd), rel)
	ents, _ := f.ReadDir(-1)
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		p := join(rel, e.Name())
		sub, err := unix.Openat(fd, e.Name(), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		a.pruneUpper(p, sub)
		unix.Close(sub)
		if (a.done[p] || !a.dirs[p]) && !hasXattr(fd, e.Name(), "user.overlay.opaque", "y") {
			unix.Unlinkat(fd, e.Name(), unix.AT_REMOVEDIR) // fails unless empty
		}
	}
	f.Close()
}
