package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hutchsandbox/hutch/internal/kernel"
)

// Host is what Probe found: the cgroup layout, where hutch would create a
// sandbox's cgroup, the backend New would use and why the others are not
// used. run and `hutch doctor` share it.
type Host struct {
	// Mode is "v2" (unified), "hybrid" (v1 controllers, a v2 hierarchy at
	// /sys/fs/cgroup/unified), "v1" (legacy) or "none".
	Mode   string `json:"mode"`
	UID    int    `json:"uid"`
	Kernel string `json:"kernel"`
	// V2 describes the cgroup v2 hierarchy (also in hybrid mode).
	V2 *V2Host `json:"v2,omitempty"`
	// V1 lists the cgroup v1 hierarchies hutch uses (memory, pids, cpu).
	V1 []V1Hierarchy `json:"v1,omitempty"`
	// SystemdUserBus is the systemd user manager's or session bus's
	// socket, when one exists (Probe does not connect to it).
	SystemdUserBus string `json:"systemd_user_bus,omitempty"`

	// Backend is what New would use: one of the Backend* names.
	Backend string `json:"backend"`
	// Where are the directories the sandbox cgroups would be made in (one
	// per hierarchy on v1); empty for rlimit, and for cgroup2-systemd-scope,
	// whose scope exists only once New asks for it.
	Where []string `json:"where,omitempty"`
	// Controllers are the ones the sandbox cgroup would have, of memory,
	// pids and cpu: the limits that can be enforced.
	Controllers []string `json:"controllers,omitempty"`
	// MovesSelf: on cgroup v2, New will move hutch's own process into a
	// leaf (hutch-PID-START-supervisor) of its own cgroup and enable the
	// controllers there, as the no-internal-process rule requires.
	MovesSelf bool `json:"moves_self,omitempty"`
	// CloneIntoCgroup: the init can be started inside the cgroup (cgroup
	// v2 and kernel >= 5.7: FD and SysProcAttr.UseCgroupFD).
	CloneIntoCgroup bool `json:"clone_into_cgroup"`
	// CgroupKill: cgroup.kill kills the cgroup at once (v2, kernel >= 5.14).
	CgroupKill bool `json:"cgroup_kill"`
	// Reason says why Backend was chosen.
	Reason string `json:"reason"`
	// Rejected says why each other backend was not chosen.
	Rejected []Rejection `json:"rejected,omitempty"`
	// Notes are limits that cannot be enforced on the chosen backend.
	Notes []string `json:"notes,omitempty"`

	v2plan *v2plan
	v1plan []v1hier
	// scopeFallback, with Backend cgroup2-systemd-scope, is the reason of
	// the cgroup2-delegated plan (v2plan) New uses if no scope can be had.
	scopeFallback string
}

// V2Host describes the cgroup v2 hierarchy.
type V2Host struct {
	Mount string `json:"mount"`
	// Own is this process's cgroup, relative to Mount.
	Own string `json:"own"`
	// RootControllers are the controllers bound to the v2 hierarchy.
	RootControllers []string `json:"root_controllers"`
	// Tried lists each cgroup examined as a place for sandbox cgroups,
	// from Own upwards, and what was found.
	Tried []string `json:"tried,omitempty"`
}

// V1Hierarchy is one cgroup v1 hierarchy.
type V1Hierarchy struct {
	Controller string `json:"controller"`
	Mount      string `json:"mount"`
	// Own is this process's cgroup in it, relative to Mount.
	Own      string `json:"own"`
	Writable bool   `json:"writable"`
}

// Rejection is a backend that was not chosen, and why.
type Rejection struct {
	Backend string `json:"backend"`
	Reason  string `json:"reason"`
}

// v2plan is where and how New creates a cgroup v2 sandbox cgroup.
type v2plan struct {
	mount    string
	base     string // absolute directory the sandbox cgroup is made in
	moveSelf bool   // move this process into a leaf of base and enable ctrls in base
	ctrls    []string
}

// v1hier is one cgroup v1 hierarchy New creates the sandbox cgroup in.
type v1hier struct {
	ctrl  string
	mount string
	base  string // absolute directory the sandbox cgroup is made in
}

// wanted are the controllers hutch uses; required must all be there for a
// cgroup backend to be chosen (they are what protects the host).
var (
	wanted   = []string{"memory", "pids", "cpu"}
	required = []string{"memory", "pids"}
)

