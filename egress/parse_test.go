package egress

import (
	"bufio"
	"bytes"
	"strings"
	"testing"
)

func TestReadHead(t *testing.T) {
	long := "GET http://a.example/ HTTP/1.1\r\nX-Long: " + strings.Repeat("v", 6000) + "\r\n\r\n"
	for _, tc := range []struct {
		in, head, rest string
		err            bool
	}{
		{in: "CONNECT a.example:443 HTTP/1.1\r\n\r\nDATA", head: "CONNECT a.example:443 HTTP/1.1\r\n\r\n", rest: "DATA"},
		{in: "\r\n\r\nCONNECT a.example:443 HTTP/1.1\n\nX", head: "CONNECT a.example:443 HTTP/1.1\n\n", rest: "X"},
		{in: long + "tail", head: long, rest: "tail"},
		{in: "CONNECT a.example:443 HTTP/1.1\r\n", err: true},
		{in: strings.Repeat("\r\n", 10) + "GET", err: true},
	} {
		br := bufio.NewReaderSize(strings.NewReader(tc.in), 4096)
		head, err := readHead(br, 32<<10)
		if (err != nil) != tc.err {
			t.Errorf("readHead(%.40q): %v", tc.in, err)
			continue
		}
		if err != nil {
			continue
		}
		rest, _ := br.Peek(br.Buffered())
		if string(head) != tc.head || string(rest) != tc.rest {
			t.Errorf("readHead(%.40q) = %.60q rest %q", tc.in, head, rest)
		}
	}
	// A line longer than the bufio buffer whose CRLF straddles reads is
	// not mistaken for the end of the head.
	in := "GET http://a.example/ HTTP/1.1\r\nX: " + strings.Repeat("v", 4096-36) + "\r\nY: 1\r\n\r\n"
	head, err := readHead(bufio.NewReaderSize(strings.NewReader(in), 4096), 32<<10)
	if err != nil || string(head) != in {
		t.Errorf("straddling CRLF: %v, %d of %d bytes", err, len(head), len(in))
	}
	_, err = readHead(bufio.NewReaderSize(strings.NewReader(long), 4096), 1024)
	if err != errHeadTooLarge {
		t.Errorf("oversized: %v", err)
	}
}

func TestParseRequestHead(t *testing.T) {
	r, err := parseRequestHead([]byte("CONNECT [2001:db8::1]:8443 HTTP/1.1\r\nHost: x\r\n\r\n"))
	if err != nil || !r.connect || r.host != "2001:db8::1" || r.port != 8443 {
		t.Fatalf("CONNECT v6: %+v %v", r, err)
	}
	r, err = parseRequestHead([]byte("GET HTTP://A.example:8080?x=1 HTTP/1.0\r\n\r\n"))
	if err != nil || r.host != "A.example" || r.port != 8080 || r.path != "/?x=1" || r.authority != "A.example:8080" {
		t.Fatalf("absolute: %+v %v", r, err)
	}
	r, err = parseRequestHead([]byte("POST http://a.example/p HTTP/1.1\r\nConnection: close, X-Secret\r\nX-Secret: s\r\nContent-Length: 3\r\nProxy-Foo: 1\r\nUser-Agent: t\r\n\r\n"))
	if err != nil {
		t.Fatal(err)
	}
	fwd := string(r.forwardHead())
	want := "POST /p HTTP/1.1\r\nHost: a.example\r\nContent-Length: 3\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
	if fwd != want {
		t.Errorf("forwardHead:\n%q\nwant\n%q", fwd, want)
	}
	// Connection naming a framing header does not drop it.
	r, _ = parseRequestHead([]byte("POST http://a.example/ HTTP/1.1\r\nConnection: Content-Length\r\nContent-Length: 1\r\n\r\n"))
	if !strings.Contains(string(r.forwardHead()), "Content-Length: 1\r\n") {
		t.Error("Content-Length dropped")
	}
	for _, bad := range []string{
		"",
		"\r\n",
		"GET http://a.example/ HTTP/1.1\r\n",
		"GET  http://a.example/ HTTP/1.1\r\n\r\n",
		"GET http://a.example/ HTTP/1.1 \r\n\r\n",
		"G(T http://a.example/ HTTP/1.1\r\n\r\n",
		"GET http://a.example/\x01 HTTP/1.1\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nBad Name: x\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nX: a\rb\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nX: a\x00b\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nX: \x7f\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nno colon\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
		"GET http://a.example/ HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n",
		"GET http://a.example/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET http://a.example:0/ HTTP/1.1\r\n\r\n",
		"GET http://a.example:/ HTTP/1.1\r\n\r\n",
		"GET http://a.example:+80/ HTTP/1.1\r\n\r\n",
		"GET http://2001:db8::1/ HTTP/1.1\r\n\r\n",
		"GET http://[fe80::1%25eth0]/ HTTP/1.1\r\n\r\n",
		"GET http://[::1/ HTTP/1.1\r\n\r\n",
		"GET http:///x HTTP/1.1\r\n\r\n",
		"CONNECT :443 HTTP/1.1\r\n\r\n",
		"CONNECT http://a.example/ HTTP/1.1\r\n\r\n",
		"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
	} {
		if r, err := parseRequestHead([]byte(bad)); err == nil {
			t.Errorf("parseRequestHead(%q) = %+v, want an error", bad, r)
		}
	}
}

