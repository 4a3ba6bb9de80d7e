package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

// Resolver resolves destination names on the host side. *net.Resolver
// satisfies it; tests inject a stub.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// internalPrefixes are the ranges, beyond what netip.Addr's predicates
// cover, that the proxy never reaches unless the allowlist names the
// address.
var internalPrefixes = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),      // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),  // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),   // IETF protocol assignments
	netip.MustParsePrefix("198.18.0.0/15"),  // benchmarking
	netip.MustParsePrefix("240.0.0.0/4"),    // reserved, and broadcast
	netip.MustParsePrefix("::/96"),          // IPv4-compatible (deprecated), includes :: and ::1
	netip.MustParsePrefix("64:ff9b:1::/48"), // local-use NAT64
	netip.MustParsePrefix("fec0::/10"),      // site-local (deprecated)
	netip.MustParsePrefix("100::/64"),       // discard-only
	netip.MustParsePrefix("2001:2::/48"),    // benchmarking
	netip.MustParsePrefix("2001:10::/28"),   // ORCHID
	netip.MustParsePrefix("2001:20::/28"),   // ORCHIDv2
	netip.MustParsePrefix("ff00::/8"),       // multicast (also IsMulticast)
	netip.MustParsePrefix("fc00::/7"),       // unique local (also IsPrivate)
	netip.MustParsePrefix("fe80::/10"),      // link-local (also IsLinkLocalUnicast)
	netip.MustParsePrefix("169.254.0.0/16"), // link-local, cloud metadata
	netip.MustParsePrefix("127.0.0.0/8"),    // loopback
	netip.MustParsePrefix("10.0.0.0/8"),     // RFC 1918
	netip.MustParsePrefix("172.16.0.0/12"),  // RFC 1918
	netip.MustParsePrefix("192.168.0.0/16"), // RFC 1918
	netip.MustParsePrefix("224.0.0.0/4"),    // multicast
}

// Prefixes whose addresses embed an IPv4 address in their last 32 bits
// (NAT64) or in bits 16..48 (6to4): internal when the embedded address is.
var (
	nat64Prefix = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour   = netip.MustParsePrefix("2002::/16")
)

// IsInternal reports whether addr is one the proxy refuses to reach unless
// the allowlist names it explicitly: loopback, private (RFC 1918,
// fc00::/7), link-local (169.254/16, which holds cloud metadata services,
// and fe80::/10), unspecified, multicast, carrier-grade NAT (100.64/10),
// or otherwise not a public unicast address (0/8, 192.0.0/24, 198.18/15,
// 240/4, deprecated and special IPv6 ranges), including the IPv4-mapped,
// NAT64 and 6to4 forms of all these. An invalid address is internal.
func IsInternal(addr netip.Addr) bool {
	if !addr.IsValid() {
		return true
	}
	addr = addr.WithZone("").Unmap()
	if addr.IsLoopback() || addr.IsPrivate() || addr.IsUnspecified() || addr.IsMulticast() ||
		addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast() || addr.IsInterfaceLocalMulticast() {
		return true
	}
	for _, p := range internalPrefixes {
		if p.Contains(addr) {
			return true
		}
	}
	if addr.Is6() {
		b := addr.As16()
		if nat64Prefix.Contains(addr) {
			return IsInternal(netip.AddrFrom4([4]byte(b[12:16])))
		}
		if sixToFour.Contains(addr) {
			return IsInternal(netip.AddrFrom4([4]byte(b[2:6])))
		}
	}
	return false
}

// blockError is a destination refused by policy.
type blockError struct {
	host     string     // as displayed: normalized name or address
	port     int        // destination port
	internal netip.Addr // valid when refused for resolving to an internal address
}

func (e *blockError) dest() string { return net.JoinHostPort(e.host, strconv.Itoa(e.port)) }

func (e *blockError) Error() string { return e.message() }

// message is the sentence for the security log and the end-of-run summary.
func (e *blockError) message() string {
	if e.internal.IsValid() {
		return fmt.Sprintf("network blocked by policy: destination %s resolves to internal address %s, not named by the allowlist", e.dest(), e.internal)
	}
	return fmt.Sprintf("network blocked by policy: destination %s not allowlisted", e.dest())
}

// adviceSuffix ends every text the sandboxed command sees about a block.
const adviceSuffix = " Do not retry or work around this; if the task needs it, ask the user to add it to the policy's network allowlist."

// callerText is what the sandboxed command sees (the 403 body).
func (e *blockError) callerText() string {
	if e.internal.IsValid() {
		return fmt.Sprintf("hutch: network blocked by policy: destination %s resolves to internal address %s, which the allowlist does not name explicitly.", e.dest(), e.internal) + adviceSuffix
	}
	return fmt.Sprintf("hutch: network blocked by policy: destination %s is not allowlisted.", e.dest()) + adviceSuffix
}

// reachError is an allowed destination that could not be reached.
type reachError struct {
	dest    string
	stage   string // "resolve" or "connect"
	err     error
	timeout bool
	refused bool
}

