package egress

import (
	"net/netip"
	"testing"

	"github.com/hutchsandbox/hutch/policy"
)

func TestAllowlistMatch(t *testing.T) {
	a, err := CompileAllowlist([]policy.AllowEntry{
		{Host: "registry.example.com", Reason: "exact"},
		{Host: "*.cdn.example.net", Ports: []int{443, 8443}, Reason: "wildcard"},
		{Host: "Mixed.Example.ORG.", Ports: []int{80}, Reason: "mixed case, trailing dot"},
		{Host: "192.0.2.10", Ports: []int{8080}, Reason: "v4 literal"},
		{Host: "2001:db8::10", Reason: "v6 literal"},
		{Host: "127.0.0.1", Ports: []int{3000}, Reason: "loopback literal"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		host   string
		port   int
		reason string // "" = no match
	}{
		{"registry.example.com", 443, "exact"},
		{"REGISTRY.example.COM", 443, "exact"},
		{"registry.example.com.", 443, "exact"},
		{"registry.example.com", 80, ""},
		{"registry.example.com", 0, ""},
		{"registry.example.com", 70000, ""},
		{"evil-registry.example.com", 443, ""},
		{"registry.example.com.evil.example", 443, ""},
		{"x.registry.example.com", 443, ""},
		{"a.cdn.example.net", 443, "wildcard"},
		{"a.b.cdn.example.net", 8443, "wildcard"},
		{"A.CDN.example.net.", 443, "wildcard"},
		{"cdn.example.net", 443, ""}, // not the bare suffix
		{"acdn.example.net", 443, ""},
		{"a.cdn.example.net", 80, ""},
		{"mixed.example.org", 80, "mixed case, trailing dot"},
		{"192.0.2.10", 8080, "v4 literal"},
		{"192.0.2.10", 443, ""},
		{"::ffff:192.0.2.10", 8080, "v4 literal"},
		{"[::ffff:192.0.2.10]", 8080, "v4 literal"},
		{"2001:db8::10", 443, "v6 literal"},
		{"[2001:DB8:0::10]", 443, "v6 literal"},
		{"2001:db8::10%eth0", 443, ""},
		{"[2001:db8::10", 443, ""},
		{"127.0.0.1", 3000, "loopback literal"},
		{"127.1", 3000, ""},
		{"0x7f.0.0.1", 3000, ""},
		{"localhost", 3000, ""},
		{"", 443, ""},
		{".", 443, ""},
		{"registry..example.com", 443, ""},
		{"registry.example.com\x00", 443, ""},
		{"registry example.com", 443, ""},
	} {
		e, ok := a.Match(tc.host, tc.port)
		got := ""
		if ok {
			got = e.Reason
		}
		if got != tc.reason {
			t.Errorf("Match(%q, %d) = %q, want %q", tc.host, tc.port, got, tc.reason)
		}
	}
}

func TestAllowlistNamesAddr(t *testing.T) {
	a, err := CompileAllowlist([]policy.AllowEntry{
		{Host: "127.0.0.1", Ports: []int{8080}, Reason: "r"},
		{Host: "internal.example", Ports: []int{8080}, Reason: "r"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr string
		port int
		want bool
	}{
		{"127.0.0.1", 8080, true},
		{"::ffff:127.0.0.1", 8080, true},
		{"127.0.0.1", 443, false},
		{"127.0.0.2", 8080, false},
		{"::1", 8080, false},
	} {
		if _, ok := a.NamesAddr(netip.MustParseAddr(tc.addr), tc.port); ok != tc.want {
			t.Errorf("NamesAddr(%s, %d) = %v", tc.addr, tc.port, ok)
		}
	}
}

func TestAllowlistDefaultPort(t *testing.T) {
	entries := []policy.AllowEntry{{Host: "a.example", Reason: "r"}}
	a, err := CompileAllowlist(entries)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Match("a.example", 443); !ok {
		t.Error("no ports should mean 443")
	}
	if entries[0].Ports != nil {
		t.Error("CompileAllowlist modified its input")
	}
}

func TestCompileAllowlistErrors(t *testing.T) {
	for _, host := range []string{"", "*", "*.", "fe80::1%eth0", "bad host", "*.bad host"} {
		if _, err := CompileAllowlist([]policy.AllowEntry{{Host: host, Reason: "r"}}); err == nil {
			t.Errorf("host %q accepted", host)
		}
	}
}
