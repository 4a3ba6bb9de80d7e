package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

// fakeExec runs fn in place of a sandbox and records the requests.
type fakeExec struct {
	mu     sync.Mutex
	reqs   []ExecRequest
	fn     func(req ExecRequest) (ExecResult, error)
	closed bool
}

func (f *fakeExec) Run(ctx context.Context, req ExecRequest) (ExecResult, error) {
	f.mu.Lock()
	f.reqs = append(f.reqs, req)
	f.mu.Unlock()
	if f.fn == nil {
		return ExecResult{}, nil
	}
	return f.fn(req)
}

func (f *fakeExec) Close() error { f.closed = true; return nil }

func (f *fakeExec) last(t *testing.T) ExecRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("executor not called")
	}
	return f.reqs[len(f.reqs)-1]
}

// runWithin fails the test when RunCommand does not return in time (a
// command blocked on a full pipe would hang it).
func runWithin(t *testing.T, tool *Tool, in RunCommandInput, d time.Duration) (RunCommandResult, error) {
	t.Helper()
	type ret struct {
		r   RunCommandResult
		err error
	}
	ch := make(chan ret, 1)
	go func() {
		r, err := tool.RunCommand(context.Background(), in)
		ch <- ret{r, err}
	}()
	select {
	case r := <-ch:
		return r.r, r.err
	case <-time.After(d):
		t.Fatalf("RunCommand(%+v) did not return within %s", in, d)
		return RunCommandResult{}, nil
	}
}

func TestRunCommandResult(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.WriteString("hello\n")
		req.Stderr.WriteString("warning\n")
		return ExecResult{ExitCode: 3, Events: []string{"hutch: network blocked by policy: destination x.example:443 not allowlisted (1 attempt)"}, SandboxID: "sb-1"}, nil
	}}
	tool := &Tool{Exec: f}
	r, err := runWithin(t, tool, RunCommandInput{Command: "make test"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := RunCommandResult{
		Stdout: "hello\n", Stderr: "warning\n", ExitCode: 3, SandboxID: "sb-1",
		Events: []string{"hutch: network blocked by policy: destination x.example:443 not allowlisted (1 attempt)"},
	}
	if !reflect.DeepEqual(r, want) {
		t.Fatalf("result\n%+v\nwant\n%+v", r, want)
	}
	req := f.last(t)
	if !reflect.DeepEqual(req.Argv, []string{"/bin/sh", "-c", "make test"}) || req.Cwd != "" || req.Timeout != 0 || req.Fresh {
		t.Fatalf("request %+v", req)
	}
}

func TestEventsNeverNil(t *testing.T) {
	tool := &Tool{Exec: &fakeExec{}}
	r, err := runWithin(t, tool, RunCommandInput{Command: "true"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Events == nil {
		t.Fatal("Events is nil; want an empty list (JSON [] rather than null)")
	}
}

func TestTruncation(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.WriteString(strings.Repeat("a", 100))
		req.Stderr.WriteString("01234567\nabc") // the newline is two bytes in JSON
		return ExecResult{}, nil
	}}
	tool := &Tool{Exec: f, MaxOutput: 10}
	r, err := runWithin(t, tool, RunCommandInput{Command: "x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Repeat("a", 10) + "\n[hutch: output truncated: 90 bytes dropped]\n"; r.Stdout != want || !r.StdoutTruncated {
		t.Fatalf("stdout %q (truncated %v), want %q", r.Stdout, r.StdoutTruncated, want)
	}
	// A cut right after a newline adds no blank line.
	if want := "01234567\n[hutch: output truncated: 3 bytes dropped]\n"; r.Stderr != want || !r.StderrTruncated {
		t.Fatalf("stderr %q, want %q", r.Stderr, want)
	}
}

func TestTruncationExactFit(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.WriteString("0123456789")
		return ExecResult{}, nil
	}}
	r, err := runWithin(t, &Tool{Exec: f, MaxOutput: 10}, RunCommandInput{Command: "x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "0123456789" || r.StdoutTruncated {
		t.Fatalf("stdout %q truncated %v", r.Stdout, r.StdoutTruncated)
	}
}

func TestTruncationKeepsWholeCharacters(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.WriteString("aé€x") // 1 + 2 + 3 + 1 bytes
		return ExecResult{}, nil
	}}
	r, err := runWithin(t, &Tool{Exec: f, MaxOutput: 5}, RunCommandInput{Command: "x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The cap cuts € after its first two bytes: it goes whole.
	if want := "aé\n[hutch: output truncated: 4 bytes dropped]\n"; r.Stdout != want {
		t.Fatalf("stdout %q, want %q", r.Stdout, want)
	}
}

func TestInvalidUTF8Replaced(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.Write([]byte{'o', 'k', 0xff, '\n'})
		return ExecResult{}, nil
	}}
	r, err := runWithin(t, &Tool{Exec: f}, RunCommandInput{Command: "x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "ok\uFFFD\n" {
		t.Fatalf("stdout %q", r.Stdout)
	}
}

