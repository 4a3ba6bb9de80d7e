package main

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hutchsandbox/hutch/containerenv"
	"github.com/hutchsandbox/hutch/containerseccomp"
)

// containerSeccompFlag is `hutch doctor --container-seccomp`.
const containerSeccompFlag = "container-seccomp"

// printContainerSeccomp writes hutch's container seccomp profile for this
// machine's architecture to stdout (JSON ready for docker run
// --security-opt seccomp=FILE) and how to use it to stderr.
func printContainerSeccomp(stdout, stderr io.Writer) error {
	b, err := containerSeccompJSON(runtime.GOARCH)
	if err != nil {
		return err
	}
	fmt.Fprint(stderr, containerseccomp.Usage)
	_, err = stdout.Write(b)
	return err
}

// containerSeccompJSON is the profile as `hutch doctor --container-seccomp`
// prints it (and deploy/seccomp/hutch.json holds, for amd64).
func containerSeccompJSON(goarch string) ([]byte, error) {
	p, err := containerseccomp.Hutch(goarch)
	if err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode the container seccomp profile: %w", err)
	}
	return append(b, '\n'), nil
}

// containerReport is doctor's view of the container hutch runs in.
type containerReport struct {
	Runtime  string   `json:"runtime,omitempty"`
	Evidence string   `json:"evidence,omitempty"`
	Seccomp  string   `json:"seccomp"`
	Proc     string   `json:"proc"`
	Findings []string `json:"findings,omitempty"`
}

// diagnoseContainer collects the container facts and, when no sandbox can
// be made, the causes with their fixes.
func diagnoseContainer(canSandbox bool) *containerReport {
	f := containerenv.Probe()
	r := &containerReport{Runtime: string(f.Runtime), Evidence: f.Evidence}
	switch {
	case f.SeccompMode == 2 && (f.UnshareErrno == unix.EPERM || f.SetnsErrno == unix.EPERM):
		r.Seccomp = fmt.Sprintf("this process runs under %d seccomp filter(s) that refuse unshare/setns (unshare(0): %s; setns(-1, 0): %s, where the kernel says bad file descriptor)", f.SeccompFilters, errText(f.UnshareErrno), errText(f.SetnsErrno))
	case f.SeccompMode == 2:
		r.Seccomp = fmt.Sprintf("this process runs under %d seccomp filter(s); unshare and setns pass them", f.SeccompFilters)
	default:
		r.Seccomp = "no seccomp filter on this process"
	}
	if len(f.ProcSubmounts) > 0 {
		r.Proc = "partly covered by " + strings.Join(f.ProcSubmounts, ", ") + " (a sandbox's procfs is refused in a user namespace then)"
	} else {
		r.Proc = "not covered (a sandbox's procfs can be mounted)"
	}
	if !canSandbox {
		for _, fd := range containerenv.Diagnose(f, containerenv.NoFailure, 0) {
			r.Findings = append(r.Findings, fd.String())
		}
	}
	return r
}

func errText(e unix.Errno) string {
	if e == 0 {
		return "ok"
	}
	return e.Error()
}

func printContainer(row func(k, v string), c *containerReport) {
	if c == nil {
		return
	}
	if c.Runtime != "" {
		row("container", containerenv.RuntimeName(containerenv.Runtime(c.Runtime))+" ("+c.Evidence+")")
	} else {
		row("container", "none found")
	}
	row("", "seccomp: "+c.Seccomp)
	row("", "/proc: "+c.Proc)
	for _, f := range c.Findings {
		row("cause and fix", f)
	}
	if len(c.Findings) > 0 {
		row("", "see "+containerenv.Docs+"; `hutch doctor --container-seccomp` prints the seccomp profile hutch needs")
	}
}
