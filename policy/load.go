package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"reflect"
	"slices"
	"strings"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

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
	ix := indexDocument(data)

	// Catch what go-toml would silently accept or report without a
	// position: an integer for a duration (nanoseconds), or a float or
	// boolean for a size.
	if errs := ix.checkKinds(name); len(errs) > 0 {
		return nil, join(errs)
	}

	p := Default()
	dec := toml.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return nil, join(ix.decodeErrors(name, err))
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
			e.Line, e.Column = ix.find(e.Key)
		}
		// In file order; problems with keys the file does not set last.
		slices.SortStableFunc(errs, func(a, b *Error) int {
			return cmp.Compare(lineOrder(a.Line), lineOrder(b.Line))
		})
		return nil, join(errs)
	}
	return p, nil
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

// docIndex records where every key of a TOML document is: it lets errors
// name the line, and the array index that go-toml's errors leave out.
type docIndex struct {
	entries []entry
	pos     map[string]int // display key → index in entries
}

type entry struct {
	key       string   // display key: "network.allow[1].host"
	parts     []string // the key's parts without indexes: network, allow, host
	line, col int
	kind      unstable.Kind // the value's kind; Invalid for table headers
	raw       string        // the value's text, for scalars
}

// indexDocument indexes data's keys. A syntax error stops it quietly: the
// decoder reports those.
func indexDocument(data []byte) *docIndex {
	ix := &docIndex{pos: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	var prefix string
	var prefixParts []string
	counts := map[string]int{} // display key of an array of tables → entries so far
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			prefix, prefixParts = "", nil
			var first *unstable.Node
			it := e.Key()
			for it.Next() {
				n := it.Node()
				if first == nil {
					first = n
				}
				prefix = joinKey(prefix, string(n.Data))
				prefixParts = append(prefixParts, string(n.Data))
				if it.IsLast() && e.Kind == unstable.ArrayTable {
					c := counts[prefix]
					counts[prefix] = c + 1
					prefix += fmt.Sprintf("[%d]", c)
				} else if c, ok := counts[prefix]; ok {
					prefix += fmt.Sprintf("[%d]", c-1)
				}
			}
			if first != nil {
				ix.add(&p, prefix, prefixParts, first, nil)
			}
		case unstable.KeyValue:
			ix.keyValue(&p, prefix, prefixParts, e)
		}
	}
	return ix
}

func (ix *docIndex) add(p *unstable.Parser, key string, parts []string, at, value *unstable.Node) {
	pos := p.Shape(at.Raw).Start
	e := entry{key: key, parts: parts, line: pos.Line, col: pos.Column}
	if value != nil {
		e.kind = value.Kind
		if value.Kind != unstable.Array && value.Kind != unstable.InlineTable {
			e.raw = string(value.Data)
		}
	}
	if _, dup := ix.pos[key]; !dup {
		ix.pos[key] = len(ix.entries)
	}
	ix.entries = append(ix.entries, e)
}

func (ix *docIndex) keyValue(p *unstable.Parser, key string, parts []string, kv *unstable.Node) {
	parts = append([]string(nil), parts...)
	var first *unstable.Node
	it := kv.Key()
	for it.Next() {
		n := it.Node()
		if first == nil {
			first = n
		}
		key = joinKey(key, string(n.Data))
		parts = append(parts, string(n.Data))
	}
	if first == nil {
		return
	}
	v := kv.Value()
	ix.add(p, key, parts, first, v)
	switch v.Kind {
	case unstable.InlineTable:
		ix.inlineTable(p, key, parts, v)
	case unstable.Array:
		i := 0
		it := v.Children()
		for it.Next() {
			el := it.Node()
			switch el.Kind {
			case unstable.Comment:
				continue
			case unstable.InlineTable:
				k := fmt.Sprintf("%s[%d]", key, i)
				ix.add(p, k, parts, el, nil)
				ix.inlineTable(p, k, parts, el)
			}
			i++
		}
	}
}

func (ix *docIndex) inlineTable(p *unstable.Parser, key string, parts []string, t *unstable.Node) {
	it := t.Children()
	for it.Next() {
		if n := it.Node(); n.Kind == unstable.KeyValue {
			ix.keyValue(p, key, parts, n)
		}
	}
}

