package publish

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/plan"
	"github.com/hutchsandbox/hutch/seclog"
)

// freePort is a port of the host's loopback that nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// sandbox stands in for a sandbox's loopback: its ports are the fake
// server's, by number.
type sandbox struct {
	servers map[int]net.Listener
}

func (sb *sandbox) dial(ctx context.Context, port int) (net.Conn, error) {
	ln, ok := sb.servers[port]
	if !ok {
		return nil, fmt.Errorf("connect to port %d on the sandbox's loopback: nothing listens on that port inside the sandbox", port)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", ln.Addr().String())
}

// echoUpper serves connections that get back their bytes upper-cased,
// then the end.
func echoUpper(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				b, _ := io.ReadAll(c)
				c.Write(bytes.ToUpper(b))
			}()
		}
	}()
	return ln
}

// readReset connects to addr and reads to the end: a reset may come as
// the connect's own error (it can arrive before the dial looks) or the
// read's.
func readReset(addr string) ([]byte, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return io.ReadAll(c)
}

// holdServer accepts connections and neither answers nor closes them.
func holdServer(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var held []net.Conn
	t.Cleanup(func() {
		ln.Close()
		for _, c := range held {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	return ln
}

func events(t *testing.T, buf *bytes.Buffer) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(buf.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

func TestRelayAndRecord(t *testing.T) {
	hostPort, missing := freePort(t), freePort(t)
	sb := &sandbox{servers: map[int]net.Listener{8080: echoUpper(t)}}
	var logBuf bytes.Buffer
	var accepted atomic.Int32
	s, err := Listen(Config{
		Ports:    []plan.Publish{{HostAddress: "127.0.0.1", HostPort: hostPort, SandboxPort: 8080}, {HostAddress: "127.0.0.1", HostPort: missing, SandboxPort: 9999}},
		Dial:     sb.dial,
		Recorder: seclog.NewRecorder(seclog.New(&logBuf), "sb1", []string{"(session)"}),
		Accepted: func() { accepted.Add(1) },
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Serve()
	defer s.Stop()

	// A request, half-closed: the answer comes back, then the end.
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)))
	if err != nil {
		t.Fatal(err)
	}
	c.Write([]byte("hello"))
	c.(*net.TCPConn).CloseWrite()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || string(got) != "HELLO" {
		t.Fatalf("relayed %q, %v", got, err)
	}

	// Nothing listens on the other port inside: reset at once, recorded.
	if b, err := readReset(net.JoinHostPort("127.0.0.1", strconv.Itoa(missing))); !errors.Is(err, syscall.ECONNRESET) || len(b) != 0 {
		t.Errorf("a connection to nothing: read %q, %v; want a reset at once", b, err)
	}
	s.Stop()
	if n := accepted.Load(); n != 2 {
		t.Errorf("accepted %d connections, want 2", n)
	}
	evs := events(t, &logBuf)
	if len(evs) != 2 {
		t.Fatalf("%d events, want 2: %v", len(evs), evs)
	}
	ok, bad := evs[0], evs[1]
	if ok["level"] != "INFO" || ok["rule"] != Rule || ok["subject"] != fmt.Sprintf("publish 127.0.0.1:%d->8080", hostPort) ||
		!strings.Contains(ok["msg"].(string), "relayed to port 8080 on the sandbox's loopback") {
		t.Errorf("accepted connection's event: %v", ok)
	}
	if d, _ := ok["detail"].(map[string]any); d == nil || !strings.HasPrefix(d["peer"].(string), "127.0.0.1:") || d["sandbox_port"] != float64(8080) {
		t.Errorf("accepted connection's detail: %v", ok["detail"])
	}
	if bad["level"] != "WARN" || !strings.Contains(bad["msg"].(string), "not relayed: connect to port 9999 on the sandbox's loopback: nothing listens on that port inside the sandbox") {
		t.Errorf("refused connection's event: %v", bad)
	}
}

// Stop closes the listeners and cuts the connections it relays.
func TestStopCutsConnections(t *testing.T) {
	hold := holdServer(t)
	hostPort := freePort(t)
	s, err := Listen(Config{Ports: []plan.Publish{{HostAddress: "127.0.0.1", HostPort: hostPort, SandboxPort: 1}},
		Dial: (&sandbox{servers: map[int]net.Listener{1: hold}}).dial})
	if err != nil {
		t.Fatal(err)
	}
	s.Serve()
	c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x")) // through the relay: the inner connection exists
	time.Sleep(100 * time.Millisecond)
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return with a connection open")
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("the connection survived Stop: %v", err)
	}
	if _, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort)), time.Second); err == nil {
		t.Error("the listener survived Stop")
	}
}

// A port that is taken is refused with the entry, the address and advice;
// nothing stays open.
func TestListenBusy(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	free := freePort(t)
	port := busy.Addr().(*net.TCPAddr).Port
	_, err = Listen(Config{Ports: []plan.Publish{{HostAddress: "127.0.0.1", HostPort: free, SandboxPort: 1}, {HostAddress: "127.0.0.1", HostPort: port, SandboxPort: 2}}})
	want := fmt.Sprintf("network.publish[1]: listen on 127.0.0.1:%d: ", port)
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "pick another host port") {
		t.Fatalf("Listen on a busy port: %v; want %q and advice", err, want)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(free)))
	if err != nil {
		t.Fatalf("the first listener was left open: %v", err)
	}
	ln.Close()
}

// Beyond MaxConns a connection is reset and recorded.
func TestMaxConns(t *testing.T) {
	hold := holdServer(t)
	var logBuf bytes.Buffer
	hostPort := freePort(t)
	s, err := Listen(Config{Ports: []plan.Publish{{HostAddress: "127.0.0.1", HostPort: hostPort, SandboxPort: 1}}, MaxConns: 1,
		Dial: (&sandbox{servers: map[int]net.Listener{1: hold}}).dial, Recorder: seclog.NewRecorder(seclog.New(&logBuf), "sb", nil)})
	if err != nil {
		t.Fatal(err)
	}
	s.Serve()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(hostPort))
	first, _ := net.Dial("tcp", addr)
	defer first.Close()
	time.Sleep(100 * time.Millisecond)
	if b, err := readReset(addr); !errors.Is(err, syscall.ECONNRESET) || len(b) != 0 {
		t.Errorf("the connection over the limit: %q, %v; want a reset", b, err)
	}
	s.Stop()
	if !strings.Contains(logBuf.String(), "more than 1 connections are relayed at once") {
		t.Errorf("no event for the connection over the limit:\n%s", logBuf.String())
	}
}
