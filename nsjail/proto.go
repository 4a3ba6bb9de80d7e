package nsjail

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// The supervisor and the init talk over a SOCK_SEQPACKET socketpair: one
// JSON message per packet, file descriptors travel beside it as SCM_RIGHTS.
// The init never trusts anything from inside the sandbox; the only party on
// the other end of this socket is the supervisor that created it.

// Message operations.
const (
	opSetup    = "setup"    // supervisor -> init: build the sandbox (Setup)
	opReady    = "ready"    // init -> supervisor: sandbox built (Ready)
	opFail     = "fail"     // init -> supervisor: setup failed (Error)
	opSpawn    = "spawn"    // supervisor -> init: start a command (Spawn) + fds 0,1,2[,notify]
	opStarted  = "started"  // init -> supervisor: command started (ID, Pid)
	opSpawnErr = "spawnerr" // init -> supervisor: command could not start (ID, Code, Error)
	opExit     = "exit"     // init -> supervisor: command ended (ID, Status)
	opSignal   = "signal"   // supervisor -> init: signal a command's process group (ID, Signal)
)

// maxMsg bounds one control message; setups with large plans stay far below.
const maxMsg = 1 << 20

// message is the envelope of every control packet.
type message struct {
	Op     string  `json:"op"`
	ID     uint64  `json:"id,omitempty"`
	Pid    int     `json:"pid,omitempty"`
	Status int     `json:"status,omitempty"` // raw wait status
	Signal int     `json:"signal,omitempty"`
	Code   int     `json:"code,omitempty"` // exit code hutch should report (spawnerr)
	Error  string  `json:"error,omitempty"`
	Setup  *Setup  `json:"setup,omitempty"`
	Spawn  *Spawn  `json:"spawn,omitempty"`
	Ready  *Ready  `json:"ready,omitempty"`
	Timing []Stage `json:"timing,omitempty"`
}

// Stage is one named, timed step, reported under --debug.
type Stage struct {
	Name string `json:"name"`
	Usec int64  `json:"usec"`
}

// conn is one end of the control socket.
type conn struct {
	f  *os.File
	fd int
}

func newConn(f *os.File) *conn { return &conn{f: f, fd: int(f.Fd())} }

// send writes one message with optional file descriptors.
func (c *conn) send(m *message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Op, err)
	}
	if len(b) > maxMsg {
		return fmt.Errorf("encode %s message: %d bytes exceeds the %d-byte limit", m.Op, len(b), maxMsg)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	for {
		err = unix.Sendmsg(c.fd, b, oob, nil, 0)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("send %s message: %w", m.Op, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it. The caller
// owns the returned descriptors. io.EOF means the peer closed the socket.
func (c *conn) recv() (*message, []int, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	oob := make([]byte, unix.CmsgSpace(8*4))
	var n, oobn int
	var err error
	for {
		n, oobn, _, _, err = unix.Recvmsg(c.fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return nil, nil, fmt.Errorf("receive control message: %w", err)
	}
	var fds []int
	if oobn > 0 {
		scms, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, fmt.Errorf("parse control message rights: %w", err)
		}
		for _, s := range scms {
			got, err := unix.ParseUnixRights(&s)
			if err == nil {
				fds = append(fds, got...)
			}
		}
	}
	if n == 0 {
		closeAll(fds)
		return nil, nil, errEOF
	}
	m := new(message)
	if err := json.Unmarshal(buf[:n], m); err != nil {
		closeAll(fds)
		return nil, nil, fmt.Errorf("decode control message: %w", err)
	}
	return m, fds, nil
}

var errEOF = errors.New("control socket closed")

// bufPool recycles receive buffers: a message may be up to maxMsg long,
// but allocating that for every message is most of a session's garbage.
var bufPool = sync.Pool{New: func() any { b := make([]byte, maxMsg); return &b }}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