// at returns the entry at line whose key starts last at or before col.
func (ix *docIndex) at(line, col int) *entry {
	var best *entry
	for i := range ix.entries {
		e := &ix.entries[i]
		if e.line == line && e.col <= col && (best == nil || e.col > best.col) {
			best = e
		}
	}
	return best
}

// find returns where key, or failing that the array element holding it, is
// in the document; 0, 0 when it is not there.
func (ix *docIndex) find(key string) (line, col int) {
	for key != "" {
		if i, ok := ix.pos[key]; ok {
			return ix.entries[i].line, ix.entries[i].col
		}
		parent, index := parentKey(key)
		if !index && !strings.HasSuffix(parent, "]") {
			break
		}
		key = parent
	}
	return 0, 0
}

// parentKey strips the last part of a display key; index reports that the
// part was an array index.
func parentKey(key string) (parent string, index bool) {
	if strings.HasSuffix(key, "]") {
		if i := strings.LastIndexByte(key, '['); i > 0 {
			return key[:i], true
		}
	}
	// The last part may be quoted; scan for the last dot outside quotes.
	last, inQuote := -1, false
	for i := 0; i < len(key); i++ {
		switch key[i] {
		case '\\':
			if inQuote {
				i++
			}
		case '"':
			inQuote = !inQuote
		case '.':
			if !inQuote {
				last = i
			}
		}
	}
	if last < 0 {
		return "", false
	}
	return key[:last], false
}

// keyFor returns the display key and parts of the decoder error at
// line:col about key k, from the index when it agrees with k.
func (ix *docIndex) keyFor(line, col int, k toml.Key) (string, []string) {
	if e := ix.at(line, col); e != nil && len(e.parts) > 0 && len(k) > 0 && e.parts[len(e.parts)-1] == k[len(k)-1] {
		return e.key, e.parts
	}
	var key string
	for _, part := range k {
		key = joinKey(key, part)
	}
	return key, k
}

// decodeErrors turns go-toml's errors into *Errors naming the file, the
// line, the full key and what would be valid.
func (ix *docIndex) decodeErrors(name string, err error) []*Error {
	var sm *toml.StrictMissingError
	if errors.As(err, &sm) {
		var errs []*Error
		for i := range sm.Errors {
			de := &sm.Errors[i]
			line, col := de.Position()
			key, parts := ix.keyFor(line, col, de.Key())
			// Name the first part the policy does not know, so that the
			// valid keys listed are those of a table it has.
			for j := 1; j < len(parts); j++ {
				if typeAt(parts[:j]) == nil {
					parts = parts[:j]
					key = strings.Join(parts, ".")
					break
				}
			}
			msg := fmt.Sprintf("unknown key %q", key)
			if len(parts) > 0 {
				if valid := validKeys(parts[:len(parts)-1]); valid != "" {
					msg += " (" + valid + ")"
				}
			}
			errs = append(errs, &Error{File: name, Line: line, Column: col, Msg: msg})
		}
		return errs
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, col := de.Position()
		msg := strings.TrimPrefix(de.Error(), "toml: ")
		e := &Error{File: name, Line: line, Column: col, Msg: msg}
		if len(de.Key()) == 0 {
			return []*Error{e}
		}
		var parts []string
		e.Key, parts = ix.keyFor(line, col, de.Key())
		found, mismatch := strings.CutPrefix(msg, "cannot decode TOML ")
		if mismatch {
			found, _, _ = strings.Cut(found, " into ")
		} else if strings.HasPrefix(msg, "cannot store a table in ") {
			found, mismatch = "table", true
		}
		switch {
		case mismatch:
			// A dotted key may run past a value: sandbox.uid.x = 1.
			for len(parts) > 1 && typeAt(parts) == nil {
				parts = parts[:len(parts)-1]
				e.Key = strings.Join(parts, ".")
			}
			if t := typeAt(parts); t != nil {
				e.Msg = fmt.Sprintf("want %s, found %s", describeType(t), withArticle(found))
			}
		case strings.HasPrefix(msg, "key ") && strings.HasSuffix(msg, " is already defined"):
			e.Msg = "set twice: a key may appear only once"
		}
		return []*Error{e}
	}
	return []*Error{{File: name, Msg: err.Error()}}
}

