//go:build !mcpimage

package main

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/agent"
	"github.com/hutchsandbox/hutch/policy"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"golang.org/x/sys/unix"
)

// decodeLine decodes what the SDK's decoder decodes, to the same message,
// and refuses what it refuses.
func TestDecodeLineMatchesSDK(t *testing.T) {
	for _, line := range decodeLineCases {
		got, gerr := decodeLine([]byte(line))
		want, werr := jsonrpc.DecodeMessage([]byte(line))
		if (gerr != nil) != (werr != nil) {
			t.Errorf("%s:\n got %#v, %v\nwant %#v, %v", line, got, gerr, want, werr)
			continue
		}
		if gerr == nil && !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Errorf("%s:\n got %#v\nwant %#v", line, got, want)
		}
	}
}

// The direct decoding takes the common requests (this fails if it stopped
// taking them: the general path would hide it) and nothing it would decode
// differently from the SDK.
func TestDecodeRequestFast(t *testing.T) {
	for _, line := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"ls"}}}`,
		`{"jsonrpc":"2.0","id":"abc","method":"tools/list"}`,
		` { "method" : "ping" , "jsonrpc" : "2.0" , "id" : -3 } `,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	} {
		if _, ok := decodeRequestFast([]byte(line)); !ok {
			t.Errorf("%s: not taken directly", line)
		}
	}
	for _, line := range decodeLineCases {
		checkDecodeRequestFast(t, line)
	}
}

func checkDecodeRequestFast(t *testing.T, line string) {
	got, ok := decodeRequestFast([]byte(line))
	if !ok {
		return
	}
	want, err := jsonrpc.DecodeMessage([]byte(line))
	if err != nil || !reflect.DeepEqual(normalize(got), normalize(want)) {
		t.Errorf("%s:\n direct %#v\n   SDK %#v, %v", line, got, want, err)
	}
}

// FuzzDecodeRequestFast: whatever the direct decoding takes, the SDK
// decodes to the same message.
func FuzzDecodeRequestFast(f *testing.F) {
	for _, line := range decodeLineCases {
		f.Add(line)
	}
	f.Fuzz(checkDecodeRequestFast)
}

var decodeLineCases = []string{
	`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"run_command","arguments":{"command":"ls"}}}`,
	`{"jsonrpc":"2.0","id":"abc","method":"tools/list"}`,
	`{"jsonrpc":"2.0","id":7.0,"method":"ping","params":null}`,
	`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
	`{"jsonrpc":"2.0","id":null,"method":"notifications/cancelled","params":{"requestId":1}}`,
	`{"params":{},"method":"ping","id":2,"jsonrpc":"2.0","extra":true}`,
	`{"jsonrpc":"2.0","id":3,"method":""}`,
	`{"jsonrpc":"2.0","id":3,"method":null}`,
	`{"jsonrpc":"2.0","id":4,"result":{}}`,
	`{"jsonrpc":"2.0","id":5,"error":{"code":-32601,"message":"no"}}`,
	`{"jsonrpc":"2.0","id":6,"method":"ping","result":{}}`,
	`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
	`{"id":1,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":5}`,
	`{"jsonrpc":"2.0","id":{"x":1},"method":"ping"}`,
	`{"jsonrpc":"2.0","id":true,"method":"ping"}`,
	`{"jsonrpc":"2.0","ID":1,"Method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"`,
	`"just a string"`,
	`{}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","id":2}`,
	`{"jsonrpc":"2.0","id":1e2,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":-0,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":9007199254740993,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":99999999999999999999,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":"a\"b","method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":"to\u006fls/list"}`,
	`{"jsonrpc":"\u0032.0","id":1,"method":"ping"}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":[1,{"a":"}"}]}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":"\\"}}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"} x`,
	`{"jsonrpc":"2.0","id":1,"method":"ping"}{}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping",}`,
	`{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":1}`,
	`{"jsonrpc":"2.0","id":1,"meth\u006fd":"ping"}`,
	`{"jsonrpc" : "2.0" ,"id":1 ,"method":"ping"}`,
	"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"\xe0\"}",
}

// normalize makes equal messages compare equal: params that are absent,
// and a JSON null, mean the same to the handlers.
func normalize(m jsonrpc.Message) jsonrpc.Message {
	if r, ok := m.(*jsonrpc.Request); ok && string(r.Params) == "null" {
		c := *r
		c.Params = nil
		return &c
	}
	return m
}

