package egress

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

const wantBlockedBody = "hutch: network blocked by policy: destination evil.example:443 is not allowlisted. Do not retry or work around this; if the task needs it, ask the user to add it to the policy's network allowlist."

func TestConnectTunnel(t *testing.T) {
	_, port := startEcho(t)
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "local origin of the test", port)}}, nil)
	c, br, resp := connect(t, h.httpAddr, "127.0.0.1:"+strconv.Itoa(port))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	msg := strings.Repeat("hello through the tunnel ", 1000)
	go func() { _, _ = io.WriteString(c, msg) }()
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(br, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != msg {
		t.Fatal("echo mismatch")
	}
	c.Close()
	line := h.waitLog(`"level":"INFO"`, `"subject":"127.0.0.1:`+strconv.Itoa(port)+`"`, `"bytes_sent":25000`, `"bytes_received":25000`)
	for _, want := range []string{`"proto":"http-connect"`, `"reason":"local origin of the test"`, `"kind":"network"`} {
		if !strings.Contains(line, want) {
			t.Errorf("allowed event %s lacks %s", line, want)
		}
	}
	if s := h.rec.Summary(); len(s) != 0 {
		t.Errorf("allowed traffic in the summary: %q", s)
	}
}

func TestConnectSendsEarlyBytes(t *testing.T) {
	// A client that sends data right after its CONNECT, without waiting
	// for the 200, must not lose it.
	_, port := startEcho(t)
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "test", port)}}, nil)
	c := dialProxy(t, h.httpAddr)
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\nearly", port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	got := make([]byte, 5)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "early" {
		t.Fatalf("got %q, %v", got, err)
	}
}

func TestBlockedHTTP(t *testing.T) {
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("good.example", "test")}}, nil)
	h.resolver.strict = true
	for i := 0; i < 2; i++ {
		_, _, resp := connect(t, h.httpAddr, "evil.example:443")
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 403 {
			t.Fatalf("status %s", resp.Status)
		}
		if got := resp.Header.Get("X-Hutch-Block"); got != "network.allow" {
			t.Errorf("X-Hutch-Block = %q", got)
		}
		if got := resp.Header.Get("Content-Type"); got != "text/plain" {
			t.Errorf("Content-Type = %q", got)
		}
		if string(body) != wantBlockedBody {
			t.Errorf("body:\n%q\nwant\n%q", body, wantBlockedBody)
		}
	}
	line := h.waitLog(`"subject":"evil.example:443"`)
	var ev map[string]any
	if err := json.Unmarshal([]byte(line), &ev); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"level":   "WARN",
		"kind":    "network",
		"rule":    "network.allow",
		"subject": "evil.example:443",
		"msg":     "network blocked by policy: destination evil.example:443 not allowlisted",
		"sandbox": "sbx1",
	} {
		if ev[k] != want {
			t.Errorf("event %s = %v, want %q", k, ev[k], want)
		}
	}
	if d, _ := ev["detail"].(map[string]any); d["proto"] != "http-connect" {
		t.Errorf("detail = %v", ev["detail"])
	}
	got := h.rec.Summary()
	want := "hutch: network blocked by policy: destination evil.example:443 not allowlisted (2 attempts)"
	if len(got) != 1 || got[0] != want {
		t.Errorf("Summary = %q, want [%q]", got, want)
	}

	// Absolute-URI requests are blocked the same way, port 80 by default.
	resp, body := roundTrip(t, h.httpAddr, "GET http://Evil.Example./x HTTP/1.1\r\nHost: evil.example\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body, "destination evil.example:80 is not allowlisted") {
		t.Errorf("absolute GET: %s %q", resp.Status, body)
	}
	h.waitLog(`"subject":"evil.example:80"`, `"proto":"http"`)
	if h.resolver.calls.Load() != 0 {
		t.Error("the proxy resolved a name it does not allow")
	}
}

