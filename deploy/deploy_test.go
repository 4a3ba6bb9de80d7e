// Package deploy holds the files that run hutch in containers, Kubernetes
// and CI (docs/DEPLOY.md); its tests check the fields hutch relies on.
package deploy

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"sigs.k8s.io/yaml"
)

// The parts of Kubernetes objects hutch relies on, with the API's field
// names (k8s.io/api/core/v1, apps/v1).
type (
	object struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	deploymentSpec struct {
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			Spec podSpec `json:"spec"`
		} `json:"template"`
	}
	podSpec struct {
		HostUsers       *bool `json:"hostUsers"`
		SecurityContext struct {
			RunAsNonRoot *bool  `json:"runAsNonRoot"`
			RunAsUser    *int64 `json:"runAsUser"`
		} `json:"securityContext"`
		Containers []container `json:"containers"`
	}
	container struct {
		Name  string   `json:"name"`
		Image string   `json:"image"`
		Args  []string `json:"args"`
		Ports []struct {
			Name          string `json:"name"`
			ContainerPort int    `json:"containerPort"`
		} `json:"ports"`
		SecurityContext struct {
			AllowPrivilegeEscalation *bool `json:"allowPrivilegeEscalation"`
			Privileged               *bool `json:"privileged"`
			Capabilities             struct {
				Add  []string `json:"add"`
				Drop []string `json:"drop"`
			} `json:"capabilities"`
			ProcMount      string `json:"procMount"`
			SeccompProfile struct {
				Type             string `json:"type"`
				LocalhostProfile string `json:"localhostProfile"`
			} `json:"seccompProfile"`
		} `json:"securityContext"`
		VolumeMounts []struct {
			Name      string `json:"name"`
			MountPath string `json:"mountPath"`
		} `json:"volumeMounts"`
	}
	serviceSpec struct {
		Selector        map[string]string `json:"selector"`
		SessionAffinity string            `json:"sessionAffinity"`
		Ports           []struct {
			Port       int    `json:"port"`
			TargetPort string `json:"targetPort"`
		} `json:"ports"`
	}
)

func readObjects(t *testing.T, path string) map[string]object {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]object{}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var o object
		if err := yaml.Unmarshal(doc, &o); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if o.Kind != "" {
			out[o.Kind] = o
		}
	}
	return out
}

// TestKubernetesManifest: the Deployment gives hutch's container what the
// namespace jail needs (a user-namespaced pod, an unmasked /proc, the
// Localhost seccomp profile that is deploy/seccomp/hutch.json) and no more
// (no privilege, all capabilities dropped), runs `hutch mcp --listen
// --token-file`, and the Service reaches it with session affinity.
func TestKubernetesManifest(t *testing.T) {
	objs := readObjects(t, "kubernetes/hutch.yaml")
	dep, ok := objs["Deployment"]
	if !ok || dep.APIVersion != "apps/v1" {
		t.Fatalf("kubernetes/hutch.yaml has no apps/v1 Deployment (kinds: %v)", keys(objs))
	}
	var ds deploymentSpec
	if err := json.Unmarshal(dep.Spec, &ds); err != nil {
		t.Fatal(err)
	}
	pod := ds.Template.Spec
	if pod.HostUsers == nil || *pod.HostUsers {
		t.Errorf("spec.template.spec.hostUsers = %v, want false (a user namespace of the pod's own; procMount: Unmasked needs it)", pod.HostUsers)
	}
	if pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		t.Errorf("the pod's securityContext.runAsNonRoot is not true")
	}
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want hutch's one", len(pod.Containers))
	}
	c := pod.Containers[0]
	sc := c.SecurityContext
	if sc.ProcMount != "Unmasked" {
		t.Errorf("securityContext.procMount = %q, want Unmasked (the kernel refuses the sandbox's procfs under a masked /proc)", sc.ProcMount)
	}
	if sc.SeccompProfile.Type != "Localhost" || sc.SeccompProfile.LocalhostProfile != "hutch.json" {
		t.Errorf("securityContext.seccompProfile = %+v, want {Localhost hutch.json} (deploy/seccomp/hutch.json)", sc.SeccompProfile)
	}
	if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("securityContext.allowPrivilegeEscalation is not false")
	}
	if sc.Privileged != nil && *sc.Privileged {
		t.Errorf("the container is privileged")
	}
	if !slices.Equal(sc.Capabilities.Drop, []string{"ALL"}) || len(sc.Capabilities.Add) > 0 {
		t.Errorf("capabilities = %+v, want drop ALL and add none", sc.Capabilities)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"mcp", "--listen 0.0.0.0:8080", "--token-file /var/run/hutch/token",
		// Off loopback, hutch serves HTTPS or refuses to start.
		"--tls-cert /var/run/hutch/tls/tls.crt", "--tls-key /var/run/hutch/tls/tls.key"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if !slices.ContainsFunc(c.VolumeMounts, func(m struct {
		Name      string `json:"name"`
		MountPath string `json:"mountPath"`
	}) bool {
		return m.MountPath == "/var/run/hutch"
	}) {
		t.Errorf("no volume at /var/run/hutch for the token file")
	}
	if len(c.Ports) != 1 || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v, want the MCP port 8080", c.Ports)
	}
	for k, v := range ds.Selector.MatchLabels {
		if ds.Template.Metadata.Labels[k] != v {
			t.Errorf("the selector's %s=%s is not among the template's labels", k, v)
		}
	}

	svc, ok := objs["Service"]
	if !ok {
		t.Fatalf("kubernetes/hutch.yaml has no Service")
	}
	var ss serviceSpec
	if err := json.Unmarshal(svc.Spec, &ss); err != nil {
		t.Fatal(err)
	}
	for k, v := range ss.Selector {
		if ds.Template.Metadata.Labels[k] != v {
			t.Errorf("the Service selects %s=%s, which the Deployment's pods do not carry", k, v)
		}
	}
	if ss.SessionAffinity != "ClientIP" {
		t.Errorf("the Service's sessionAffinity = %q, want ClientIP (a session's state is its pod's)", ss.SessionAffinity)
	}
	if len(ss.Ports) != 1 || ss.Ports[0].TargetPort != c.Ports[0].Name {
		t.Errorf("the Service's ports %+v do not target the container's port %q", ss.Ports, c.Ports[0].Name)
	}
}

