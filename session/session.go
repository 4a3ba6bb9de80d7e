// Package session serves a hutch Session over a private unix socket, so
// that a background supervisor holds one warm sandbox and `hutch exec`
// runs commands in it. The socket lives in the user's runtime directory
// (mode 0700, socket 0600), is checked for the peer's uid, and is never
// visible inside the sandbox: nothing on the exec path is a path, binary or
// socket the sandbox can write.
package session

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/background"
	"github.com/hutchsandbox/hutch/hostdirs"
	"github.com/hutchsandbox/hutch/internal/memfd"
)

// Dir returns the directory that holds session sockets, creating it:
// $XDG_RUNTIME_DIR/hutch, or /tmp/hutch-UID when there is no runtime
// directory. An existing directory must belong to the user and be 0700.
func Dir() (string, error) {
	dir := hostdirs.Runtime()
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("session directory %s: %w", dir, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("session directory %s: %w", dir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 {
		return "", fmt.Errorf("session directory %s is not a private directory of uid %d (mode %o, owner %d); remove it or set XDG_RUNTIME_DIR", dir, os.Getuid(), st.Mode&0o7777, st.Uid)
	}
	return dir, nil
}

// ValidName checks a session name: 1-64 letters, digits, '.', '_' or '-',
// starting with a letter or digit. (No regexp: compiling one at package
// init cost every hutch process half a millisecond.)
func ValidName(name string) error {
	ok := len(name) >= 1 && len(name) <= 64
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		ok = alnum || i > 0 && (c == '.' || c == '_' || c == '-')
	}
	if !ok {
		return fmt.Errorf("session name %q: want 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// SocketPath is the control socket of session name in dir.
func SocketPath(dir, name string) string { return filepath.Join(dir, name+".sock") }

// Request is a client's message. An exec request travels as
// {"op":"exec"} with four descriptors: the caller's stdin, stdout and
// stderr, and a sealed memfd that holds the whole request as JSON (its
// argv and environment may be as large as execve takes, megabytes, far
// beyond what one packet of the socket holds).
//
// A detach request is {"op":"detach"} with one descriptor, the sealed memfd
// of the request: the command runs in the background, with no stdio of the
// caller's, and the reply (detached) carries its id at once. ps lists the
// detached commands, logs (ID) sends what one's stdout and stderr kept as
// two memfds, kill (ID) stops one.
type Request struct {
	Op       string   `json:"op"` // exec, detach, signal, info, stop, ps, logs, kill
	Argv     []string `json:"argv,omitempty"`
	Env      []string `json:"env,omitempty"`
	ExtraEnv []string `json:"extra_env,omitempty"`
	Cwd      string   `json:"cwd,omitempty"`
	// HostCwd is the client's current directory on the host: with Cwd
	// empty, the command starts at the same place in the workspace.
	HostCwd string `json:"host_cwd,omitempty"`
	// TimeoutMS overrides the policy's timeout when > 0.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
	Signal    int   `json:"signal,omitempty"`
	// Terminal: the client relays its terminal. Those of its stdio that
	// are terminals are replaced by a pseudo-terminal of the sandbox's own,
	// whose master comes back with the "started" reply (the one descriptor
	// it carries); the client relays between its terminal and the master
	// (package terminal). Without a terminal among the stdio it is
	// ignored, and the reply carries none.
	Terminal bool `json:"terminal,omitempty"`
	// ID names a detached command (logs, kill).
	ID string `json:"id,omitempty"`
}

// Reply is the server's message.
type Reply struct {
	Op        string   `json:"op"` // started, exit, info, stopped, error
	ExitCode  int      `json:"exit_code"`
	TimedOut  bool     `json:"timed_out,omitempty"`
	Messages  []string `json:"messages,omitempty"`
	SandboxID string   `json:"sandbox_id,omitempty"`
	// Image is the digest of the image the sandbox's root is made of, if any.
	Image string `json:"image,omitempty"`
	Error string `json:"error,omitempty"`
	Info  *Info  `json:"info,omitempty"`
	// ID is a detached command's id (detached).
	ID string `json:"id,omitempty"`
	// Background describes the session's detached commands (ps), or the
	// one a logs or kill request named.
	Background []background.Info `json:"background,omitempty"`
	// StdoutDropped and StderrDropped (logs) count the bytes of each
	// stream that came before the ones kept.
	StdoutDropped int64 `json:"stdout_dropped,omitempty"`
	StderrDropped int64 `json:"stderr_dropped,omitempty"`
	// Isolation and IsolationLimits (exit): see hutch.Result.
	Isolation       string   `json:"isolation,omitempty"`
	IsolationLimits []string `json:"isolation_limits,omitempty"`
}

// Info describes a running session.
type Info struct {
	Name      string    `json:"name"`
	Pid       int       `json:"pid"`
	SandboxID string    `json:"sandbox_id"`
	Workspace string    `json:"workspace"`
	Started   time.Time `json:"started"`
	Execs     int       `json:"execs"`
	Running   int       `json:"running"`
	Idle      string    `json:"idle_timeout"`
	Max       string    `json:"max_lifetime"`
	// Policy is the session's effective policy as TOML (for --fresh).
	Policy string `json:"policy"`

	// Background counts the detached commands that run; Published are
	// the host addresses of the published ports.
	Background int      `json:"background"`
	Published  []string `json:"published,omitempty"`
}

const maxMsg = 1 << 20

// maxBody bounds an exec request's body (its memfd).
const maxBody = 64 << 20

// sendExec sends an exec request with the caller's stdio.
func sendExec(c *net.UnixConn, req *Request, stdin, stdout, stderr int) error {
	body, err := requestBody(req)
	if err != nil {
		return err
	}
	defer body.Close()
	return send(c, &Request{Op: "exec"}, stdin, stdout, stderr, int(body.Fd()))
}

// sendDetach sends a detach request: the request alone, in its memfd.
func sendDetach(c *net.UnixConn, req *Request) error {
	body, err := requestBody(req)
	if err != nil {
		return err
	}
	defer body.Close()
	return send(c, &Request{Op: "detach"}, int(body.Fd()))
}

// requestBody is req as JSON in a sealed memfd.
func requestBody(req *Request) (*os.File, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	if len(b) > maxBody {
		return nil, fmt.Errorf("the request is %d bytes, more than a session takes (%d)", len(b), maxBody)
	}
	return sealedBody(b)
}

// sealedBody is b in a memfd nothing can change any more.
func sealedBody(b []byte) (*os.File, error) {
	fd, err := memfd.NoExec("hutch-exec", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "hutch-exec")
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, fmt.Errorf("write the request: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK|unix.F_SEAL_SEAL); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal the request: %w", err)
	}
	return f, nil
}

// readBody decodes an exec request from its body's descriptor (a regular
// file of at most maxBody bytes), which it closes.
func readBody(fd int, req *Request) error {
	b, err := readMemfd(fd)
	if err != nil {
		return fmt.Errorf("exec request: %w", err)
	}
	if err := json.Unmarshal(b, req); err != nil {
		return fmt.Errorf("decode the exec request: %w", err)
	}
	return nil
}

// readMemfd reads the whole of a request's or an answer's memfd (a
// regular file of at most maxBody bytes) and closes it.
func readMemfd(fd int) ([]byte, error) {
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Size() > maxBody {
		return nil, fmt.Errorf("want a regular file of at most %d bytes", maxBody)
	}
	b := make([]byte, fi.Size())
	if _, err := f.ReadAt(b, 0); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return b, nil
}

func send(c *net.UnixConn, v any, fds ...int) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	_, _, err = c.WriteMsgUnix(b, oob, nil)
	return err
}

func recv(c *net.UnixConn, v any) ([]int, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	oob := make([]byte, unix.CmsgSpace(8*4))
	n, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err == nil {
			for _, s := range scms {
				if got, err := unix.ParseUnixRights(&s); err == nil {
					fds = append(fds, got...)
				}
			}
		}
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
	}
	if n == 0 {
		closeFDs(fds)
		return nil, errClosed
	}
	if err := json.Unmarshal(buf[:n], v); err != nil {
		closeFDs(fds)
		return nil, fmt.Errorf("decode session message: %w", err)
	}
	return fds, nil
}

var errClosed = errors.New("session connection closed")

// bufPool recycles receive buffers (up to maxMsg per message).
var bufPool = sync.Pool{New: func() any { b := make([]byte, maxMsg); return &b }}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
