package session

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/background"
)

// stopGrace is how long `hutch session kill` waits after SIGTERM, and then
// after SIGKILL, for a detached command to end.
const stopGrace = 3 * time.Second

// touch records client activity for the idle timer.
func (s *Server) touch() {
	s.mu.Lock()
	s.last = time.Now()
	s.mu.Unlock()
}

// detach starts the command of the request in body (its memfd) in the
// background and answers with its id. The command is the session's, not
// the connection's: it runs on when the client goes, and does not keep the
// session from idling out (published connections and requests do).
func (s *Server) detach(body int) *Reply {
	var req Request
	if err := readBody(body, &req); err != nil {
		return &Reply{Op: "error", Error: err.Error()}
	}
	if err := checkExec(&req); err != nil {
		return &Reply{Op: "error", Error: err.Error()}
	}
	s.mu.Lock()
	s.execs++
	s.last = time.Now()
	s.mu.Unlock()
	cmd, err := s.Session.Detach(&hutch.ExecOptions{
		Argv: req.Argv, Env: req.Env, ExtraEnv: req.ExtraEnv, Cwd: req.Cwd,
		Timeout: time.Duration(req.TimeoutMS) * time.Millisecond,
	})
	if err != nil {
		return &Reply{Op: "error", Error: err.Error()}
	}
	s.log("detached command started", "id", cmd.ID, "argv", req.Argv)
	return &Reply{Op: "detached", ID: cmd.ID, SandboxID: s.Session.ID()}
}

// background answers ps, logs and kill.
func (s *Server) background(c *net.UnixConn, req *Request) {
	tab := s.Session.Background()
	if req.Op == "ps" {
		send(c, &Reply{Op: "ps", Background: tab.List(), SandboxID: s.Session.ID()})
		return
	}
	cmd, err := tab.Get(req.ID)
	if errors.Is(err, background.ErrUnknown) {
		send(c, &Reply{Op: "error", Error: fmt.Sprintf("no background command %q in session %s (hutch session ps %s lists them)", req.ID, s.Name, s.Name)})
		return
	}
	if req.Op == "kill" {
		cmd.Stop(stopGrace)
		s.log("detached command stopped", "id", cmd.ID)
		send(c, &Reply{Op: "killed", Background: []background.Info{cmd.Info()}})
		return
	}
	out := cmd.Output()
	var files []*os.File
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, b := range [][]byte{out.Stdout, out.Stderr} {
		f, err := sealedBody(b)
		if err != nil {
			send(c, &Reply{Op: "error", Error: "logs: " + err.Error()})
			return
		}
		files = append(files, f)
	}
	send(c, &Reply{Op: "logs", Background: []background.Info{cmd.Info()}, StdoutDropped: out.StdoutDropped, StderrDropped: out.StderrDropped},
		int(files[0].Fd()), int(files[1].Fd()))
}
