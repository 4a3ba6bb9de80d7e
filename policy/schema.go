package policy

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/pelletier/go-toml/v2/unstable"
)

// doc is what Parse learns by walking a policy document with go-toml's
// parser (package unstable): where each key is, so that an error about it
// names its line, and every problem of shape found on the way, checked
// against the Policy type: unknown keys, values of the wrong type, sizes
// and durations that do not parse, keys set twice.
type doc struct {
	name  string
	data  []byte
	lines lineCursor
	// pos holds the first position of each display key
	// ("network.allow[1].host").
	pos map[string]position
	// assigned holds the keys given a value or a table header; a second
	// one is an error.
	assigned map[string]bool
	// entries counts the [[...]] entries so far of each array of tables,
	// by its display key.
	entries map[string]int
	errs    []*Error
}

type position struct{ line, col int }

// lineCursor turns byte offsets into lines and columns moving forward
// only: the walk asks in document order, so a whole document costs one
// pass over it however many keys it has. (unstable.Parser.Shape counts the
// lines from the start on every call: a document of 20,000 entries took
// 24 s.)
type lineCursor struct {
	data []byte
	// off is the next byte to examine, line its 1-based line and start the
	// offset at which that line starts.
	off, line, start int
	// scanned counts the bytes examined, for the test that the walk stays
	// linear.
	scanned int
}

func (c *lineCursor) at(off int) position {
	off = min(max(off, 0), len(c.data))
	if off < c.off || c.line == 0 { // not in document order: start over
		c.off, c.line, c.start = 0, 1, 0
	}
	for {
		i := bytes.IndexByte(c.data[c.off:off], '\n')
		if i < 0 {
			break
		}
		c.line++
		c.start = c.off + i + 1
		c.scanned += i + 1
		c.off = c.start
	}
	c.scanned += off - c.off
	c.off = off
	return position{c.line, off - c.start + 1}
}

// keyPath is a key being resolved: its parts as the policy's types know them
// (no indexes) and as errors display them (indexes into arrays, quoted
// when not bare): network, allow, host and network, allow[1], host.
type keyPath struct {
	parts, disp []string
}

func (p keyPath) key() string { return strings.Join(p.disp, ".") }

// child is p extended by one key part.
func (p keyPath) child(part string) keyPath {
	return keyPath{
		parts: append(p.parts[:len(p.parts):len(p.parts)], part),
		disp:  append(p.disp[:len(p.disp):len(p.disp)], joinKey("", part)),
	}
}

// index is p with an index into the array at its last part.
func (p keyPath) index(i int) keyPath {
	disp := append([]string(nil), p.disp...)
	disp[len(disp)-1] += fmt.Sprintf("[%d]", i)
	return keyPath{parts: p.parts, disp: disp}
}

// prefix is p's first n parts.
func (p keyPath) prefix(n int) keyPath { return keyPath{parts: p.parts[:n], disp: p.disp[:n]} }

// scan walks data. A syntax error ends the walk; it is listed after the
// problems found before it.
func scan(data []byte, name string) *doc {
	d := &doc{name: name, data: data, lines: lineCursor{data: data},
		pos: map[string]position{}, assigned: map[string]bool{}, entries: map[string]int{}}
	var p unstable.Parser
	p.Reset(data)
	var table keyPath
	skip := false // the current table is unknown or no table: its keys were reported with it
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			table, skip = d.header(e)
		case unstable.KeyValue:
			if !skip {
				d.keyValue(table, e)
			}
		}
	}
	if err := p.Error(); err != nil {
		d.syntax(err)
	}
	return d
}

func (d *doc) at(n *unstable.Node) position { return d.lines.at(int(n.Raw.Offset)) }

func (d *doc) bad(key string, at position, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.name, Line: at.line, Column: at.col, Key: key, Msg: fmt.Sprintf(format, args...)})
}

func (d *doc) record(key string, at position) {
	if _, ok := d.pos[key]; !ok {
		d.pos[key] = at
	}
}