// A command that writes far more than a pipe holds, on both streams, must
// run to its end: the tool drains what it does not keep.
func TestDrainsBeyondCap(t *testing.T) {
	const total = 8 << 20
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		chunk := []byte(strings.Repeat("x", 4096))
		var wg sync.WaitGroup
		for _, w := range []*os.File{req.Stdout, req.Stderr} {
			wg.Add(1)
			go func(w *os.File) {
				defer wg.Done()
				for n := 0; n < total; n += len(chunk) {
					if _, err := w.Write(chunk); err != nil {
						t.Errorf("write: %v", err)
						return
					}
				}
			}(w)
		}
		wg.Wait() // blocks forever unless both pipes are drained
		return ExecResult{}, nil
	}}
	tool := &Tool{Exec: f, MaxOutput: 1000}
	r, err := runWithin(t, tool, RunCommandInput{Command: "yes"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	marker := "\n[hutch: output truncated: 8387608 bytes dropped]\n"
	if !strings.HasSuffix(r.Stdout, marker) || !strings.HasSuffix(r.Stderr, marker) || len(r.Stdout) != 1000+len(marker) {
		t.Fatalf("stdout tail %q, stderr tail %q", r.Stdout[max(0, len(r.Stdout)-80):], r.Stderr[max(0, len(r.Stderr)-80):])
	}
}

func TestDefaultCap(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stdout.WriteString(strings.Repeat("y", DefaultMaxOutput+5))
		return ExecResult{}, nil
	}}
	r, err := runWithin(t, &Tool{Exec: f}, RunCommandInput{Command: "x"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !r.StdoutTruncated || !strings.HasSuffix(r.Stdout, "y\n[hutch: output truncated: 5 bytes dropped]\n") {
		t.Fatalf("truncated %v, tail %q", r.StdoutTruncated, r.Stdout[len(r.Stdout)-60:])
	}
}

// A process that keeps stdout open after the command ended (possible in a
// kept sandbox) must not hang the call.
func TestLingeringWriterCutOff(t *testing.T) {
	var held int
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		fd, err := syscall.Dup(int(req.Stdout.Fd()))
		if err != nil {
			return ExecResult{}, err
		}
		held = fd
		req.Stdout.WriteString("partial\n")
		return ExecResult{}, nil
	}}
	defer func() {
		if held > 0 {
			syscall.Close(held)
		}
	}()
	tool := &Tool{Exec: f, DrainGrace: 100 * time.Millisecond}
	start := time.Now()
	r, err := runWithin(t, tool, RunCommandInput{Command: "sleep 100 &"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s", d)
	}
	if r.Stdout != "partial\n" {
		t.Fatalf("stdout %q", r.Stdout)
	}
	if len(r.Events) != 1 || !strings.Contains(r.Events[0], "still holds stdout or stderr open") {
		t.Fatalf("events %q", r.Events)
	}
}

