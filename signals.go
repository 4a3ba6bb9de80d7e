package hutch

import (
	"os"
	"os/signal"
	"syscall"
)

// ForwardedSignals are the signals hutch relays to the command it runs.
var ForwardedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

func signalNotify(c chan os.Signal) { signal.Notify(c, ForwardedSignals...) }
func signalStop(c chan os.Signal)   { signal.Stop(c) }
