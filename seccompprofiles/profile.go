package seccompprofiles

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hutchsandbox/hutch/internal/readfile"
)

// Profile is a seccomp profile in the Docker/OCI JSON format. The JSON field
// names are Docker's; json.Marshal of a Profile is its canonical form (the
// cache hashes it).
type Profile struct {
	// DefaultAction applies to every syscall no rule matches.
	DefaultAction string `json:"defaultAction"`
	// DefaultErrnoRet is the errno of an SCMP_ACT_ERRNO (or TRACE) default
	// action; nil means EPERM, as in Docker.
	DefaultErrnoRet *uint `json:"defaultErrnoRet,omitempty"`
	// Architectures lists the SCMP_ARCH_* ABIs the filter accepts besides the
	// native one. Mutually exclusive with ArchMap.
	Architectures []string `json:"architectures,omitempty"`
	// ArchMap selects the ABIs by native architecture: the entry whose
	// Architecture is the running one contributes it and its SubArchitectures.
	ArchMap []ArchMap `json:"archMap,omitempty"`
	// Flags are OCI filter flags; hutch's loader chooses its own flags, so
	// they are validated and ignored (with a warning).
	Flags []string `json:"flags,omitempty"`
	// ListenerPath and ListenerMetadata are OCI fields for an external
	// notification agent; hutch serves notifications itself and ignores them
	// (with a warning).
	ListenerPath     string `json:"listenerPath,omitempty"`
	ListenerMetadata string `json:"listenerMetadata,omitempty"`
	// Syscalls are the rules, in order.
	Syscalls []Syscall `json:"syscalls,omitempty"`

	// Source names where the profile came from (a path, or "default").
	Source string `json:"-"`
	// Warnings lists what was accepted but skipped or ignored: syscall names
	// unknown on this system (skipped, as Docker does), ignored fields.
	Warnings []string `json:"-"`
}

// ArchMap is one entry of a profile's "archMap".
type ArchMap struct {
	Architecture     string   `json:"architecture"`
	SubArchitectures []string `json:"subArchitectures,omitempty"`
}

// Syscall is one rule of a profile: an action for a set of syscalls,
// optionally restricted by argument conditions.
type Syscall struct {
	// Name is the legacy single-name form; Names is preferred.
	Name  string   `json:"name,omitempty"`
	Names []string `json:"names,omitempty"`
	// Action is one of the SCMP_ACT_* names.
	Action string `json:"action"`
	// ErrnoRet is the errno for SCMP_ACT_ERRNO (nil: EPERM), the message
	// number for SCMP_ACT_TRACE, and the errno the supervisor answers for
	// SCMP_ACT_NOTIFY (nil: EPERM).
	ErrnoRet *uint `json:"errnoRet,omitempty"`
	// Args are argument conditions. They are ANDed, except that when two
	// conditions test the same argument each condition becomes a rule of
	// its own (ORed), as Docker/runc do.
	Args []Arg `json:"args,omitempty"`
	// Comment says why the rule exists; hutch reports it with denials.
	Comment string `json:"comment,omitempty"`
	// Includes and Excludes restrict the rule to some architectures,
	// capabilities or kernels.
	Includes *Selector `json:"includes,omitempty"`
	Excludes *Selector `json:"excludes,omitempty"`
}

// AllNames returns Names followed by the legacy Name, if set.
func (s *Syscall) AllNames() []string {
	if s.Name == "" {
		return s.Names
	}
	return append(append([]string(nil), s.Names...), s.Name)
}

// Selector is a rule's "includes" or "excludes".
type Selector struct {
	// Arches are architecture names ("amd64", "x32", "arm64", or
	// SCMP_ARCH_* names); compared with the running architecture.
	Arches []string `json:"arches,omitempty"`
	// Caps are capability names. hutch grants the command no capabilities,
	// so a rule that includes caps never applies and excluded caps never
	// exclude.
	Caps []string `json:"caps,omitempty"`
	// MinKernel is "MAJOR.MINOR" (or "MAJOR.MINOR.PATCH"), compared with the
	// running kernel.
	MinKernel string `json:"minKernel,omitempty"`
}

