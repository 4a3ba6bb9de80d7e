package nsjail

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/mounts"
	"github.com/hutchsandbox/hutch/plan"
)

// The supervisor and the init talk over a SOCK_SEQPACKET socketpair: one
// message per packet, file descriptors beside it as SCM_RIGHTS. The init is
// C (init.c), so the encoding is plain: a header (u32 op, u32 zero, u64 id),
// then the op's fields as native-endian u32 and i64 values and strings
// (u32 length, bytes, NUL). hutch_init.h defines every number of the
// schema; the constants below are read from it (cgo), and wire_test.go
// checks this encoder against init.c's decoder and the other way round. The
// init never trusts anything from inside the sandbox; the only party on the
// other end of this socket is the supervisor that created it.

/*
#include "hutch_init.h"
*/
import "C"

// Message operations.
const (
	opSetup        = uint32(C.HUTCH_OP_SETUP)         // supervisor -> init: build the sandbox + [BPF memfd]
	opReady        = uint32(C.HUTCH_OP_READY)         // init -> supervisor: built (timings) + root fd [+ 3 proxy sockets]
	opFail         = uint32(C.HUTCH_OP_FAIL)          // init -> supervisor: setup failed (Errno, Step, Error)
	opSpawn        = uint32(C.HUTCH_OP_SPAWN)         // supervisor -> init: start a command (Spawn) + fds 0,1,2[,notify]
	opStarted      = uint32(C.HUTCH_OP_STARTED)       // init -> supervisor: command started (Pid)
	opSpawnErr     = uint32(C.HUTCH_OP_SPAWNERR)      // init -> supervisor: command could not start (Code, Error)
	opExit         = uint32(C.HUTCH_OP_EXIT)          // init -> supervisor: command ended (Status, Code, Errno, Error, Alone)
	opSignal       = uint32(C.HUTCH_OP_SIGNAL)        // supervisor -> init: signal a command's reaper (Signal)
	opLandlock     = uint32(C.HUTCH_OP_LANDLOCK)      // supervisor -> init: + the Landlock ruleset fd
	opSpawner      = uint32(C.HUTCH_OP_SPAWNER)       // supervisor -> init: start the spawner + scope ruleset [+ notify socket]
	opSpawnerReply = uint32(C.HUTCH_OP_SPAWNER_REPLY) // init -> supervisor: the spawner is ready (Code 0), or why not
	opPids         = uint32(C.HUTCH_OP_PIDS)          // supervisor -> init: send opStarted for each command not announced
	opSocket       = uint32(C.HUTCH_OP_SOCKET)        // supervisor -> init: a TCP socket in the sandbox's network namespace (Family)
	opSocketReply  = uint32(C.HUTCH_OP_SOCKET_REPLY)  // init -> supervisor: + the socket (Code 0), or why not (Code, Errno, Error)
)

// The address families of a socket request.
const (
	socketInet  = uint32(C.HUTCH_SOCKET_INET)
	socketInet6 = uint32(C.HUTCH_SOCKET_INET6)
)

// The kind of step a FAIL message names.
const (
	failOther      = uint32(C.HUTCH_FAIL_OTHER)
	failNamespaces = uint32(C.HUTCH_FAIL_NAMESPACES) // creating namespaces
)

// codeNoSpawner is the spawn error of a request through a spawner that is
// gone.
const codeNoSpawner = int(C.HUTCH_CODE_NO_SPAWNER)

// Setup, spawn and spawner flags, and step flags.
const (
	setupSeccomp    = uint32(C.HUTCH_SETUP_SECCOMP)
	setupProxy      = uint32(C.HUTCH_SETUP_PROXY)
	setupTiming     = uint32(C.HUTCH_SETUP_TIMING)
	setupBuild      = uint32(C.HUTCH_SETUP_BUILD)
	spawnNotify     = uint32(C.HUTCH_SPAWN_NOTIFY)
	spawnViaSpawner = uint32(C.HUTCH_SPAWN_VIA_SPAWNER) // the session's spawner starts the command
	spawnTerminal   = uint32(C.HUTCH_SPAWN_TERMINAL)    // the command leads a session on its terminal
	spawnerNotify   = uint32(C.HUTCH_SPAWNER_NOTIFY)
	stepfReadOnly   = uint32(C.HUTCH_STEPF_RO)
	stepfOptional   = uint32(C.HUTCH_STEPF_OPTIONAL)
	stepfNoSymlinks = uint32(C.HUTCH_STEPF_NOSYM)
)

// maxPayload bounds a spawn request's payload.
const maxPayload = int(C.HUTCH_MAX_PAYLOAD)

// maxRlimits is the most resource limits a setup carries.
const maxRlimits = int(C.HUTCH_MAX_RLIMITS)