// checkKinds refuses the value kinds go-toml would take without complaint or
// without a position for sizes and durations.
func (ix *docIndex) checkKinds(name string) []*Error {
	var errs []*Error
	for _, e := range ix.entries {
		if e.kind == unstable.Invalid {
			continue
		}
		t := typeAt(e.parts)
		bad := t == sizeType && e.kind != unstable.String && e.kind != unstable.Integer ||
			t == durationType && e.kind != unstable.String
		if !bad {
			continue
		}
		found := withArticle(kindName(e.kind))
		if e.raw != "" {
			found += " " + e.raw
		}
		errs = append(errs, &Error{File: name, Line: e.line, Column: e.col, Key: e.key,
			Msg: fmt.Sprintf("want %s, found %s", describeType(t), found)})
	}
	return errs
}

var (
	policyType   = reflect.TypeOf(Policy{})
	sizeType     = reflect.TypeOf(Size(0))
	durationType = reflect.TypeOf(Duration(0))
)

// typeAt returns the Go type of the value at a key (parts without indexes),
// or nil when the policy has no such key.
func typeAt(parts []string) reflect.Type {
	t := policyType
	for _, part := range parts {
		for t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
			t = t.Elem()
		}
		switch t.Kind() {
		case reflect.Struct:
			f, ok := fieldByKey(t, part)
			if !ok {
				return nil
			}
			t = f.Type
		case reflect.Map:
			t = t.Elem()
		default:
			return nil
		}
	}
	return t
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if tomlKey(f) == key {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func tomlKey(f reflect.StructField) string {
	k, _, _ := strings.Cut(f.Tag.Get("toml"), ",")
	if k == "" {
		return f.Name
	}
	return k
}

// validKeys describes the keys a table (parts without indexes) may hold:
// "valid keys in [filesystem]: tooling, workspace, ...".
func validKeys(table []string) string {
	t := typeAt(table)
	if t == nil {
		return ""
	}
	where := "valid top-level keys"
	if len(table) > 0 {
		where = "valid keys in [" + strings.Join(table, ".") + "]"
	}
	if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct {
		t = t.Elem()
		where = "valid keys in [[" + strings.Join(table, ".") + "]]"
	}
	if t.Kind() != reflect.Struct {
		return ""
	}
	var keys []string
	for i := 0; i < t.NumField(); i++ {
		if k := tomlKey(t.Field(i)); k != "-" { // "-": not part of the format
			keys = append(keys, k)
		}
	}
	return where + ": " + strings.Join(keys, ", ")
}

// describeType says in words what a value of type t looks like in TOML.
func describeType(t reflect.Type) string {
	switch t {
	case sizeType:
		return `a size such as "512MiB" (or a whole number of bytes)`
	case durationType:
		return `a duration string such as "30s", "10m" or "1h30m"`
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "an integer"
	case reflect.Float64:
		return "a number"
	case reflect.Bool:
		return "true or false"
	case reflect.Map:
		return "a table of strings"
	case reflect.Struct:
		return "a table"
	case reflect.Slice:
		switch t.Elem().Kind() {
		case reflect.Struct:
			return "an array of tables"
		case reflect.String:
			return "an array of strings"
		case reflect.Int:
			return "an array of integers"
		}
		return "an array"
	}
	return t.String()
}

func kindName(k unstable.Kind) string {
	switch k {
	case unstable.String:
		return "string"
	case unstable.Integer:
		return "integer"
	case unstable.Float:
		return "float"
	case unstable.Bool:
		return "boolean"
	case unstable.Array:
		return "array"
	case unstable.InlineTable:
		return "inline table"
	default:
		return "date/time"
	}
}

func withArticle(s string) string {
	if s != "" && strings.ContainsRune("aeiouAEIOU", rune(s[0])) {
		return "an " + s
	}
	return "a " + s
}

// joinKey appends part to a dotted display key, quoting it unless bare.
func joinKey(key, part string) string {
	if !isBareKey(part) {
		part = tomlQuote(part)
	}
	if key == "" {
		return part
	}
	return key + "." + part
}

func isBareKey(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// tomlQuote writes s as a TOML basic string.
func tomlQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\b':
			b.WriteString(`\b`)
		case '\t':
			b.WriteString(`\t`)
		case '\n':
			b.WriteString(`\n`)
		case '\f':
			b.WriteString(`\f`)
		case '\r':
			b.WriteString(`\r`)
		default:
			if r < 0x20 || r == 0x7f {
				fmt.Fprintf(&b, `\u%04X`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
	return b.String()
}