func (s *Selector) empty() bool {
	return s == nil || (len(s.Arches) == 0 && len(s.Caps) == 0 && s.MinKernel == "")
}

// Arg is an argument condition. For SCMP_CMP_MASKED_EQ, Value is the mask
// and ValueTwo the value the masked argument must equal.
type Arg struct {
	Index    uint   `json:"index"`
	Value    uint64 `json:"value"`
	ValueTwo uint64 `json:"valueTwo,omitempty"`
	Op       string `json:"op"`
}

// ProfileError is a malformed profile: Path is the JSON path of the bad
// entry ("$.syscalls[3].action"), or, for a JSON syntax error, Offset, Line
// and Column locate it.
type ProfileError struct {
	Source string
	Path   string
	Msg    string
	// For syntax errors: the offending byte's offset (0-based), line and
	// column (1-based).
	Offset       int64
	Line, Column int
}

func (e *ProfileError) Error() string {
	src := e.Source
	if src == "" {
		src = "<input>"
	}
	if e.Path == "" {
		return fmt.Sprintf("seccomp profile %s: invalid JSON at byte %d (line %d, column %d): %s",
			src, e.Offset, e.Line, e.Column, e.Msg)
	}
	return fmt.Sprintf("seccomp profile %s: %s: %s", src, e.Path, e.Msg)
}

// MaxProfileSize is the largest profile ReadFile reads: Docker's default
// profile is ~20 KiB; this leaves room for any hand-made one.
const MaxProfileSize = 4 << 20

// ReadFile returns the contents of the profile at path: a regular file of
// at most MaxProfileSize bytes (a device, a FIFO or a larger file is
// refused, naming the file and the limit).
func ReadFile(path string) ([]byte, error) {
	return readfile.Read(path, "seccomp profile", MaxProfileSize)
}

// CheckFile refuses what ReadFile would refuse, without reading: a path
// that exists and is not a regular file of at most MaxProfileSize bytes. A
// missing file passes; reading it says so.
func CheckFile(path string) error {
	return readfile.Check(path, "seccomp profile", MaxProfileSize)
}

// LoadFile reads (see ReadFile) and parses the profile at path.
func LoadFile(path string) (*Profile, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, path)
}

// Parse parses a Docker/OCI-format profile. source names it in errors.
// Malformed input gives a *ProfileError naming the JSON path of the bad
// entry and what would be valid. Syscall names unknown on this system are
// kept in the profile (they may exist elsewhere) but reported in Warnings
// and skipped at compile time.
func Parse(data []byte, source string) (*Profile, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, syntaxError(data, source, err, dec.InputOffset())
	}
	// Anything but whitespace after the document is an error too.
	off := dec.InputOffset()
	if rest := bytes.TrimLeft(data[off:], " \t\r\n"); len(rest) > 0 {
		off = int64(len(data) - len(rest))
		return nil, syntaxError(data, source, errors.New("unexpected data after the top-level value"), off+1)
	}
	d := &decoder{source: source}
	p, err := d.profile(root)
	if err != nil {
		return nil, err
	}
	p.Source = source
	p.Warnings = append(d.warnings, p.unknownNames()...)
	return p, nil
}

// syntaxError locates a JSON syntax error. fallback is the decoder's count
// of bytes read, which includes the offending byte.
func syntaxError(data []byte, source string, err error, fallback int64) error {
	pos := fallback - 1 // 0-based index of the offending byte
	msg := err.Error()
	var se *json.SyntaxError
	if errors.As(err, &se) {
		pos = se.Offset - 1
		msg = strings.TrimPrefix(se.Error(), "json: ")
	} else if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		pos = int64(len(data))
		msg = "unexpected end of input"
	}
	pos = max(0, min(pos, int64(len(data))))
	line, col := 1, 1
	for _, b := range data[:pos] {
		if b == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return &ProfileError{Source: source, Msg: msg, Offset: pos, Line: line, Column: col}
}

