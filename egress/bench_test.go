package egress

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

// benchBytes is what each iteration pushes through one connection.
const benchBytes = 64 << 20

// startSink serves a loopback TCP sink: it reads a connection to EOF and
// answers with the byte count (8 bytes, big endian).
func startSink(b *testing.B) (port int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	b.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				n, _ := io.Copy(io.Discard, c)
				_ = binary.Write(c, binary.BigEndian, n)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// push writes benchBytes to c, half-closes, and checks the sink's count.
func push(b *testing.B, c net.Conn, r io.Reader, buf []byte) {
	for sent := 0; sent < benchBytes; sent += len(buf) {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		b.Fatal(err)
	}
	var n int64
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		b.Fatal(err)
	}
	if n != benchBytes {
		b.Fatalf("sink got %d bytes", n)
	}
}

// BenchmarkDirectThroughput is the baseline: a loopback TCP connection.
func BenchmarkDirectThroughput(b *testing.B) {
	port := startSink(b)
	buf := make([]byte, 256<<10)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			b.Fatal(err)
		}
		push(b, c, c, buf)
		c.Close()
	}
}

// BenchmarkProxyThroughput pushes the same bytes through a CONNECT
// tunnel of the proxy.
func BenchmarkProxyThroughput(b *testing.B) {
	port := startSink(b)
	h := newHarness(b, Config{Allow: []policy.AllowEntry{allow("127.0.0.1", "benchmark sink", port)}}, nil)
	buf := make([]byte, 256<<10)
	b.SetBytes(benchBytes)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c, err := net.Dial("tcp", h.httpAddr)
		if err != nil {
			b.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(time.Minute))
		fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\n\r\n", port)
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: "CONNECT"})
		if err != nil || resp.StatusCode != 200 {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		push(b, c, br, buf)
		c.Close()
	}
}
