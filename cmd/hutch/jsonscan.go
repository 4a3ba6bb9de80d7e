//go:build !mcpimage

package main

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// The MCP server's hot path (a run_command request in, its answer out)
// reads a few plain members of small JSON objects. encoding/json's
// reflection-driven decoding of them is a measurable share of a quick
// call (docs/PERFORMANCE.md, "Second paths"); the helpers below
// take the common shapes directly and leave everything else (escapes,
// nulls, repeated keys, other types) to the slow decoders, so that what
// is accepted, and every error, stays theirs.

// objectMembers calls visit with each member of the JSON object in data,
// its key and its raw value, in order, and reports whether data was an
// object whose keys all are plain (no escapes) and distinct, and every
// visit returned true. data must be valid JSON (json.Valid).
func objectMembers(data []byte, visit func(key string, value []byte) bool) bool {
	i := skipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	var seen [8]string
	n := 0
	i = skipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return skipSpace(data, i+1) == len(data)
	}
	for i < len(data) {
		end, plain := stringEnd(data, i)
		if !plain {
			return false
		}
		key := string(data[i+1 : end-1])
		for _, k := range seen[:n] {
			if k == key {
				return false
			}
		}
		if n >= len(seen) {
			return false // more members than any request shape we take
		}
		seen[n] = key
		n++
		i = skipSpace(data, end)
		i = skipSpace(data, i+1) // the colon
		vend := valueEnd(data, i)
		if !visit(key, data[i:vend]) {
			return false
		}
		i = skipSpace(data, vend)
		if i < len(data) && data[i] == '}' {
			return skipSpace(data, i+1) == len(data)
		}
		i = skipSpace(data, i+1) // the comma
	}
	return false
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index after the string starting at data[i] (a
// quote) and whether it has no escapes.
func stringEnd(data []byte, i int) (end int, plain bool) {
	plain = true
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			plain = false
			j++
		case '"':
			return j + 1, plain
		}
	}
	return len(data), false
}

// valueEnd returns the index after the value starting at data[i].
func valueEnd(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		end, _ := stringEnd(data, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, _ := stringEnd(data, j)
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	j := i
	for ; j < len(data); j++ {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
	}
	return j
}

// plainString returns the text of a JSON string without escapes, in valid
// UTF-8 (decoders replace invalid bytes with U+FFFD).
func plainString(v []byte) (string, bool) {
	if len(v) < 2 || v[0] != '"' || bytes.IndexByte(v, '\\') >= 0 || !utf8.Valid(v) {
		return "", false
	}
	return string(v[1 : len(v)-1]), true
}

// plainInt returns a JSON number written as an integer (no fraction or
// exponent) that fits an int64.
func plainInt(v []byte) (int64, bool) {
	if len(v) == 0 || bytes.ContainsAny(v, ".eE") {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// validObject reports whether data is valid JSON starting with '{'.
func validObject(data []byte) bool {
	i := skipSpace(data, 0)
	return i < len(data) && data[i] == '{' && json.Valid(data)
}

// plainBool returns a JSON true or false.
func plainBool(v []byte) (bool, bool) {
	return string(v) == "true", string(v) == "true" || string(v) == "false"
}
