package test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"
)

// SIGKILL of hutch at random moments — run, exec, mcp — leaves nothing: no
// process of the command, nothing in the workspace. (The supervisor's
// parent-death signal takes the init, and pid 1 takes its namespace; a
// session's server terminates a command whose client went away.)
func TestSIGKILLAtRandomMoments(t *testing.T) {
	rounds := 25
	ws := userDir(t)
	writeUserFile(t, ws+"/keep.txt", "x\n")
	// Each command carries a marker in its command line: a survivor is a
	// process with it.
	marker := fmt.Sprintf("7.%d", rand.IntN(1e6))
	cmdline := []string{"/bin/sh", "-c", "touch /tmp/t; sleep " + marker + " & sleep " + marker + "; true", "sh"}
	kill := func(start func() (interface{ Kill() error }, func()), i int) {
		p, wait := start()
		time.Sleep(time.Duration(i%10)*7*time.Millisecond + time.Duration(rand.IntN(5))*time.Millisecond)
		p.Kill()
		wait()
	}
	t.Run("run", func(t *testing.T) {
		for i := range rounds {
			kill(func() (interface{ Kill() error }, func()) {
				cmd := hutchCmd(opts{dir: ws}, append([]string{"run", "--no-discover", "--"}, cmdline...)...)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd.Process, func() { cmd.Wait() }
			}, i)
		}
	})
	t.Run("exec", func(t *testing.T) {
		name := startSession(t, ws, "--no-discover")
		for i := range rounds {
			env := []string(nil)
			if i%2 == 1 {
				env = []string{"HUTCH_NO_FAST_EXEC=1"}
			}
			kill(func() (interface{ Kill() error }, func()) {
				cmd := hutchCmd(opts{dir: ws, env: env}, append([]string{"exec", name, "--"}, cmdline...)...)
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				return cmd.Process, func() { cmd.Wait() }
			}, i)
		}
		// The session serves on.
		mustCode(t, hutch(t, opts{dir: ws}, "exec", name, "--", "true"), 0)
	})
	t.Run("mcp", func(t *testing.T) {
		for i := range rounds / 2 {
			kill(func() (interface{ Kill() error }, func()) {
				cmd := hutchCmd(opts{dir: ws}, "mcp", "--no-discover")
				m := startMCP(t, cmd)
				args, _ := json.Marshal(map[string]any{"name": "run_command", "arguments": map[string]any{"command": strings.Join(cmdline[2:3], "")}})
				fmt.Fprintf(m.stdin, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":%s}`+"\n", args)
				return cmd.Process, func() { m.stdin.Close(); m.stdin = nil; cmd.Wait() }
			}, i)
		}
	})
	var left []int
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if left = processesWith("sleep " + marker); len(left) == 0 {
			break
		}
	}
	if len(left) > 0 {
		t.Errorf("processes of killed hutch runs survive: %v", left)
	}
	ents, _ := os.ReadDir(ws)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "keep.txt" {
		t.Errorf("after the SIGKILLs the workspace holds %v", names)
	}
}
