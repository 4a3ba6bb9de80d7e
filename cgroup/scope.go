package cgroup

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	sddbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
)

// scopeTimeout bounds the D-Bus round trip to the systemd user manager.
const scopeTimeout = 5 * time.Second

// joinScope asks the systemd user manager listening on bus (a session bus
// socket, or systemd's private socket) for a transient scope with
// Delegate=yes holding this process, as podman does when it is started
// outside a delegated cgroup. systemd moves the process (all its threads)
// into the scope and hands the scope's cgroup to the user; hutch then
// manages it like any delegated cgroup v2 subtree. The scope ends, and
// systemd removes its cgroup, when its last process exits.
func joinScope(ctx context.Context, bus, name string) (unit string, err error) {
	ctx, cancel := context.WithTimeout(ctx, scopeTimeout)
	defer cancel()
	// godbus's authentication and go-systemd's set-up calls take no
	// context: the connections are closed when ctx ends, which unblocks
	// them.
	var mu sync.Mutex
	var raw []*dbus.Conn
	stop := context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range raw {
			c.Close()
		}
	})
	defer stop()
	register := func(c *dbus.Conn) {
		mu.Lock()
		defer mu.Unlock()
		raw = append(raw, c)
		if ctx.Err() != nil {
			c.Close() // the context ended before this connection was known
		}
	}
	conn, err := sddbus.NewConnection(func() (*dbus.Conn, error) { return dialUserBus(ctx, bus, register) })
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return "", fmt.Errorf("connect to the systemd user manager at %s: %w", bus, err)
	}
	defer conn.Close()
	unit = fmt.Sprintf("%s%d-%s.scope", namePrefix, os.Getpid(), name)
	props := []sddbus.Property{
		sddbus.PropDescription("hutch sandbox supervisor (pid " + strconv.Itoa(os.Getpid()) + ")"),
		sddbus.PropPids(uint32(os.Getpid())),
		{Name: "Delegate", Value: dbus.MakeVariant(true)},
		{Name: "CollectMode", Value: dbus.MakeVariant("inactive-or-failed")},
	}
	done := make(chan string, 1)
	if _, err := conn.StartTransientUnitContext(ctx, unit, "fail", props, done); err != nil {
		return "", fmt.Errorf("start transient unit %s: %w", unit, err)
	}
	select {
	case res := <-done:
		if res != "done" {
			return "", fmt.Errorf("start transient unit %s: job %s", unit, res)
		}
	case <-ctx.Done():
		return "", fmt.Errorf("start transient unit %s: %w", unit, ctx.Err())
	}
	return unit, nil
}

// dialUserBus connects and authenticates to bus. systemd's private socket
// speaks D-Bus directly (no Hello); a session bus needs the Hello call.
// register receives the connection before authentication, so that the
// caller can close it, and so unblock authentication, when its context ends.
func dialUserBus(ctx context.Context, bus string, register func(*dbus.Conn)) (*dbus.Conn, error) {
	c, err := dbus.Dial("unix:path="+bus, dbus.WithContext(ctx))
	if err != nil {
		return nil, err
	}
	register(c)
	if err := c.Auth([]dbus.Auth{dbus.AuthExternal(strconv.Itoa(os.Getuid()))}); err != nil {
		c.Close()
		return nil, fmt.Errorf("authenticate: %w", err)
	}
	if !strings.HasSuffix(bus, "/systemd/private") {
		if err := c.Hello(); err != nil {
			c.Close()
			return nil, fmt.Errorf("hello: %w", err)
		}
	}
	return c, nil
}
