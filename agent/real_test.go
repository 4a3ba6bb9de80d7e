package agent

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/hutchsandbox/hutch/policy"
)

// TestRealSandbox runs a command through HutchExecutor in a real sandbox.
// hutch.Run re-executes a hutch binary as the sandbox's init, which a test
// binary is not, so it needs the built binary: HUTCH_BIN (make test sets it).
func TestRealSandbox(t *testing.T) {
	bin := os.Getenv("HUTCH_BIN")
	if bin == "" {
		t.Skip("HUTCH_BIN is not set: this test needs the built hutch binary as the sandbox's init (make build; HUTCH_BIN=$PWD/bin/hutch go test ./agent/)")
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("HUTCH_BIN: %v (relative paths are taken from the package directory; pass an absolute path)", err)
	}
	ws := t.TempDir()
	if err := os.Mkdir(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := policy.Default()
	p.Filesystem.Workspace = ws
	p.Network.DiscoverRegistries = false
	p.Filesystem.DefaultCaches = false // a temporary workspace: no caches left behind
	if err := p.ResolvePaths(ws); err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	tool := New(p, nil)
	tool.Exec.(*HutchExecutor).Executable = bin
	defer tool.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := tool.RunCommand(ctx, RunCommandInput{Command: "echo hi; echo err >&2; exit 3"})
	if err != nil {
		t.Fatal(err)
	}
	want := RunCommandResult{Stdout: "hi\n", Stderr: "err\n", ExitCode: 3, Events: []string{}, SandboxID: r.SandboxID}
	if !reflect.DeepEqual(r, want) || r.SandboxID == "" {
		t.Fatalf("result\n%#v\nwant\n%#v (and a sandbox id)", r, want)
	}

	r, err = tool.RunCommand(ctx, RunCommandInput{Command: "pwd", Cwd: "sub", TimeoutSeconds: 30})
	if err != nil {
		t.Fatal(err)
	}
	// The Go API's default: the workspace at its own host path.
	if r.Stdout != filepath.Join(tool.Workspace.Host, "sub")+"\n" || tool.Workspace.Mount != tool.Workspace.Host || r.ExitCode != 0 {
		t.Fatalf("pwd in sub: %#v", r)
	}
}
