package egress

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/hutchsandbox/hutch/policy"
)

func TestIsInternal(t *testing.T) {
	internal := []string{
		"127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1",
		"10.0.0.1", "172.16.0.1", "172.31.255.255", "192.168.1.1", "fc00::1", "fd12:3456::1",
		"169.254.169.254", "169.254.0.1", "fe80::1", "::ffff:169.254.169.254",
		"0.0.0.0", "::", "0.1.2.3",
		"224.0.0.1", "239.255.255.250", "ff02::1", "ff05::2",
		"100.64.0.1", "100.127.255.255",
		"192.0.0.8", "198.18.0.1", "198.19.255.255", "240.0.0.1", "255.255.255.255",
		"::ffff:10.0.0.1", "::ffff:192.168.0.1", "::ffff:100.64.0.1",
		"64:ff9b::7f00:1", "64:ff9b::a9fe:a9fe", "64:ff9b:1::1",
		"2002:7f00:1::1", "2002:a9fe:a9fe::1",
		"::127.0.0.1", "fec0::1",
	}
	public := []string{
		"93.184.215.14", "192.0.2.1", "198.51.100.7", "203.0.113.9", "8.8.8.8", "1.1.1.1",
		"100.63.255.255", "100.128.0.0", "172.15.255.255", "172.32.0.0", "192.169.0.1",
		"2001:db8::1", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1",
		"198.17.255.255", "198.20.0.0", "223.255.255.255",
	}
	for _, s := range internal {
		if !IsInternal(netip.MustParseAddr(s)) {
			t.Errorf("IsInternal(%s) = false", s)
		}
	}
	for _, s := range public {
		if IsInternal(netip.MustParseAddr(s)) {
			t.Errorf("IsInternal(%s) = true", s)
		}
	}
	if !IsInternal(netip.Addr{}) {
		t.Error("the zero Addr is not internal")
	}
	if !IsInternal(netip.MustParseAddr("fe80::1%eth0")) {
		t.Error("zoned link-local is not internal")
	}
}

