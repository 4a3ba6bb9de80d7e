package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// hutch run --json and hutch exec --json forward SIGINT, SIGTERM and SIGHUP
// to the command as the plain forms do (docs/POLICY.md, LIFECYCLE): the
// command's trap runs, hutch prints the result object with the command's
// exit status and exits with it, and run leaves no placeholder behind.
func TestJSONForwardsSignals(t *testing.T) {
	ws := userDir(t)
	session := startSession(t, ws)
	script := `trap 'exit 42' INT TERM HUP; touch /workspace/ready; sleep 30 & wait`
	for _, form := range []struct {
		name string
		args []string
	}{
		{"run", []string{"run", "--json", "--no-discover", "--", "/bin/sh", "-c", script}},
		{"exec", []string{"exec", "--json", session, "--", "/bin/sh", "-c", script}},
		{"exec-fresh", []string{"exec", "--json", "--fresh", session, "--", "/bin/sh", "-c", script}},
	} {
		for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
			t.Run(form.name+"/"+sig.String(), func(t *testing.T) {
				dir := ws
				if form.name == "run" {
					dir = userDir(t) // no .git: run makes a placeholder and must remove it
				}
				ready := filepath.Join(dir, "ready")
				os.Remove(ready) // left by the previous exec
				cmd := hutchCmd(opts{dir: dir}, form.args...)
				out := &syncBuffer{}
				cmd.Stdout, cmd.Stderr = out, out
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				defer cmd.Process.Kill()
				deadline := time.Now().Add(30 * time.Second)
				for {
					if _, err := os.Stat(ready); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the command never became ready; output:\n%s", out.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
				cmd.Process.Signal(sig)
				done := make(chan error, 1)
				go func() { done <- cmd.Wait() }()
				var err error
				select {
				case err = <-done:
				case <-time.After(20 * time.Second):
					t.Fatalf("hutch %s --json did not end within 20s of %s", form.name, sig)
				}
				var res struct {
					ExitCode int `json:"exit_code"`
				}
				if jerr := json.Unmarshal([]byte(out.String()), &res); jerr != nil || res.ExitCode != 42 {
					t.Errorf("after %s: output %q (%v); want the result object with exit_code 42", sig, out.String(), jerr)
				}
				if code := cmd.ProcessState.ExitCode(); code != 42 {
					t.Errorf("after %s: hutch exited %d (%v), want the command's 42", sig, code, err)
				}
				if form.name == "run" {
					if _, err := os.Stat(filepath.Join(dir, ".git")); err == nil {
						t.Errorf("after %s: the .git placeholder was left in the workspace", sig)
					}
				}
			})
		}
	}
}
