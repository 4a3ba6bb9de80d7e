package seccompprofiles

import (
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/internal/kernel"
)

// rule is one effective rule: a profile entry applied to one syscall with
// one conjunction of argument conditions.
type rule struct {
	src     int    // index in Profile.Syscalls
	name    string // syscall name as written
	nr      int32  // libseccomp number (negative: pseudo-number of a foreign syscall)
	table   bool   // nr comes from newSyscalls, libseccomp does not know the name
	action  string // SCMP_ACT_* as written
	errno   int    // errno for ERRNO/NOTIFY, message for TRACE; 0 otherwise
	conds   []Arg  // ANDed; empty means unconditional
	comment string
}

func (r *rule) conditional() bool { return len(r.conds) > 0 }

// effectiveErrno is the errno (or trace message) of an action with an
// optional errnoRet: EPERM when unset, as in Docker.
func effectiveErrno(action string, errnoRet *uint) int {
	if !takesErrno(action) {
		return 0
	}
	if errnoRet != nil {
		return int(*errnoRet)
	}
	return int(unix.EPERM)
}

// rules expands the profile into effective rules for the running system:
// entries excluded by includes/excludes are dropped, names unknown here are
// skipped, and args are split into conjunctions with Docker's semantics.
func (p *Profile) rules() []rule {
	var out []rule
	for i := range p.Syscalls {
		s := &p.Syscalls[i]
		if !ruleApplies(s) {
			continue
		}
		for _, conds := range splitArgs(s.Args) {
			for _, name := range s.AllNames() {
				nr, table, ok := resolveSyscall(name)
				if !ok {
					continue
				}
				out = append(out, rule{
					src: i, name: name, nr: nr, table: table,
					action: s.Action, errno: effectiveErrno(s.Action, s.ErrnoRet),
					conds: conds, comment: s.Comment,
				})
			}
		}
	}
	return out
}

// splitArgs turns a rule's args into the conjunctions libseccomp gets. Like
// runc, when two conditions test the same argument (libseccomp refuses
// that), each condition becomes a rule of its own.
func splitArgs(args []Arg) [][]Arg {
	if len(args) == 0 {
		return [][]Arg{nil}
	}
	seen := map[uint]bool{}
	repeated := false
	for _, a := range args {
		if seen[a.Index] {
			repeated = true
		}
		seen[a.Index] = true
	}
	if !repeated {
		return [][]Arg{append([]Arg(nil), args...)}
	}
	out := make([][]Arg, 0, len(args))
	for _, a := range args {
		out = append(out, []Arg{a})
	}
	return out
}

// ruleApplies evaluates includes/excludes against the running system. hutch
// grants the sandboxed command no capabilities.
func ruleApplies(s *Syscall) bool {
	if e := s.Excludes; e != nil {
		for _, a := range e.Arches {
			if isNativeArchName(a) {
				return false
			}
		}
		// Excluded capabilities are never held: nothing to exclude.
		if e.MinKernel != "" && kernelAtLeast(e.MinKernel) {
			return false
		}
	}
	if in := s.Includes; in != nil {
		if len(in.Arches) > 0 {
			found := false
			for _, a := range in.Arches {
				if isNativeArchName(a) {
					found = true
				}
			}
			if !found {
				return false
			}
		}
		if len(in.Caps) > 0 {
			return false
		}
		if in.MinKernel != "" && !kernelAtLeast(in.MinKernel) {
			return false
		}
	}
	return true
}

func kernelAtLeast(min string) bool { return kernel.AtLeast(min) }

// condString renders a conjunction of conditions for people:
// "arg0 & 0x7e020000 == 0 && arg1 == 0x5".
func condString(conds []Arg) string {
	parts := make([]string, 0, len(conds))
	for _, c := range conds {
		parts = append(parts, c.String())
	}
	return strings.Join(parts, " && ")
}

// String renders the condition as "arg1 & 0xffffffff == 0x5412".
func (a Arg) String() string {
	arg := "arg" + strconv.Itoa(int(a.Index))
	switch a.Op {
	case OpMaskedEqual:
		return fmt.Sprintf("%s & %#x == %#x", arg, a.Value, a.ValueTwo)
	case OpNotEqual:
		return fmt.Sprintf("%s != %#x", arg, a.Value)
	case OpLessThan:
		return fmt.Sprintf("%s < %#x", arg, a.Value)
	case OpLessEqual:
		return fmt.Sprintf("%s <= %#x", arg, a.Value)
	case OpEqualTo:
		return fmt.Sprintf("%s == %#x", arg, a.Value)
	case OpGreaterEqual:
		return fmt.Sprintf("%s >= %#x", arg, a.Value)
	case OpGreaterThan:
		return fmt.Sprintf("%s > %#x", arg, a.Value)
	}
	return fmt.Sprintf("%s %s %#x %#x", arg, a.Op, a.Value, a.ValueTwo)
}

// Match reports whether the syscall argument vector satisfies the condition,
// with libseccomp's 64-bit semantics.
func (a Arg) Match(args [6]uint64) bool {
	if a.Index > 5 {
		return false
	}
	v := args[a.Index]
	switch a.Op {
	case OpMaskedEqual:
		return v&a.Value == a.ValueTwo
	case OpNotEqual:
		return v != a.Value
	case OpLessThan:
		return v < a.Value
	case OpLessEqual:
		return v <= a.Value
	case OpEqualTo:
		return v == a.Value
	case OpGreaterEqual:
		return v >= a.Value
	case OpGreaterThan:
		return v > a.Value
	}
	return false
}

func matchAll(conds []Arg, args [6]uint64) bool {
	for _, c := range conds {
		if !c.Match(args) {
			return false
		}
	}
	return true
}
