package seccompprofiles

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"unsafe"

	seccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/internal/memfd"
)

// Options change how a profile is compiled.
type Options struct {
	// Notify turns every SCMP_ACT_ERRNO action (the rules' and the
	// default's) into SCMP_ACT_NOTIFY, so that the supervisor answers the
	// errno itself and reports the denial. Explicit rules whose errno is
	// ENOSYS are quiet fallbacks and stay plain SCMP_ACT_ERRNO.
	Notify bool
	// Strict refuses a profile with syscall names this system does not
	// know (otherwise skipped, and listed in Filter.Unknown): the policy's
	// enforcement = "strict" refuses what it cannot apply.
	Strict bool
}

// Denial says how the supervisor answers a notified syscall.
type Denial struct {
	// Name is the syscall's name.
	Name string `json:"name"`
	// Errno is the positive errno returned to the caller (1 for EPERM).
	Errno int `json:"errno"`
	// Reason is the rule's comment, or why the default action applied.
	Reason string `json:"reason,omitempty"`
	// Args are the argument conditions under which the rule applies
	// (ANDed); empty means always.
	Args []Arg `json:"args,omitempty"`
	// Quiet marks an explicit ENOSYS fallback that stays plain
	// SCMP_ACT_ERRNO with Notify: the supervisor never sees it.
	Quiet bool `json:"quiet,omitempty"`
	// Default marks the profile's default action.
	Default bool `json:"default,omitempty"`
}

// Filter is a compiled profile, ready for seccomp(SECCOMP_SET_MODE_FILTER).
type Filter struct {
	// BPF is the struct sock_filter array in native byte order, 8 bytes an
	// instruction ({u16 code; u8 jt; u8 jf; u32 k}); sock_fprog.len is
	// len(BPF)/8.
	BPF []byte `json:"bpf"`
	// Notify is true when the filter contains SCMP_ACT_NOTIFY actions: load
	// it with SECCOMP_FILTER_FLAG_NEW_LISTENER and serve the listener.
	Notify bool `json:"notify"`
	// NotifyUnavailable says why a filter compiled with Options.Notify fell
	// back to plain errno actions ("" when it did not).
	NotifyUnavailable string `json:"notifyUnavailable,omitempty"`
	// ProfileHash is the hex SHA-256 of the profile's canonical JSON.
	ProfileHash string `json:"profileHash"`
	// Arch is libseccomp's name of the native architecture ("amd64").
	Arch string `json:"arch"`
	// DefaultAction is the profile's default action and DefaultErrno its
	// errno (0 when the action takes none).
	DefaultAction string `json:"defaultAction"`
	DefaultErrno  int    `json:"defaultErrno"`
	// Denials maps a native syscall number to its first errno-type rule
	// (SCMP_ACT_ERRNO or SCMP_ACT_NOTIFY), for the notification handler
	// and for display. Syscalls absent here are denied, if at all, by the
	// default action.
	Denials map[uint32]Denial `json:"denials"`
	// DenialRules holds every errno-type rule of a syscall in evaluation
	// order (conditional rules first); Lookup picks the one whose
	// conditions match.
	DenialRules map[uint32][]Denial `json:"denialRules"`
	// Warnings lists what was skipped or ignored: the profile's own
	// warnings (Profile.Warnings: unknown syscall names, ignored fields)
	// and the rules skipped while compiling. A caller says them once per
	// profile.
	Warnings []string `json:"warnings,omitempty"`
	// Unknown lists the rules' syscall names this system does not know,
	// skipped ("$.syscalls[3].names[1]: unknown syscall \"foo\" skipped");
	// they are in Warnings too. Options.Strict refuses them.
	Unknown []string `json:"unknown,omitempty"`

	// tables, when set, fills DefaultAction, DefaultErrno, Denials and
	// DenialRules on the first Lookup (see LoadTablesLazily).
	tables *lazyTables
}

type lazyTables struct {
	once sync.Once
	load func() (*Filter, error)
}

// LoadTablesLazily makes f, which holds only BPF and Notify, fetch the rest
// of its description from load on the first Lookup: a sandbox whose
// commands never hit a denial never pays for decoding the tables. If load
// fails, Lookup answers with the default (EPERM) for every syscall. Call it
// before f is shared.
func (f *Filter) LoadTablesLazily(load func() (*Filter, error)) {
	f.tables = &lazyTables{load: load}
}