func TestInternalAddressRefused(t *testing.T) {
	_, port := startEcho(t)
	names := map[string][]string{
		"internal.example": {"127.0.0.1"},
		"meta.example":     {"169.254.169.254"},
		"mixed.example":    {"127.0.0.1", "::ffff:10.1.2.3"},
	}
	h := newHarness(t, Config{Allow: []policy.AllowEntry{
		allow("internal.example", "test", port),
		allow("meta.example", "test", 80),
		allow("*.example", "test", port),
	}}, names)
	_, _, resp := connect(t, h.httpAddr, "internal.example:"+strconv.Itoa(port))
	body, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("hutch: network blocked by policy: destination internal.example:%d resolves to internal address 127.0.0.1, which the allowlist does not name explicitly. Do not retry", port)
	if resp.StatusCode != 403 || !strings.HasPrefix(string(body), want) {
		t.Errorf("internal.example: %s %q", resp.Status, body)
	}
	h.waitLog(`"subject":"internal.example:`+strconv.Itoa(port)+`"`, `"why":"internal-address"`, `"address":"127.0.0.1"`)

	resp, body2 := roundTrip(t, h.httpAddr, "GET http://meta.example/latest/meta-data/ HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 403 || !strings.Contains(body2, "resolves to internal address 169.254.169.254") {
		t.Errorf("meta.example: %s %q", resp.Status, body2)
	}
	_, _, resp = connect(t, h.httpAddr, "mixed.example:"+strconv.Itoa(port))
	if resp.StatusCode != 403 {
		t.Errorf("mixed.example: %s", resp.Status)
	}
	if n := h.dialer.calls.Load(); n != 0 {
		t.Errorf("dialer called %d times for refused destinations", n)
	}

	// Naming the address explicitly lets the name through.
	h2 := newHarness(t, Config{Allow: []policy.AllowEntry{
		allow("internal.example", "test", port),
		allow("127.0.0.1", "the local origin, named explicitly", port),
	}}, names)
	c, br, resp := connect(t, h2.httpAddr, "internal.example:"+strconv.Itoa(port))
	if resp.StatusCode != 200 {
		t.Fatalf("internal.example with 127.0.0.1 allowlisted: %s", resp.Status)
	}
	io.WriteString(c, "ping")
	got := make([]byte, 4)
	if _, err := io.ReadFull(br, got); err != nil || string(got) != "ping" {
		t.Fatalf("echo: %q %v", got, err)
	}
}

func TestAbsoluteURIForwarded(t *testing.T) {
	type seen struct {
		host, uri string
		header    http.Header
		body      string
	}
	ch := make(chan seen, 4)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		ch <- seen{r.Host, r.RequestURI, r.Header.Clone(), string(b)}
		w.Header().Set("X-Origin", "yes")
		io.WriteString(w, "origin says hi")
	}))
	defer origin.Close()
	port := origin.Listener.Addr().(*net.TCPAddr).Port
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "test origin", port)}}, nil)
	auth := "127.0.0.1:" + strconv.Itoa(port)

	raw := "GET http://" + auth + "/path?q=1#frag HTTP/1.1\r\n" +
		"Host: somewhere-else.example\r\n" +
		"Proxy-Authorization: Basic c2VjcmV0\r\n" +
		"Proxy-Connection: keep-alive\r\n" +
		"Connection: X-Drop-Me, keep-alive\r\n" +
		"X-Drop-Me: 1\r\n" +
		"Keep-Alive: timeout=5\r\n" +
		"TE: trailers\r\n" +
		"Upgrade: websocket\r\n" +
		"X-Keep: kept\r\n\r\n"
	resp, body := roundTrip(t, h.httpAddr, raw)
	if resp.StatusCode != 200 || body != "origin says hi" || resp.Header.Get("X-Origin") != "yes" {
		t.Fatalf("response %s %q %v", resp.Status, body, resp.Header)
	}
	s := <-ch
	if s.host != auth || s.uri != "/path?q=1" {
		t.Errorf("origin saw Host %q URI %q", s.host, s.uri)
	}
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Drop-Me", "Keep-Alive", "Te", "Upgrade"} {
		if v := s.header.Get(k); v != "" {
			t.Errorf("origin saw %s: %s", k, v)
		}
	}
	if s.header.Get("X-Keep") != "kept" {
		t.Errorf("X-Keep lost: %v", s.header)
	}

	// Bodies pass, by length and chunked.
	resp, body = roundTrip(t, h.httpAddr, "POST http://"+auth+"/post HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello")
	if resp.StatusCode != 200 || body != "origin says hi" {
		t.Fatalf("POST: %s %q", resp.Status, body)
	}
	if s := <-ch; s.body != "hello" {
		t.Errorf("origin got body %q", s.body)
	}
	resp, _ = roundTrip(t, h.httpAddr, "POST http://"+auth+"/chunked HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("chunked POST: %s", resp.Status)
	}
	if s := <-ch; s.body != "hello world" {
		t.Errorf("origin got chunked body %q", s.body)
	}

	// Go's own client, configured with the proxy, works end to end.
	proxyURL, _ := http.NewRequest("GET", "http://"+h.httpAddr, nil)
	client := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL.URL)}, Timeout: 10 * time.Second}
	r, err := client.Get("http://" + auth + "/via-go")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if string(b) != "origin says hi" {
		t.Errorf("Go client got %q", b)
	}
	<-ch
	client.CloseIdleConnections()
	h.waitLog(`"proto":"http"`, `"level":"INFO"`, `"subject":"`+auth+`"`)
}