// maxLower is the most lower layers of one overlay step.
const maxLower = int(C.HUTCH_MAX_LOWER)

// maxStepKind is the highest step kind the C executor knows.
const maxStepKind = uint32(C.HUTCH_STEP_KINDS)

// stepKinds numbers the plan's step kinds for the C executor.
var stepKinds = map[mounts.Kind]uint32{
	mounts.Bind: C.HUTCH_STEP_BIND, mounts.Tmpfs: C.HUTCH_STEP_TMPFS, mounts.Proc: C.HUTCH_STEP_PROC,
	mounts.Devpts: C.HUTCH_STEP_DEVPTS, mounts.Sysfs: C.HUTCH_STEP_SYSFS, mounts.Mkdir: C.HUTCH_STEP_MKDIR,
	mounts.File: C.HUTCH_STEP_FILE, mounts.Symlink: C.HUTCH_STEP_SYMLINK, mounts.MaskFile: C.HUTCH_STEP_MASK_FILE,
	mounts.MaskDir: C.HUTCH_STEP_MASK_DIR, mounts.ReadOnly: C.HUTCH_STEP_RO, mounts.Pin: C.HUTCH_STEP_PIN,
	mounts.Seal: C.HUTCH_STEP_SEAL, mounts.Protect: C.HUTCH_STEP_PROTECT, mounts.Hide: C.HUTCH_STEP_HIDE,
	mounts.Cover: C.HUTCH_STEP_COVER, mounts.Overlay: C.HUTCH_STEP_OVERLAY,
}

// What a Ready message says of the plan hint.
const (
	hintNone   = uint32(C.HUTCH_HINT_NONE)   // the init had none
	hintUsed   = uint32(C.HUTCH_HINT_USED)   // the setup's plan was the hint's: part of it was built ahead
	hintUnused = uint32(C.HUTCH_HINT_UNUSED) // a hint that could not be used (differs, malformed, failed)
)

func hintState(h uint32) string {
	switch h {
	case hintUsed:
		return "used"
	case hintUnused:
		return "unused"
	}
	return ""
}

// maxMsg bounds one control message.
const maxMsg = int(C.HUTCH_MAX_MSG)

// message is the decoded form of every control packet; each op uses some
// of the fields.
type message struct {
	Op     uint32
	ID     uint64
	Pid    int
	Status int // raw wait status
	Signal int
	Code   int // exit code hutch should report (spawnerr, exit)
	Errno  int // with Code (or in a FAIL), the errno of the failed step; 0 if none was recorded
	// Step (fail): the kind of step that failed (failNamespaces: creating
	// namespaces; failOther: anything else).
	Step  uint32
	Error string
	// Alone (exit): when the init reported this exit it had no other
	// child, so no sandboxed process was left.
	Alone bool
	// Leftover (exit): the processes the command's reaper killed when the
	// command ended, what it left behind.
	Leftover int
	Setup    *Setup
	Spawn    *Spawn
	Timing   []Stage
	// Hint (ready): what became of the plan hint (hintNone, hintUsed,
	// hintUnused).
	Hint uint32
	// SpawnerNotify (spawner): the spawner sends its seccomp listener on
	// the socket that comes with the request.
	SpawnerNotify bool
	// Family (socket): socketInet or socketInet6.
	Family uint32
}

// Stage is one named, timed step, reported under --debug.
type Stage struct {
	Name string `json:"name"`
	Usec int64  `json:"usec"`
}

// enc builds one message.
type enc struct {
	b   []byte
	err error
}

func (e *enc) u32(v uint32) { e.b = binary.NativeEndian.AppendUint32(e.b, v) }
func (e *enc) i64(v int64)  { e.b = binary.NativeEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) str(what, s string) {
	if strings.IndexByte(s, 0) >= 0 && e.err == nil {
		e.err = fmt.Errorf("%s contains a NUL byte", what)
	}
	e.u32(uint32(len(s)))
	e.b = append(e.b, s...)
	e.b = append(e.b, 0)
}
func (e *enc) strs(what string, ss []string) {
	e.u32(uint32(len(ss)))
	for _, s := range ss {
		e.str(what, s)
	}
}

// dec reads one message's fields, as init.c's hutch_rd_* do; a short or
// malformed field sets bad.
type dec struct {
	b   []byte
	bad bool
}

func (d *dec) u32() uint32 {
	if len(d.b) < 4 {
		d.bad = true
		return 0
	}
	v := binary.NativeEndian.Uint32(d.b)
	d.b = d.b[4:]
	return v
}

func (d *dec) i64() int64 {
	if len(d.b) < 8 {
		d.bad = true
		return 0
	}
	v := binary.NativeEndian.Uint64(d.b)
	d.b = d.b[8:]
	return int64(v)
}