// Probe examines the host without changing anything (it reads /proc and
// cgroupfs, and does not connect to D-Bus).
func Probe() Host {
	mu.Lock()
	defer mu.Unlock()
	return probe("")
}

func probe(parent string) Host {
	h := Host{UID: os.Getuid(), Kernel: kernel.Release()}
	root := h.UID == 0
	h.Mode = hostMode()
	mounts, _ := parseMountinfo("/proc/self/mountinfo")
	v1own, v2own, err := parseProcCgroup("/proc/self/cgroup")
	if err != nil || h.Mode == modeNone {
		h.Backend = BackendRlimit
		h.Reason = "no cgroup filesystem at /sys/fs/cgroup"
		if err != nil {
			h.Reason = "cannot read /proc/self/cgroup: " + err.Error()
		}
		return h
	}

	// cgroup v2.
	v2name := BackendV2Delegated
	if root {
		v2name = BackendV2Root
	}
	if h.Mode == modeV2 || h.Mode == modeHybrid {
		mount := "/sys/fs/cgroup"
		if h.Mode == modeHybrid {
			mount = "/sys/fs/cgroup/unified"
		}
		own := relToMount(v2own, mountRoot(mounts, mount))
		h.V2 = &V2Host{Mount: mount, Own: own, RootControllers: readFields(filepath.Join(mount, "cgroup.controllers"))}
		if missing := missingOf(h.V2.RootControllers, required); len(missing) > 0 {
			why := fmt.Sprintf("the cgroup v2 hierarchy at %s has controllers [%s], not %s", mount, strings.Join(h.V2.RootControllers, " "), strings.Join(missing, " and "))
			if h.Mode == modeHybrid {
				why += " (on this hybrid host they are bound to cgroup v1 hierarchies)"
			}
			h.Rejected = append(h.Rejected, Rejection{v2name, why})
		} else {
			plan, tried, why := planV2(mount, own, parent)
			h.V2.Tried = tried
			if plan != nil {
				h.v2plan = plan
				h.Backend = v2name
				h.Where = []string{plan.base}
				h.Controllers = plan.ctrls
				h.MovesSelf = plan.moveSelf
				h.CloneIntoCgroup = kernel.AtLeast("5.7")
				h.CgroupKill = kernel.AtLeast("5.14")
				if root {
					h.Reason = "root on a cgroup v2 host"
				} else {
					h.Reason = fmt.Sprintf("uid %d may write the cgroup v2 subtree %s (delegated)", h.UID, rel(mount, plan.base))
				}
				if plan.moveSelf {
					h.Reason += fmt.Sprintf("; hutch's own cgroup %s holds only hutch, so hutch moves into a leaf of it and enables %s there", rel(mount, plan.base), strings.Join(plan.ctrls, " "))
				} else {
					h.Reason += fmt.Sprintf("; sandbox cgroups go in %s, which has %s enabled for its children", rel(mount, plan.base), strings.Join(plan.ctrls, " "))
				}
			} else {
				h.Rejected = append(h.Rejected, Rejection{v2name, why})
			}
		}
	}

	// cgroup v2 through a systemd transient scope: New asks the user
	// manager for one and moves hutch into it (Probe does not connect).
	// Also preferred over an ancestor cgroup that the user manager owns
	// (app.slice when hutch shares a terminal's scope): systemd does not
	// expect cgroups it did not create there; a scope of hutch's own is the
	// clean way, and that ancestor stays the fallback.
	fallback := ""
	if h.Backend == v2name && !root && parent == "" && h.v2plan != nil && !h.v2plan.moveSelf && !ownIsHutchLeaf(h.V2) {
		fallback = h.Reason
	}
	if (h.Backend == "" || fallback != "") && h.Mode == modeV2 && !root {
		bus := userBus(h.UID)
		if bus == "" {
			h.Rejected = append(h.Rejected, Rejection{BackendV2Scope, fmt.Sprintf("no systemd user manager bus for uid %d (no $DBUS_SESSION_BUS_ADDRESS socket, no $XDG_RUNTIME_DIR/bus or /run/user/%d/bus, no systemd/private socket there)", h.UID, h.UID)})
		} else {
			h.SystemdUserBus = bus
			// A scope gets the controllers its parent slice has enabled
			// for its children, which is what this process's own cgroup
			// has too.
			avail := readFields(filepath.Join(h.V2.Mount, h.V2.Own, "cgroup.controllers"))
			if missing := missingOf(avail, required); len(missing) > 0 {
				h.Rejected = append(h.Rejected, Rejection{BackendV2Scope, fmt.Sprintf("the systemd user manager (%s) could make a scope, but its cgroups get [%s], not %s: enable delegation of them (systemctl edit user@.service: [Service] Delegate=memory pids cpu)",
					bus, strings.Join(avail, " "), strings.Join(missing, " and "))})
			} else {
				h.Backend = BackendV2Scope
				h.scopeFallback = fallback
				h.Where = nil // the scope, and so its path, exists only once New asks for it
				h.Controllers = nil
				for _, c := range wanted {
					if slices.Contains(avail, c) {
						h.Controllers = append(h.Controllers, c)
					}
				}
				h.MovesSelf = true
				h.CloneIntoCgroup = kernel.AtLeast("5.7")
				h.CgroupKill = kernel.AtLeast("5.14")
				h.Reason = fmt.Sprintf("uid %d has no delegated cgroup v2 subtree to itself here, and the systemd user manager answers at %s: "+
					"hutch asks it for a transient scope with Delegate=yes (%s<pid>-<name>.scope), moves itself into it and makes the sandbox cgroups there, as podman does", h.UID, bus, namePrefix)
				if fallback != "" {
					h.Reason += "; should that fail: " + fallback
				}
			}
		}
	}

	// cgroup v1.
	v1name := BackendV1Root
	if !root && v1Writable(mounts, v1own) {
		v1name = BackendV1Delegated
	}
	if h.Mode == modeV1 || h.Mode == modeHybrid {
		hiers, info, why := planV1(mounts, v1own, parent)
		h.V1 = info
		switch {
		case why != "":
			if h.Backend == "" {
				h.Rejected = append(h.Rejected, Rejection{v1name, why})
			}
		case h.Backend != "":
			h.Rejected = append(h.Rejected, Rejection{v1name, "cgroup v2 is preferred"})
		default:
			h.v1plan = hiers
			h.Backend = v1name
			for _, x := range hiers {
				h.Where = append(h.Where, x.base)
				h.Controllers = append(h.Controllers, x.ctrl)
			}
			if root {
				h.Reason = "root on a cgroup " + map[string]string{"v1": "v1", "hybrid": "v1/v2 hybrid"}[h.Mode] + " host: a child cgroup in the " + strings.Join(h.Controllers, ", ") + " hierarchies"
			} else {
				h.Reason = fmt.Sprintf("uid %d may write the cgroup v1 hierarchies %s", h.UID, strings.Join(h.Controllers, ", "))
			}
		}
	}

	if h.Backend == "" {
		h.Backend = BackendRlimit
		h.Reason = unavailableReason(h)
		return h
	}
	if !slices.Contains(h.Controllers, "cpu") {
		h.Notes = append(h.Notes, "no cpu controller: a cpus limit cannot be enforced (New fails with ErrControllerMissing)")
	}
	if h.Backend == BackendV1Root || h.Backend == BackendV1Delegated {
		for _, x := range h.v1plan {
			if x.ctrl == "memory" && !exists(filepath.Join(x.base, "memory.memsw.limit_in_bytes")) {
				h.Notes = append(h.Notes, "no memory.memsw.limit_in_bytes (swap accounting off): swap use cannot be capped")
			}
		}
	}
	return h
}