func (f *Filter) ensureTables() {
	t := f.tables
	if t == nil {
		return
	}
	t.once.Do(func() {
		full, err := t.load()
		if err != nil || full == nil {
			return
		}
		f.DefaultAction, f.DefaultErrno = full.DefaultAction, full.DefaultErrno
		f.Denials, f.DenialRules = full.Denials, full.DenialRules
		f.ProfileHash, f.Arch = full.ProfileHash, full.Arch
	})
}

// Instructions is the number of BPF instructions (sock_fprog.len).
func (f *Filter) Instructions() int { return len(f.BPF) / bpfInsnSize }

// Lookup returns the denial the supervisor answers for a notified native
// syscall with the given arguments: the first errno-type rule whose
// conditions match, else the default action.
func (f *Filter) Lookup(nr uint32, args [6]uint64) Denial {
	f.ensureTables()
	for _, d := range f.DenialRules[nr] {
		if matchAll(d.Args, args) {
			return d
		}
	}
	errno := f.DefaultErrno
	if errno == 0 {
		errno = int(unix.EPERM)
	}
	return Denial{
		Name:    syscallName(int32(nr)),
		Errno:   errno,
		Reason:  "not allowed by the profile (default action)",
		Default: true,
	}
}

const (
	bpfInsnSize = 8
	bpfMaxInsns = 4096 // BPF_MAXINSNS

	bpfRetK = 0x06 // BPF_RET | BPF_K
	bpfJA   = 0x05 // BPF_JMP | BPF_JA
)

// Compile compiles p to BPF with libseccomp and refuses a profile under
// which hutch's exec stage cannot start the command (see execStageNeeds),
// naming the calls it lacks, and with opts.Strict one with syscall names
// this system does not know.
//
// The filter checks the architecture first: syscalls of an ABI the profile
// does not list (i386 via int 0x80, x32 on x86_64 unless listed) kill the
// process. libseccomp ignores conditional rules for a syscall that also
// has an unconditional rule; Compile evaluates such conditional rules in a
// separate libseccomp program placed in front of the main one, so that
// they take precedence (see docs/SECCOMP.md).
func Compile(p *Profile, opts Options) (*Filter, error) {
	if p == nil {
		return nil, errors.New("seccomp: nil profile")
	}
	f, err := compileUnchecked(p, opts)
	if err != nil {
		return nil, err
	}
	if err := f.checkExecStage(); err != nil {
		return nil, err
	}
	if opts.Strict && len(f.Unknown) > 0 {
		return nil, fmt.Errorf(`%s: strict enforcement refuses what it cannot apply: remove the name, or set enforcement = "best-effort"`,
			strings.TrimSuffix(f.Unknown[0], " skipped"))
	}
	return f, nil
}

// compileUnchecked is Compile without the checks of what the profile
// allows (tests of the rules' semantics use small profiles).
func compileUnchecked(p *Profile, opts Options) (*Filter, error) {
	notify, why := opts.Notify, ""
	if notify {
		if why = notifyUnavailable(); why != "" {
			notify = false
		}
	}
	f, err := compile(p, notify)
	if err != nil {
		return nil, err
	}
	if f.Notify && !f.allows("sendmsg") {
		// The exec stage would block forever in sendmsg, holding the
		// only copy of the listener.
		why = "the profile does not allow sendmsg, which hutch's exec stage needs to hand the listener to the supervisor"
		if f, err = compile(p, false); err != nil {
			return nil, err
		}
	}
	f.NotifyUnavailable = why
	f.Unknown = p.unknownNames()
	f.Warnings = append(slices.Clone(p.Warnings), f.Warnings...)
	return f, nil
}