// decoder walks the generic JSON tree, so that every error can name the
// path of the offending entry.
type decoder struct {
	source   string
	warnings []string
}

func (d *decoder) errorf(path, format string, args ...any) error {
	return &ProfileError{Source: d.source, Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (d *decoder) warnf(path, format string, args ...any) {
	d.warnings = append(d.warnings, path+": "+fmt.Sprintf(format, args...))
}

func childPath(path, key string) string {
	if isIdent(key) {
		return path + "." + key
	}
	return path + "[" + strconv.Quote(key) + "]"
}

func index(path string, i int) string { return path + "[" + strconv.Itoa(i) + "]" }

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case json.Number:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

// object checks that v is an object whose keys are all in valid.
func (d *decoder) object(v any, path string, valid []string) (map[string]any, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return nil, d.errorf(path, "expected an object, got %s", jsonType(v))
	}
	for _, k := range sortedKeys(m) {
		if !contains(valid, k) {
			return nil, d.errorf(childPath(path, k), "unknown field %q (valid: %s)", k, strings.Join(valid, ", "))
		}
	}
	return m, nil
}

func (d *decoder) stringValue(v any, path string) (string, error) {
	s, ok := v.(string)
	if !ok {
		return "", d.errorf(path, "expected a string, got %s", jsonType(v))
	}
	return s, nil
}

func (d *decoder) unsigned(v any, path string, max uint64) (uint64, error) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, d.errorf(path, "expected an unsigned integer, got %s", jsonType(v))
	}
	u, err := strconv.ParseUint(n.String(), 10, 64)
	if err != nil {
		// Negative, fractional, exponent forms and overflows.
		return 0, d.errorf(path, "expected an unsigned integer (0 to %d), got %s", max, n.String())
	}
	if u > max {
		return 0, d.errorf(path, "%d is out of range (0 to %d)", u, max)
	}
	return u, nil
}

func (d *decoder) array(v any, path string) ([]any, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, d.errorf(path, "expected an array, got %s", jsonType(v))
	}
	return a, nil
}

// strings decodes an array of strings, each checked by check (may be nil).
func (d *decoder) stringList(v any, path string, check func(s, path string) error) ([]string, error) {
	a, err := d.array(v, path)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(a))
	for i, e := range a {
		p := index(path, i)
		s, err := d.stringValue(e, p)
		if err != nil {
			return nil, err
		}
		if check != nil {
			if err := check(s, p); err != nil {
				return nil, err
			}
		}
		out = append(out, s)
	}
	return out, nil
}

func (d *decoder) oneOf(what string, valid []string) func(s, path string) error {
	return func(s, path string) error {
		if !contains(valid, s) {
			return d.errorf(path, "unknown %s %q (valid: %s)", what, s, strings.Join(valid, ", "))
		}
		return nil
	}
}

// maxErrno is the largest errno the kernel passes through (MAX_ERRNO).
const maxErrno = 4095

var profileFields = []string{
	"defaultAction", "defaultErrnoRet", "architectures", "archMap", "flags",
	"listenerPath", "listenerMetadata", "syscalls",
}