func TestMalformedRequests(t *testing.T) {
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("good.example", "test")}, MaxHeaderBytes: 1024}, nil)
	for _, raw := range []string{
		"GET / HTTP/1.1\r\nHost: good.example\r\n\r\n",
		"garbage\r\n\r\n",
		"GET https://good.example/ HTTP/1.1\r\n\r\n",
		"GET ftp://good.example/ HTTP/1.1\r\n\r\n",
		"CONNECT good.example HTTP/1.1\r\n\r\n",
		"CONNECT good.example:99999 HTTP/1.1\r\n\r\n",
		"CONNECT good.example:443 HTTP/2.0\r\n\r\n",
		"GET http://user:pw@good.example/ HTTP/1.1\r\n\r\n",
		"GET http://good.example/ HTTP/1.1\r\n folded: header\r\n\r\n",
		"GET http://good.example/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"GET http://good.example/ HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
		"GET http://bad host/ HTTP/1.1\r\n\r\n",
	} {
		resp, body := roundTrip(t, h.httpAddr, raw)
		if resp.StatusCode != 400 || !strings.HasPrefix(body, "hutch: egress proxy: bad request: ") {
			t.Errorf("%q: %s %q", raw, resp.Status, body)
		}
	}
	resp, _ := roundTrip(t, h.httpAddr, "GET http://good.example/ HTTP/1.1\r\nX-Big: "+strings.Repeat("a", 2000)+"\r\n\r\n")
	if resp.StatusCode != 431 {
		t.Errorf("oversized head: %s", resp.Status)
	}
	h.waitLog(`"subject":"malformed request"`, `"level":"INFO"`)
	if s := h.rec.Summary(); len(s) != 0 {
		t.Errorf("malformed requests reached the summary: %q", s)
	}
}

func TestUnreachable(t *testing.T) {
	ln := listen(t)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "test", port), allow("nx.example", "test")}}, nil)
	_, _, resp := connect(t, h.httpAddr, "127.0.0.1:"+strconv.Itoa(port))
	if resp.StatusCode != 502 {
		t.Errorf("closed port: %s", resp.Status)
	}
	_, _, resp = connect(t, h.httpAddr, "nx.example:443")
	if resp.StatusCode != 502 {
		t.Errorf("unresolvable: %s", resp.Status)
	}
	h.waitLog(`"subject":"nx.example:443"`, `"stage":"resolve"`)
}

func TestPanicRecovered(t *testing.T) {
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("boom.example", "test")}, Resolver: panicResolver{}}, nil)
	c := dialProxy(t, h.httpAddr)
	io.WriteString(c, "CONNECT boom.example:443 HTTP/1.1\r\n\r\n")
	if _, err := io.ReadAll(c); err != nil && !isReset(err) {
		t.Fatal(err)
	}
	// Still serving.
	_, _, resp := connect(t, h.httpAddr, "evil.example:443")
	if resp.StatusCode != 403 {
		t.Fatalf("after a panic: %s", resp.Status)
	}
}

type panicResolver struct{}

func (panicResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	panic("resolver exploded")
}

// socksGreet performs the no-auth greeting.
func socksGreet(t *testing.T, c net.Conn) {
	t.Helper()
	c.Write([]byte{5, 1, 0})
	var r [2]byte
	if _, err := io.ReadFull(c, r[:]); err != nil || r != [2]byte{5, 0} {
		t.Fatalf("greeting reply %v %v", r, err)
	}
}

