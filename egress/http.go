package egress

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Request head errors.
var (
	errHeadTooLarge = errors.New("request head too large")
	errHeadEOF      = errors.New("connection closed before the request head ended")
)

// maxLeadingBlankLines is how many empty lines readHead skips before the
// request line (RFC 9112 §2.2 asks servers to ignore at least one).
const maxLeadingBlankLines = 4

// readHead reads an HTTP request head from br: everything up to and
// including the empty line that ends it, at most max bytes. Bytes after
// the head stay in br.
func readHead(br *bufio.Reader, max int) ([]byte, error) {
	var head []byte
	blank := 0
	midLine := false // the last read ended inside a line longer than br's buffer
	for {
		line, err := br.ReadSlice('\n')
		if len(head)+len(line) > max {
			return head, errHeadTooLarge
		}
		head = append(head, line...)
		continued := midLine
		midLine = err == bufio.ErrBufferFull
		switch {
		case midLine:
			continue
		case err == io.EOF:
			if len(head) == 0 {
				return nil, io.EOF
			}
			return head, errHeadEOF
		case err != nil:
			return head, err
		}
		// head ends with a complete line.
		if !continued && (bytes.Equal(line, []byte("\r\n")) || bytes.Equal(line, []byte("\n"))) {
			if len(head) == len(line) {
				// Blank lines before the request line.
				if blank++; blank > maxLeadingBlankLines {
					return head, errors.New("too many empty lines before the request line")
				}
				head = head[:0]
				continue
			}
			// An empty line after the request line ends the head.
			return head, nil
		}
	}
}

// headerField is one header line of a request.
type headerField struct {
	name  string // as sent
	value string // trimmed of surrounding blanks
}

// requestHead is a parsed HTTP proxy request.
type requestHead struct {
	method  string
	target  string // the request target as sent
	proto   string // "HTTP/1.0" or "HTTP/1.1"
	connect bool   // CONNECT host:port

	host      string // destination host as sent, brackets removed
	port      int    // destination port
	authority string // host[:port] as the Host header of a forwarded request
	path      string // origin-form target of a forwarded request

	headers []headerField
}

// hopByHop are the headers that describe one connection, not the request:
// a proxy never forwards them (RFC 9110 §7.6.1). Transfer-Encoding is
// absent on purpose: the proxy forwards the body as it came, so its
// framing stays.
var hopByHop = map[string]bool{
	"connection":          true,
	"keep-alive":          true,
	"proxy-connection":    true,
	"proxy-authenticate":  true,
	"proxy-authorization": true,
	"te":                  true,
	"trailer":             true,
	"upgrade":             true,
}

// parseRequestHead parses a request head as read by readHead. It accepts
// CONNECT host:port and absolute http:// URIs with HTTP/1.0 or HTTP/1.1,
// and refuses anything ambiguous: folded or malformed header lines,
// control characters, several Host or Content-Length headers that
// disagree, Content-Length with Transfer-Encoding, a transfer coding other
// than chunked.
func parseRequestHead(head []byte) (*requestHead, error) {
	lines, err := splitHeadLines(head)
	if err != nil {
		return nil, err
	}
	if len(lines) == 0 {
		return nil, errors.New("empty request")
	}
	r := &requestHead{}
	if err := r.parseRequestLine(lines[0]); err != nil {
		return nil, err
	}
	var contentLength, transferEncoding []string
	hosts := 0
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return nil, errors.New("folded header lines are not supported")
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return nil, fmt.Errorf("header line without a colon: %s", quoteShort(l))
		}
		if !isToken(name) {
			return nil, fmt.Errorf("invalid header name %s", quoteShort(name))
		}
		value = strings.Trim(value, " \t")
		for i := 0; i < len(value); i++ {
			if c := value[i]; c < 0x20 && c != '\t' || c == 0x7f {
				return nil, fmt.Errorf("control character in header %s", quoteShort(name))
			}
		}
		switch strings.ToLower(name) {
		case "content-length":
			contentLength = append(contentLength, value)
		case "transfer-encoding":
			transferEncoding = append(transferEncoding, value)
		case "host":
			hosts++
		}
		r.headers = append(r.headers, headerField{name: name, value: value})
	}
	if hosts > 1 {
		return nil, errors.New("more than one Host header")
	}
	if len(transferEncoding) > 0 {
		if len(contentLength) > 0 {
			return nil, errors.New("both Content-Length and Transfer-Encoding")
		}
		if len(transferEncoding) > 1 || !strings.EqualFold(transferEncoding[0], "chunked") {
			return nil, errors.New("unsupported Transfer-Encoding (only chunked)")
		}
		if r.proto == "HTTP/1.0" {
			return nil, errors.New("Transfer-Encoding in an HTTP/1.0 request")
		}
	}
	if len(contentLength) > 0 {
		for _, v := range contentLength {
			if v != contentLength[0] {
				return nil, errors.New("conflicting Content-Length headers")
			}
		}
		if !isDigits(contentLength[0]) || len(contentLength[0]) > 18 {
			return nil, errors.New("invalid Content-Length")
		}
	}
	return r, nil
}

