//go:build !mcpimage

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	good := strings.Repeat("aB3", 12)
	for _, tc := range []struct {
		name, content string
		mode          os.FileMode
		want, err     string // want: the token; err: a part of the error
		warn          bool
	}{
		{name: "ok", content: good + "\n", mode: 0o600, want: good},
		{name: "crlf", content: good + "\r\n", mode: 0o400, want: good},
		{name: "group", content: good, mode: 0o640, want: good, warn: true},
		{name: "world", content: good, mode: 0o644, err: "chmod 600"},
		{name: "short", content: "secret\n", mode: 0o600, err: "a token of 6 characters: want 32 or more"},
		{name: "space", content: good + " x", mode: 0o600, err: "visible ASCII"},
		{name: "twolines", content: good + "\n" + good + "\n", mode: 0o600, err: "visible ASCII"},
		{name: "long", content: strings.Repeat("a", maxTokenLen+1), mode: 0o600, err: "longer than 4096"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(p, tc.mode); err != nil {
				t.Fatal(err)
			}
			tok, warn, err := readTokenFile(p)
			switch {
			case tc.err != "":
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.Contains(err.Error(), p) {
					t.Fatalf("err %v, want one naming %s with %q", err, p, tc.err)
				}
			case err != nil:
				t.Fatal(err)
			case string(tok) != tc.want:
				t.Fatalf("token %q, want %q", tok, tc.want)
			case (warn != "") != tc.warn:
				t.Fatalf("warning %q, want one: %v", warn, tc.warn)
			}
		})
	}
	if _, _, err := readTokenFile(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--token-file") {
		t.Fatalf("a missing file: err %v, want one naming --token-file", err)
	}
}

func TestListenMCPRules(t *testing.T) {
	tok := []byte(strings.Repeat("x", 32))
	for _, tc := range []struct {
		addr  string
		token []byte
		plain bool
		err   string
	}{
		{addr: "127.0.0.1:0"},
		{addr: "localhost:0"},
		{addr: "0.0.0.0:0", err: "--token-file"},
		{addr: ":0", err: "--token-file"},
		{addr: "0.0.0.0:0", token: tok, err: "--tls-cert"},
		{addr: "0.0.0.0:0", token: tok, plain: true},
	} {
		ln, loopback, err := listenMCP(&mcpHTTPConfig{addr: tc.addr, token: tc.token, allowPlain: tc.plain})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err %v, want one naming %s", tc.addr, err, tc.err)
			}
			if ln != nil {
				ln.Close()
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.addr, err)
			continue
		}
		if want := tc.token == nil; loopback != want {
			t.Errorf("%s: loopback %v, want %v", tc.addr, loopback, want)
		}
		ln.Close()
	}
}
