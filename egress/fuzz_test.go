package egress

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// The fuzzers drive the pure parsers the servers use: no sockets. Seeds
// live in testdata/fuzz/<FuzzName>/ and below.

func FuzzParseRequestHead(f *testing.F) {
	f.Add([]byte("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n"))
	f.Add([]byte("GET http://a.example/x?y HTTP/1.1\r\nConnection: X-A\r\nX-A: 1\r\nProxy-Authorization: b\r\n\r\n"))
	f.Add([]byte("POST http://[2001:db8::1]:8080/ HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc"))
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReaderSize(bytes.NewReader(data), 4096)
		head, err := readHead(br, 8<<10)
		if err != nil {
			head = data // parse the raw bytes too
		}
		if len(head) > 8<<10 && err == nil {
			t.Fatalf("head of %d bytes over the cap", len(head))
		}
		r, err := parseRequestHead(head)
		if err != nil {
			return
		}
		if r.port < 1 || r.port > 65535 {
			t.Fatalf("port %d", r.port)
		}
		if _, ok := parseDest(r.host); !ok && !strings.Contains(r.host, ":") {
			t.Fatalf("host %q does not parse", r.host)
		}
		if r.connect {
			return
		}
		fwd := string(r.forwardHead())
		if !strings.HasSuffix(fwd, "\r\n\r\n") || strings.Count(fwd, "\r\n\r\n") != 1 {
			t.Fatalf("forwarded head not terminated once: %q", fwd)
		}
		lines := strings.Split(strings.TrimSuffix(fwd, "\r\n\r\n"), "\r\n")
		for _, l := range lines {
			if strings.ContainsAny(l, "\r\n\x00") {
				t.Fatalf("forwarded line %q", l)
			}
			lower := strings.ToLower(l)
			if strings.HasPrefix(lower, "proxy-") || strings.HasPrefix(lower, "keep-alive:") {
				t.Fatalf("forwarded hop-by-hop header %q", l)
			}
		}
		if lines[1] != "Host: "+r.authority {
			t.Fatalf("Host line %q", lines[1])
		}
		if !strings.HasPrefix(r.path, "/") {
			t.Fatalf("path %q", r.path)
		}
	})
}

func FuzzSOCKS5Handshake(f *testing.F) {
	f.Add([]byte{5, 1, 0, 5, 1, 0, 3, 9, 'a', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', 1, 187})
	f.Add([]byte{5, 1, 0, 5, 1, 0, 1, 192, 0, 2, 1, 0, 80})
	f.Add([]byte{5, 1, 0, 5, 2, 0, 4, 0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 80})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		var w bytes.Buffer
		req, err := socksHandshake(r, &w)
		if w.Len() > 2 {
			t.Fatalf("wrote %d bytes", w.Len())
		}
		if err != nil {
			if se, ok := err.(*socksError); ok && se.reply != 0 && w.Len() != 2 {
				t.Fatalf("reply %d without the method selection", se.reply)
			}
			return
		}
		if req.host == "" || req.port < 0 || req.port > 65535 {
			t.Fatalf("request %+v", req)
		}
		consumed := len(data) - r.Len()
		if consumed < 10 {
			t.Fatalf("accepted a handshake of %d bytes", consumed)
		}
		// The display form of whatever name arrived is printable.
		if d := sanitizeHost(req.host); strings.ContainsFunc(d, func(c rune) bool { return c < 0x20 || c >= 0x7f }) {
			t.Fatalf("unprintable display %q", d)
		}
	})
}

func FuzzDNSQuery(f *testing.F) {
	f.Add(dnsQueryPacket(1, "a.example", 1))
	f.Add(dnsQueryPacket(0xffff, "x.y.z.example", 28))
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		reply, q, qerr := dnsRefusal(data)
		if reply == nil {
			return
		}
		if len(reply) < 12 || len(reply) > len(data) {
			t.Fatalf("reply of %d bytes to %d", len(reply), len(data))
		}
		if !bytes.Equal(reply[0:2], data[0:2]) {
			t.Fatal("ID not echoed")
		}
		flags := binary.BigEndian.Uint16(reply[2:4])
		if flags&0x8000 == 0 {
			t.Fatal("QR not set")
		}
		if qerr != nil {
			if len(reply) != 12 || flags&0xf != 1 {
				t.Fatalf("FORMERR reply %x", reply)
			}
			return
		}
		if flags&0xf != 5 || !bytes.Equal(reply[12:], data[12:len(reply)]) {
			t.Fatalf("REFUSED reply %x to %x", reply, data)
		}
		if strings.ContainsFunc(q.name, func(c rune) bool { return c < 0x21 || c >= 0x7f }) || len(q.name) > 1100 {
			t.Fatalf("name %q", q.name)
		}
	})
}