// header takes a [table] or [[array]] header; skip means the table's
// keys are not to be checked (the header was reported).
func (d *doc) header(e *unstable.Node) (h keyPath, skip bool) {
	var first *unstable.Node
	it := e.Key()
	for it.Next() {
		n := it.Node()
		if first == nil {
			first = n
		}
		h = h.child(string(n.Data))
		k := h.key()
		if it.IsLast() && e.Kind == unstable.ArrayTable {
			c := d.entries[k]
			d.entries[k] = c + 1
			h = h.index(c)
		} else if c, ok := d.entries[k]; ok {
			h = h.index(c - 1) // a table in the array's last entry
		}
	}
	if first == nil {
		return h, true
	}
	at := d.at(first)
	key := h.key()
	d.record(key, at)
	if !d.known(h, at) {
		return h, true
	}
	t := typeAt(h.parts)
	switch {
	case e.Kind == unstable.ArrayTable && !isTableArray(t):
		d.bad(key[:strings.LastIndexByte(key, '[')], at, "want %s, found an array of tables", describeType(t))
		return h, true
	case e.Kind == unstable.Table && isTableArray(t):
		d.bad(key, at, "want %s, found a table: write [[%s]] for each entry", describeType(t), strings.Join(h.disp, "."))
		return h, true
	case e.Kind == unstable.Table && t.Kind() != reflect.Struct && t.Kind() != reflect.Map:
		d.bad(key, at, "want %s, found a table", describeType(t))
		return h, true
	case e.Kind == unstable.Table && d.assigned[key]:
		d.bad(key, at, "set twice: a key may appear only once")
		return h, true
	}
	d.assigned[key] = true
	return h, false
}

// keyValue takes KEY = VALUE in the table at table (a top-level one, a
// [table]'s, or an inline table's).
func (d *doc) keyValue(table keyPath, kv *unstable.Node) {
	k := table
	var first *unstable.Node
	it := kv.Key()
	for it.Next() {
		n := it.Node()
		if first == nil {
			first = n
		}
		k = k.child(string(n.Data))
	}
	if first == nil {
		return
	}
	at := d.at(first)
	key := k.key()
	if d.assigned[key] {
		d.bad(key, at, "set twice: a key may appear only once")
		return
	}
	d.assigned[key] = true
	d.record(key, at)
	if d.known(k, at) {
		d.value(k, typeAt(k.parts), kv.Value(), at)
	}
}

// known reports whether every part of k names a key of the policy, a table
// on the way; when not, it reports the first part that does not.
func (d *doc) known(k keyPath, at position) bool {
	for j := 1; j <= len(k.parts); j++ {
		parent := typeAt(k.parts[:j-1])
		if typeAt(k.parts[:j]) == nil {
			if container(parent) {
				msg := fmt.Sprintf("unknown key %q", k.prefix(j).key())
				if valid := validKeys(k.parts[:j-1]); valid != "" {
					msg += " (" + valid + ")"
				}
				d.errs = append(d.errs, &Error{File: d.name, Line: at.line, Column: at.col, Msg: msg})
			} else {
				// A dotted key runs past a value: sandbox.uid.x = 1.
				d.bad(k.prefix(j-1).key(), at, "want %s, found a table", describeType(parent))
			}
			return false
		}
		// A table inside an array of tables must be in one of its entries.
		if j < len(k.parts) && isTableArray(typeAt(k.parts[:j])) && !strings.HasSuffix(k.disp[j-1], "]") {
			d.bad(k.prefix(j).key(), at, "want %s, found a table: write [[%s]] for each entry", describeType(typeAt(k.parts[:j])), strings.Join(k.disp[:j], "."))
			return false
		}
	}
	return true
}