func (e *reachError) Error() string {
	return fmt.Sprintf("cannot %s %s: %v", e.stage, e.dest, e.err)
}

func (e *reachError) Unwrap() error { return e.err }

// target is a vetted destination.
type target struct {
	host  string // normalized name or address, for display
	port  int
	entry *policy.AllowEntry
	addrs []netip.Addr // vetted, in dialing order
}

func (t *target) dest() string { return net.JoinHostPort(t.host, strconv.Itoa(t.port)) }

// maxDialAddrs bounds the addresses tried for one connection.
const maxDialAddrs = 8

// vet decides whether the client may reach host:port: the allowlist must
// match the name (or address) as asked, and every address the name
// resolves to must be public or named by the allowlist as an address.
// It returns a *blockError for a policy refusal, a *reachError when
// resolution fails, or the vetted target.
func (p *Proxy) vet(ctx context.Context, host string, port int) (*target, error) {
	d, ok := parseDest(host)
	display := sanitizeHost(host)
	if ok {
		display = d.display()
	}
	entry, ok := p.allow.Match(host, port)
	if !ok {
		return nil, &blockError{host: display, port: port}
	}
	t := &target{host: display, port: port, entry: entry}
	if d.isAddr {
		// Match found an entry naming this very address.
		t.addrs = []netip.Addr{d.addr}
		return t, nil
	}
	if len(entry.Addresses) > 0 {
		// The entry pins the name to addresses it names explicitly: no
		// DNS, and internal addresses are allowed because they are named.
		for _, s := range entry.Addresses {
			if a, err := netip.ParseAddr(s); err == nil && len(t.addrs) < maxDialAddrs {
				t.addrs = append(t.addrs, a.Unmap())
			}
		}
		return t, nil
	}
	rctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(rctx, "ip", d.name)
	if err == nil && len(addrs) == 0 {
		err = errors.New("no addresses")
	}
	if err != nil {
		re := &reachError{dest: t.dest(), stage: "resolve", err: err}
		var de *net.DNSError
		if errors.As(err, &de) && de.IsTimeout || errors.Is(err, context.DeadlineExceeded) {
			re.timeout = true
		}
		return nil, re
	}
	for _, a := range addrs {
		a = a.Unmap()
		if IsInternal(a) {
			if _, named := p.allow.NamesAddr(a, port); !named {
				return nil, &blockError{host: display, port: port, internal: a.WithZone("")}
			}
		}
		if len(t.addrs) < maxDialAddrs && !containsAddr(t.addrs, a) {
			t.addrs = append(t.addrs, a)
		}
	}
	return t, nil
}

func containsAddr(list []netip.Addr, a netip.Addr) bool {
	for _, b := range list {
		if a == b {
			return true
		}
	}
	return false
}

func (d dest) display() string {
	if d.isAddr {
		return d.addr.String()
	}
	return d.name
}

// sanitizeHost makes a host the client sent printable for messages: at
// most 64 bytes, and every byte outside letters, digits and "-._:[]*"
// written as \xNN.
func sanitizeHost(h string) string {
	const max = 64
	out := make([]byte, 0, len(h))
	for i := 0; i < len(h) && len(out) < max; i++ {
		c := h[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == ':' || c == '[' || c == ']' || c == '*' {
			out = append(out, c)
		} else {
			out = append(out, fmt.Sprintf(`\x%02x`, c)...)
		}
	}
	if len(h) > 0 && len(out) >= max {
		out = append(out, "..."...)
	}
	if len(out) == 0 {
		return `""`
	}
	return string(out)
}

// dial connects to the vetted target, trying its addresses in order within
// DialTimeout. It dials addresses, never the name, so a name cannot be
// rebound between the check and the connection.
func (p *Proxy) dial(ctx context.Context, t *target) (net.Conn, netip.AddrPort, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.DialTimeout)
	defer cancel()
	var firstErr error
	for i, a := range t.addrs {
		ap := netip.AddrPortFrom(a, uint16(t.port))
		actx := ctx
		if left := len(t.addrs) - i; left > 1 {
			// Give each remaining address a fair share of the time left,
			// so one black-holed address does not use it all.
			if dl, ok := ctx.Deadline(); ok {
				var c context.CancelFunc
				actx, c = context.WithTimeout(ctx, time.Until(dl)/time.Duration(left))
				defer c()
			}
		}
		c, err := p.dialer(actx, "tcp", ap.String())
		if err == nil {
			return c, ap, nil
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr == nil {
		firstErr = errors.New("no addresses")
	}
	re := &reachError{dest: t.dest(), stage: "connect", err: firstErr}
	var ne net.Error
	if errors.As(firstErr, &ne) && ne.Timeout() || errors.Is(firstErr, context.DeadlineExceeded) {
		re.timeout = true
	}
	if isConnRefused(firstErr) {
		re.refused = true
	}
	return nil, netip.AddrPort{}, re
}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }
