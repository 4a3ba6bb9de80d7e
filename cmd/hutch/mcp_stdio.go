//go:build !mcpimage

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// pollableStdin returns standard input as a file the Go runtime's poller
// waits on, when it is a pipe or a socket (as an MCP client starts its
// server): reading it then parks a goroutine instead of holding a thread
// in read(2), which the scheduler would have to work around at every
// request. See pollableInput.
func pollableStdin() (f io.ReadCloser, restore func(), err error) {
	return pollableInput(0, os.Stdin)
}

// pollableInput returns a duplicate of fd in non-blocking mode, registered
// with the poller, when fd is a pipe or a socket; restore puts the mode
// back (the open file is shared with fd and with whoever else holds it)
// and is safe to call more than once. Any other kind of descriptor is
// returned as orig, with a restore that does nothing.
func pollableInput(fd int, orig *os.File) (f io.ReadCloser, restore func(), err error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, nil, fmt.Errorf("stat standard input: %w", err)
	}
	if kind := st.Mode & unix.S_IFMT; kind != unix.S_IFIFO && kind != unix.S_IFSOCK {
		return orig, func() {}, nil
	}
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("read the flags of standard input: %w", err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, nil, fmt.Errorf("duplicate standard input: %w", err)
	}
	if flags&unix.O_NONBLOCK == 0 {
		if _, err := unix.FcntlInt(uintptr(dup), unix.F_SETFL, flags|unix.O_NONBLOCK); err != nil {
			unix.Close(dup)
			return nil, nil, fmt.Errorf("make standard input non-blocking: %w", err)
		}
	}
	restore = func() {
		if flags&unix.O_NONBLOCK == 0 {
			_, _ = unix.FcntlInt(uintptr(fd), unix.F_SETFL, flags)
		}
	}
	// A non-blocking descriptor makes os.NewFile register it with the poller.
	return os.NewFile(uintptr(dup), "stdin"), restore, nil
}

// lineTransport is the MCP stdio transport (newline-delimited JSON-RPC
// messages) with one decoding pass per request. The SDK's own transport
// decodes each line three times (as a batch, as a message, its method),
// each with a fresh 32 KiB buffer; requests and notifications are decoded
// here once, with the same rules (the "jsonrpc" tag must be "2.0", keys
// match exactly), and anything else (a response, a malformed line) by the
// SDK's decoder. Batches are refused, as the SDK refuses them from protocol
// version 2025-06-18 on.
type lineTransport struct {
	r io.ReadCloser
	w io.Writer
	// written, if set, is called after each response is written.
	written func()
}

// Connect implements mcp.Transport.
func (t *lineTransport) Connect(context.Context) (mcp.Connection, error) {
	return &lineConn{r: t.r, in: bufio.NewReaderSize(t.r, 64<<10), w: t.w, written: t.written, closed: make(chan struct{})}, nil
}

type lineConn struct {
	r   io.ReadCloser
	in  *bufio.Reader
	buf []byte // a line longer than the reader's buffer
	wmu sync.Mutex
	w   io.Writer

	written func()

	// While an initialize request is being answered, the next message
	// waits (initDone is closed by the answer's Write): the SDK handles
	// notifications such as notifications/initialized at once, beside its
	// queue of requests, and a client that writes its messages without
	// waiting for the answer (a shell pipe) would have them before the
	// initialize they follow.
	initMu   sync.Mutex
	initID   jsonrpc.ID
	initDone chan struct{}

	closeOnce sync.Once
	closed    chan struct{}
}

func (c *lineConn) SessionID() string { return "" }

// Read implements mcp.Connection.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	c.initMu.Lock()
	wait := c.initDone
	c.initMu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-c.closed:
			return nil, io.EOF
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		line, err := c.readLine()
		if err != nil {
			return nil, err
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		msg, err := decodeLine(line)
		if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.Method == "initialize" && req.ID.IsValid() {
			c.initMu.Lock()
			c.initID, c.initDone = req.ID, make(chan struct{})
			c.initMu.Unlock()
		}
		return msg, err
	}
}

// maxLine bounds one message, as the SDK's transport does by default.
const maxLine = mcp.DefaultMaxLineLength

func (c *lineConn) readLine() ([]byte, error) {
	c.buf = c.buf[:0]
	for {
		frag, err := c.in.ReadSlice('\n')
		if err == nil && len(c.buf) == 0 {
			return frag, nil
		}
		c.buf = append(c.buf, frag...)
		if len(c.buf) > maxLine {
			return nil, fmt.Errorf("a JSON-RPC message longer than %d bytes", maxLine)
		}
		switch {
		case err == nil:
			return c.buf, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(bytes.TrimSpace(c.buf)) > 0:
			return c.buf, nil
		default:
			return nil, err
		}
	}
}

// decodeLine decodes one message.
func decodeLine(line []byte) (jsonrpc.Message, error) {
	if line[0] == '[' {
		return nil, errors.New("JSON-RPC batches are not supported: send one message per line")
	}
	if msg, ok := decodeRequestFast(line); ok {
		return msg, nil
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(line, &m) != nil || m["method"] == nil || m["result"] != nil || m["error"] != nil {
		return jsonrpc.DecodeMessage(line) // the SDK's decoder, and its errors
	}
	var tag, method string
	if err := json.Unmarshal(m["jsonrpc"], &tag); err != nil || tag != "2.0" {
		return nil, fmt.Errorf("invalid message version tag %s; expected \"2.0\"", m["jsonrpc"])
	}
	if err := json.Unmarshal(m["method"], &method); err != nil {
		return nil, fmt.Errorf("unmarshaling jsonrpc message: method: %w", err)
	}
	var rawID any
	if id := m["id"]; id != nil {
		if err := json.Unmarshal(id, &rawID); err != nil {
			return nil, fmt.Errorf("unmarshaling jsonrpc message: id: %w", err)
		}
	}
	id, err := jsonrpc.MakeID(rawID)
	if err != nil {
		return nil, err
	}
	return &jsonrpc.Request{ID: id, Method: method, Params: m["params"]}, nil
}

// decodeRequestFast decodes a request or notification of the common shape:
// the members jsonrpc ("2.0"), method (a string without escapes), id (an
// integer or a string without escapes; absent for a notification) and
// params, nothing else. For any other line it returns false and decodeLine
// decodes it the general way, with the same result where both apply.
func decodeRequestFast(line []byte) (jsonrpc.Message, bool) {
	if !validObject(line) {
		return nil, false
	}
	var req jsonrpc.Request
	var tag, method bool
	ok := objectMembers(line, func(key string, v []byte) bool {
		switch key {
		case "jsonrpc":
			tag = string(v) == `"2.0"`
			return tag
		case "method":
			req.Method, method = plainString(v)
			return method
		case "id":
			var id any
			if n, ok := plainInt(v); ok {
				id = float64(n) // as the SDK's decoder reads any number
			} else if s, ok := plainString(v); ok {
				id = s
			} else {
				return false
			}
			var err error
			req.ID, err = jsonrpc.MakeID(id)
			return err == nil
		case "params":
			req.Params = json.RawMessage(v)
			return true
		}
		return false
	})
	if !ok || !tag || !method {
		return nil, false
	}
	return &req, true
}

// Write implements mcp.Connection.
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	data, err := encodeMessage(msg)
	if err != nil {
		return fmt.Errorf("encode a JSON-RPC message: %w", err)
	}
	c.wmu.Lock()
	_, err = c.w.Write(append(data, '\n'))
	c.wmu.Unlock()
	if resp, ok := msg.(*jsonrpc.Response); ok {
		c.initMu.Lock()
		if c.initDone != nil && resp.ID == c.initID {
			close(c.initDone)
			c.initDone = nil
		}
		c.initMu.Unlock()
		if c.written != nil {
			c.written()
		}
	}
	return err
}

// encodeMessage is jsonrpc.EncodeMessage, with a successful response to a
// numbered request put together directly: its result is already the SDK's
// compact encoding, which EncodeMessage would copy through a validating
// pass after encoding the envelope by reflection.
func encodeMessage(msg jsonrpc.Message) ([]byte, error) {
	if r, ok := msg.(*jsonrpc.Response); ok && r.Error == nil && len(r.Result) > 0 && bytes.IndexByte(r.Result, '\n') < 0 {
		if id, ok := r.ID.Raw().(int64); ok {
			b := make([]byte, 0, len(r.Result)+48)
			b = append(b, `{"jsonrpc":"2.0","id":`...)
			b = strconv.AppendInt(b, id, 10)
			b = append(b, `,"result":`...)
			b = append(b, r.Result...)
			return append(b, '}'), nil
		}
	}
	return jsonrpc.EncodeMessage(msg)
}

// Close implements mcp.Connection.
func (c *lineConn) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.r.Close()
}
