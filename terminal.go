package hutch

import (
	"os"

	"github.com/hutchsandbox/hutch/terminal"
)

// Terminal is a pseudo-terminal of a session's sandbox (NewTerminal) for
// one command: its slave (/dev/pts/N inside) is the command's standard
// streams that were the caller's terminal, and its controlling terminal;
// Master is the caller's end (package terminal relays it).
type Terminal struct {
	// Master is read for what the command writes to its terminal and
	// written with its terminal's input. It is non-blocking (the runtime's
	// poller waits on it); reading it reports the end (EIO) after the
	// command's last bytes, once no process holds the slave.
	Master *os.File
}

// NewTerminal makes a pseudo-terminal in the session's sandbox with the
// modes and window size of the caller's terminal like (nil: the kernel's
// defaults, 0x0), for one Exec (ExecOptions.Terminal). Close it when done.
func (s *Session) NewTerminal(like *os.File) (*Terminal, error) {
	m, err := s.sb.OpenPTY()
	if err != nil {
		return nil, err
	}
	if like != nil {
		if err := terminal.CopyModes(m, like); err != nil {
			m.Close()
			return nil, err
		}
	}
	return &Terminal{Master: m}, nil
}

// Close closes the master.
func (t *Terminal) Close() error {
	if t == nil {
		return nil
	}
	return t.Master.Close()
}

// streams says which of the command's standard streams get the terminal:
// those that are terminals (the caller's).
func streams(stdio ...*os.File) [3]bool {
	var on [3]bool
	for i, f := range stdio {
		on[i] = terminal.IsTerminal(f)
	}
	return on
}

// runTerminal is Run's relay of the caller's terminal, or nil when none of
// o's streams is one (or o does not ask for it): the sandbox's own terminal
// for the command, relayed to the caller's.
func runTerminal(sess *Session, o *RunOptions) (*Terminal, *terminal.Relay, error) {
	if !o.Terminal {
		return nil, nil, nil
	}
	c := terminal.Find(o.Stdin, o.Stdout, o.Stderr)
	if c == nil {
		return nil, nil, nil
	}
	t, err := sess.NewTerminal(c.File())
	if err != nil {
		return nil, nil, err
	}
	r, err := terminal.Start(c, t.Master, terminal.Options{Executable: o.Executable})
	if err != nil {
		t.Close()
		return nil, nil, err
	}
	return t, r, nil
}
