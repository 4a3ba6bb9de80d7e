package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/hutchsandbox/hutch/policy"
)

// Allowlist is a compiled []policy.AllowEntry: it answers whether a
// destination name (or address) and port may be reached, and which entry
// says so. It is immutable and safe for concurrent use.
type Allowlist struct {
	rules []rule
}

type ruleKind int

const (
	ruleExact  ruleKind = iota // Host is a DNS name
	ruleSuffix                 // Host is "*." + suffix
	ruleAddr                   // Host is an IP address
)

type rule struct {
	kind  ruleKind
	name  string     // ruleExact: the normalized name; ruleSuffix: "." + suffix
	addr  netip.Addr // ruleAddr: unmapped
	ports []int
	entry *policy.AllowEntry
}

// CompileAllowlist compiles entries. An entry without ports gets
// [policy.DefaultPort]. It refuses entries whose host is empty, a bare "*"
// or "*." or carries a zone, and ports outside 1..65535; the policy's own
// validation refuses more (this only guards against a caller that skipped
// it).
func CompileAllowlist(entries []policy.AllowEntry) (*Allowlist, error) {
	a := &Allowlist{}
	for i := range entries {
		e := entries[i]
		e.Ports = slices.Clone(e.Ports)
		if len(e.Ports) == 0 {
			e.Ports = []int{policy.DefaultPort}
		}
		for _, p := range e.Ports {
			if p < 1 || p > 65535 {
				return nil, fmt.Errorf("network.allow[%d]: port %d is not between 1 and 65535", i, p)
			}
		}
		r := rule{ports: e.Ports, entry: &e}
		host := strings.TrimSpace(e.Host)
		switch {
		case host == "":
			return nil, fmt.Errorf("network.allow[%d]: host is empty", i)
		case strings.HasPrefix(host, "*."):
			suffix, ok := normalizeName(host[2:])
			if !ok || suffix == "" {
				return nil, fmt.Errorf("network.allow[%d]: %q is not a valid wildcard", i, e.Host)
			}
			r.kind, r.name = ruleSuffix, "."+suffix
		default:
			if addr, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")); err == nil {
				if addr.Zone() != "" {
					return nil, fmt.Errorf("network.allow[%d]: %q: an address with a zone is not supported", i, e.Host)
				}
				r.kind, r.addr = ruleAddr, addr.Unmap()
				break
			}
			name, ok := normalizeName(host)
			if !ok {
				return nil, fmt.Errorf("network.allow[%d]: %q is not a valid host", i, e.Host)
			}
			r.kind, r.name = ruleExact, name
		}
		a.rules = append(a.rules, r)
	}
	return a, nil
}

// Match reports the first entry that allows host on port. host is a DNS
// name (matched case-insensitively, a trailing dot ignored) or an IP
// address (with or without brackets; an IPv4-mapped IPv6 address matches
// its IPv4 form). A name never matches an address entry, nor an address a
// name entry: Match decides by what the client asked for, before any
// resolution.
func (a *Allowlist) Match(host string, port int) (entry *policy.AllowEntry, ok bool) {
	if a == nil || port < 1 || port > 65535 {
		return nil, false
	}
	dst, ok := parseDest(host)
	if !ok {
		return nil, false
	}
	for i := range a.rules {
		r := &a.rules[i]
		if !slices.Contains(r.ports, port) {
			continue
		}
		switch r.kind {
		case ruleAddr:
			if dst.isAddr && dst.addr == r.addr {
				return r.entry, true
			}
		case ruleExact:
			if !dst.isAddr && dst.name == r.name {
				return r.entry, true
			}
		case ruleSuffix:
			if !dst.isAddr && strings.HasSuffix(dst.name, r.name) && len(dst.name) > len(r.name) {
				return r.entry, true
			}
		}
	}
	return nil, false
}

// NamesAddr reports the first entry that names addr itself, as an IP
// address, for port: the only way an internal address (see IsInternal) may
// be reached.
func (a *Allowlist) NamesAddr(addr netip.Addr, port int) (entry *policy.AllowEntry, ok bool) {
	if a == nil || !addr.IsValid() {
		return nil, false
	}
	addr = addr.Unmap()
	for i := range a.rules {
		r := &a.rules[i]
		if r.kind == ruleAddr && r.addr == addr && slices.Contains(r.ports, port) {
			return r.entry, true
		}
	}
	return nil, false
}

// dest is a destination host as a client named it.
type dest struct {
	isAddr bool
	addr   netip.Addr // unmapped, no zone
	name   string     // normalized DNS name
}

// parseDest normalizes a destination host: an IP address (brackets
// allowed, no zone) or a DNS name (see normalizeName).
func parseDest(host string) (dest, bool) {
	h := host
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
		addr, err := netip.ParseAddr(h)
		if err != nil || !addr.Is6() || addr.Zone() != "" {
			return dest{}, false
		}
		return dest{isAddr: true, addr: addr.Unmap()}, true
	}
	if addr, err := netip.ParseAddr(h); err == nil {
		if addr.Zone() != "" {
			return dest{}, false
		}
		return dest{isAddr: true, addr: addr.Unmap()}, true
	}
	name, ok := normalizeName(h)
	if !ok {
		return dest{}, false
	}
	return dest{name: name}, true
}

// normalizeName lowercases a DNS name and drops one trailing dot. It
// accepts labels of 1 to 63 letters, digits, hyphens and underscores and
// names up to 253 characters; anything else (spaces, control characters,
// empty labels, a name of digits and dots that is not an IP address) is
// refused, so that what reaches a log or an error message is printable.
func normalizeName(s string) (string, bool) {
	s = strings.TrimSuffix(s, ".")
	if s == "" || len(s) > 253 {
		return "", false
	}
	allDigits := true
	labelLen := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '.':
			if labelLen == 0 {
				return "", false
			}
			labelLen = 0
			allDigits = true
			continue
		case c >= '0' && c <= '9':
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '-', c == '_':
			allDigits = false
		default:
			return "", false
		}
		labelLen++
		if labelLen > 63 {
			return "", false
		}
	}
	if labelLen == 0 || allDigits {
		// An empty last label, or a last label of digits only: "1.2.3"
		// or "0x7f.1" style spellings of addresses are not names.
		return "", false
	}
	return strings.ToLower(s), true
}