func (d *decoder) profile(v any) (*Profile, error) {
	m, err := d.object(v, "$", profileFields)
	if err != nil {
		return nil, err
	}
	p := &Profile{}
	da, ok := m["defaultAction"]
	if !ok || da == nil {
		return nil, d.errorf("$.defaultAction", "missing (valid: %s)", strings.Join(validActions, ", "))
	}
	if p.DefaultAction, err = d.stringValue(da, "$.defaultAction"); err != nil {
		return nil, err
	}
	if err := d.oneOf("action", validActions)(p.DefaultAction, "$.defaultAction"); err != nil {
		return nil, err
	}
	if v := m["defaultErrnoRet"]; v != nil {
		u, err := d.unsigned(v, "$.defaultErrnoRet", maxErrno)
		if err != nil {
			return nil, err
		}
		e := uint(u)
		p.DefaultErrnoRet = &e
		if !takesErrno(p.DefaultAction) {
			d.warnf("$.defaultErrnoRet", "ignored: %s takes no errno", p.DefaultAction)
		}
	}
	if v := m["architectures"]; v != nil {
		if p.Architectures, err = d.stringList(v, "$.architectures", d.oneOf("architecture", validArchitectures)); err != nil {
			return nil, err
		}
	}
	if v := m["archMap"]; v != nil {
		a, err := d.array(v, "$.archMap")
		if err != nil {
			return nil, err
		}
		for i, e := range a {
			path := index("$.archMap", i)
			em, err := d.object(e, path, []string{"architecture", "subArchitectures"})
			if err != nil {
				return nil, err
			}
			var am ArchMap
			av, ok := em["architecture"]
			if !ok || av == nil {
				return nil, d.errorf(childPath(path, "architecture"), "missing (valid: %s)", strings.Join(validArchitectures, ", "))
			}
			if am.Architecture, err = d.stringValue(av, childPath(path, "architecture")); err != nil {
				return nil, err
			}
			if err := d.oneOf("architecture", validArchitectures)(am.Architecture, childPath(path, "architecture")); err != nil {
				return nil, err
			}
			if sv := em["subArchitectures"]; sv != nil {
				if am.SubArchitectures, err = d.stringList(sv, childPath(path, "subArchitectures"), d.oneOf("architecture", validArchitectures)); err != nil {
					return nil, err
				}
			}
			p.ArchMap = append(p.ArchMap, am)
		}
	}
	if len(p.Architectures) > 0 && len(p.ArchMap) > 0 {
		return nil, d.errorf("$", `both "architectures" and "archMap" are set; use one of them`)
	}
	if v := m["flags"]; v != nil {
		if p.Flags, err = d.stringList(v, "$.flags", d.oneOf("flag", validFlags)); err != nil {
			return nil, err
		}
		if len(p.Flags) > 0 {
			d.warnf("$.flags", "ignored: hutch's loader chooses the filter flags")
		}
	}
	for _, k := range []string{"listenerPath", "listenerMetadata"} {
		if v := m[k]; v != nil {
			s, err := d.stringValue(v, childPath("$", k))
			if err != nil {
				return nil, err
			}
			if k == "listenerPath" {
				p.ListenerPath = s
			} else {
				p.ListenerMetadata = s
			}
			if s != "" {
				d.warnf(childPath("$", k), "ignored: hutch's supervisor serves SCMP_ACT_NOTIFY itself")
			}
		}
	}
	if v := m["syscalls"]; v != nil {
		a, err := d.array(v, "$.syscalls")
		if err != nil {
			return nil, err
		}
		for i, e := range a {
			s, err := d.syscall(e, index("$.syscalls", i))
			if err != nil {
				return nil, err
			}
			p.Syscalls = append(p.Syscalls, s)
		}
	}
	return p, nil
}

var syscallFields = []string{"names", "name", "action", "errnoRet", "args", "comment", "includes", "excludes"}

