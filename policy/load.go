package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/hutchsandbox/hutch/internal/readfile"
)

// Error is one problem with a policy. Load, Parse and Validate return one
// *Error per problem, several joined with errors.Join; use errors.As or the
// Unwrap() []error method of the joined error to get at them.
//
// Error() reads FILE:LINE: KEY: MSG, leaving out what is unknown:
//
//	policy.toml:12: resources.memory: bad size "12XB": want ...
//	policy.toml:7: unknown key "filesystem.tmpsize" (valid keys in [filesystem]: ...)
//	network.allow[2].reason: required: say why the sandbox needs example.com
type Error struct {
	// File is the name given to Load or Parse; empty for Validate.
	File string
	// Line and Column locate the problem in File, both 1-based; 0 when
	// unknown (the key is not in the file, or the policy has no file).
	// Column is not part of Error().
	Line, Column int
	// Key is the full dotted key the problem is about, with 0-based indexes
	// into arrays: "network.allow[2].reason", "environment.set.FOO". It is
	// empty for syntax errors and for unknown keys (Msg names those).
	Key string
	// Msg says what is wrong and what would be valid.
	Msg string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.File != "" {
		b.WriteString(e.File)
		if e.Line > 0 {
			fmt.Fprintf(&b, ":%d", e.Line)
		}
		b.WriteString(": ")
	}
	if e.Key != "" {
		b.WriteString(e.Key)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// MaxFileSize is the largest policy file Load reads (a policy is a page or
// two; this leaves room for thousands of allow entries).
const MaxFileSize = 1 << 20

// Load reads the policy file at path; see Parse. The file must be a regular
// file of at most MaxFileSize bytes.
func Load(path string) (*Policy, error) {
	data, err := readfile.Read(path, "policy file", MaxFileSize)
	if err != nil {
		return nil, err
	}
	p, err := Parse(data, path)
	if err != nil {
		return nil, err
	}
	if p.File, err = filepath.Abs(path); err != nil {
		return nil, fmt.Errorf("policy %s: %w", path, err)
	}
	return p, nil
}

// Parse decodes a policy file's contents. name is the file's path; it names
// the file in errors, and relative host paths in the file are resolved
// against its directory.
//
// Decoding starts from Default(), so keys the file leaves out keep their
// default values. A key the file sets replaces the default value whole:
// setting environment.pass or filesystem.protected replaces the default list
// (protected = [] removes all protection). Tables merge key by key, so
// [environment.set] adds to (or overrides entries of) the default set.
//
// Decoding is strict: an unknown key, a value of the wrong type, a size or a
// duration that does not parse are errors, each naming the file, the line
// and the full key. Sizes are strings with a unit ("512MiB") or bare TOML
// integers counting bytes; durations must be strings ("10m").
//
// Host paths in a policy file (filesystem.workspace, filesystem.tooling's
// "rootfs:DIR", filesystem.read_only[].source and seccomp.profile) may be
// relative: they are resolved against the directory holding the file and
// cleaned. "~" is not expanded and is refused.
//
// The result has passed Validate (which also fills in default ports); on
// any error Parse returns a nil policy and every problem it found.
func Parse(data []byte, name string) (*Policy, error) {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark

	// The walk checks the document's shape against the policy (unknown
	// keys, wrong types, sizes and durations that do not parse) and lists
	// every such problem; go-toml's decoder would stop at the first. What
	// it passes, the decoder takes.
	d := scan(data, name)
	if len(d.errs) > 0 {
		return nil, sorted(d.errs)
	}
	p := Default()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return nil, sorted(decodeErrors(name, err))
	}

	base := filepath.Dir(name)
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	errs := p.resolvePaths(base)
	reported := map[string]bool{}
	for _, e := range errs {
		reported[e.Key] = true
	}
	for _, e := range p.problems() {
		if !reported[e.Key] {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		for _, e := range errs {
			e.File = name
			at := d.find(e.Key)
			e.Line, e.Column = at.line, at.col
		}
		return nil, sorted(errs)
	}
	return p, nil
}

// sorted joins errs in file order, those without a line (keys the file
// does not set) last.
func sorted(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int {
		return cmp.Compare(lineOrder(a.Line), lineOrder(b.Line))
	})
	return join(errs)
}

// decodeErrors turns what go-toml's decoder still refuses after the walk
// (rare: TOML rules such as an integer out of range) into *Errors, at the
// position it reports.
func decodeErrors(name string, err error) []*Error {
	var des []toml.DecodeError
	var sm *toml.StrictMissingError
	var de *toml.DecodeError
	switch {
	case errors.As(err, &sm):
		des = sm.Errors
	case errors.As(err, &de):
		des = []toml.DecodeError{*de}
	default:
		return []*Error{{File: name, Msg: err.Error()}}
	}
	errs := make([]*Error, len(des))
	for i := range des {
		line, col := des[i].Position()
		var key string
		for _, part := range des[i].Key() {
			key = joinKey(key, part)
		}
		errs[i] = &Error{File: name, Line: line, Column: col, Key: key, Msg: strings.TrimPrefix(des[i].Error(), "toml: ")}
	}
	return errs
}

func lineOrder(line int) int {
	if line == 0 {
		return math.MaxInt
	}
	return line
}

func join(errs []*Error) error {
	if len(errs) == 0 {
		return nil
	}
	if len(errs) == 1 {
		return errs[0]
	}
	list := make([]error, len(errs))
	for i, e := range errs {
		list[i] = e
	}
	return errors.Join(list...)
}

// ResolvePaths makes p's relative host paths absolute against base and
// cleans them: filesystem.workspace, the DIR of filesystem.tooling
// "rootfs:DIR", filesystem.read_only[].source and seccomp.profile (not
// "default"). Parse does this against the policy file's directory; the CLI
// calls it against the current directory after applying its flags, before
// Validate. A path starting with "~" is an error: nothing expands it.
func (p *Policy) ResolvePaths(base string) error {
	if abs, err := filepath.Abs(base); err == nil {
		base = abs
	}
	return join(p.resolvePaths(base))
}

func (p *Policy) resolvePaths(base string) []*Error {
	var errs []*Error
	fix := func(key, path string) string {
		if path == "" {
			return path
		}
		if strings.HasPrefix(path, "~") {
			errs = append(errs, &Error{Key: key, Msg: fmt.Sprintf(`%q: "~" is not expanded: write the path out in full`, path)})
			return path
		}
		if !filepath.IsAbs(path) {
			path = filepath.Join(base, path)
		}
		return filepath.Clean(path)
	}
	fs := &p.Filesystem
	fs.Workspace = fix("filesystem.workspace", fs.Workspace)
	if dir, ok := fs.RootfsDir(); ok {
		fs.Tooling = ToolingRootfs + fix("filesystem.tooling", dir)
	}
	for i := range fs.ReadOnly {
		fs.ReadOnly[i].Source = fix(fmt.Sprintf("filesystem.read_only[%d].source", i), fs.ReadOnly[i].Source)
	}
	if p.Seccomp.Profile != SeccompDefault {
		p.Seccomp.Profile = fix("seccomp.profile", p.Seccomp.Profile)
	}
	return errs
}