func socksDomainRequest(cmd byte, host string, port int) []byte {
	b := []byte{5, cmd, 0, 3, byte(len(host))}
	b = append(b, host...)
	return binary.BigEndian.AppendUint16(b, uint16(port))
}

func readSOCKSReply(t *testing.T, c net.Conn) byte {
	t.Helper()
	var r [10]byte
	if _, err := io.ReadFull(c, r[:]); err != nil {
		t.Fatalf("reading the SOCKS5 reply: %v", err)
	}
	if r[0] != 5 || r[3] != 1 {
		t.Fatalf("reply %v", r)
	}
	return r[1]
}

func TestSOCKS5(t *testing.T) {
	_, port := startEcho(t)
	h := newHarness(t, Config{Allow: []policy.AllowEntry{
		allow("origin.example", "test", port),
		allow("127.0.0.1", "test", port),
	}}, map[string][]string{"origin.example": {"127.0.0.1"}})

	c := dialProxy(t, h.socks)
	socksGreet(t, c)
	c.Write(socksDomainRequest(1, "origin.example", port))
	if code := readSOCKSReply(t, c); code != 0 {
		t.Fatalf("domain CONNECT reply %d", code)
	}
	c.Write([]byte("socks echo"))
	got := make([]byte, 10)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "socks echo" {
		t.Fatalf("echo %q %v", got, err)
	}
	c.Close()
	h.waitLog(`"proto":"socks5"`, `"level":"INFO"`, `"subject":"origin.example:`+strconv.Itoa(port)+`"`)

	// IPv4 address type.
	c = dialProxy(t, h.socks)
	socksGreet(t, c)
	req := []byte{5, 1, 0, 1, 127, 0, 0, 1}
	c.Write(binary.BigEndian.AppendUint16(req, uint16(port)))
	if code := readSOCKSReply(t, c); code != 0 {
		t.Fatalf("IPv4 CONNECT reply %d", code)
	}

	// Blocked: "connection not allowed by ruleset".
	c = dialProxy(t, h.socks)
	socksGreet(t, c)
	c.Write(socksDomainRequest(1, "evil.example", 443))
	if code := readSOCKSReply(t, c); code != 2 {
		t.Fatalf("blocked CONNECT reply %d, want 2", code)
	}
	h.waitLog(`"subject":"evil.example:443"`, `"proto":"socks5"`, `"level":"WARN"`)

	// BIND and UDP ASSOCIATE: command not supported.
	for _, cmd := range []byte{2, 3} {
		c = dialProxy(t, h.socks)
		socksGreet(t, c)
		c.Write(socksDomainRequest(cmd, "origin.example", port))
		if code := readSOCKSReply(t, c); code != 7 {
			t.Fatalf("command %d reply %d, want 7", cmd, code)
		}
	}

	// A client that only offers username/password gets "no acceptable
	// methods".
	c = dialProxy(t, h.socks)
	c.Write([]byte{5, 1, 2})
	var r [2]byte
	if _, err := io.ReadFull(c, r[:]); err != nil || r != [2]byte{5, 0xff} {
		t.Fatalf("auth-only greeting: %v %v", r, err)
	}
	if s := h.rec.Summary(); len(s) != 1 || !strings.Contains(s[0], "evil.example:443 not allowlisted (1 attempt)") {
		t.Errorf("Summary %q", s)
	}
}

