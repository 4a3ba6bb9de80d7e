package policy

import (
	"strings"
	"testing"
)

func TestParsePublish(t *testing.T) {
	for _, c := range []struct {
		in   string
		want PublishEntry
	}{
		{"8080:8080", PublishEntry{"127.0.0.1", 8080, 8080}},
		{"18080:3000", PublishEntry{"127.0.0.1", 18080, 3000}},
		{"0.0.0.0:8080:80", PublishEntry{"0.0.0.0", 8080, 80}},
		{"192.168.1.5:1:65535", PublishEntry{"192.168.1.5", 1, 65535}},
		{"[::1]:8080:8080", PublishEntry{"::1", 8080, 8080}},
		{"[::]:8080:8080", PublishEntry{"::", 8080, 8080}},
	} {
		got, err := ParsePublish(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePublish(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "want [ADDR:]HOSTPORT:PORT"},
		{"8080", "want [ADDR:]HOSTPORT:PORT"},
		{"8080:", `the sandbox's port "": want a number 1..65535`},
		{":8080", `the host's port "": want a number 1..65535`},
		{"0:8080", `the host's port "0": want a number 1..65535`},
		{"8080:0", `the sandbox's port "0"`},
		{"8080:65536", `the sandbox's port "65536"`},
		{"x:8080", `the host's port "x"`},
		{"localhost:8080:8080", `address "localhost": want an IP address`},
		{"::1:8080:8080", "write an IPv6 address in brackets"},
		{"[127.0.0.1]:8080:8080", "brackets are for IPv6 addresses"},
		{"[::1:8080:8080", `address "[::1"`},
		{"[fe80::1%eth0]:8080:8080", "no names or zones"},
		{"1.2.3.4:8080:8080:1", "write an IPv6 address in brackets"},
	} {
		_, err := ParsePublish(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParsePublish(%q) error %v; want it to say %q", c.in, err, c.want)
		}
	}
}

func TestValidatePublish(t *testing.T) {
	p := Default()
	p.Network.Publish = []PublishEntry{
		{HostPort: 8080, SandboxPort: 8080},
		{HostAddress: "0.0.0.0", HostPort: 9090, SandboxPort: 3000},
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Network.Publish[0].HostAddress != DefaultPublishAddress {
		t.Errorf("no address: %q, want the default filled in", p.Network.Publish[0].HostAddress)
	}
	for _, c := range []struct {
		e    []PublishEntry
		want string
	}{
		{[]PublishEntry{{HostPort: 0, SandboxPort: 80}}, "network.publish[0].host_port: must be between 1 and 65535, not 0"},
		{[]PublishEntry{{HostPort: 80, SandboxPort: 70000}}, "network.publish[0].sandbox_port: must be between 1 and 65535, not 70000"},
		{[]PublishEntry{{HostAddress: "localhost", HostPort: 80, SandboxPort: 80}}, `network.publish[0].host_address: want an IPv4 or IPv6 address`},
		{[]PublishEntry{{HostAddress: "[::1]", HostPort: 80, SandboxPort: 80}}, `not "[::1]"`},
		{[]PublishEntry{{HostPort: 8080, SandboxPort: 3128}}, "network.publish[0].sandbox_port: 3128 is where hutch's egress proxy listens inside the sandbox"},
		{[]PublishEntry{{HostPort: 8080, SandboxPort: 1}, {HostAddress: "127.0.0.1", HostPort: 8080, SandboxPort: 2}}, "network.publish[1].host_port: 127.0.0.1:8080 is published twice (network.publish[0] listens there too)"},
	} {
		p := Default()
		p.Network.Publish = c.e
		err := p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v; want %q", c.e, err, c.want)
		}
	}
}
