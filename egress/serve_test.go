package egress

import (
	"context"
	"net"
	"testing"
	"time"
)

// waitForTraffic reports a pending connection (or datagram) without
// consuming it, returns false when its context ends, and in both cases
// leaves the sockets usable without deadlines.
func TestWaitForTraffic(t *testing.T) {
	listen := func(t *testing.T) (*net.TCPListener, *net.TCPListener, *net.UDPConn) {
		a, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		b, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { a.Close(); b.Close(); u.Close() })
		return a, b, u
	}
	t.Run("connection", func(t *testing.T) {
		a, b, u := listen(t)
		go func() {
			time.Sleep(20 * time.Millisecond)
			if c, err := net.Dial("tcp", b.Addr().String()); err == nil {
				defer c.Close()
				time.Sleep(2 * time.Second)
			}
		}()
		if !waitForTraffic(context.Background(), a, b, u) {
			t.Fatal("a pending connection was not reported")
		}
		// Not consumed, and no deadline left behind: Accept still works.
		b.SetDeadline(time.Now().Add(5 * time.Second))
		c, err := b.Accept()
		if err != nil {
			t.Fatalf("accept after the wait: %v", err)
		}
		c.Close()
	})
	t.Run("datagram", func(t *testing.T) {
		a, b, u := listen(t)
		c, err := net.Dial("udp", u.LocalAddr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("q"))
		if !waitForTraffic(context.Background(), a, b, u) {
			t.Fatal("a pending datagram was not reported")
		}
		buf := make([]byte, 8)
		if n, _, err := u.ReadFrom(buf); err != nil || string(buf[:n]) != "q" {
			t.Fatalf("read after the wait: %q, %v", buf[:n], err)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		a, b, u := listen(t)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(20*time.Millisecond, cancel)
		if waitForTraffic(ctx, a, b, u) {
			t.Fatal("reported traffic with none and a cancelled context")
		}
		// The wake-up deadline is cleared: a later Accept waits for a
		// connection instead of failing at once.
		go func() {
			time.Sleep(50 * time.Millisecond)
			if c, err := net.Dial("tcp", a.Addr().String()); err == nil {
				c.Close()
			}
		}()
		c, err := a.Accept()
		if err != nil {
			t.Fatalf("accept after a cancelled wait: %v", err)
		}
		c.Close()
	})
}