func dnsQueryPacket(id uint16, name string, qtype uint16) []byte {
	b := []byte{byte(id >> 8), byte(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0}
	for _, l := range strings.Split(name, ".") {
		b = append(b, byte(len(l)))
		b = append(b, l...)
	}
	b = append(b, 0, byte(qtype>>8), byte(qtype), 0, 1)
	return b
}

func TestDNSRefused(t *testing.T) {
	h := newHarness(t, Config{}, nil)
	c, err := net.Dial("udp", h.dnsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	q := dnsQueryPacket(0xbeef, "Evil.Example", 28)
	c.Write([]byte{1, 2, 3}) // garbage first: ignored
	c.Write(q)
	buf := make([]byte, 512)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatal(err)
	}
	r := buf[:n]
	if binary.BigEndian.Uint16(r[0:2]) != 0xbeef {
		t.Errorf("reply ID %x", r[0:2])
	}
	flags := binary.BigEndian.Uint16(r[2:4])
	if flags&0x8000 == 0 || flags&0xf != 5 || flags&0x0100 == 0 {
		t.Errorf("reply flags %04x: want QR, RD and RCODE 5", flags)
	}
	if binary.BigEndian.Uint16(r[4:6]) != 1 || string(r[12:]) != string(q[12:]) {
		t.Errorf("question not echoed: %x", r)
	}
	line := h.waitLog(`"kind":"network"`, `"subject":"evil.example"`)
	for _, want := range []string{`"rule":"network.dns"`, `"proto":"dns"`, `"qtype":"AAAA"`, `"level":"WARN"`,
		`DNS lookup of evil.example refused: the sandbox resolves nothing itself; use the proxy (HTTP_PROXY/HTTPS_PROXY are set)`} {
		if !strings.Contains(line, want) {
			t.Errorf("DNS event %s lacks %s", line, want)
		}
	}
}

func TestSlowlorisDropped(t *testing.T) {
	h := newHarness(t, Config{HeadTimeout: 300 * time.Millisecond}, nil)
	slow := dialProxy(t, h.httpAddr)
	dropped := make(chan time.Duration, 1)
	start := time.Now()
	go func() {
		req := "CONNECT evil.example:443 HTTP/1.1\r\n\r\n"
		for i := 0; i < len(req); i++ {
			if _, err := slow.Write([]byte{req[i]}); err != nil {
				break
			}
			time.Sleep(time.Second)
			if i > 3 {
				break // must have been dropped long before
			}
		}
		dropped <- time.Since(start)
	}()
	// Another client is served meanwhile, promptly.
	t0 := time.Now()
	_, _, resp := connect(t, h.httpAddr, "evil.example:443")
	if resp.StatusCode != 403 || time.Since(t0) > 250*time.Millisecond {
		t.Errorf("concurrent client: %s after %v", resp.Status, time.Since(t0))
	}
	// The slow client sees the connection end well before its request does.
	slow.SetReadDeadline(time.Now().Add(3 * time.Second))
	b, err := io.ReadAll(slow)
	if err != nil && !isReset(err) {
		t.Fatalf("slow client: %v", err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("slow client dropped after %v", el)
	}
	if !strings.HasPrefix(string(b), "HTTP/1.1 408") {
		t.Errorf("slow client got %q", b)
	}
	slow.Close() // ends the writer at its next byte
	<-dropped
	h.waitLog(`request head not received within 300ms`)
}

func TestManyBlockedConcurrent(t *testing.T) {
	const n = 1000
	h := newHarness(t, Config{MaxConns: n + 24}, nil)
	var wg sync.WaitGroup
	errs := make(chan string, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			c, err := net.DialTimeout("tcp", h.httpAddr, 10*time.Second)
			if err != nil {
				errs <- err.Error()
				return
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(20 * time.Second))
			io.WriteString(c, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
			resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: "CONNECT"})
			if err != nil {
				errs <- err.Error()
				return
			}
			if resp.StatusCode != 403 {
				errs <- resp.Status
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	bad := 0
	for e := range errs {
		if bad++; bad <= 5 {
			t.Error(e)
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d requests did not get 403", bad, n)
	}
	t0 := time.Now()
	_, _, resp := connect(t, h.httpAddr, "evil.example:443")
	if resp.StatusCode != 403 || time.Since(t0) > time.Second {
		t.Errorf("after the burst: %s in %v", resp.Status, time.Since(t0))
	}
	s := h.rec.Summary()
	if len(s) != 1 || !strings.HasSuffix(s[0], fmt.Sprintf("(%d attempts)", n+1)) {
		t.Errorf("Summary %q", s)
	}
}

func TestMaxConns(t *testing.T) {
	h := newHarness(t, Config{MaxConns: 2, HeadTimeout: 5 * time.Second}, nil)
	// Two clients hold connections open without finishing a request.
	for i := 0; i < 2; i++ {
		c := dialProxy(t, h.httpAddr)
		io.WriteString(c, "CONNECT ")
	}
	time.Sleep(100 * time.Millisecond) // let the proxy accept both
	resp, body := roundTrip(t, h.httpAddr, "CONNECT evil.example:443 HTTP/1.1\r\n\r\n")
	if resp.StatusCode != 503 || !strings.Contains(body, "busy") {
		t.Fatalf("third connection: %s %q", resp.Status, body)
	}
	// SOCKS5 counts against the same limit.
	c := dialProxy(t, h.socks)
	socksGreet(t, c)
	c.Write(socksDomainRequest(1, "evil.example", 443))
	if code := readSOCKSReply(t, c); code != 1 {
		t.Errorf("SOCKS5 over the limit: reply %d, want 1", code)
	}
	h.waitLog(`"subject":"connection limit"`, `"level":"WARN"`)
}

func TestIdleTimeout(t *testing.T) {
	_, port := startEcho(t)
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "test", port)}, IdleTimeout: 300 * time.Millisecond}, nil)
	c, br, resp := connect(t, h.httpAddr, "127.0.0.1:"+strconv.Itoa(port))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	// Busy for three idle periods: stays open.
	buf := make([]byte, 1)
	for i := 0; i < 9; i++ {
		c.Write([]byte{'x'})
		if _, err := io.ReadFull(br, buf); err != nil {
			t.Fatalf("tunnel closed while busy: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Then idle: closed.
	t0 := time.Now()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); err == nil {
		t.Fatal("read a byte from an idle tunnel")
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("idle tunnel closed after %v", el)
	}
}

func TestShutdownLeaksNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	_, port := startEcho(t)
	h := newHarness(t, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "test", port)}}, nil)
	// Leave an open tunnel, a half-sent request and an idle SOCKS client.
	c, _, resp := connect(t, h.httpAddr, "127.0.0.1:"+strconv.Itoa(port))
	if resp.StatusCode != 200 {
		t.Fatal(resp.Status)
	}
	half := dialProxy(t, h.httpAddr)
	io.WriteString(half, "GET http://")
	idle := dialProxy(t, h.socks)
	time.Sleep(50 * time.Millisecond)
	t0 := time.Now()
	h.stop()
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("stop took %v", el)
	}
	for _, conn := range []net.Conn{c, half, idle} {
		conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.ReadAll(conn); err != nil && !isReset(err) {
			t.Errorf("connection not closed by shutdown: %v", err)
		}
		conn.Close()
	}
	// +2: the echo server's accept loop and its one connection, which
	// end at cleanup.
	settleGoroutines(t, before+2)
}