// str checks what the C reader (hutch_rd_str) checks: the length fits, a
// NUL follows, and there is no NUL inside.
func (d *dec) str() string {
	n := int(d.u32())
	if d.bad || len(d.b) < n+1 || d.b[n] != 0 || strings.IndexByte(string(d.b[:n]), 0) >= 0 {
		d.bad = true
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n+1:]
	return s
}

func (m *message) encode() ([]byte, error) {
	e := &enc{b: make([]byte, 0, 256)}
	e.u32(m.Op)
	e.u32(0)
	e.i64(int64(m.ID))
	switch m.Op {
	case opSetup:
		encodeSetup(e, m.Setup)
	case opSpawn:
		sp := m.Spawn
		var fl uint32
		if sp.Notify {
			fl |= spawnNotify
		}
		if sp.ViaSpawner {
			fl |= spawnViaSpawner
		}
		if sp.Terminal {
			fl |= spawnTerminal
		}
		e.u32(fl) // the rest travels in the payload (encodePayload)
	case opSignal:
		e.i64(int64(m.Signal))
	case opLandlock, opPids:
	case opSocket:
		e.u32(m.Family)
	case opSpawner:
		var fl uint32
		if m.SpawnerNotify {
			fl |= spawnerNotify
		}
		e.u32(fl)
	default:
		return nil, fmt.Errorf("encode: op %d is not sent by the supervisor", m.Op)
	}
	if e.err != nil {
		return nil, e.err
	}
	if len(e.b) > maxMsg {
		return nil, fmt.Errorf("%d bytes exceeds the %d-byte limit", len(e.b), maxMsg)
	}
	return e.b, nil
}

func encodeSetup(e *enc, s *Setup) {
	sb := s.Sandbox
	var fl uint32
	if s.Seccomp != nil {
		fl |= setupSeccomp
	}
	if sb.Network.Proxy != nil {
		fl |= setupProxy
	}
	if s.Timing {
		fl |= setupTiming
	}
	if sb.Identity.BuildCaps {
		fl |= setupBuild
	}
	e.u32(fl)
	e.str("hostname", sb.Identity.Hostname)
	e.i64(int64(sb.Identity.UID))
	e.i64(int64(sb.Identity.GID))
	var px plan.Proxy
	if sb.Network.Proxy != nil {
		px = *sb.Network.Proxy
	}
	e.u32(uint32(px.HTTP))
	e.u32(uint32(px.SOCKS))
	e.u32(uint32(px.DNS))
	if len(s.Rlimits) > maxRlimits && e.err == nil {
		e.err = fmt.Errorf("%d resource limits, at most %d", len(s.Rlimits), maxRlimits)
	}
	e.u32(uint32(len(s.Rlimits)))
	for _, r := range s.Rlimits {
		e.u32(uint32(r.Resource))
		e.i64(int64(r.Cur)) // RLIM_INFINITY (^0) travels as -1
		e.i64(int64(r.Max))
	}
	encodePlan(e, sb.Mounts) // last: the init compares it with its plan hint
}

// encodePayload encodes a spawn request's payload: the working directory,
// argv and the environment, which travel in a sealed memfd beside the
// message (HUTCH_MAX_PAYLOAD).
func encodePayload(sp *Spawn) ([]byte, error) {
	n := len(sp.Cwd) + 16
	for _, s := range sp.Argv {
		n += len(s) + 5
	}
	for _, s := range sp.Env {
		n += len(s) + 5
	}
	e := &enc{b: make([]byte, 0, n)}
	e.str("working directory", sp.Cwd)
	e.strs("command argument", sp.Argv)
	e.strs("environment variable", sp.Env)
	if e.err != nil {
		return nil, e.err
	}
	if len(e.b) > maxPayload {
		return nil, fmt.Errorf("the command's arguments and environment are %d bytes, more than hutch passes (%d)", len(e.b), maxPayload)
	}
	return e.b, nil
}

// EncodePlanHint encodes p as the setup message carries it: the form of
// the plan hint that a prestarted init builds ahead of its setup (init.c).
func EncodePlanHint(p *mounts.Plan) ([]byte, error) {
	e := &enc{}
	encodePlan(e, p)
	if e.err != nil {
		return nil, fmt.Errorf("encode plan hint: %w", e.err)
	}
	if len(e.b) > maxMsg {
		return nil, fmt.Errorf("encode plan hint: %d bytes exceeds the %d-byte limit", len(e.b), maxMsg)
	}
	return e.b, nil
}