// value checks a value of the key at k against its type t.
func (d *doc) value(k keyPath, t reflect.Type, v *unstable.Node, at position) {
	key := k.key()
	mismatch := func(withValue bool) {
		found := withArticle(kindName(v.Kind))
		if withValue && v.Kind != unstable.Array && v.Kind != unstable.InlineTable {
			found += " " + string(v.Data)
		}
		d.bad(key, at, "want %s, found %s", describeType(t), found)
	}
	switch {
	case t == sizeType:
		switch v.Kind {
		case unstable.String:
			if _, err := ParseSize(string(v.Data)); err != nil {
				d.bad(key, at, "%v", err)
			}
		case unstable.Integer:
		default:
			mismatch(true)
		}
	case t == durationType:
		if v.Kind != unstable.String {
			mismatch(true)
		} else if _, err := ParseDuration(string(v.Data)); err != nil {
			d.bad(key, at, "%v", err)
		}
	case t.Kind() == reflect.Struct || t.Kind() == reflect.Map:
		if v.Kind != unstable.InlineTable {
			mismatch(false)
			return
		}
		d.inlineTable(k, v)
	case t.Kind() == reflect.Slice:
		if v.Kind != unstable.Array {
			mismatch(false)
			return
		}
		i := 0
		it := v.Children()
		for it.Next() {
			el := it.Node()
			if el.Kind == unstable.Comment {
				continue
			}
			ek, eat := k.index(i), d.at(el)
			d.record(ek.key(), eat)
			d.value(ek, t.Elem(), el, eat)
			i++
		}
	case !scalarFits(t.Kind(), v.Kind):
		mismatch(false)
	}
}

// inlineTable checks the members of {...} at k.
func (d *doc) inlineTable(k keyPath, v *unstable.Node) {
	it := v.Children()
	for it.Next() {
		if n := it.Node(); n.Kind == unstable.KeyValue {
			d.keyValue(k, n)
		}
	}
}

// scalarFits reports whether a TOML value of kind k decodes into a Go
// value of kind t (an integer fits a float).
func scalarFits(t reflect.Kind, k unstable.Kind) bool {
	switch t {
	case reflect.String:
		return k == unstable.String
	case reflect.Int, reflect.Int64:
		return k == unstable.Integer
	case reflect.Float64:
		return k == unstable.Float || k == unstable.Integer
	case reflect.Bool:
		return k == unstable.Bool
	}
	return false
}

func container(t reflect.Type) bool {
	return t != nil && (t.Kind() == reflect.Struct || t.Kind() == reflect.Map || isTableArray(t))
}

func isTableArray(t reflect.Type) bool {
	return t != nil && t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Struct
}

// syntax records the parser's error at its position. go-toml names a
// character it did not expect by its first byte; a non-ASCII character is
// named whole.
func (d *doc) syntax(err error) {
	var pe *unstable.ParserError
	if !errors.As(err, &pe) {
		d.errs = append(d.errs, &Error{File: d.name, Msg: err.Error()})
		return
	}
	// The highlight is a subslice of the document.
	off := cap(d.data) - cap(pe.Highlight)
	if len(pe.Highlight) == 0 || off < 0 || off > len(d.data) {
		off = 0
	}
	msg := pe.Message
	if off < len(d.data) && d.data[off] >= utf8.RuneSelf {
		r, _ := utf8.DecodeRune(d.data[off:])
		if byteName := fmt.Sprintf("%#U", rune(d.data[off])); r != utf8.RuneError && strings.Contains(msg, byteName) {
			msg = strings.Replace(msg, byteName, fmt.Sprintf("%#U", r), 1)
			if strings.HasPrefix(msg, "invalid character at start of key") {
				word := d.data[off:]
				if end := bytes.IndexAny(word, " \t=.\r\n"); end >= 0 {
					word = word[:end]
				}
				msg += fmt.Sprintf(`: a bare key has only ASCII letters, digits, "_" and "-"; quote any other: %s = ...`, tomlQuote(string(word)))
			}
		}
	}
	at := d.lines.at(off)
	d.errs = append(d.errs, &Error{File: d.name, Line: at.line, Column: at.col, Msg: msg})
}

// find returns where key, or failing that the array entry holding it, is
// in the document; the zero position when it is not there.
func (d *doc) find(key string) position {
	for key != "" {
		if at, ok := d.pos[key]; ok {
			return at
		}
		parent, index := parentKey(key)
		if !index && !strings.HasSuffix(parent, "]") {
			break
		}
		key = parent
	}
	return position{}
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
		if k := tomlKey(f); k == key && k != "-" { // "-": not part of the format
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