func (d *decoder) syscall(v any, path string) (Syscall, error) {
	var s Syscall
	m, err := d.object(v, path, syscallFields)
	if err != nil {
		return s, err
	}
	checkName := func(n, p string) error {
		if n == "" {
			return d.errorf(p, "empty syscall name")
		}
		if !isSyscallName(n) {
			return d.errorf(p, "invalid syscall name %q (lower-case letters, digits and _)", n)
		}
		return nil
	}
	if nv := m["names"]; nv != nil {
		if s.Names, err = d.stringList(nv, childPath(path, "names"), checkName); err != nil {
			return s, err
		}
	}
	if nv := m["name"]; nv != nil {
		if s.Name, err = d.stringValue(nv, childPath(path, "name")); err != nil {
			return s, err
		}
		if err := checkName(s.Name, childPath(path, "name")); err != nil {
			return s, err
		}
	}
	if len(s.Names) == 0 && s.Name == "" {
		return s, d.errorf(path, "no syscall names")
	}
	av, ok := m["action"]
	if !ok || av == nil {
		return s, d.errorf(childPath(path, "action"), "missing (valid: %s)", strings.Join(validActions, ", "))
	}
	if s.Action, err = d.stringValue(av, childPath(path, "action")); err != nil {
		return s, err
	}
	if err := d.oneOf("action", validActions)(s.Action, childPath(path, "action")); err != nil {
		return s, err
	}
	if ev := m["errnoRet"]; ev != nil {
		max := uint64(maxErrno)
		if s.Action == ActTrace {
			max = 0xffff
		}
		u, err := d.unsigned(ev, childPath(path, "errnoRet"), max)
		if err != nil {
			return s, err
		}
		e := uint(u)
		s.ErrnoRet = &e
		if !takesErrno(s.Action) {
			d.warnf(childPath(path, "errnoRet"), "ignored: %s takes no errno", s.Action)
		}
	}
	if cv := m["comment"]; cv != nil {
		if s.Comment, err = d.stringValue(cv, childPath(path, "comment")); err != nil {
			return s, err
		}
	}
	if av := m["args"]; av != nil {
		a, err := d.array(av, childPath(path, "args"))
		if err != nil {
			return s, err
		}
		if len(a) > 6 {
			return s, d.errorf(childPath(path, "args"), "%d conditions; a syscall has at most 6 arguments", len(a))
		}
		for i, e := range a {
			arg, err := d.arg(e, index(childPath(path, "args"), i))
			if err != nil {
				return s, err
			}
			s.Args = append(s.Args, arg)
		}
	}
	for _, k := range []string{"includes", "excludes"} {
		sv := m[k]
		if sv == nil {
			continue
		}
		sel, err := d.selector(sv, childPath(path, k))
		if err != nil {
			return s, err
		}
		if sel.empty() {
			sel = nil
		}
		if k == "includes" {
			s.Includes = sel
		} else {
			s.Excludes = sel
		}
	}
	return s, nil
}

func (d *decoder) arg(v any, path string) (Arg, error) {
	var a Arg
	m, err := d.object(v, path, []string{"index", "value", "valueTwo", "op"})
	if err != nil {
		return a, err
	}
	iv, ok := m["index"]
	if !ok || iv == nil {
		return a, d.errorf(childPath(path, "index"), "missing (valid: 0 to 5)")
	}
	u, err := d.unsigned(iv, childPath(path, "index"), 5)
	if err != nil {
		return a, err
	}
	a.Index = uint(u)
	vv, ok := m["value"]
	if !ok || vv == nil {
		return a, d.errorf(childPath(path, "value"), "missing")
	}
	if a.Value, err = d.unsigned(vv, childPath(path, "value"), ^uint64(0)); err != nil {
		return a, err
	}
	if v2 := m["valueTwo"]; v2 != nil {
		if a.ValueTwo, err = d.unsigned(v2, childPath(path, "valueTwo"), ^uint64(0)); err != nil {
			return a, err
		}
	}
	ov, ok := m["op"]
	if !ok || ov == nil {
		return a, d.errorf(childPath(path, "op"), "missing (valid: %s)", strings.Join(validOps, ", "))
	}
	if a.Op, err = d.stringValue(ov, childPath(path, "op")); err != nil {
		return a, err
	}
	if !contains(validOps, a.Op) {
		return a, d.errorf(childPath(path, "op"), "unknown operator %q (valid: %s)", a.Op, strings.Join(validOps, ", "))
	}
	return a, nil
}

