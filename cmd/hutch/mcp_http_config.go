//go:build !mcpimage

package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"
)

// mcpHTTPConfig is what the flags of `hutch mcp --listen` say.
type mcpHTTPConfig struct {
	addr string
	// token is the bearer token every request must carry; nil: none
	// (allowed on a loopback address only).
	token     []byte
	tokenFile string
	// tokenWarning, if set, is a warning about the token file to log.
	tokenWarning string
	tls          *tls.Config // nil: plain HTTP
	allowPlain   bool
	maxSessions  int
	idleTimeout  time.Duration
}

// Bounds of a token file's content.
const (
	minTokenLen = 32
	maxTokenLen = 4096
)

// mcpHTTPSettings reads the HTTP flags: the token file and the TLS key
// pair are read here, so that a bad one stops the server before it
// listens.
func mcpHTTPSettings(c *cli.Context) (*mcpHTTPConfig, error) {
	cfg := &mcpHTTPConfig{
		addr:        c.String("listen"),
		allowPlain:  c.Bool("allow-plain-http"),
		maxSessions: c.Int("max-sessions"),
		tokenFile:   c.String("token-file"),
	}
	if cfg.addr == "" {
		return nil, errors.New("--listen: want an address host:port, e.g. 127.0.0.1:8765")
	}
	if cfg.maxSessions < 1 {
		return nil, fmt.Errorf("--max-sessions %d: want 1 or more (each session is a sandbox)", cfg.maxSessions)
	}
	idle, err := time.ParseDuration(c.String("idle-timeout"))
	if err != nil || idle < 0 {
		return nil, fmt.Errorf("--idle-timeout %q: want a duration such as 30m, 2h or 90s (0: sessions never expire)", c.String("idle-timeout"))
	}
	cfg.idleTimeout = idle
	if cfg.tokenFile != "" {
		tok, warn, err := readTokenFile(cfg.tokenFile)
		if err != nil {
			return nil, err
		}
		cfg.token, cfg.tokenWarning = tok, warn
	}
	cert, key := c.String("tls-cert"), c.String("tls-key")
	switch {
	case (cert == "") != (key == ""):
		return nil, errors.New("--tls-cert and --tls-key go together: pass both (the certificate chain and its private key, PEM)")
	case cert != "" && cfg.allowPlain:
		return nil, errors.New("--allow-plain-http contradicts --tls-cert: pass one or the other")
	case cert != "":
		pair, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %w", cert, key, err)
		}
		cfg.tls = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	return cfg, nil
}

// readTokenFile reads a bearer token from path: one line of at least
// minTokenLen visible ASCII characters (a trailing newline is dropped). As
// ssh does with private keys, a file that others may read or write is
// refused; one that its group may read is accepted with a warning (a
// Kubernetes secret volume with fsGroup is so).
func readTokenFile(path string) (token []byte, warning string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, "", fmt.Errorf("--token-file: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", fmt.Errorf("--token-file: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, "", fmt.Errorf("--token-file %s: not a regular file (%s)", path, fi.Mode().Type())
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		return nil, "", fmt.Errorf("--token-file %s: mode %04o lets other users read or change the token: chmod 600 %s (a Kubernetes secret volume: defaultMode: 0400)", path, perm, path)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() && st.Uid != 0 {
		return nil, "", fmt.Errorf("--token-file %s: owned by uid %d: want a file of your own (uid %d) or root's", path, st.Uid, os.Geteuid())
	}
	if fi.Mode().Perm()&0o070 != 0 {
		warning = fmt.Sprintf("--token-file %s: mode %04o lets its group read the token (chmod 600 unless that is meant)", path, fi.Mode().Perm())
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenLen+2))
	if err != nil {
		return nil, "", fmt.Errorf("--token-file %s: %w", path, err)
	}
	b = bytes.TrimSuffix(bytes.TrimSuffix(b, []byte("\n")), []byte("\r"))
	switch {
	case len(b) > maxTokenLen:
		return nil, "", fmt.Errorf("--token-file %s: longer than %d bytes: want one line, the token", path, maxTokenLen)
	case len(b) < minTokenLen:
		return nil, "", fmt.Errorf("--token-file %s: a token of %d characters: want %d or more, e.g. made by: head -c 32 /dev/urandom | base64 > %s", path, len(b), minTokenLen, path)
	}
	for i, ch := range b {
		if ch <= ' ' || ch > '~' {
			return nil, "", fmt.Errorf("--token-file %s: byte %d is %q: want one line of visible ASCII characters (no spaces), e.g. base64", path, i, ch)
		}
	}
	return b, warning, nil
}

// listenMCP listens on cfg.addr and checks the address against the
// rules: any address but loopback needs a token, and TLS unless
// --allow-plain-http. It decides on the address the listener got (a name
// such as localhost resolves to one address; 0.0.0.0 and [::] are every
// interface, not loopback). On refusal nothing is left listening.
func listenMCP(cfg *mcpHTTPConfig) (ln net.Listener, loopback bool, err error) {
	ln, err = net.Listen("tcp", cfg.addr)
	if err != nil {
		return nil, false, fmt.Errorf("--listen %s: %w", cfg.addr, err)
	}
	tcp, _ := ln.Addr().(*net.TCPAddr)
	loopback = tcp != nil && tcp.IP.IsLoopback()
	switch {
	case loopback:
	case cfg.token == nil:
		ln.Close()
		return nil, false, fmt.Errorf("--listen %s: not a loopback address, and without --token-file anyone who reaches it could run commands: pass --token-file FILE (a secret of %d characters or more, mode 0600), or listen on 127.0.0.1", cfg.addr, minTokenLen)
	case cfg.tls == nil && !cfg.allowPlain:
		ln.Close()
		return nil, false, fmt.Errorf("--listen %s: not a loopback address, and plain HTTP would carry the bearer token in clear: pass --tls-cert and --tls-key, or --allow-plain-http when a proxy or service mesh in front terminates TLS", cfg.addr)
	}
	return ln, loopback, nil
}