func TestServeReturnsWhenListenerClosed(t *testing.T) {
	p, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t)
	done := make(chan error, 1)
	go func() { done <- p.ServeHTTP(context.Background(), ln) }()
	time.Sleep(20 * time.Millisecond)
	ln.Close()
	select {
	case err := <-done:
		if err == nil {
			t.Error("ServeHTTP returned nil for a listener closed under it")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ServeHTTP did not return")
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{Allow: []policy.AllowEntry{{Host: "", Reason: "x"}}},
		{Allow: []policy.AllowEntry{{Host: "a.example", Ports: []int{0}, Reason: "x"}}},
		{Allow: []policy.AllowEntry{{Host: "*.", Reason: "x"}}},
		{DialTimeout: -1},
		{MaxConns: -1},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestEnv(t *testing.T) {
	env := Env(3128, 1080)
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := m[k]; dup {
			t.Errorf("duplicate %s", k)
		}
		m[k] = v
	}
	for k, want := range map[string]string{
		"HTTP_PROXY":             "http://127.0.0.1:3128",
		"HTTPS_PROXY":            "http://127.0.0.1:3128",
		"http_proxy":             "http://127.0.0.1:3128",
		"https_proxy":            "http://127.0.0.1:3128",
		"ALL_PROXY":              "socks5h://127.0.0.1:1080",
		"all_proxy":              "socks5h://127.0.0.1:1080",
		"NO_PROXY":               "localhost,127.0.0.1,::1",
		"no_proxy":               "localhost,127.0.0.1,::1",
		"NODE_USE_ENV_PROXY":     "1",
		"npm_config_proxy":       "http://127.0.0.1:3128",
		"npm_config_https_proxy": "http://127.0.0.1:3128",
		"PIP_PROXY":              "http://127.0.0.1:3128",
		"CARGO_HTTP_PROXY":       "http://127.0.0.1:3128",
	} {
		if m[k] != want {
			t.Errorf("%s = %q, want %q", k, m[k], want)
		}
	}
}