// splitHeadLines splits a head into lines without their CRLF or LF; a CR
// anywhere else is an error.
func splitHeadLines(head []byte) ([]string, error) {
	s := string(head)
	var lines []string
	for s != "" {
		i := strings.IndexByte(s, '\n')
		if i < 0 {
			return nil, errors.New("request head does not end with an empty line")
		}
		line := strings.TrimSuffix(s[:i], "\r")
		if strings.IndexByte(line, '\r') >= 0 {
			return nil, errors.New("stray carriage return in request head")
		}
		if strings.IndexByte(line, 0) >= 0 {
			return nil, errors.New("NUL byte in request head")
		}
		lines = append(lines, line)
		s = s[i+1:]
	}
	if len(lines) == 0 || lines[len(lines)-1] != "" {
		return nil, errors.New("request head does not end with an empty line")
	}
	return lines[:len(lines)-1], nil
}

func (r *requestHead) parseRequestLine(line string) error {
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || strings.Contains(proto, " ") {
		return fmt.Errorf("malformed request line %s", quoteShort(line))
	}
	if !isToken(method) {
		return fmt.Errorf("invalid method %s", quoteShort(method))
	}
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return fmt.Errorf("unsupported protocol version %s (HTTP/1.0 and HTTP/1.1 only)", quoteShort(proto))
	}
	if target == "" {
		return errors.New("empty request target")
	}
	for i := 0; i < len(target); i++ {
		if c := target[i]; c <= 0x20 || c >= 0x7f {
			return errors.New("invalid character in request target")
		}
	}
	r.method, r.target, r.proto = method, target, proto
	if method == "CONNECT" {
		r.connect = true
		host, port, err := splitAuthority(target, 0)
		if err != nil {
			return fmt.Errorf("CONNECT target %s: %v", quoteShort(target), err)
		}
		r.host, r.port, r.authority = host, port, target
		return nil
	}
	scheme, rest, ok := strings.Cut(target, "://")
	if !ok {
		if strings.HasPrefix(target, "/") || target == "*" {
			return errors.New("this is a proxy: the request target must be an absolute http:// URI (or use CONNECT)")
		}
		return fmt.Errorf("request target %s is not an absolute http:// URI", quoteShort(target))
	}
	switch strings.ToLower(scheme) {
	case "http":
	case "https":
		return errors.New("https:// URIs must go through CONNECT")
	default:
		return fmt.Errorf("unsupported URI scheme %s (http only; use CONNECT for anything else)", quoteShort(scheme))
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	authority, path := rest[:end], rest[end:]
	if strings.Contains(authority, "@") {
		return errors.New("credentials in the request URI are not supported")
	}
	host, port, err := splitAuthority(authority, 80)
	if err != nil {
		return fmt.Errorf("URI authority %s: %v", quoteShort(authority), err)
	}
	if i := strings.IndexByte(path, '#'); i >= 0 {
		path = path[:i]
	}
	if path == "" || path[0] == '?' {
		path = "/" + path
	}
	r.host, r.port, r.authority, r.path = host, port, authority, path
	return nil
}

