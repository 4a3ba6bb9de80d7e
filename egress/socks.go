package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// SOCKS5 constants (RFC 1928).
const (
	socksVersion      = 5
	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff
	socksCmdConnect   = 0x01
	socksAtypIPv4     = 0x01
	socksAtypDomain   = 0x03
	socksAtypIPv6     = 0x04

	socksSucceeded        = 0x00
	socksGeneralFailure   = 0x01
	socksNotAllowed       = 0x02 // connection not allowed by ruleset
	socksHostUnreachable  = 0x04
	socksConnRefused      = 0x05
	socksCmdNotSupported  = 0x07
	socksAtypNotSupported = 0x08
)

// socksRequest is a parsed SOCKS5 request.
type socksRequest struct {
	cmd  byte
	atyp byte
	host string // a name as sent, or an address in its standard form
	port int
}

// socksError is a handshake failure; reply is the reply code to send, or 0
// when no reply can be sent (the greeting failed).
type socksError struct {
	reply byte
	msg   string
}

func (e *socksError) Error() string { return e.msg }

// socksHandshake reads a SOCKS5 greeting from r, answers it on w (no
// authentication, or "no acceptable methods"), and reads the request that
// follows. It reads exactly the handshake's bytes, so what the client
// sends after it stays unread. The request it returns may still be one
// the proxy refuses: its command is not checked here beyond parsing. A
// *socksError says which reply, if any, to send.
func socksHandshake(r io.Reader, w io.Writer) (socksRequest, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return socksRequest{}, err
	}
	if hdr[0] != socksVersion {
		return socksRequest{}, &socksError{msg: fmt.Sprintf("SOCKS version %d (only 5 is supported)", hdr[0])}
	}
	if hdr[1] == 0 {
		return socksRequest{}, &socksError{msg: "SOCKS5 greeting offers no authentication method"}
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return socksRequest{}, err
	}
	noAuth := false
	for _, m := range methods {
		if m == socksNoAuth {
			noAuth = true
		}
	}
	if !noAuth {
		_, _ = w.Write([]byte{socksVersion, socksNoAcceptable})
		return socksRequest{}, &socksError{msg: "SOCKS5 client does not offer \"no authentication\""}
	}
	if _, err := w.Write([]byte{socksVersion, socksNoAuth}); err != nil {
		return socksRequest{}, err
	}
	var req [4]byte
	if _, err := io.ReadFull(r, req[:]); err != nil {
		return socksRequest{}, err
	}
	if req[0] != socksVersion {
		return socksRequest{}, &socksError{reply: socksGeneralFailure, msg: fmt.Sprintf("SOCKS5 request with version %d", req[0])}
	}
	sr := socksRequest{cmd: req[1], atyp: req[3]}
	switch sr.atyp {
	case socksAtypIPv4:
		var a [4]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return sr, err
		}
		sr.host = netip.AddrFrom4(a).String()
	case socksAtypIPv6:
		var a [16]byte
		if _, err := io.ReadFull(r, a[:]); err != nil {
			return sr, err
		}
		sr.host = netip.AddrFrom16(a).String()
	case socksAtypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return sr, err
		}
		if l[0] == 0 {
			return sr, &socksError{reply: socksGeneralFailure, msg: "SOCKS5 request with an empty domain name"}
		}
		name := make([]byte, l[0])
		if _, err := io.ReadFull(r, name); err != nil {
			return sr, err
		}
		sr.host = string(name)
	default:
		return sr, &socksError{reply: socksAtypNotSupported, msg: fmt.Sprintf("SOCKS5 address type %d", sr.atyp)}
	}
	var port [2]byte
	if _, err := io.ReadFull(r, port[:]); err != nil {
		return sr, err
	}
	sr.port = int(binary.BigEndian.Uint16(port[:]))
	return sr, nil
}

// socksReply is a reply with the bound address 0.0.0.0:0: the proxy does
// not tell the sandbox which host address it connected from.
func socksReply(code byte) []byte {
	return []byte{socksVersion, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0}
}

func writeSOCKSReply(c net.Conn, code byte) error {
	_ = c.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := c.Write(socksReply(code))
	return err
}

func (p *Proxy) handleSOCKS5(ctx context.Context, c net.Conn) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(p.cfg.HeadTimeout))
	req, err := socksHandshake(c, c)
	if err != nil {
		var se *socksError
		switch {
		case errors.As(err, &se):
			p.recordMalformed("socks5", c, err)
			if se.reply != 0 {
				_ = writeSOCKSReply(c, se.reply)
			}
			lingerClose(c)
		case errors.Is(err, io.EOF):
			// Closed before a byte, or between greeting and request.
		case isTimeout(err):
			p.recordMalformed("socks5", c, fmt.Errorf("handshake not completed within %s", p.cfg.HeadTimeout))
		default:
			p.recordMalformed("socks5", c, err)
		}
		return
	}
	if req.cmd != socksCmdConnect {
		p.recordMalformed("socks5", c, fmt.Errorf("SOCKS5 command %d (only CONNECT is supported)", req.cmd))
		_ = writeSOCKSReply(c, socksCmdNotSupported)
		lingerClose(c)
		return
	}
	_ = c.SetDeadline(time.Time{})
	t, err := p.vet(ctx, req.host, req.port)
	if err == nil {
		var up net.Conn
		var addr netip.AddrPort
		up, addr, err = p.dial(ctx, t)
		if err == nil {
			defer up.Close()
			if writeSOCKSReply(c, socksSucceeded) != nil {
				return
			}
			_ = c.SetWriteDeadline(time.Time{})
			sent, received := p.tunnel(ctx, c, c, up, false)
			p.recordAllowed(t, "socks5", addr.String(), sent, received, start)
			return
		}
	}
	var be *blockError
	var re *reachError
	code := byte(socksGeneralFailure)
	switch {
	case errors.As(err, &be):
		p.recordBlock(be, "socks5")
		code = socksNotAllowed
	case errors.As(err, &re):
		p.recordUnreachable(t, "socks5", re)
		code = socksHostUnreachable
		if re.refused {
			code = socksConnRefused
		}
	}
	_ = writeSOCKSReply(c, code)
	lingerClose(c)
}

// busySOCKS5 answers a connection over MaxConns with a general failure.
func (p *Proxy) busySOCKS5(ctx context.Context, c net.Conn) {
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := socksHandshake(c, c); err != nil {
		return
	}
	_ = writeSOCKSReply(c, socksGeneralFailure)
	lingerClose(c)
}