// A call uses the capture made after the one before (never a pipe a sandbox
// had: a writer still holding the earlier call's stdout reaches nothing of
// the next call), and Close ends the one made ahead.
func TestCaptureMadeAhead(t *testing.T) {
	var held int
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		if held == 0 {
			fd, err := syscall.Dup(int(req.Stdout.Fd()))
			if err != nil {
				return ExecResult{}, err
			}
			held = fd
		}
		req.Stdout.WriteString("out\n")
		return ExecResult{}, nil
	}}
	defer func() { syscall.Close(held) }()
	tool := &Tool{Exec: f, DrainGrace: 50 * time.Millisecond}
	spare := func() *outputCapture {
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			tool.spareMu.Lock()
			c := tool.spare
			tool.spareMu.Unlock()
			if c != nil {
				return c
			}
			if time.Now().After(deadline) {
				t.Fatal("no capture made ahead within 5 s")
			}
		}
	}
	if _, err := runWithin(t, tool, RunCommandInput{Command: "x"}, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	next := spare()
	syscall.Write(held, []byte("late\n")) // the first call's stdout, still held
	r, err := runWithin(t, tool, RunCommandInput{Command: "x"}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.last(t).Stdout; got != next.outW {
		t.Errorf("the call made its own capture instead of the one made ahead")
	}
	if r.Stdout != "out\n" {
		t.Errorf("stdout %q: an earlier call's writer reached it", r.Stdout)
	}
	last := spare()
	if err := tool.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := last.outR.Stat(); err == nil {
		t.Error("Close left the capture made ahead open")
	}
}

func TestResolveCwd(t *testing.T) {
	ok := map[string]string{
		"":                   "/workspace",
		".":                  "/workspace",
		"src":                "/workspace/src",
		"src/../lib/":        "/workspace/lib",
		"./a//b":             "/workspace/a/b",
		"/workspace":         "/workspace",
		"/workspace/":        "/workspace",
		"/workspace/a/../b":  "/workspace/b",
		"a/..":               "/workspace",
		"/workspace/.hidden": "/workspace/.hidden",
		"/home/u/proj/src":   "/workspace/src", // the host path of the same directory
	}
	tool := &Tool{Workspace: policy.WorkspacePaths{Host: "/home/u/proj", Mount: "/workspace"}}
	for in, want := range ok {
		got, err := tool.ResolveCwd(in)
		if err != nil || got != want {
			t.Errorf("ResolveCwd(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"..", "../x", "a/../../x", "/", "/etc", "/tmp", "/workspace/..", "/workspace/../etc", "/workspacex", "/work", "x\x00y"} {
		got, err := tool.ResolveCwd(in)
		var ie *InputError
		if err == nil || !errors.As(err, &ie) {
			t.Errorf("ResolveCwd(%q) = %q, %v; want an InputError", in, got, err)
			continue
		}
		if in != "x\x00y" && !strings.Contains(err.Error(), "outside /workspace") {
			t.Errorf("ResolveCwd(%q): %v; want it to say outside /workspace", in, err)
		}
	}
}

func TestValidation(t *testing.T) {
	f := &fakeExec{}
	tool := &Tool{Exec: f, MaxTimeout: 10 * time.Minute, Workspace: policy.WorkspacePaths{Host: "/home/u/proj", Mount: "/workspace"}}
	bad := []struct {
		in   RunCommandInput
		want string
	}{
		{RunCommandInput{}, "command is empty"},
		{RunCommandInput{Command: "  \n\t"}, "command is empty"},
		{RunCommandInput{Command: "a\x00b"}, "NUL"},
		{RunCommandInput{Command: "ls", Cwd: "../etc"}, "outside /workspace"},
		{RunCommandInput{Command: "ls", TimeoutSeconds: -1}, "must be positive"},
		{RunCommandInput{Command: "ls", TimeoutSeconds: 601}, "exceeds the policy's limit of 600 seconds"},
		{RunCommandInput{Command: "ls", TimeoutSeconds: 1 << 62}, "exceeds the policy's limit"},
	}
	for _, b := range bad {
		_, err := tool.RunCommand(context.Background(), b.in)
		var ie *InputError
		if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), b.want) {
			t.Errorf("RunCommand(%+v): %v; want an InputError with %q", b.in, err, b.want)
		}
	}
	if len(f.reqs) != 0 {
		t.Fatalf("executor called for invalid input: %+v", f.reqs)
	}
	if _, err := (&Tool{Exec: f}).RunCommand(context.Background(), RunCommandInput{Command: "ls", TimeoutSeconds: 1 << 62}); err == nil {
		t.Error("no error for an absurd timeout without a policy limit")
	}

	r, err := tool.RunCommand(context.Background(), RunCommandInput{Command: "ls", Cwd: "/workspace/sub", TimeoutSeconds: 600, Fresh: true})
	if err != nil {
		t.Fatal(err)
	}
	req := f.last(t)
	if req.Cwd != "/workspace/sub" || req.Timeout != 600*time.Second || !req.Fresh {
		t.Fatalf("request %+v", req)
	}
	_ = r
	// A Tool that does not know its workspace leaves the cwd to the
	// sandbox, as given.
	if _, err := (&Tool{Exec: f}).RunCommand(context.Background(), RunCommandInput{Command: "ls", Cwd: "../x"}); err != nil || f.last(t).Cwd != "../x" {
		t.Errorf("cwd not passed on: %v %+v", err, f.last(t))
	}
}

func TestExecutorErrorCarriesStderr(t *testing.T) {
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		req.Stderr.WriteString("init: mount /workspace: permission denied\n")
		return ExecResult{}, errors.New("cannot set up the sandbox: build the sandbox: boom")
	}}
	_, err := runWithin(t, &Tool{Exec: f}, RunCommandInput{Command: "ls"}, 10*time.Second)
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("err %v", err)
	}
	var ie *InputError
	if errors.As(err, &ie) {
		t.Fatal("a sandbox failure reported as an input error")
	}
}