// splitAuthority splits "host:port", "[v6]:port" or, when defaultPort is
// not 0, a bare host. The host must be a DNS name or an IP address.
func splitAuthority(a string, defaultPort int) (host string, port int, err error) {
	var portStr string
	switch {
	case strings.HasPrefix(a, "["):
		end := strings.IndexByte(a, ']')
		if end < 0 {
			return "", 0, errors.New("unclosed [")
		}
		host, rest := a[1:end], a[end+1:]
		if rest != "" {
			if rest[0] != ':' {
				return "", 0, errors.New("junk after ]")
			}
			portStr = rest[1:]
		}
		d, ok := parseDest("[" + host + "]")
		if !ok || !d.isAddr {
			return "", 0, errors.New("invalid IPv6 address")
		}
		a = host
	default:
		i := strings.LastIndexByte(a, ':')
		if i >= 0 {
			if strings.IndexByte(a[:i], ':') >= 0 {
				return "", 0, errors.New("IPv6 addresses must be in brackets")
			}
			a, portStr = a[:i], a[i+1:]
			if portStr == "" {
				return "", 0, errors.New("empty port")
			}
		}
		if _, ok := parseDest(a); !ok {
			return "", 0, errors.New("invalid host")
		}
	}
	if portStr == "" {
		if defaultPort == 0 {
			return "", 0, errors.New("missing port")
		}
		return a, defaultPort, nil
	}
	if !isDigits(portStr) || len(portStr) > 5 {
		return "", 0, errors.New("invalid port")
	}
	port, _ = strconv.Atoi(portStr)
	if port < 1 || port > 65535 {
		return "", 0, errors.New("port out of range")
	}
	return a, port, nil
}

// forwardHead is the head sent to the origin for a forwarded request:
// origin-form target, Host set to the URI's authority (whatever Host the
// client sent), hop-by-hop headers, headers named by Connection and every
// Proxy-* header removed, and Connection: close.
func (r *requestHead) forwardHead() []byte {
	drop := map[string]bool{}
	for _, h := range r.headers {
		if strings.EqualFold(h.name, "Connection") || strings.EqualFold(h.name, "Proxy-Connection") {
			for _, tok := range strings.Split(h.value, ",") {
				if tok = strings.TrimSpace(tok); tok != "" {
					drop[strings.ToLower(tok)] = true
				}
			}
		}
	}
	var b bytes.Buffer
	b.WriteString(r.method + " " + r.path + " " + r.proto + "\r\n")
	b.WriteString("Host: " + r.authority + "\r\n")
	for _, h := range r.headers {
		lower := strings.ToLower(h.name)
		framing := lower == "transfer-encoding" || lower == "content-length"
		if !framing && (hopByHop[lower] || drop[lower]) || lower == "host" || strings.HasPrefix(lower, "proxy-") {
			// The body is forwarded as it came, so its framing headers
			// stay even when Connection names them.
			continue
		}
		b.WriteString(h.name + ": " + h.value + "\r\n")
	}
	b.WriteString("Connection: close\r\n\r\n")
	return b.Bytes()
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// isToken reports whether s is an RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' {
			continue
		}
		if !strings.ContainsRune("!#$%&'*+-.^_`|~", rune(c)) {
			return false
		}
	}
	return true
}

// quoteShort quotes s for an error message, cut to 64 bytes.
func quoteShort(s string) string {
	if len(s) > 64 {
		return strconv.Quote(s[:64]) + "..."
	}
	return strconv.Quote(s)
}

// writeTimeout bounds writing the proxy's own responses.
const writeTimeout = 5 * time.Second

// writeResponse writes a complete response with a text/plain body and
// Connection: close.
func writeResponse(c net.Conn, status int, reason string, extra []string, body string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, reason)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	fmt.Fprintf(&b, "Content-Type: text/plain\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", len(body), body)
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := io.WriteString(c, b.String())
	return err
}

// lingerClose lets the client read what was written before the connection
// closes: it half-closes, then reads and discards (at most 256 KiB, for at
// most a second) until the client closes, so that unread request bytes do
// not turn the close into a reset that loses the response.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 256<<10))
	_ = c.Close()
}

