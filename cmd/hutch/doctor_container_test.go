package main

import (
	"bytes"
	"os"
	"testing"
)

// TestDeploySeccompProfileIsGenerated: deploy/seccomp/hutch.json is what
// `hutch doctor --container-seccomp` prints on amd64. After a change to
// package containerseccomp, regenerate it:
//
//	go run ./cmd/hutch doctor --container-seccomp > deploy/seccomp/hutch.json
func TestDeploySeccompProfileIsGenerated(t *testing.T) {
	want, err := containerSeccompJSON("amd64")
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../../deploy/seccomp/hutch.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("deploy/seccomp/hutch.json differs from the generated profile; regenerate it: go run ./cmd/hutch doctor --container-seccomp > deploy/seccomp/hutch.json")
	}
}

func TestPrintContainerSeccomp(t *testing.T) {
	var out, errb bytes.Buffer
	if err := printContainerSeccomp(&out, &errb); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"--security-opt seccomp=hutch-seccomp.json", "systempaths=unconfined", "localhostProfile: hutch.json", "hostUsers: false", "procMount: Unmasked", "apparmor=unconfined", "deploy/apparmor/hutch", "apparmor_restrict_unprivileged_userns=0"} {
		if !bytes.Contains(errb.Bytes(), []byte(s)) {
			t.Errorf("the usage on stderr lacks %q", s)
		}
	}
	if !bytes.HasPrefix(out.Bytes(), []byte("{")) {
		t.Errorf("stdout is not the JSON profile: %.40q", out.String())
	}
}