// TestSeccompProfileFields: deploy/seccomp/hutch.json is an OCI seccomp
// profile that refuses by default and allows what hutch's init needs
// (cmd/hutch's TestDeploySeccompProfileIsGenerated checks it is exactly
// the generated one).
func TestSeccompProfileFields(t *testing.T) {
	b, err := os.ReadFile("seccomp/hutch.json")
	if err != nil {
		t.Fatal(err)
	}
	var p specs.LinuxSeccomp
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("seccomp/hutch.json is not an OCI seccomp profile: %v", err)
	}
	if p.DefaultAction != specs.ActErrno {
		t.Errorf("defaultAction = %s, want SCMP_ACT_ERRNO", p.DefaultAction)
	}
	for _, n := range []string{"clone", "clone3", "unshare", "setns", "mount", "umount2", "pivot_root", "mount_setattr", "sethostname", "landlock_create_ruleset", "seccomp", "execve"} {
		if !slices.ContainsFunc(p.Syscalls, func(s specs.LinuxSyscall) bool {
			return s.Action == specs.ActAllow && len(s.Args) == 0 && slices.Contains(s.Names, n)
		}) {
			t.Errorf("seccomp/hutch.json does not allow %s unconditionally", n)
		}
	}
}

func keys(m map[string]object) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestCIExamples: the GitHub Actions and GitLab CI examples are valid YAML,
// run hutch doctor before the sandboxed tests, and the GitHub job (on
// ubuntu-24.04) loads the AppArmor profile this directory holds.
func TestCIExamples(t *testing.T) {
	for _, f := range []string{"github-actions.yml", "gitlab-ci.yml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		for _, want := range []string{"hutch doctor", "hutch run"} {
			if !bytes.Contains(b, []byte(want)) {
				t.Errorf("%s does not run %q", f, want)
			}
		}
	}
	var gh struct {
		Jobs map[string]struct {
			RunsOn string `json:"runs-on"`
			Steps  []struct {
				Run string `json:"run"`
			} `json:"steps"`
		} `json:"jobs"`
	}
	b, _ := os.ReadFile("github-actions.yml")
	if err := yaml.Unmarshal(b, &gh); err != nil {
		t.Fatal(err)
	}
	job, ok := gh.Jobs["test"]
	if !ok || job.RunsOn != "ubuntu-24.04" {
		t.Fatalf("github-actions.yml: no job test on ubuntu-24.04")
	}
	if !slices.ContainsFunc(job.Steps, func(s struct {
		Run string `json:"run"`
	}) bool {
		return strings.Contains(s.Run, "deploy/apparmor/hutch /etc/apparmor.d/hutch") && strings.Contains(s.Run, "apparmor_parser -r")
	}) {
		t.Errorf("github-actions.yml does not load deploy/apparmor/hutch")
	}
	if _, err := os.Stat("apparmor/hutch"); err != nil {
		t.Error(err)
	}
}