// unavailableReason words why no cgroup can be used, with what to do.
func unavailableReason(h Host) string {
	var b strings.Builder
	if h.UID == 0 {
		b.WriteString("no usable cgroup hierarchy as root")
	} else {
		fmt.Fprintf(&b, "no delegated cgroup v2 subtree for uid %d and not root", h.UID)
	}
	var parts []string
	for _, r := range h.Rejected {
		parts = append(parts, r.Backend+": "+r.Reason)
	}
	if len(parts) > 0 {
		b.WriteString(" (" + strings.Join(parts, "; ") + ")")
	}
	switch {
	case h.UID == 0:
	case h.Mode == modeV2:
		b.WriteString("; enable delegation: systemctl edit user@.service → [Service] Delegate=yes (then log in again), " +
			"or start hutch in a delegated scope: systemd-run --user --scope -p Delegate=yes hutch ...")
	default:
		b.WriteString("; cgroup v1 controllers can be used only as root: boot with cgroup v2 " +
			"(systemd.unified_cgroup_hierarchy=1) and enable delegation: systemctl edit user@.service → [Service] Delegate=yes")
	}
	return b.String()
}

// planV2 finds where sandbox cgroups go: the nearest cgroup, from this
// process's own cgroup upwards, that hutch may write and whose children get
// memory and pids, or its own cgroup when hutch is alone in it (then hutch
// moves itself into a leaf and enables the controllers).
func planV2(mount, own, parent string) (*v2plan, []string, string) {
	ownAbs := filepath.Join(mount, own)
	var dirs []string
	if parent != "" {
		dirs = []string{filepath.Join(mount, filepath.Clean("/"+parent))}
	} else {
		for d := ownAbs; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if d == mount || !strings.HasPrefix(d, mount+"/") {
				break
			}
		}
	}
	var tried []string
	var owners []string
	unwritable := 0
	for _, d := range dirs {
		plan, why := checkV2(mount, d, d == ownAbs)
		tried = append(tried, rel(mount, d)+": "+why)
		if plan != nil {
			return plan, tried, ""
		}
		if strings.HasPrefix(why, "not writable") {
			unwritable++
			if o := "uid " + strconv.Itoa(ownerUID(d)); !slices.Contains(owners, o) {
				owners = append(owners, o)
			}
		}
	}
	if parent == "" && unwritable == len(dirs) {
		return nil, tried, fmt.Sprintf("uid %d may write neither its own cgroup %s nor any cgroup above it (they belong to %s): nothing is delegated",
			os.Getuid(), own, strings.Join(owners, ", "))
	}
	return nil, tried, "no cgroup from hutch's own (" + own + ") up to the root can hold sandbox cgroups: " + strings.Join(tried, "; ")
}

