package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/hutchsandbox/hutch/seclog"
)

// DNS header bits and codes (RFC 1035 §4.1.1).
const (
	dnsHeaderLen  = 12
	dnsFlagQR     = 1 << 15
	dnsOpcodeMask = 0xf << 11
	dnsFlagRD     = 1 << 8
	dnsRcodeForm  = 1 // FORMERR
	dnsRcodeRefus = 5 // REFUSED
)

// dnsQuery is what the proxy reads of a DNS query: its header and first
// question.
type dnsQuery struct {
	id       uint16
	flags    uint16
	name     string // presentation form, lowercased
	qtype    uint16
	qclass   uint16
	question []byte // the first question as sent: name, type, class
}

// parseDNSQuery reads the header and first question of a DNS message.
// ok is false for a message to ignore (shorter than a header, or a
// response); err is set when the header is readable but no question is.
func parseDNSQuery(b []byte) (q dnsQuery, ok bool, err error) {
	if len(b) < dnsHeaderLen {
		return q, false, nil
	}
	q.id = binary.BigEndian.Uint16(b[0:2])
	q.flags = binary.BigEndian.Uint16(b[2:4])
	if q.flags&dnsFlagQR != 0 {
		return q, false, nil
	}
	if binary.BigEndian.Uint16(b[4:6]) == 0 {
		return q, true, errors.New("no question")
	}
	off := dnsHeaderLen
	var name strings.Builder
	wire := 0
	for {
		if off >= len(b) {
			return q, true, errors.New("question name runs past the message")
		}
		l := int(b[off])
		if l&0xc0 != 0 {
			return q, true, errors.New("compressed or extended label in the question")
		}
		off++
		wire += l + 1
		if wire > 255 {
			return q, true, errors.New("question name longer than 255 bytes")
		}
		if l == 0 {
			break
		}
		if off+l > len(b) {
			return q, true, errors.New("question label runs past the message")
		}
		if name.Len() > 0 {
			name.WriteByte('.')
		}
		writeDNSLabel(&name, b[off:off+l])
		off += l
	}
	if off+4 > len(b) {
		return q, true, errors.New("question type and class missing")
	}
	q.qtype = binary.BigEndian.Uint16(b[off : off+2])
	q.qclass = binary.BigEndian.Uint16(b[off+2 : off+4])
	q.question = b[dnsHeaderLen : off+4]
	q.name = name.String()
	if q.name == "" {
		q.name = "."
	}
	return q, true, nil
}

// writeDNSLabel writes a label in presentation form, lowercased, with
// every byte other than letters, digits, '-' and '_' as \DDD.
func writeDNSLabel(sb *strings.Builder, label []byte) {
	for _, c := range label {
		switch {
		case c >= 'A' && c <= 'Z':
			sb.WriteByte(c + 'a' - 'A')
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			sb.WriteByte(c)
		default:
			fmt.Fprintf(sb, `\%03d`, c)
		}
	}
}

// dnsRefusal builds the answer to a query: REFUSED with the query's ID,
// opcode, RD bit and first question, or FORMERR without a question when
// the question cannot be read. It returns nil for a message to ignore.
func dnsRefusal(b []byte) (reply []byte, q dnsQuery, qerr error) {
	q, ok, qerr := parseDNSQuery(b)
	if !ok {
		return nil, q, nil
	}
	flags := uint16(dnsFlagQR) | q.flags&(dnsOpcodeMask|dnsFlagRD)
	qdcount := uint16(1)
	if qerr != nil {
		flags |= dnsRcodeForm
		qdcount = 0
	} else {
		flags |= dnsRcodeRefus
	}
	reply = make([]byte, dnsHeaderLen, dnsHeaderLen+len(q.question))
	binary.BigEndian.PutUint16(reply[0:2], q.id)
	binary.BigEndian.PutUint16(reply[2:4], flags)
	binary.BigEndian.PutUint16(reply[4:6], qdcount)
	if qerr == nil {
		reply = append(reply, q.question...)
	}
	return reply, q, qerr
}

var dnsTypeNames = map[uint16]string{
	1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT",
	28: "AAAA", 33: "SRV", 35: "NAPTR", 64: "SVCB", 65: "HTTPS", 255: "ANY",
}

func dnsTypeName(t uint16) string {
	if n, ok := dnsTypeNames[t]; ok {
		return n
	}
	return "TYPE" + strconv.Itoa(int(t))
}

// dnsMessage is the sentence for a refused lookup.
func dnsMessage(name string) string {
	return "DNS lookup of " + name + " refused: the sandbox resolves nothing itself; use the proxy (HTTP_PROXY/HTTPS_PROXY are set)"
}

// ServeDNS answers every DNS query arriving on pc REFUSED (the sandbox
// resolves nothing itself: the proxy resolves destinations on the host
// side) and records each as a blocked lookup. It closes pc and returns
// when ctx is done (nil) or pc fails.
func (p *Proxy) ServeDNS(ctx context.Context, pc net.PacketConn) error {
	stop := context.AfterFunc(ctx, func() { _ = pc.Close() })
	defer stop()
	defer pc.Close()
	buf := make([]byte, 4096)
	var backoff time.Duration
	failures := 0
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return fmt.Errorf("egress DNS: %w", err)
			}
			// Transient receive errors (a queued ICMP error, memory
			// pressure): back off and keep serving, but not forever.
			if failures++; failures > 100 {
				return fmt.Errorf("egress DNS: read: %w", err)
			}
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			if !sleepCtx(ctx, backoff) {
				return nil
			}
			continue
		}
		failures, backoff = 0, 0
		p.answerDNS(pc, from, buf[:n])
	}
}

func (p *Proxy) answerDNS(pc net.PacketConn, from net.Addr, pkt []byte) {
	defer func() {
		if r := recover(); r != nil {
			p.log.Error("egress DNS: panic answering a query", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	reply, q, qerr := dnsRefusal(pkt)
	if reply == nil {
		return
	}
	_ = pc.SetWriteDeadline(time.Now().Add(time.Second))
	_, _ = pc.WriteTo(reply, from)
	if qerr != nil {
		p.recordNote("malformed request", "egress DNS: malformed query: "+qerr.Error(), "dns", map[string]any{"id": int(q.id)})
		return
	}
	p.rec.Record(seclog.Event{
		Kind:    seclog.KindNetwork,
		Rule:    RuleDNS,
		Subject: q.name,
		Message: dnsMessage(q.name),
		Detail:  map[string]any{"proto": "dns", "qtype": dnsTypeName(q.qtype), "id": int(q.id)},
		Level:   slog.LevelWarn,
	})
}
