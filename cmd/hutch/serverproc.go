package main

import (
	"os"
	"runtime"
)

// oneProcessor runs the Go code of a long-lived session server (`hutch
// session serve`, `hutch mcp`) on one processor, unless GOMAXPROCS is set.
// Each command passes through several goroutines of the server (the
// control socket's reader, the caller's, output readers, the MCP SDK's
// reader and handler); with two processors each hand-off between them
// wakes an idle thread on the other CPU, which costs more here than the
// work handed off. The servers wait far more than they compute; the
// commands themselves are other processes and use every CPU.
// docs/PERFORMANCE.md has the measurements.
func oneProcessor() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