func encodePlan(e *enc, p *mounts.Plan) {
	if p == nil {
		p = &mounts.Plan{}
	}
	stage := p.Stage
	if stage == "" {
		stage = "/tmp"
	}
	e.i64(p.RootSize)
	e.str("staging directory", stage)
	e.u32(uint32(len(p.Steps)))
	for _, st := range p.Steps {
		kind, ok := stepKinds[st.Kind]
		if !ok && e.err == nil {
			e.err = fmt.Errorf("mount plan: unknown step kind %q", st.Kind)
		}
		var sf uint32
		if st.ReadOnly {
			sf |= stepfReadOnly
		}
		if st.Optional {
			sf |= stepfOptional
		}
		if st.NoSymlinks {
			sf |= stepfNoSymlinks
		}
		target := filepath.Clean("/" + st.Target)
		e.u32(kind)
		e.u32(sf)
		e.u32(st.Mode)
		e.i64(st.Size)
		e.str("mount step", string(st.Kind))
		e.str("mount source", st.Source)
		e.str("mount target", target)
		e.str("mount target", filepath.Join(stage, target))
		e.str("mount data", st.Data)
		e.str("mount step", st.Why)
		if st.Kind == mounts.Overlay {
			if (len(st.Lower) == 0 || len(st.Lower) > maxLower || (st.Upper == "") != (st.Work == "")) && e.err == nil {
				e.err = fmt.Errorf("mount plan: overlay at %s: want 1..%d lower layers and both or neither of upper and work", target, maxLower)
			}
			e.u32(uint32(len(st.Lower)))
			for _, l := range st.Lower {
				e.str("overlay lower layer", l)
			}
			e.str("overlay upper layer", st.Upper)
			e.str("overlay work directory", st.Work)
		}
	}
}

func decode(b []byte) (*message, error) {
	d := &dec{b: b}
	m := &message{Op: d.u32()}
	d.u32()
	m.ID = uint64(d.i64())
	switch m.Op {
	case opReady:
		n := int(d.u32())
		for i := 0; i < n && !d.bad; i++ {
			m.Timing = append(m.Timing, Stage{Name: d.str(), Usec: d.i64()})
		}
		m.Hint = d.u32()
	case opFail:
		m.Errno = int(d.i64())
		m.Step = d.u32()
		m.Error = d.str()
	case opStarted:
		m.Pid = int(d.i64())
	case opSpawnErr, opExit, opSpawnerReply, opSocketReply:
		m.Status = int(d.i64())
		m.Code = int(d.i64())
		m.Errno = int(d.i64())
		m.Error = d.str()
		m.Alone = d.u32() == 1
		m.Leftover = int(d.u32())
	default:
		return nil, fmt.Errorf("decode control message: unknown op %d", m.Op)
	}
	if d.bad {
		return nil, fmt.Errorf("decode control message: op %d is malformed", m.Op)
	}
	return m, nil
}

// conn is one end of the control socket. Its descriptor is non-blocking
// and registered with the Go runtime's poller: the dispatch goroutine waits
// for the init's next message parked, not in a blocking recvmsg that would
// hold an OS thread in a system call between every two messages (which
// keeps the runtime's monitor thread polling and hands processors between
// threads as the call blocks and returns).
type conn struct {
	f  *os.File
	rc syscall.RawConn
}

// newConn takes over f, the supervisor's end of the control socket.
func newConn(f *os.File) (*conn, error) {
	// f.Fd would make a pollable file blocking again: work on a duplicate.
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fmt.Errorf("duplicate the control socket: %w", err)
	}
	f.Close()
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("make the control socket non-blocking: %w", err)
	}
	nf := os.NewFile(uintptr(fd), "hutch-control")
	rc, err := nf.SyscallConn()
	if err != nil {
		nf.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	return &conn{f: nf, rc: rc}, nil
}

// send writes one message with optional file descriptors.
func (c *conn) send(m *message, fds ...int) error {
	b, err := m.encode()
	if err != nil {
		return fmt.Errorf("encode control message %d: %w", m.Op, err)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	werr := c.rc.Write(func(fd uintptr) bool {
		for {
			err = unix.Sendmsg(int(fd), b, oob, nil, 0)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if err == nil {
		err = werr
	}
	if err != nil {
		return fmt.Errorf("send control message %d: %w", m.Op, err)
	}
	return nil
}

// recv reads one message and the descriptors that came with it. The caller
// owns the returned descriptors. errEOF means the peer closed the socket.
func (c *conn) recv() (*message, []int, error) {
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	oob := make([]byte, unix.CmsgSpace(8*4))
	var n, oobn int
	var err error
	rerr := c.rc.Read(func(fd uintptr) bool {
		for {
			n, oobn, _, _, err = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != unix.EINTR {
				return err != unix.EAGAIN
			}
		}
	})
	if err == nil {
		err = rerr
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
	m, err := decode(buf[:n])
	if err != nil {
		closeAll(fds)
		return nil, nil, err
	}
	return m, fds, nil
}

var errEOF = errors.New("control socket closed")

// bufPool recycles receive buffers. Messages from the init are small (the
// largest is an exit report with a message), so 64 KiB is plenty.
var bufPool = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
