package session

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/terminal"
)

// Client is a connection to a session's control socket.
type Client struct {
	c *net.UnixConn
}

// Dial connects to session name.
func Dial(name string) (*Client, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	dir, err := Dir()
	if err != nil {
		return nil, err
	}
	return DialPath(SocketPath(dir, name), name)
}

// DialPath connects to the control socket at path.
func DialPath(path, name string) (*Client, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("no session named %q is running (start one with: hutch session start --name %s; list them with: hutch session ls)", name, name)
		}
		return nil, fmt.Errorf("session %q: %w", name, err)
	}
	return &Client{c: c}, nil
}

// Close closes the connection.
func (cl *Client) Close() error { return cl.c.Close() }

// Info asks for the session's description.
func (cl *Client) Info() (*Info, error) {
	if err := send(cl.c, &Request{Op: "info"}); err != nil {
		return nil, err
	}
	var r Reply
	if _, err := recv(cl.c, &r); err != nil {
		return nil, err
	}
	if r.Info == nil {
		return nil, fmt.Errorf("session: %s", r.Error)
	}
	return r.Info, nil
}

// Stop ends the session and waits until it is torn down.
func (cl *Client) Stop() error {
	if err := send(cl.c, &Request{Op: "stop"}); err != nil {
		return err
	}
	var r Reply
	cl.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := recv(cl.c, &r); err != nil && !errors.Is(err, errClosed) {
		return err
	}
	return nil
}

// Exec runs a command in the session with the given stdio, relaying
// signals from sigs, and returns the exit reply. With req.Terminal and a
// terminal among the stdio, the command runs on a pseudo-terminal of the
// sandbox's own that this client relays to it (package terminal).
func (cl *Client) Exec(req *Request, stdin, stdout, stderr *os.File, sigs <-chan os.Signal) (*Reply, error) {
	req.Op = "exec"
	var tty *terminal.Caller
	if req.Terminal {
		if tty = terminal.Find(stdin, stdout, stderr); tty == nil {
			req.Terminal = false
		}
	}
	if err := sendExec(cl.c, req, int(stdin.Fd()), int(stdout.Fd()), int(stderr.Fd())); err != nil {
		return nil, fmt.Errorf("send to session: %w", err)
	}
	type reply struct {
		r   Reply
		fds []int
	}
	replies := make(chan reply, 2)
	errc := make(chan error, 1)
	go func() {
		for {
			var r Reply
			fds, err := recv(cl.c, &r)
			if err != nil {
				errc <- err
				return
			}
			replies <- reply{r, fds}
			if r.Op != "started" {
				return
			}
		}
	}()
	var relay *terminal.Relay
	stopRelay := func() {
		if relay != nil {
			relay.Close()
			relay = nil
		}
	}
	defer stopRelay()
	for {
		select {
		case s := <-sigs:
			if ss, ok := s.(syscall.Signal); ok {
				send(cl.c, &Request{Op: "signal", Signal: int(ss)})
			}
		case rp := <-replies:
			r := rp.r
			if r.Op == "started" {
				if tty != nil && len(rp.fds) == 1 && relay == nil {
					master, err := pollable(rp.fds[0])
					if err != nil {
						return nil, err
					}
					if relay, err = terminal.Start(tty, master, terminal.Options{}); err != nil {
						master.Close()
						return nil, err
					}
				} else {
					closeFDs(rp.fds)
				}
				continue
			}
			closeFDs(rp.fds)
			stopRelay() // what the command wrote last, then the caller's modes
			if r.Op == "error" {
				return nil, errors.New(r.Error)
			}
			return &r, nil
		case err := <-errc:
			return nil, fmt.Errorf("the session ended before the command did (%v)", err)
		}
	}
}

// pollable is a received pseudo-terminal master as a File the runtime's
// poller waits on (it is non-blocking already: OpenPTY made it so, and
// the flag belongs to the open file, which travels).
func pollable(fd int) (*os.File, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("terminal master: %w", err)
	}
	return os.NewFile(uintptr(fd), "pty master"), nil
}

// Detach starts a command in the session's background and returns its id.
func (cl *Client) Detach(req *Request) (string, error) {
	req.Op = "detach"
	if err := sendDetach(cl.c, req); err != nil {
		return "", fmt.Errorf("send to session: %w", err)
	}
	r, err := cl.reply("detached", nil)
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

// Ps lists the session's detached commands.
func (cl *Client) Ps() ([]background.Info, error) {
	if err := send(cl.c, &Request{Op: "ps"}); err != nil {
		return nil, err
	}
	r, err := cl.reply("ps", nil)
	if err != nil {
		return nil, err
	}
	return r.Background, nil
}

// Logs is what detached command id kept of its stdout and stderr so far,
// with its description and the bytes of each stream dropped before them.
func (cl *Client) Logs(id string) (stdout, stderr []byte, r *Reply, err error) {
	if err := send(cl.c, &Request{Op: "logs", ID: id}); err != nil {
		return nil, nil, nil, err
	}
	var fds []int
	if r, err = cl.reply("logs", &fds); err != nil {
		return nil, nil, nil, err
	}
	if len(fds) != 2 {
		closeFDs(fds)
		return nil, nil, nil, fmt.Errorf("logs: the session sent %d descriptors, not 2", len(fds))
	}
	stdout, err = readMemfd(fds[0]) // each closes its descriptor
	if serr, rerr := readMemfd(fds[1]); err == nil {
		stderr, err = serr, rerr
	}
	return stdout, stderr, r, err
}

// Kill stops detached command id (SIGTERM, then SIGKILL) and describes how
// it ended.
func (cl *Client) Kill(id string) (*background.Info, error) {
	if err := send(cl.c, &Request{Op: "kill", ID: id}); err != nil {
		return nil, err
	}
	cl.c.SetReadDeadline(time.Now().Add(30 * time.Second))
	r, err := cl.reply("killed", nil)
	if err != nil {
		return nil, err
	}
	if len(r.Background) != 1 {
		return nil, errors.New("kill: the session did not say how the command ended")
	}
	return &r.Background[0], nil
}

// reply reads the answer to a request, want or an error; fds, when not
// nil, receives the descriptors that came with it (else they are closed).
func (cl *Client) reply(want string, fds *[]int) (*Reply, error) {
	var r Reply
	got, err := recv(cl.c, &r)
	if err != nil {
		return nil, fmt.Errorf("the session did not answer: %w", err)
	}
	if fds != nil && r.Op == want {
		*fds = got
	} else {
		closeFDs(got)
	}
	switch r.Op {
	case want:
		return &r, nil
	case "error":
		return nil, errors.New(r.Error)
	}
	return nil, fmt.Errorf("unexpected answer %q from the session (an older hutch serves it? stop it and start it again)", r.Op)
}