// checkV2 examines d as the parent of sandbox cgroups.
func checkV2(mount, d string, isOwn bool) (*v2plan, string) {
	if _, _, _, ok := parseLeafName(filepath.Base(d)); ok {
		return nil, "a hutch cgroup, not a parent for others"
	}
	if !exists(d) {
		return nil, "does not exist"
	}
	uid := os.Getuid()
	if err := writable(d); err != nil {
		return nil, fmt.Sprintf("not writable by uid %d (owner uid %d): %v", uid, ownerUID(d), err)
	}
	if err := writable(filepath.Join(d, "cgroup.procs")); err != nil {
		return nil, fmt.Sprintf("cgroup.procs not writable by uid %d (owner uid %d), so processes cannot be moved below it", uid, ownerUID(filepath.Join(d, "cgroup.procs")))
	}
	if t, err := readString(filepath.Join(d, "cgroup.type")); err == nil && t != "domain" {
		return nil, "cgroup type " + t + " (memory needs a domain cgroup)"
	}
	avail := readFields(filepath.Join(d, "cgroup.controllers"))
	enabled := readFields(filepath.Join(d, "cgroup.subtree_control"))
	if len(missingOf(enabled, required)) == 0 {
		ctrls := intersect(wanted, enabled)
		return &v2plan{mount: mount, base: d, ctrls: ctrls}, "usable: " + strings.Join(ctrls, " ") + " enabled for its children"
	}
	if missing := missingOf(avail, required); len(missing) > 0 {
		return nil, fmt.Sprintf("controllers available here: [%s]; %s missing", strings.Join(avail, " "), strings.Join(missing, " and "))
	}
	if !isOwn {
		return nil, fmt.Sprintf("memory and pids are available but not enabled for its children (cgroup.subtree_control: [%s]), and hutch enables controllers only in its own cgroup", strings.Join(enabled, " "))
	}
	if d == mount {
		return nil, "the root cgroup: hutch does not enable controllers there"
	}
	if err := writable(filepath.Join(d, "cgroup.subtree_control")); err != nil {
		return nil, fmt.Sprintf("cgroup.subtree_control not writable by uid %d", uid)
	}
	pids, err := readPids(filepath.Join(d, "cgroup.procs"))
	if err != nil {
		return nil, "cannot read cgroup.procs: " + err.Error()
	}
	if foreign := foreignPids(pids); len(foreign) > 0 {
		return nil, fmt.Sprintf("hutch's own cgroup, but it holds %d other %s (pid %d ...): controllers cannot be enabled while they are there (no-internal-process rule), and hutch does not move processes it did not start",
			len(foreign), plural(uint64(len(foreign)), "process", "processes"), foreign[0])
	}
	ctrls := intersect(wanted, avail)
	return &v2plan{mount: mount, base: d, moveSelf: true, ctrls: ctrls}, "usable: hutch's own cgroup holds only hutch; it moves into a leaf and enables " + strings.Join(ctrls, " ")
}