func (p *Proxy) httpError(c net.Conn, status int, reason, body string) {
	_ = writeResponse(c, status, reason, nil, body+"\n")
	lingerClose(c)
}

func (p *Proxy) handleHTTP(ctx context.Context, c net.Conn) {
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(p.cfg.HeadTimeout))
	br := bufio.NewReaderSize(c, 4096)
	head, err := readHead(br, p.cfg.MaxHeaderBytes)
	if err != nil {
		switch {
		case err == io.EOF:
			// Connected and closed without a byte: nothing to say.
		case errors.Is(err, errHeadTooLarge):
			p.recordMalformed("http", c, fmt.Errorf("request head larger than %d bytes", p.cfg.MaxHeaderBytes))
			p.httpError(c, 431, "Request Header Fields Too Large", fmt.Sprintf("hutch: egress proxy: request head larger than %d bytes", p.cfg.MaxHeaderBytes))
		case isTimeout(err):
			p.recordMalformed("http", c, fmt.Errorf("request head not received within %s", p.cfg.HeadTimeout))
			if len(head) > 0 {
				p.httpError(c, 408, "Request Timeout", fmt.Sprintf("hutch: egress proxy: request head not received within %s", p.cfg.HeadTimeout))
			}
		default:
			if len(head) > 0 {
				p.recordMalformed("http", c, err)
			}
		}
		return
	}
	req, err := parseRequestHead(head)
	if err != nil {
		p.recordMalformed("http", c, err)
		p.httpError(c, 400, "Bad Request", "hutch: egress proxy: bad request: "+err.Error())
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	proto := "http"
	if req.connect {
		proto = "http-connect"
	}
	t, err := p.vet(ctx, req.host, req.port)
	if err != nil {
		p.httpRefuse(c, t, proto, err)
		return
	}
	up, addr, err := p.dial(ctx, t)
	if err != nil {
		p.httpRefuse(c, t, proto, err)
		return
	}
	defer up.Close()
	if req.connect {
		_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := io.WriteString(c, req.proto+" 200 Connection established\r\n\r\n"); err != nil {
			return
		}
		_ = c.SetWriteDeadline(time.Time{})
	} else {
		_ = up.SetWriteDeadline(time.Now().Add(p.cfg.IdleTimeout))
		if _, err := up.Write(req.forwardHead()); err != nil {
			p.recordUnreachable(t, proto, &reachError{dest: t.dest(), stage: "send to", err: err})
			p.httpError(c, 502, "Bad Gateway", "hutch: egress proxy: cannot send the request to "+t.dest()+": "+err.Error())
			return
		}
	}
	sent, received := p.tunnel(ctx, c, br, up, !req.connect)
	p.recordAllowed(t, proto, addr.String(), sent, received, start)
}

// httpRefuse answers a refused or unreachable destination.
func (p *Proxy) httpRefuse(c net.Conn, t *target, proto string, err error) {
	var be *blockError
	var re *reachError
	switch {
	case errors.As(err, &be):
		p.recordBlock(be, proto)
		_ = writeResponse(c, 403, "Forbidden", []string{"X-Hutch-Block: " + RuleAllow}, be.callerText())
		lingerClose(c)
	case errors.As(err, &re):
		p.recordUnreachable(t, proto, re)
		if re.timeout {
			p.httpError(c, 504, "Gateway Timeout", "hutch: egress proxy: "+re.Error())
		} else {
			p.httpError(c, 502, "Bad Gateway", "hutch: egress proxy: "+re.Error())
		}
	default:
		p.httpError(c, 502, "Bad Gateway", "hutch: egress proxy: "+err.Error())
	}
}

// busyHTTP answers a connection over MaxConns with 503.
func (p *Proxy) busyHTTP(ctx context.Context, c net.Conn) {
	_ = writeResponse(c, 503, "Service Unavailable", []string{"Retry-After: 1"},
		fmt.Sprintf("hutch: egress proxy busy: %d connections already open (the limit); retry after some close\n", p.cfg.MaxConns))
	lingerClose(c)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