func TestCloseClosesExecutor(t *testing.T) {
	f := &fakeExec{}
	if err := (&Tool{Exec: f}).Close(); err != nil || !f.closed {
		t.Fatalf("Close: %v, closed %v", err, f.closed)
	}
	if err := New(nil, nil).Close(); err != nil {
		t.Fatal(err)
	}
}

func TestNewUsesPolicyTimeout(t *testing.T) {
	tool := New(nil, nil)
	if tool.MaxTimeout != 10*time.Minute {
		t.Fatalf("MaxTimeout %s", tool.MaxTimeout)
	}
	if _, ok := tool.Exec.(*HutchExecutor); !ok {
		t.Fatalf("Exec %T", tool.Exec)
	}
}

func TestFormatText(t *testing.T) {
	got := FormatText(RunCommandResult{Stdout: "hello\n", Stderr: "oops", ExitCode: 124, TimedOut: true, Events: []string{"hutch: a", "hutch: b"}})
	want := "exit_code: 124 (timed out)\n--- stdout ---\nhello\n--- stderr ---\noops\n--- policy_events ---\nhutch: a\nhutch: b\n"
	if got != want {
		t.Fatalf("got\n%s\nwant\n%s", got, want)
	}
	if got := FormatText(RunCommandResult{Events: []string{}}); got != "exit_code: 0\n" {
		t.Fatalf("empty: %q", got)
	}
}

