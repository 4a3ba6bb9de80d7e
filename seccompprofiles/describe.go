package seccompprofiles

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Describe renders the effective rules of p on this system, for
// `hutch seccomp show`.
func Describe(p *Profile) string {
	var b strings.Builder
	_ = WriteRules(&b, p)
	return b.String()
}

const describeWidth = 78

// WriteRules writes the effective rules of p on this system: the default
// action, the allowed syscalls (sorted, wrapped), the conditional allows,
// each denial with its errno, condition and reason, other actions, and the
// warnings. Conditional rules take precedence over an unconditional rule
// for the same syscall, as the compiled filter evaluates them first.
func WriteRules(w io.Writer, p *Profile) error {
	ew := &errWriter{w: w}
	src := p.Source
	if src == "" {
		src = "<input>"
	}
	ew.printf("seccomp profile: %s\n", src)
	ew.printf("default action:  %s\n", actionString(p.DefaultAction, effectiveErrno(p.DefaultAction, p.DefaultErrnoRet)))
	native := nativeArch()
	arches, _ := profileArches(p, native)
	abis := []string{native.String() + " (native)"}
	for _, a := range arches {
		abis = append(abis, a.String())
	}
	ew.printf("architectures:   %s; syscalls of any other ABI kill the process\n", strings.Join(abis, ", "))

	type group struct {
		src     int
		action  string
		errno   int
		conds   string
		names   []string
		comment string
	}
	var allowed []string
	seenAllowed := map[string]bool{}
	var condAllowed, denied, other []*group
	index := map[string]*group{}
	var foreign []string
	for _, r := range p.rules() {
		if r.nr < 0 && len(arches) == 0 {
			// A syscall of other architectures only (umount on x86_64).
			if !contains(foreign, r.name) {
				foreign = append(foreign, r.name)
			}
			continue
		}
		if r.action == ActAllow && !r.conditional() {
			if !seenAllowed[r.name] {
				seenAllowed[r.name] = true
				allowed = append(allowed, r.name)
			}
			continue
		}
		key := fmt.Sprintf("%d|%s", r.src, condString(r.conds))
		g := index[key]
		if g == nil {
			g = &group{src: r.src, action: r.action, errno: r.errno, conds: condString(r.conds), comment: r.comment}
			index[key] = g
			switch {
			case r.action == ActAllow:
				condAllowed = append(condAllowed, g)
			case r.action == ActErrno || r.action == ActNotify:
				denied = append(denied, g)
			default:
				other = append(other, g)
			}
		}
		if !contains(g.names, r.name) {
			g.names = append(g.names, r.name)
		}
	}
	sort.Strings(allowed)

	ew.printf("\nallowed (%d):\n", len(allowed))
	ew.wrap("  ", strings.Join(allowed, " "))

	if len(condAllowed) > 0 {
		ew.printf("\nallowed when:\n")
		for _, g := range condAllowed {
			ew.printf("  %s: %s\n", strings.Join(g.names, ", "), g.conds)
		}
	}
	if len(denied) > 0 {
		ew.printf("\ndenied:\n")
		for _, g := range denied {
			head := strings.Join(g.names, ", ")
			if g.conds != "" {
				head += " when " + g.conds
			}
			verdict := errnoName(g.errno)
			if g.action == ActNotify {
				verdict += ", SCMP_ACT_NOTIFY"
			} else if g.errno == int(unix.ENOSYS) {
				verdict += ", quiet fallback"
			}
			ew.wrap("  ", fmt.Sprintf("%s -> %s", head, verdict))
			if g.comment != "" {
				ew.wrap("      ", g.comment)
			}
		}
	}
	if len(other) > 0 {
		ew.printf("\nother actions:\n")
		for _, g := range other {
			head := strings.Join(g.names, ", ")
			if g.conds != "" {
				head += " when " + g.conds
			}
			ew.wrap("  ", fmt.Sprintf("%s -> %s", head, actionString(g.action, g.errno)))
			if g.comment != "" {
				ew.wrap("      ", g.comment)
			}
		}
	}
	if len(foreign) > 0 {
		sort.Strings(foreign)
		ew.printf("\nnot syscalls on %s (rules skipped):\n", native)
		ew.wrap("  ", strings.Join(foreign, " "))
	}
	warnings := append(append([]string(nil), p.Warnings...), plan(p, false).warnings...)
	if len(warnings) > 0 {
		ew.printf("\nwarnings:\n")
		for _, w := range warnings {
			ew.wrap("  ", w)
		}
	}
	return ew.err
}

func actionString(action string, errno int) string {
	switch action {
	case ActErrno, ActNotify:
		return fmt.Sprintf("%s (%s, errno %d)", action, errnoName(errno), errno)
	case ActTrace:
		return fmt.Sprintf("%s (message %d)", action, errno)
	}
	return action
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// wrap writes text as lines of at most describeWidth columns, each starting
// with indent.
func (e *errWriter) wrap(indent, text string) {
	line := indent
	for _, word := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(word) > describeWidth {
			e.printf("%s\n", line)
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += word
	}
	if len(line) > len(indent) {
		e.printf("%s\n", line)
	}
}