func (d *decoder) selector(v any, path string) (*Selector, error) {
	m, err := d.object(v, path, []string{"arches", "caps", "minKernel"})
	if err != nil {
		return nil, err
	}
	s := &Selector{}
	if av := m["arches"]; av != nil {
		if s.Arches, err = d.stringList(av, childPath(path, "arches"), func(a, p string) error {
			if contains(selectorArchNames, a) || contains(validArchitectures, a) {
				return nil
			}
			return d.errorf(p, "unknown architecture %q (valid: %s, or a SCMP_ARCH_* name)", a, strings.Join(selectorArchNames, ", "))
		}); err != nil {
			return nil, err
		}
	}
	if cv := m["caps"]; cv != nil {
		if s.Caps, err = d.stringList(cv, childPath(path, "caps"), func(c, p string) error {
			if contains(capabilityNames, c) {
				return nil
			}
			return d.errorf(p, "unknown capability %q (valid: CAP_* names such as CAP_SYS_ADMIN, CAP_SYS_PTRACE)", c)
		}); err != nil {
			return nil, err
		}
	}
	if kv := m["minKernel"]; kv != nil {
		if s.MinKernel, err = d.stringValue(kv, childPath(path, "minKernel")); err != nil {
			return nil, err
		}
		if s.MinKernel != "" && !isKernelVersion(s.MinKernel) {
			return nil, d.errorf(childPath(path, "minKernel"), "invalid kernel version %q (valid: MAJOR.MINOR, e.g. \"5.8\")", s.MinKernel)
		}
	}
	return s, nil
}

func takesErrno(action string) bool {
	return action == ActErrno || action == ActTrace || action == ActNotify
}

// unknownNames lists the syscall names of applicable rules that neither
// libseccomp nor hutch's table of recent syscalls knows, as warnings.
func (p *Profile) unknownNames() []string {
	var w []string
	for i := range p.Syscalls {
		s := &p.Syscalls[i]
		if !ruleApplies(s) {
			continue
		}
		for j, n := range s.Names {
			if _, _, ok := resolveSyscall(n); !ok {
				w = append(w, fmt.Sprintf("$.syscalls[%d].names[%d]: unknown syscall %q skipped", i, j, n))
			}
		}
		if s.Name != "" {
			if _, _, ok := resolveSyscall(s.Name); !ok {
				w = append(w, fmt.Sprintf("$.syscalls[%d].name: unknown syscall %q skipped", i, s.Name))
			}
		}
	}
	return w
}

// Clone returns a deep copy of p.
func (p *Profile) Clone() *Profile {
	q := *p
	if p.DefaultErrnoRet != nil {
		e := *p.DefaultErrnoRet
		q.DefaultErrnoRet = &e
	}
	q.Architectures = append([]string(nil), p.Architectures...)
	q.ArchMap = nil
	for _, am := range p.ArchMap {
		q.ArchMap = append(q.ArchMap, ArchMap{am.Architecture, append([]string(nil), am.SubArchitectures...)})
	}
	q.Flags = append([]string(nil), p.Flags...)
	q.Warnings = append([]string(nil), p.Warnings...)
	q.Syscalls = make([]Syscall, len(p.Syscalls))
	for i, s := range p.Syscalls {
		c := s
		c.Names = append([]string(nil), s.Names...)
		c.Args = append([]Arg(nil), s.Args...)
		if s.ErrnoRet != nil {
			e := *s.ErrnoRet
			c.ErrnoRet = &e
		}
		c.Includes = s.Includes.clone()
		c.Excludes = s.Excludes.clone()
		q.Syscalls[i] = c
	}
	return &q
}

func (s *Selector) clone() *Selector {
	if s == nil {
		return nil
	}
	return &Selector{
		Arches:    append([]string(nil), s.Arches...),
		Caps:      append([]string(nil), s.Caps...),
		MinKernel: s.MinKernel,
	}
}

// Hand-written matchers: regexps compiled at package initialisation cost
// every hutch process (and every start) their compile time.

// isIdent matches ^[A-Za-z_][A-Za-z0-9_]*$.
func isIdent(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// isSyscallName matches ^[a-z_][a-z0-9_]*$.
func isSyscallName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
}

// isKernelVersion matches ^[0-9]+\.[0-9]+(\.[0-9]+)?$.
func isKernelVersion(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return false
	}
	for _, p := range parts {
		if p == "" || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}
