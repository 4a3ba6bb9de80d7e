package policy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParsePublish reads a publish entry written [ADDR:]HOSTPORT:PORT, the form
// of the --publish flag: the host's address (an IP address, IPv6 in
// brackets; default DefaultPublishAddress), the host's port, and the
// loopback port inside the sandbox. The error says what is valid; the
// caller names the flag.
func ParsePublish(s string) (PublishEntry, error) {
	const want = "want [ADDR:]HOSTPORT:PORT, e.g. 8080:8080 or 0.0.0.0:8080:3000 (ADDR: the host's IP address to listen on, IPv6 in brackets; default 127.0.0.1, loopback)"
	var e PublishEntry
	rest, port, ok := cutLast(s, ":")
	if !ok {
		return e, fmt.Errorf("%s", want)
	}
	sp, err := publishPort("the sandbox's port", port)
	if err != nil {
		return e, err
	}
	e.SandboxPort = sp
	addr, hostPort, hasAddr := cutLast(rest, ":")
	if !hasAddr {
		hostPort = rest
	} else {
		if strings.HasPrefix(addr, "[") != strings.HasSuffix(addr, "]") || strings.Contains(strings.Trim(addr, "[]"), "[") {
			return e, fmt.Errorf("address %q: %s", addr, want)
		}
		bracketed := strings.HasPrefix(addr, "[")
		addr = strings.Trim(addr, "[]")
		a, err := netip.ParseAddr(addr)
		switch {
		case err != nil && strings.Contains(addr, ":") && !bracketed:
			return e, fmt.Errorf("%q: write an IPv6 address in brackets, e.g. [::1]:8080:8080", s)
		case err != nil || a.Zone() != "":
			return e, fmt.Errorf("address %q: want an IP address (no names or zones); %s", addr, want)
		case a.Is6() && !bracketed:
			return e, fmt.Errorf("%q: write an IPv6 address in brackets, e.g. [::1]:8080:8080", s)
		case a.Is4() && bracketed:
			return e, fmt.Errorf("address [%s]: brackets are for IPv6 addresses; write %s", addr, addr)
		}
		e.HostAddress = a.String()
	}
	if e.HostPort, err = publishPort("the host's port", hostPort); err != nil {
		return e, err
	}
	if e.HostAddress == "" {
		e.HostAddress = DefaultPublishAddress
	}
	return e, nil
}

// publishPort reads one port of a publish entry.
func publishPort(what, s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%s %q: want a number 1..65535", what, s)
	}
	return n, nil
}

// cutLast is strings.Cut at the last sep.
func cutLast(s, sep string) (before, after string, found bool) {
	if i := strings.LastIndex(s, sep); i >= 0 {
		return s[:i], s[i+len(sep):], true
	}
	return s, "", false
}