func TestDecodeLineRefusesBatches(t *testing.T) {
	_, err := decodeLine([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`))
	if err == nil || !strings.Contains(err.Error(), "batches are not supported") {
		t.Errorf("batch: %v", err)
	}
}

// The connection reads one message per line: blank lines skipped, a line
// longer than the reader's buffer, a last line without a newline, then EOF.
func TestLineConnRead(t *testing.T) {
	long := strings.Repeat("x", 200<<10)
	input := "\n  \n" +
		`{"jsonrpc":"2.0","id":1,"method":"ping"}` + "\r\n" +
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"` + long + `"}}` + "\n" +
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`
	c, err := (&lineTransport{r: io.NopCloser(strings.NewReader(input)), w: io.Discard}).Connect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i, want := range []string{"ping", "tools/call", "notifications/initialized"} {
		m, err := c.Read(ctx)
		r, ok := m.(*jsonrpc.Request)
		if err != nil || !ok || r.Method != want {
			t.Fatalf("message %d: %#v, %v; want %s", i, m, err, want)
		}
		if want == "tools/call" && !strings.Contains(string(r.Params), long) {
			t.Errorf("the long line's params were cut: %d bytes", len(r.Params))
		}
	}
	if _, err := c.Read(ctx); !errors.Is(err, io.EOF) {
		t.Errorf("after the last line: %v, want EOF", err)
	}
}

func TestLineConnTooLong(t *testing.T) {
	input := `{"jsonrpc":"2.0","id":1,"method":"` + strings.Repeat("x", maxLine) + `"}` + "\n"
	c, _ := (&lineTransport{r: io.NopCloser(strings.NewReader(input)), w: io.Discard}).Connect(context.Background())
	if _, err := c.Read(context.Background()); err == nil || !strings.Contains(err.Error(), "longer than") {
		t.Errorf("an over-long line: %v", err)
	}
}

// Write puts one message per line, encoded as the SDK encodes it.
func TestLineConnWrite(t *testing.T) {
	num, _ := jsonrpc.MakeID(float64(9))
	neg, _ := jsonrpc.MakeID(float64(-12))
	str, _ := jsonrpc.MakeID("a<b")
	for _, msg := range []jsonrpc.Message{
		&jsonrpc.Response{ID: num, Result: []byte(`{"ok":true}`)},
		&jsonrpc.Response{ID: neg, Result: []byte(`{"text":"a <b> & \u2028 \u00e9 é \\n","n":[1,2.5,null]}`)},
		&jsonrpc.Response{ID: num, Result: []byte("{\"t\":\"\u2028\u2029<>&\"}")},
		&jsonrpc.Response{ID: str, Result: []byte(`{}`)},
		&jsonrpc.Response{ID: num, Error: &jsonrpc.Error{Code: -32601, Message: "no"}},
		&jsonrpc.Request{ID: num, Method: "ping"},
		&jsonrpc.Request{Method: "notifications/progress", Params: []byte(`{"progress":1}`)},
	} {
		var out strings.Builder
		c, _ := (&lineTransport{r: io.NopCloser(strings.NewReader("")), w: &out}).Connect(context.Background())
		if err := c.Write(context.Background(), msg); err != nil {
			t.Fatal(err)
		}
		want, _ := jsonrpc.EncodeMessage(msg)
		if out.String() != string(want)+"\n" {
			t.Errorf("wrote %q, want %q", out.String(), string(want)+"\n")
		}
	}
}

// A pipe comes back as a file in the poller (deadlines work only there),
// reads what is written, and gets its blocking mode back; anything else
// comes back as it was.
func TestPollableInput(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	sc, _ := r.SyscallConn()
	var fd int
	sc.Control(func(u uintptr) { fd = int(u) })
	// os.Pipe's ends are non-blocking; make this one blocking, as a
	// client's pipe on descriptor 0 is.
	if err := unix.SetNonblock(fd, false); err != nil {
		t.Fatal(err)
	}
	f, restore, err := pollableInput(fd, r)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f == io.ReadCloser(r) {
		t.Fatal("a pipe came back as it was")
	}
	if err := f.(*os.File).SetReadDeadline(time.Now().Add(time.Minute)); err != nil {
		t.Errorf("the duplicate is not in the poller: %v", err)
	}
	w.Write([]byte("x"))
	if b := make([]byte, 1); func() bool { n, err := f.Read(b); return n != 1 || err != nil }() {
		t.Error("read through the duplicate failed")
	}
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK == 0 {
		t.Error("the shared open file is not non-blocking while served")
	}
	restore()
	if fl, _ := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); fl&unix.O_NONBLOCK != 0 {
		t.Error("restore left the open file non-blocking")
	}

	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	g, restore2, err := pollableInput(int(null.Fd()), null)
	if err != nil || g != io.ReadCloser(null) {
		t.Errorf("/dev/null: %v, %v; want it back as it was", g, err)
	}
	restore2()
}

// A client that writes initialize and notifications/initialized without
// waiting for the answer (a shell pipe) and then closes its end gets them
// handled in that order: what follows initialize waits for its answer.
// Before, the SDK handled the notification first (it handles notifications
// at once, beside its queue of requests), complained, and saw the end of
// the input before it answered initialize.
func TestLineConnInitializeFirst(t *testing.T) {
	// As the server runs (oneProcessor): the reading goroutine keeps the
	// processor while it has input.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	for i := 0; i < 20; i++ {
		ctx := context.Background()
		var log strings.Builder
		var mu sync.Mutex
		lg := slog.New(slog.NewTextHandler(lockedWriter{&mu, &log}, nil))
		srv, err := newMCPServer(ctx, &agent.Tool{Exec: writeExec{}}, policy.Default(), agent.DefaultMaxOutput, lg, lg)
		if err != nil {
			t.Fatal(err)
		}
		inR, inW, _ := os.Pipe()
		outR, outW, _ := os.Pipe()
		input := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"0"}}}` + "\n" +
			`{"jsonrpc":"2.0","method":"notifications/initialized"}` + "\n"
		if _, err := inW.WriteString(input); err != nil { // all at once, then the end
			t.Fatal(err)
		}
		inW.Close()
		ss, err := srv.Connect(ctx, &lineTransport{r: inR, w: outW}, nil)
		if err != nil {
			t.Fatal(err)
		}
		outR.SetReadDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(outR).ReadString('\n')
		ss.Wait()
		outR.Close()
		outW.Close()
		mu.Lock()
		logged := log.String()
		mu.Unlock()
		if err != nil || !strings.Contains(line, `"id":1,"result":{"capabilities"`) || strings.Contains(logged, "before initialize") {
			t.Fatalf("round %d: answer %q, %v; log:\n%s", i, line, err, logged)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
