package hutch_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/hutchsandbox/hutch"
	"github.com/hutchsandbox/hutch/policy"
)

// A tool that embeds hutch starts a session from a policy and runs
// commands in it, each with a context, and gets the same result the CLI
// and the MCP server report.
func ExampleNewSession() {
	ws, _ := os.MkdirTemp("", "hutch-example-")
	defer os.RemoveAll(ws)

	p := policy.Default()
	p.Filesystem.Workspace = ws
	p.Network.DiscoverRegistries = false
	sess, err := hutch.NewSession(context.Background(), &hutch.SessionOptions{Policy: p})
	if err != nil {
		fmt.Println("no sandbox here:", err)
		return
	}
	defer sess.Close()

	r, w, _ := os.Pipe()
	res, err := sess.Exec(context.Background(), &hutch.ExecOptions{
		Argv:   []string{"/bin/sh", "-c", "id -u; echo hello > greeting; touch /etc/x 2>/dev/null"},
		Stdout: w,
	})
	w.Close()
	out, _ := io.ReadAll(r)
	if err != nil {
		fmt.Println("exec:", err)
		return
	}
	greeting, _ := os.ReadFile(filepath.Join(ws, "greeting"))
	fmt.Printf("uid inside: %s", out)
	fmt.Printf("exit code: %d\n", res.ExitCode)
	fmt.Printf("written to the workspace: %s", greeting)
	// Output:
	// uid inside: 1000
	// exit code: 1
	// written to the workspace: hello
}