func compile(p *Profile, notify bool) (*Filter, error) {
	native := nativeArch()
	if native == seccomp.ArchInvalid {
		return nil, errors.New("seccomp: libseccomp does not know the native architecture")
	}
	canon, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("seccomp: %w", err)
	}
	sum := sha256.Sum256(canon)
	f := &Filter{
		ProfileHash:   hex.EncodeToString(sum[:]),
		Arch:          native.String(),
		DefaultAction: p.DefaultAction,
		DefaultErrno:  effectiveErrno(p.DefaultAction, p.DefaultErrnoRet),
		Denials:       map[uint32]Denial{},
		DenialRules:   map[uint32][]Denial{},
	}
	if p.DefaultAction == ActTrace {
		f.DefaultErrno = 0
	}

	pl := plan(p, notify)
	f.Warnings = pl.warnings
	arches, warns := profileArches(p, native)
	f.Warnings = append(f.Warnings, warns...)

	mainBPF, err := buildBPF(pl.defaultAct, seccomp.ActKillProcess, arches, pl.main, &f.Warnings)
	if err != nil {
		return nil, err
	}
	bpf := mainBPF
	if len(pl.prelude) > 0 {
		marker := pickMarker(pl.prelude)
		pre, err := buildBPF(marker, marker, arches, pl.prelude, &f.Warnings)
		if err != nil {
			return nil, err
		}
		if pre, err = spliceMarker(pre, uint32(unix.SECCOMP_RET_TRACE)|uint32(marker.GetReturnCode())&0xffff); err != nil {
			return nil, err
		}
		bpf = append(pre, mainBPF...)
	}
	if len(bpf)/bpfInsnSize > bpfMaxInsns {
		return nil, fmt.Errorf("seccomp: filter has %d instructions, more than the kernel's %d", len(bpf)/bpfInsnSize, bpfMaxInsns)
	}
	f.BPF = bpf
	f.Notify = pl.usesNotify
	// The program must evaluate: check it on a syscall before anyone loads it.
	audit, ok := nativeAuditArch()
	if !ok {
		audit = auditArchX86_64
	}
	if _, _, err := evalBPF(f.BPF, seccompData{arch: audit}); err != nil {
		return nil, fmt.Errorf("seccomp: internal error: the compiled program does not evaluate: %w", err)
	}

	for _, pr := range pl.denials {
		if pr.r.nr < 0 {
			continue // exists only on a foreign ABI
		}
		d := Denial{Name: pr.r.name, Errno: pr.r.errno, Reason: pr.r.comment, Args: pr.r.conds, Quiet: pr.quiet}
		nr := uint32(pr.r.nr)
		if _, ok := f.Denials[nr]; !ok {
			f.Denials[nr] = d
		}
		f.DenialRules[nr] = append(f.DenialRules[nr], d)
	}
	return f, nil
}

// allows reports whether the program lets the native syscall name through
// (with zero arguments). Unknown names and foreign architectures count as
// allowed: there is nothing to check.
func (f *Filter) allows(name string) bool {
	v, _ := f.verdictOn(name)
	return v == allowed
}

// planned is a rule with its libseccomp action.
type planned struct {
	r     rule
	act   seccomp.ScmpAction
	quiet bool
}

type compilePlan struct {
	defaultAct seccomp.ScmpAction
	main       []planned // unconditional rules, and conditional ones of syscalls without an unconditional rule
	prelude    []planned // conditional rules of syscalls that also have an unconditional rule
	denials    []planned // errno-type rules in evaluation order (prelude first), incl. those equal to the default
	usesNotify bool
	warnings   []string
}

// scmpAction maps a profile action to libseccomp's, applying Notify.
func scmpAction(action string, errno int, notify bool) (act seccomp.ScmpAction, quiet bool) {
	switch action {
	case ActAllow:
		return seccomp.ActAllow, false
	case ActLog:
		return seccomp.ActLog, false
	case ActKill, ActKillThread:
		return seccomp.ActKillThread, false
	case ActKillProcess:
		return seccomp.ActKillProcess, false
	case ActTrap:
		return seccomp.ActTrap, false
	case ActTrace:
		return seccomp.ActTrace.SetReturnCode(int16(uint16(errno))), false
	case ActErrno:
		if notify && errno != int(unix.ENOSYS) {
			return seccomp.ActNotify, false
		}
		return seccomp.ActErrno.SetReturnCode(int16(errno)), notify
	case ActNotify:
		if notify {
			return seccomp.ActNotify, false
		}
		return seccomp.ActErrno.SetReturnCode(int16(errno)), false
	}
	return seccomp.ActInvalid, false
}