func TestDescribe(t *testing.T) {
	p := policy.Default()
	p.Network.Allow = []policy.AllowEntry{{Host: "modules.example.com", Ports: []int{443}, Reason: "go"}}
	d := Describe(p, DescribeOptions{})
	for _, want := range []string{"/workspace", "read-write", "default deny", "modules.example.com:443", "policy_events",
		"network blocked by policy", "do not retry", "600", "1 MiB", "[hutch: output truncated: N bytes dropped]", "124", "125", "126", "127", ".git/hooks"} {
		if !strings.Contains(d, want) {
			t.Errorf("description lacks %q:\n%s", want, d)
		}
	}
	p.Network.Mode = policy.NetNone
	if d := Describe(p, DescribeOptions{MaxOutput: 4096}); !strings.Contains(d, "Network: none") || !strings.Contains(d, "4 KiB") {
		t.Errorf("network none / 4 KiB cap not described:\n%s", d)
	}
	if d := Describe(p, DescribeOptions{Workspace: policy.WorkspacePaths{Host: "/home/u/proj", Mount: "/home/u/proj"}}); !strings.Contains(d, "at its own host path, /home/u/proj, so paths are the same inside and out") || strings.Contains(d, "/workspace") {
		t.Errorf("the workspace at its host path is not described:\n%s", d)
	}
	if d := Describe(p, DescribeOptions{Session: true}); !strings.Contains(d, "Calls share one sandbox") || strings.Contains(d, "Each call gets a fresh sandbox") {
		t.Errorf("a session's sharing is not described:\n%s", d)
	}
}

// The cap counts the output as its JSON encoding (the result's form on the
// wire): a NUL is six bytes there (\u0000), so a stream of NULs must not
// make a result six times the cap. What is cut is counted as dropped.
func TestTruncationCountsJSONEscapes(t *testing.T) {
	const max = 1 << 20
	f := &fakeExec{fn: func(req ExecRequest) (ExecResult, error) {
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); req.Stderr.Write([]byte(strings.Repeat("<&\"\n", 2<<20))) }()
		req.Stdout.Write(make([]byte, 8<<20))
		wg.Wait()
		return ExecResult{}, nil
	}}
	r, err := runWithin(t, &Tool{Exec: f, MaxOutput: max}, RunCommandInput{Command: "x"}, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{"stdout": r.Stdout, "stderr": r.Stderr} {
		b, _ := json.Marshal(s)
		body, marker, _ := strings.Cut(s, "[hutch: output truncated: ")
		eb, _ := json.Marshal(body)
		if len(eb)-2 > max || len(eb)-2 < max-6 {
			t.Errorf("%s: %d bytes as JSON before the marker (%d in all), want at most the cap %d and not much less", name, len(eb)-2, len(b)-2, max)
		}
		var dropped int
		fmt.Sscanf(marker, "%d bytes dropped]", &dropped)
		kept := len(body)
		if name == "stdout" {
			kept-- // the newline put before the marker (stderr's cut ends with one of its own)
		}
		if kept+dropped != 8<<20 {
			t.Errorf("%s: %d bytes kept and %d dropped, want %d in all", name, kept, dropped, 8<<20)
		}
	}
	if !r.StdoutTruncated || !r.StderrTruncated {
		t.Errorf("truncated: %v, %v", r.StdoutTruncated, r.StderrTruncated)
	}
}

func TestFormatTextTail(t *testing.T) {
	r := RunCommandResult{Stdout: "line 1\nline 2\nline 3\n", Stderr: "short\n", ExitCode: 1, Events: []string{"hutch: a"}}
	got := FormatTextTail(r, 10)
	want := "exit_code: 1\n--- stdout (the last 7 of 21 bytes) ---\nline 3\n--- stderr ---\nshort\n--- policy_events ---\nhutch: a\n"
	if got != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
	if got, want := FormatTextTail(RunCommandResult{Stdout: "€€€€"}, 4), "exit_code: 0\n--- stdout (the last 3 of 12 bytes) ---\n€\n"; got != want {
		t.Fatalf("got %q, want %q (whole characters)", got, want)
	}
	if FormatTextTail(r, 0) != FormatText(r) {
		t.Fatal("FormatTextTail(r, 0) is not FormatText(r)")
	}
}
