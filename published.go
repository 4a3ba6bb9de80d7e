package hutch

import (
	"time"

	"github.com/hutchsandbox/hutch/nsjail"
	"github.com/hutchsandbox/hutch/publish"
)

// LastActive is when a published port last accepted a connection (zero
// when none has): a session server counts it as activity.
func (s *Session) LastActive() time.Time {
	if n := s.lastActive.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// PublishedAddrs are the host addresses the published ports listen on, in
// the plan's order.
func (s *Session) PublishedAddrs() []string {
	if s.published == nil {
		return nil
	}
	var out []string
	for _, a := range s.published.Addrs() {
		out = append(out, a.String())
	}
	return out
}

// publish opens the plan's published ports and serves them: each
// connection accepted on the host goes to the sandbox's loopback
// (nsjail's DialLoopback), recorded in the session's security log. The
// listeners close, and the connections are cut, at Close.
func (s *Session) publish() error {
	if len(s.plan.Network.Publish) == 0 {
		return nil
	}
	t := time.Now()
	srv, err := publish.Listen(publish.Config{
		Ports: s.plan.Network.Publish, Dial: s.sb.DialLoopback, Recorder: s.rec, Logger: s.o.Logger,
		Accepted: func() { s.lastActive.Store(time.Now().UnixNano()) },
	})
	if err != nil {
		return &nsjail.SetupError{Op: "publish a port", Err: err}
	}
	s.published = srv
	srv.Serve()
	s.mark("supervisor.publish", t)
	return nil
}