// plan decides which rule goes where. It needs no libseccomp filter, so
// Describe shares it.
func plan(p *Profile, notify bool) *compilePlan {
	pl := &compilePlan{}
	defErrno := effectiveErrno(p.DefaultAction, p.DefaultErrnoRet)
	pl.defaultAct, _ = scmpAction(p.DefaultAction, defErrno, notify)
	if notify && p.DefaultAction == ActErrno {
		// The default action is never a quiet fallback: a syscall outside
		// the allowlist is worth reporting whatever its errno.
		pl.defaultAct = seccomp.ActNotify
	}
	if pl.defaultAct == seccomp.ActNotify {
		pl.usesNotify = true
	}

	type group struct {
		uncond *planned
		conds  []planned
	}
	groups := map[int32]*group{}
	var order []int32
	for _, r := range p.rules() {
		act, quiet := scmpAction(r.action, r.errno, notify)
		if notify && r.action == ActErrno && strings.HasPrefix(r.comment, QuietPrefix) {
			act, quiet = seccomp.ActErrno.SetReturnCode(int16(r.errno)), true
		}
		pr := planned{r: r, act: act, quiet: quiet}
		g := groups[r.nr]
		if g == nil {
			g = &group{}
			groups[r.nr] = g
			order = append(order, r.nr)
		}
		if !r.conditional() {
			if g.uncond == nil {
				g.uncond = &pr
			} else if g.uncond.act != act {
				pl.warnings = append(pl.warnings, fmt.Sprintf(
					"$.syscalls[%d]: %s %s ignored: $.syscalls[%d] already gives it %s",
					r.src, r.name, r.action, g.uncond.r.src, g.uncond.r.action))
			}
			continue
		}
		g.conds = append(g.conds, pr)
	}
	isDenial := func(pr planned) bool { return pr.r.action == ActErrno || pr.r.action == ActNotify }
	for _, nr := range order {
		g := groups[nr]
		if g.uncond != nil && len(g.conds) > 0 {
			for _, c := range g.conds {
				if c.act == g.uncond.act {
					continue // redundant with the unconditional rule
				}
				pl.prelude = append(pl.prelude, c)
				if c.act == seccomp.ActNotify {
					pl.usesNotify = true
				}
			}
		} else {
			for _, c := range g.conds {
				if c.act != pl.defaultAct {
					pl.main = append(pl.main, c)
					if c.act == seccomp.ActNotify {
						pl.usesNotify = true
					}
				}
			}
		}
		if g.uncond != nil && g.uncond.act != pl.defaultAct {
			pl.main = append(pl.main, *g.uncond)
			if g.uncond.act == seccomp.ActNotify {
				pl.usesNotify = true
			}
		}
	}
	// Denials in the order the filter evaluates them.
	for _, nr := range order {
		g := groups[nr]
		for _, c := range g.conds {
			if isDenial(c) && (g.uncond == nil || c.act != g.uncond.act) {
				pl.denials = append(pl.denials, c)
			}
		}
		if g.uncond != nil && isDenial(*g.uncond) {
			pl.denials = append(pl.denials, *g.uncond)
		}
	}
	return pl
}

// profileArches returns the extra ABIs the filter accepts, from
// "architectures" or the native entry of "archMap".
func profileArches(p *Profile, native seccomp.ScmpArch) (arches []seccomp.ScmpArch, warnings []string) {
	names := p.Architectures
	for _, am := range p.ArchMap {
		if a, err := scmpArch(am.Architecture); err == nil && a == native {
			names = append([]string{am.Architecture}, am.SubArchitectures...)
			break
		}
	}
	for _, n := range names {
		a, err := scmpArch(n)
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("architecture %s skipped: %v", n, err))
			continue
		}
		if a == native || containsArch(arches, a) {
			continue
		}
		arches = append(arches, a)
	}
	return arches, warnings
}

func containsArch(list []seccomp.ScmpArch, a seccomp.ScmpArch) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

// buildBPF builds one libseccomp program and exports it.
func buildBPF(def, badArch seccomp.ScmpAction, arches []seccomp.ScmpArch, rules []planned, warnings *[]string) ([]byte, error) {
	sf, err := seccomp.NewFilter(def)
	if err != nil {
		return nil, fmt.Errorf("seccomp: new filter: %w", err)
	}
	defer sf.Release()
	if err := sf.SetBadArchAction(badArch); err != nil {
		return nil, fmt.Errorf("seccomp: bad-architecture action: %w", err)
	}
	// A binary tree of syscall numbers instead of a linear chain: a long
	// allowlist costs a few comparisons per syscall instead of hundreds.
	if err := sf.SetOptimize(2); err != nil {
		return nil, fmt.Errorf("seccomp: optimize: %w", err)
	}
	// no_new_privs is set by the loader; the attribute only matters to
	// seccomp_load, which hutch does not use, and is left at its default.
	for _, a := range arches {
		if err := sf.AddArch(a); err != nil {
			*warnings = append(*warnings, fmt.Sprintf("architecture %s skipped: %v", a, err))
		}
	}
	for _, pr := range rules {
		var err error
		call := seccomp.ScmpSyscall(pr.r.nr)
		if pr.r.conditional() {
			conds := make([]seccomp.ScmpCondition, 0, len(pr.r.conds))
			for _, c := range pr.r.conds {
				var sc seccomp.ScmpCondition
				if c.Op == OpMaskedEqual {
					sc, err = seccomp.MakeCondition(c.Index, opToScmp[c.Op], c.Value, c.ValueTwo)
				} else {
					sc, err = seccomp.MakeCondition(c.Index, opToScmp[c.Op], c.Value)
				}
				if err != nil {
					return nil, fmt.Errorf("seccomp: $.syscalls[%d] %s: condition %s: %w", pr.r.src, pr.r.name, c, err)
				}
				conds = append(conds, sc)
			}
			err = sf.AddRuleConditional(call, pr.act, conds)
		} else {
			err = sf.AddRule(call, pr.act)
		}
		if err != nil {
			if pr.r.table {
				// libseccomp cannot place a number it does not know on
				// a foreign ABI of a multi-ABI filter.
				*warnings = append(*warnings, fmt.Sprintf("$.syscalls[%d]: %s skipped: %v", pr.r.src, pr.r.name, err))
				continue
			}
			return nil, fmt.Errorf("seccomp: $.syscalls[%d] %s: %w", pr.r.src, pr.r.name, err)
		}
	}
	return exportBPF(sf)
}