// foreignPids returns the pids that are neither this process nor its
// children.
func foreignPids(pids []int) []int {
	self := os.Getpid()
	var out []int
	for _, p := range pids {
		if p != self && parentPid(p) != self {
			out = append(out, p)
		}
	}
	return out
}

// planV1 finds the memory, pids and cpu hierarchies and this process's
// cgroup in each; sandbox cgroups go below those (or below parent).
func planV1(mounts []mountEntry, own map[string]string, parent string) ([]v1hier, []V1Hierarchy, string) {
	var hiers []v1hier
	var info []V1Hierarchy
	var problems, unwritable []string
	var why error
	for _, ctrl := range wanted {
		m, ok := findV1Mount(mounts, ctrl)
		if !ok {
			if slices.Contains(required, ctrl) {
				problems = append(problems, "no cgroup v1 hierarchy has the "+ctrl+" controller")
			}
			continue
		}
		ownRel := relToMount(own[ctrl], m.root)
		base := filepath.Join(m.point, ownRel)
		if parent != "" {
			base = filepath.Join(m.point, filepath.Clean("/"+parent))
		}
		hi := V1Hierarchy{Controller: ctrl, Mount: m.point, Own: ownRel}
		err := writable(base)
		if err == nil {
			err = writable(filepath.Join(base, "cgroup.procs"))
		}
		hi.Writable = err == nil
		info = append(info, hi)
		if err != nil {
			if slices.Contains(required, ctrl) {
				unwritable = append(unwritable, base)
				why = err
			}
			continue
		}
		hiers = append(hiers, v1hier{ctrl: ctrl, mount: m.point, base: base})
	}
	if len(unwritable) > 0 {
		p := fmt.Sprintf("uid %d may not write %s (%v)", os.Getuid(), strings.Join(unwritable, ", "), why)
		if os.Getuid() != 0 {
			p = "not root, and " + p
		}
		problems = append(problems, p)
	}
	if len(problems) > 0 {
		return nil, info, strings.Join(problems, "; ")
	}
	return hiers, info, ""
}

// v1Writable reports whether this user may write its own memory cgroup
// v1 (a hierarchy chown'ed to the user: rare, but then it is used).
func v1Writable(mounts []mountEntry, own map[string]string) bool {
	m, ok := findV1Mount(mounts, "memory")
	return ok && writable(filepath.Join(m.point, relToMount(own["memory"], m.root))) == nil
}

// ownIsHutchLeaf reports whether this process already sits in a leaf hutch
// made for it (it moved itself there for an earlier sandbox): the cgroup
// above is then hutch's own, scope or not.
func ownIsHutchLeaf(v2 *V2Host) bool {
	if v2 == nil {
		return false
	}
	_, _, _, ok := parseLeafName(filepath.Base(v2.Own))
	return ok
}

// userBus returns the socket of the user's D-Bus session bus or systemd
// user manager, "" when there is none.
func userBus(uid int) string {
	if a := os.Getenv("DBUS_SESSION_BUS_ADDRESS"); a != "" {
		for _, part := range strings.Split(a, ";") {
			if p, ok := strings.CutPrefix(part, "unix:path="); ok {
				p, _, _ = strings.Cut(p, ",")
				if isSocket(p) {
					return p
				}
			}
		}
	}
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = "/run/user/" + strconv.Itoa(uid)
	}
	for _, p := range []string{filepath.Join(dir, "bus"), filepath.Join(dir, "systemd", "private")} {
		if isSocket(p) {
			return p
		}
	}
	return ""
}

func isSocket(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode()&os.ModeSocket != 0
}

// mountEntry is one line of /proc/self/mountinfo.
type mountEntry struct {
	root, point, fstype string
	super               []string
}

func parseMountinfo(p string) ([]mountEntry, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var out []mountEntry
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		sep := slices.Index(f, "-")
		if len(f) < 10 || sep < 6 || len(f) < sep+4 {
			continue
		}
		out = append(out, mountEntry{
			root:   unescapeMount(f[3]),
			point:  unescapeMount(f[4]),
			fstype: f[sep+1],
			super:  strings.Split(f[sep+3], ","),
		})
	}
	return out, nil
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mountRoot returns the root (within the cgroup filesystem) of the mount at
// point, "/" when unknown.
func mountRoot(mounts []mountEntry, point string) string {
	for i := len(mounts) - 1; i >= 0; i-- {
		if mounts[i].point == point {
			return mounts[i].root
		}
	}
	return "/"
}