func TestSOCKSHandshakeParse(t *testing.T) {
	for _, tc := range []struct {
		in    []byte
		host  string
		port  int
		reply byte // expected socksError reply (0 with err: none)
		err   bool
		out   []byte
	}{
		{in: []byte{5, 1, 0, 5, 1, 0, 3, 9, 'a', '.', 'e', 'x', 'a', 'm', 'p', 'l', 'e', 1, 187}, host: "a.example", port: 443, out: []byte{5, 0}},
		{in: []byte{5, 2, 2, 0, 5, 1, 0, 1, 192, 0, 2, 1, 0, 80}, host: "192.0.2.1", port: 80, out: []byte{5, 0}},
		{in: append(append([]byte{5, 1, 0, 5, 1, 0, 4}, make([]byte, 15)...), 1, 0, 80), host: "::1", port: 80, out: []byte{5, 0}},
		{in: []byte{4, 1, 0, 80}, err: true},
		{in: []byte{5, 0}, err: true},
		{in: []byte{5, 1, 2}, err: true, out: []byte{5, 0xff}},
		{in: []byte{5, 1, 0, 5, 1, 0, 9}, err: true, reply: socksAtypNotSupported, out: []byte{5, 0}},
		{in: []byte{5, 1, 0, 5, 1, 0, 3, 0, 0, 80}, err: true, reply: socksGeneralFailure, out: []byte{5, 0}},
		{in: []byte{5, 1, 0, 4, 1, 0, 1}, err: true, reply: socksGeneralFailure, out: []byte{5, 0}},
		{in: []byte{5, 1, 0, 5, 1, 0, 3, 10, 'a'}, err: true, out: []byte{5, 0}},
	} {
		var w bytes.Buffer
		req, err := socksHandshake(bytes.NewReader(tc.in), &w)
		if (err != nil) != tc.err {
			t.Errorf("%v: %v", tc.in, err)
			continue
		}
		if !bytes.Equal(w.Bytes(), tc.out) {
			t.Errorf("%v: wrote %v, want %v", tc.in, w.Bytes(), tc.out)
		}
		if err != nil {
			se, _ := err.(*socksError)
			var reply byte
			if se != nil {
				reply = se.reply
			}
			if reply != tc.reply {
				t.Errorf("%v: reply %d, want %d (%v)", tc.in, reply, tc.reply, err)
			}
			continue
		}
		if req.host != tc.host || req.port != tc.port {
			t.Errorf("%v: %+v", tc.in, req)
		}
	}
}

func TestDNSRefusal(t *testing.T) {
	q := dnsQueryPacket(7, "a.Example", 1)
	reply, dq, err := dnsRefusal(q)
	if err != nil || dq.name != "a.example" || dq.qtype != 1 {
		t.Fatalf("%+v %v", dq, err)
	}
	if len(reply) != len(q) || reply[0] != 0 || reply[1] != 7 || reply[3]&0xf != 5 {
		t.Errorf("reply %x", reply)
	}
	// Ignored: short packets and responses.
	if r, _, _ := dnsRefusal([]byte{1, 2, 3}); r != nil {
		t.Error("answered a short packet")
	}
	resp := append([]byte(nil), q...)
	resp[2] |= 0x80
	if r, _, _ := dnsRefusal(resp); r != nil {
		t.Error("answered a response")
	}
	// Unreadable question: FORMERR, no question.
	bad := append([]byte(nil), q[:14]...)
	r, _, err := dnsRefusal(bad)
	if err == nil || len(r) != 12 || r[3]&0xf != 1 || r[5] != 0 {
		t.Errorf("truncated question: %x %v", r, err)
	}
	ptr := append(append([]byte(nil), q[:12]...), 0xc0, 0x0c, 0, 1, 0, 1)
	if _, _, err := dnsRefusal(ptr); err == nil {
		t.Error("accepted a compression pointer in the question")
	}
	// Odd bytes are escaped.
	odd := dnsQueryPacket(1, "a\x1b.b", 1)
	if _, dq, _ := dnsRefusal(odd); dq.name != `a\027.b` {
		t.Errorf("escaped name %q", dq.name)
	}
	root := []byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1}
	if _, dq, err := dnsRefusal(root); err != nil || dq.name != "." {
		t.Errorf("root query: %q %v", dq.name, err)
	}
}