func TestVet(t *testing.T) {
	names := map[string][]string{
		"internal.example": {"127.0.0.1"},
		"meta.example":     {"169.254.169.254"},
		"public.example":   {"192.0.2.1", "2001:db8::1"},
		"sneaky.example":   {"192.0.2.1", "::ffff:10.0.0.1"},
		"dup.example":      {"192.0.2.1", "::ffff:192.0.2.1"},
	}
	res := &stubResolver{t: t, m: names}
	mk := func(entries ...policy.AllowEntry) *Proxy {
		p, err := New(Config{Allow: entries, Resolver: res})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := mk(
		allow("internal.example", "r", 8080),
		allow("meta.example", "r", 80),
		allow("*.example", "r"),
	)
	ctx := context.Background()
	for _, tc := range []struct {
		host     string
		port     int
		internal string // expected internal address of a block; "-" = not allowlisted; "" = allowed
	}{
		{"internal.example", 8080, "127.0.0.1"},
		{"meta.example", 80, "169.254.169.254"},
		{"sneaky.example", 443, "10.0.0.1"},
		{"public.example", 443, ""},
		{"public.example", 80, "-"},
		{"other.org", 443, "-"},
		{"127.0.0.1", 8080, "-"},
	} {
		tg, err := p.vet(ctx, tc.host, tc.port)
		var be *blockError
		switch {
		case tc.internal == "":
			if err != nil {
				t.Errorf("vet(%s:%d): %v", tc.host, tc.port, err)
			}
		case !errors.As(err, &be):
			t.Errorf("vet(%s:%d) = %v, %v; want a block", tc.host, tc.port, tg, err)
		case tc.internal == "-" && be.internal.IsValid():
			t.Errorf("vet(%s:%d): %v; want not allowlisted", tc.host, tc.port, be)
		case tc.internal != "-" && be.internal.String() != tc.internal:
			t.Errorf("vet(%s:%d): %v; want internal %s", tc.host, tc.port, be, tc.internal)
		}
	}
	tg, err := p.vet(ctx, "dup.example", 443)
	if err != nil || len(tg.addrs) != 1 {
		t.Errorf("dup.example: %v %v", tg, err)
	}
	tg, err = p.vet(ctx, "public.example", 443)
	if err != nil || len(tg.addrs) != 2 || tg.addrs[0].String() != "192.0.2.1" {
		t.Errorf("public.example: %+v %v", tg, err)
	}

	// Named explicitly: the address entry lets the name reach it.
	p = mk(allow("internal.example", "r", 8080), allow("127.0.0.1", "r", 8080))
	if _, err := p.vet(ctx, "internal.example", 8080); err != nil {
		t.Errorf("internal.example with 127.0.0.1 named: %v", err)
	}
	// ...on that port only.
	p = mk(allow("internal.example", "r", 8080), allow("127.0.0.1", "r", 9090))
	if _, err := p.vet(ctx, "internal.example", 8080); err == nil {
		t.Error("127.0.0.1 named on another port let internal.example through")
	}
	// An address destination allowed by its own entry.
	p = mk(allow("127.0.0.1", "r", 8080))
	if _, err := p.vet(ctx, "127.0.0.1", 8080); err != nil {
		t.Errorf("127.0.0.1 literal: %v", err)
	}
	if _, err := p.vet(ctx, "127.0.0.2", 8080); err == nil {
		t.Error("127.0.0.2 allowed")
	}
}

func TestBlockTexts(t *testing.T) {
	be := &blockError{host: "evil.example", port: 443}
	if got := be.callerText(); got != wantBlockedBody {
		t.Errorf("callerText = %q", got)
	}
	if got := be.message(); got != "network blocked by policy: destination evil.example:443 not allowlisted" {
		t.Errorf("message = %q", got)
	}
	be = &blockError{host: "2001:db8::1", port: 443}
	if !strings.Contains(be.message(), "[2001:db8::1]:443") {
		t.Errorf("IPv6 destination: %q", be.message())
	}
}

func TestSanitizeHost(t *testing.T) {
	for in, want := range map[string]string{
		"ok.example":   "ok.example",
		"bad\x1b[31m":  `bad\x1b[31m`,
		"sp ace":       `sp\x20ace`,
		"":             `""`,
		"\n":           `\x0a`,
		"x\u00e9.test": `x\xc3\xa9.test`,
	} {
		if got := sanitizeHost(in); got != want {
			t.Errorf("sanitizeHost(%q) = %q, want %q", in, got, want)
		}
	}
	if got := sanitizeHost(strings.Repeat("a", 500)); len(got) > 80 {
		t.Errorf("long host kept %d bytes", len(got))
	}
}

// An entry that pins its name to addresses names them explicitly: the
// proxy uses them without DNS, internal or not.
func TestVetPinnedAddresses(t *testing.T) {
	res := &stubResolver{t: t, m: map[string][]string{"mirror.example": {"192.0.2.1"}}}
	p, err := New(Config{Resolver: res, Allow: []policy.AllowEntry{
		{Host: "mirror.example", Ports: []int{8080}, Addresses: []string{"127.0.0.1", "::1"}, Reason: "pinned"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	tg, err := p.vet(context.Background(), "mirror.example", 8080)
	if err != nil {
		t.Fatalf("pinned internal address refused: %v", err)
	}
	if len(tg.addrs) != 2 || tg.addrs[0].String() != "127.0.0.1" || tg.addrs[1].String() != "::1" {
		t.Errorf("addrs = %v, want the pinned ones (not the resolver's 192.0.2.1)", tg.addrs)
	}
	if _, err := p.vet(context.Background(), "mirror.example", 443); err == nil {
		t.Error("pinning must not widen the ports")
	}
}