func findV1Mount(mounts []mountEntry, ctrl string) (mountEntry, bool) {
	for i := len(mounts) - 1; i >= 0; i-- {
		m := mounts[i]
		if m.fstype == "cgroup" && slices.Contains(m.super, ctrl) {
			return m, true
		}
	}
	return mountEntry{}, false
}

// relToMount turns a cgroup path from /proc/self/cgroup into one relative
// to a mount whose root is root.
func relToMount(p, root string) string {
	p = filepath.Clean("/" + p)
	if root == "" || root == "/" {
		return p
	}
	if r, ok := strings.CutPrefix(p, root); ok && (r == "" || r[0] == '/') {
		return filepath.Clean("/" + r)
	}
	return p
}

// rel returns d relative to mount, as "/a/b".
func rel(mount, d string) string {
	r, err := filepath.Rel(mount, d)
	if err != nil || r == "." {
		return "/"
	}
	return "/" + r
}

func missingOf(have, need []string) []string {
	var out []string
	for _, n := range need {
		if !slices.Contains(have, n) {
			out = append(out, n)
		}
	}
	return out
}

// intersect returns the elements of a that are in b, in a's order.
func intersect(a, b []string) []string {
	var out []string
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// String describes the host for `hutch doctor`.
func (h Host) String() string {
	var b strings.Builder
	mode := map[string]string{
		"v2":     "cgroup v2 (unified)",
		"hybrid": "cgroup v1/v2 hybrid (controllers on v1 hierarchies)",
		"v1":     "cgroup v1 (legacy)",
		"none":   "no cgroups",
	}[h.Mode]
	fmt.Fprintf(&b, "cgroups: %s; uid %d; kernel %s\n", mode, h.UID, h.Kernel)
	if h.V2 != nil {
		fmt.Fprintf(&b, "  v2 hierarchy %s, controllers [%s], hutch's cgroup %s\n", h.V2.Mount, strings.Join(h.V2.RootControllers, " "), h.V2.Own)
		for _, t := range h.V2.Tried {
			fmt.Fprintf(&b, "    %s\n", t)
		}
	}
	for _, x := range h.V1 {
		w := "not writable"
		if x.Writable {
			w = "writable"
		}
		fmt.Fprintf(&b, "  v1 %s hierarchy %s, hutch's cgroup %s (%s)\n", x.Controller, x.Mount, x.Own, w)
	}
	if h.SystemdUserBus != "" {
		fmt.Fprintf(&b, "  systemd user bus: %s\n", h.SystemdUserBus)
	}
	fmt.Fprintf(&b, "backend: %s: %s\n", h.Backend, h.Reason)
	if h.Backend != BackendRlimit && h.Backend != "" {
		if len(h.Where) > 0 {
			fmt.Fprintf(&b, "  sandbox cgroups in: %s\n", strings.Join(h.Where, ", "))
		}
		fmt.Fprintf(&b, "  limits enforced: %s\n", limitsEnforced(h.Controllers))
		start := "AddProc right after the init starts (no CLONE_INTO_CGROUP on cgroup v1)"
		if h.CloneIntoCgroup {
			start = "born inside (clone3 CLONE_INTO_CGROUP)"
		} else if h.V2 != nil && h.v2plan != nil {
			start = "AddProc right after the init starts (kernel < 5.7: no CLONE_INTO_CGROUP)"
		}
		fmt.Fprintf(&b, "  init: %s\n", start)
	} else {
		b.WriteString("  limits enforced with rlimits in the sandbox: RLIMIT_NPROC (processes), RLIMIT_FSIZE, RLIMIT_NOFILE; memory by the supervisor's watchdog (package limits), sampled, not exact; no cpus limit\n")
	}
	for _, r := range h.Rejected {
		fmt.Fprintf(&b, "not %s: %s\n", r.Backend, r.Reason)
	}
	for _, n := range h.Notes {
		fmt.Fprintf(&b, "note: %s\n", n)
	}
	return strings.TrimRight(b.String(), "\n")
}

func limitsEnforced(ctrls []string) string {
	var out []string
	for _, c := range ctrls {
		switch c {
		case "memory":
			out = append(out, "memory (swap 0)")
		case "pids":
			out = append(out, "processes")
		case "cpu":
			out = append(out, "cpus")
		}
	}
	return strings.Join(out, ", ")
}