// exportBPF exports through a memfd: libseccomp 2.5 has no
// seccomp_export_bpf_mem.
func exportBPF(sf *seccomp.ScmpFilter) ([]byte, error) {
	fd, err := memfd.NoExec("hutch-seccomp-bpf", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("seccomp: memfd_create: %w", err)
	}
	file := os.NewFile(uintptr(fd), "memfd:hutch-seccomp-bpf")
	defer file.Close()
	if err := sf.ExportBPF(file); err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	if _, err := file.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	bpf, err := io.ReadAll(file)
	if err != nil {
		return nil, fmt.Errorf("seccomp: export BPF: %w", err)
	}
	if len(bpf) == 0 || len(bpf)%bpfInsnSize != 0 {
		return nil, fmt.Errorf("seccomp: libseccomp exported %d bytes of BPF, not a whole number of instructions", len(bpf))
	}
	return bpf, nil
}

// pickMarker returns an SCMP_ACT_TRACE action no prelude rule uses; the
// prelude returns it for "no rule matched" and spliceMarker turns it into a
// jump to the main program.
func pickMarker(rules []planned) seccomp.ScmpAction {
	for code := 0xffff; ; code-- {
		m := seccomp.ActTrace.SetReturnCode(int16(uint16(code)))
		used := false
		for _, pr := range rules {
			if pr.act == m {
				used = true
			}
		}
		if !used {
			return m
		}
	}
}

// spliceMarker replaces each "ret MARKER" of the prelude with a jump past
// its end, where the main program starts. Jumps in BPF are relative and
// forward only, so neither program's other jumps change.
func spliceMarker(bpf []byte, marker uint32) ([]byte, error) {
	n := len(bpf) / bpfInsnSize
	out := append([]byte(nil), bpf...)
	replaced := 0
	for i := range n {
		ins := out[i*bpfInsnSize : (i+1)*bpfInsnSize]
		code := nativeEndian.Uint16(ins[0:])
		k := nativeEndian.Uint32(ins[4:])
		if code == bpfRetK && k == marker {
			nativeEndian.PutUint16(ins[0:], bpfJA)
			ins[2], ins[3] = 0, 0
			nativeEndian.PutUint32(ins[4:], uint32(n-i-1))
			replaced++
		}
	}
	if replaced == 0 {
		return nil, errors.New("seccomp: internal error: prelude program has no fall-through")
	}
	return out, nil
}

// nativeEndian is the byte order of struct sock_filter on this machine.
var nativeEndian = func() binary.ByteOrder {
	x := uint16(1)
	if *(*byte)(unsafe.Pointer(&x)) == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}()

// notifyUnavailable returns why SCMP_ACT_NOTIFY cannot be used here, or "".
func notifyUnavailable() string {
	var act uint32 = unix.SECCOMP_RET_USER_NOTIF
	if _, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&act))); e != 0 {
		return fmt.Sprintf("the kernel does not support seccomp user notification (SECCOMP_GET_ACTION_AVAIL SECCOMP_RET_USER_NOTIF: %v)", e)
	}
	api, err := seccomp.GetAPI()
	if err != nil {
		return fmt.Sprintf("cannot read the libseccomp API level: %v", err)
	}
	if api < 6 {
		if err := seccomp.SetAPI(6); err != nil {
			maj, min, mic := seccomp.GetLibraryVersion()
			return fmt.Sprintf("libseccomp %d.%d.%d API level %d, SCMP_ACT_NOTIFY needs 6: %v", maj, min, mic, api, err)
		}
	}
	return ""
}
