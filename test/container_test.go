package test

// The nested-container tier: hutch inside a container that runc (Debian's
// package, the runtime under Docker, containerd and Kubernetes) makes from
// an OCI bundle this file writes. It needs root and runc; CI has both
// (the Makefile's DEB_TEST installs runc) and must not skip it.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/hutchsandbox/hutch/containerseccomp"
)

// containerUID is the uid hutch runs as inside the container (as a pod
// with runAsUser: 1000 would); idBase is where a user-namespaced
// container's ids start on the host.
const (
	containerUID = 1000
	idBase       = 200000
	idRange      = 65536
)

// needRunc skips without root or runc, except in CI, where the tier must run.
func needRunc(t *testing.T) string {
	t.Helper()
	runc, err := exec.LookPath("runc")
	why := ""
	switch {
	case !asRoot:
		why = "the nested-container tier needs root (runc makes the container)"
	case err != nil:
		why = "the nested-container tier needs runc (apt-get install runc; make deps-test installs it)"
	}
	if why != "" {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s, and CI must run it", why)
		}
		t.Skip(why)
	}
	return runc
}

// bundle is one OCI bundle and the runc state it runs under.
type bundle struct {
	runc, dir, state, id string
}

// containerShape is what kind of container the bundle describes.
type containerShape struct {
	userns  bool                // a user namespace of its own (Kubernetes' hostUsers: false)
	masked  bool                // Docker's masked and read-only /proc paths
	seccomp *specs.LinuxSeccomp // the container's seccomp profile
	// markers are files the engine would leave in the root (/.dockerenv),
	// env the variables it would set (KUBERNETES_SERVICE_HOST).
	markers []string
	env     []string
	// root runs the container's process as its uid 0 with caps as its
	// effective, permitted and bounding sets (else uid 1000 with Docker's
	// default bounding set).
	root bool
	caps []string
}

// dockerMaskedPaths and dockerReadonlyPaths are the paths moby's default
// spec (oci/defaults.go) masks and makes read-only; containerd's CRI and
// runc's `runc spec` use the same lists.
var (
	dockerMaskedPaths = []string{"/proc/asound", "/proc/acpi", "/proc/interrupts", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi", "/sys/firmware", "/sys/devices/virtual/powercap"}
	dockerReadonlyPaths = []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
	// dockerCaps is Docker's default capability set.
	dockerCaps = []string{"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
		"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"}
)

// newBundle writes a bundle whose read-only root has the host's /usr
// (the tooling hutch's sandboxes get), the hutch binary at /hutch, and a
// workspace /work and a home, volumes owned by the container's uid 1000. runc's
// state lives in a directory of the test's own; t.Cleanup deletes the
// container (runc delete --force: its processes, cgroups and mounts) and
// the bundle, even when the test fails.
func newBundle(t *testing.T, runc string, shape containerShape, args ...string) *bundle {
	t.Helper()
	dir, err := os.MkdirTemp("", "hutch-runc-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// The container's uids must reach the bundle: 0755 on the path.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	b := &bundle{runc: runc, dir: dir, state: filepath.Join(dir, "runc-state"), id: "hutch-test-" + hex.EncodeToString(rnd[:])}
	uid := containerUID
	if shape.root {
		uid = 0
	}
	owner := func(id int) int {
		if shape.userns {
			return idBase + id
		}
		return id
	}
	rootfs := filepath.Join(dir, "rootfs")
	for _, d := range []string{"usr", "etc", "proc", "dev", "sys", "tmp", "work", "home/u", "run"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		if _, err := os.Lstat("/" + l); err == nil {
			os.Symlink("usr/"+l, filepath.Join(rootfs, l))
		}
	}
	os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	files := map[string]string{
		"etc/passwd":   "root:x:0:0:root:/root:/bin/sh\nu:x:1000:1000:u:/home/u:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":    "root:x:0:\nu:x:1000:\nnogroup:x:65534:\n",
		"etc/hostname": "container\n",
		"hutch":        "",
	}
	for _, m := range shape.markers {
		files[strings.TrimPrefix(m, "/")] = ""
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(rootfs, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Everything in the root belongs to the container's root, the
	// workspace and home to its uid 1000.
	filepath.Walk(rootfs, func(p string, _ os.FileInfo, _ error) error {
		return os.Lchown(p, owner(0), owner(0))
	})
	// The workspace and home are volumes (as a pod's emptyDirs), so that
	// the root can be read-only (readOnlyRootFilesystem).
	for _, d := range []string{"work-vol", "home-vol"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(filepath.Join(dir, d), owner(uid), owner(uid))
	}
	probeIn(t, filepath.Join(dir, "work-vol"))
	os.Chown(filepath.Join(dir, "work-vol", "probe"), owner(uid), owner(uid))

	ro := []string{"rbind", "ro", "nosuid", "nodev"}
	s := &specs.Spec{
		Version:  specs.Version,
		Hostname: "container",
		Root:     &specs.Root{Path: "rootfs", Readonly: true},
		Process: &specs.Process{
			User: specs.User{UID: uint32(uid), GID: uint32(uid)},
			Args: args,
			Env: append([]string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/home/u", "LANG=C.UTF-8",
				"XDG_STATE_HOME=/home/u/.local/state", "XDG_CACHE_HOME=/home/u/.cache"}, shape.env...),
			Cwd: "/work",
			// As Kubernetes' allowPrivilegeEscalation: false does.
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{Bounding: dockerCaps},
		},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc"},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/usr", Type: "bind", Source: "/usr", Options: ro},
			{Destination: "/hutch", Type: "bind", Source: hutchBin, Options: ro},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777"}},
			{Destination: "/work", Type: "bind", Source: filepath.Join(dir, "work-vol"), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
			{Destination: "/home/u", Type: "bind", Source: filepath.Join(dir, "home-vol"), Options: []string{"rbind", "rw", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.CgroupNamespace}},
			CgroupsPath: "/" + b.id,
			Seccomp:     shape.seccomp,
		},
	}
	if shape.root {
		s.Process.Capabilities = &specs.LinuxCapabilities{Bounding: shape.caps, Effective: shape.caps, Permitted: shape.caps}
	}
	if shape.masked {
		s.Linux.MaskedPaths = dockerMaskedPaths
		s.Linux.ReadonlyPaths = dockerReadonlyPaths
	}
	if shape.userns {
		s.Linux.Namespaces = append(s.Linux.Namespaces, specs.LinuxNamespace{Type: specs.UserNamespace})
		s.Linux.UIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: idBase, Size: idRange}}
		s.Linux.GIDMappings = []specs.LinuxIDMapping{{ContainerID: 0, HostID: idBase, Size: idRange}}
	}
	cfg, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever happened: no container, cgroup or mount is left.
		out, err := exec.Command(runc, "--root", b.state, "delete", "--force", b.id).CombinedOutput()
		if err != nil && !bytes.Contains(out, []byte("does not exist")) {
			t.Errorf("runc delete %s: %v: %s", b.id, err, out)
		}
		if m, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(m, []byte(dir)) {
			t.Errorf("mounts under the bundle %s remain after runc delete", dir)
		}
	})
	return b
}

// run runs the bundle's container to its end and returns its exit status
// and output.
func (b *bundle) run(t *testing.T) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, b.runc, "--root", b.state, "run", "--bundle", b.dir, b.id)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("runc run: %v\n%s", err, errb.String())
	}
	if ctx.Err() != nil {
		t.Fatalf("runc run did not end in 120s; stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

// hardeningScript runs inside the sandbox inside the container and prints
// KEY=VALUE lines for TestNestedContainerFullJail to check.
const hardeningScript = `
echo "uid=$(id -u)"
grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status | sed 's/:[[:space:]]*/=/'
if touch /usr/hutch-write-test 2>/dev/null; then echo tooling=writable; else echo tooling=readonly; fi
if echo x > /workspace/written 2>/dev/null || echo x > ./written 2>/dev/null; then echo workspace=writable; else echo workspace=readonly; fi
echo "selfpid=$(readlink /proc/self)"
echo "pids=$(ls /proc | grep -c '^[0-9][0-9]*$')"
echo "hostname=$(cat /proc/sys/kernel/hostname)"
echo "netdevs=$(ls /sys/class/net 2>/dev/null | tr '\n' ' ' || true)$(sed -n '3,$p' /proc/net/dev | cut -d: -f1 | tr -d ' ' | tr '\n' ,)"
python3 -c '
import socket
s = socket.socket()
s.settimeout(3)
try:
    s.connect(("192.0.2.1", 80))
    print("net=connected")
except OSError as e:
    print("net=refused:" + (e.strerror or str(e)))
'
`

// TestNestedContainerFullJail (issue 21, 3b): inside a user-namespaced
// container (Kubernetes' hostUsers: false) with /proc unmasked and the
// seccomp profile `hutch doctor --container-seccomp` prints, the full
// namespace jail works: hutch runs unprivileged as uid 1000 under
// no_new_privs, and the sandbox gets its own uid, no capabilities, its
// seccomp filter on top of the container's, a read-only tooling tree, its
// own pid namespace's /proc, no network, and refuses the calls hutch's
// hardening refuses (the probe of TestSeccompDenialsReportedAndLogged);
// a session starts, runs commands and stops.
func TestNestedContainerFullJail(t *testing.T) {
	runc := needRunc(t)
	gen := exec.Command(hutchBin, "doctor", "--container-seccomp")
	var profJSON, usage bytes.Buffer
	gen.Stdout, gen.Stderr = &profJSON, &usage
	if err := gen.Run(); err != nil {
		t.Fatalf("hutch doctor --container-seccomp: %v\n%s", err, usage.String())
	}
	var prof specs.LinuxSeccomp
	if err := json.Unmarshal(profJSON.Bytes(), &prof); err != nil {
		t.Fatalf("the profile hutch doctor --container-seccomp printed is not an OCI seccomp profile: %v", err)
	}
	probeCalls := map[string]string{
		"unshare": "EPERM", "clone-newuser": "EPERM", "mount": "EPERM", "keyctl": "EPERM", "bpf": "EPERM",
		"perf_event_open": "EPERM", "userfaultfd": "EPERM", "io_uring_setup": "EPERM", "open_by_handle_at": "EPERM",
		"clone3": "ENOSYS", "getpid": "ok",
	}
	probeArgs := ""
	for c := range probeCalls {
		probeArgs += " " + c
	}
	script := "set -u; /hutch run --no-discover -- /bin/sh -c " + shellQuote(hardeningScript) +
		"; echo hutch-exit=$?; /hutch run --no-discover -- ./probe" + probeArgs + "; echo probe-exit=$?" +
		// A session: its commands enter the sandbox's namespaces (setns).
		"; /hutch session start --no-discover --name nested >/dev/null; echo session-start=$?" +
		"; echo session-uid=$(/hutch exec nested -- id -u); /hutch exec nested -- sh -c 'exit 7'; echo session-exec=$?" +
		"; /hutch session stop nested; echo session-stop=$?"
	b := newBundle(t, runc, containerShape{userns: true, seccomp: &prof}, "/bin/sh", "-c", script)
	code, out, errOut := b.run(t)
	t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	got := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			got[k] = v
		} else if f := strings.Fields(l); len(f) == 2 {
			got["probe:"+f[0]] = f[1]
		}
	}
	if got["hutch-exit"] == "" {
		t.Fatalf("the container did not run its script (runc exit %d)", code)
	}
	want := map[string]string{
		"hutch-exit": "0", "probe-exit": "0",
		"session-start": "0", "session-uid": "1000", "session-exec": "7", "session-stop": "0",
		"uid": "1000", "CapEff": "0000000000000000", "CapBnd": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2",
		"tooling": "readonly", "workspace": "writable",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q inside the nested sandbox, want %q", k, got[k], v)
		}
	}
	for c, e := range probeCalls {
		if got["probe:"+c] != e {
			t.Errorf("probe %s = %q inside the nested sandbox, want %q", c, got["probe:"+c], e)
		}
	}
	// Its own pid namespace: /proc is the sandbox's, with a handful of
	// processes and this shell's pid small.
	if p := got["selfpid"]; p == "" || len(p) > 2 {
		t.Errorf("the sandbox's /proc/self is %q, want a pid of the sandbox's own pid namespace", p)
	}
	if !strings.HasPrefix(got["net"], "refused:") {
		t.Errorf("a connection to 192.0.2.1:80 from the nested sandbox: %q, want it refused (no route: loopback only)", got["net"])
	}
	if nd := got["netdevs"]; strings.Contains(nd, "eth") {
		t.Errorf("the nested sandbox sees network devices %q, want loopback only", nd)
	}
}

// TestNestedContainerDockerDefaults (issue 21, 3a, the diagnosis): in a
// container as Docker makes it by default (its default seccomp profile,
// masked /proc paths, no user namespace), hutch cannot make its namespace
// jail; it exits 125 naming both causes and their fixes, and doctor says
// the same.
func TestNestedContainerDockerDefaults(t *testing.T) {
	runc := needRunc(t)
	prof, err := containerseccomp.DockerDefault(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	common := []string{"a seccomp filter refuses namespace creation", "/proc is partly covered", "docs/DEPLOY.md"}
	for _, tc := range []struct {
		name    string
		markers []string
		env     []string
		want    []string // in hutch run's message and doctor's report
	}{
		// runc alone leaves no marker: both the Docker and the Kubernetes fixes.
		{"runc", nil, nil, []string{"an OCI container", "hutch doctor --container-seccomp", "--security-opt seccomp=",
			"localhostProfile", "systempaths=unconfined", "procMount: Unmasked"}},
		// What Docker, Podman and the kubelet leave: that runtime's fix.
		{"docker", []string{"/.dockerenv"}, nil, []string{"a Docker container (/.dockerenv exists)",
			"docker run --security-opt seccomp=hutch-seccomp.json", "--security-opt systempaths=unconfined"}},
		{"podman", []string{"/run/.containerenv"}, nil, []string{"a Podman container (/run/.containerenv exists)",
			"podman run --security-opt seccomp=hutch-seccomp.json", "unmask=ALL"}},
		{"kubernetes", nil, []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"}, []string{"a Kubernetes pod (KUBERNETES_SERVICE_HOST is set)",
			"hostUsers: false", "localhostProfile: hutch.json", "procMount: Unmasked"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := "/hutch run --no-discover -- true; echo hutch-exit=$?; /hutch doctor; echo doctor-exit=$?" +
				// The way out the message gives: a sandbox without namespaces.
				"; /hutch run --no-discover --isolation auto -- sh -c 'touch /usr/x 2>/dev/null || echo auto-tooling=readonly'; echo auto-exit=$?"
			b := newBundle(t, runc, containerShape{masked: true, seccomp: prof, markers: tc.markers, env: tc.env}, "/bin/sh", "-c", script)
			code, out, errOut := b.run(t)
			t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
			if !strings.Contains(out, "hutch-exit=125") {
				t.Errorf("hutch run in Docker's default container: want exit 125")
			}
			if !strings.Contains(out, "auto-exit=0") || !strings.Contains(out, "auto-tooling=readonly") {
				t.Errorf("hutch run --isolation auto in Docker's default container: want a sandbox without namespaces (exit 0, tooling read-only)")
			}
			for _, s := range []string{"--isolation landlock", "docs/ISOLATION.md", "so the sandbox is made with Landlock"} {
				if !strings.Contains(errOut, s) {
					t.Errorf("hutch's messages in Docker's default container lack %q (the way to a sandbox without namespaces, and what it lacks)", s)
				}
			}
			if !strings.Contains(out, "doctor-exit=1") {
				t.Errorf("hutch doctor in Docker's default container: want exit 1 (no sandbox can be made)")
			}
			for _, s := range append(common, tc.want...) {
				if !strings.Contains(errOut, s) {
					t.Errorf("hutch run's message lacks %q", s)
				}
				if !strings.Contains(out, s) {
					t.Errorf("hutch doctor's report lacks %q", s)
				}
			}
		})
	}
}

// TestNestedContainerMaskedProc: with the seccomp profile but Docker's
// masked /proc (and no user namespace), the namespaces are made and the
// sandbox's procfs is refused; the message names the covered /proc and
// the fix.
func TestNestedContainerMaskedProc(t *testing.T) {
	runc := needRunc(t)
	prof, err := containerseccomp.Hutch(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	b := newBundle(t, runc, containerShape{masked: true, seccomp: prof}, "/bin/sh", "-c", "/hutch run --no-discover -- true; echo hutch-exit=$?")
	code, out, errOut := b.run(t)
	t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if !strings.Contains(out, "hutch-exit=125") {
		t.Errorf("hutch run with /proc masked: want exit 125")
	}
	for _, s := range []string{"proc /proc", "/proc is partly covered", "/proc/bus", "systempaths=unconfined", "procMount: Unmasked", "docs/DEPLOY.md"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("hutch run's message lacks %q", s)
		}
	}
	if strings.Contains(errOut, "seccomp filter refuses") {
		t.Errorf("hutch run blames a seccomp filter though the container's profile allows what hutch needs")
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestNestedContainerProfileWithoutMount: a container profile that lets
// hutch make its namespaces but refuses mount (a hand-made profile that
// added only clone and unshare): the init's first mount is refused, and
// the message names the container's seccomp filter and the profile to use.
func TestNestedContainerProfileWithoutMount(t *testing.T) {
	runc := needRunc(t)
	prof, err := containerseccomp.Hutch(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	last := &prof.Syscalls[len(prof.Syscalls)-1]
	last.Names = slices.DeleteFunc(last.Names, func(n string) bool { return n == "mount" })
	b := newBundle(t, runc, containerShape{userns: true, seccomp: prof}, "/bin/sh", "-c", "/hutch run --no-discover -- true; echo hutch-exit=$?")
	code, out, errOut := b.run(t)
	t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if !strings.Contains(out, "hutch-exit=125") {
		t.Errorf("hutch run with mount refused: want exit 125")
	}
	for _, s := range []string{"operation not permitted", "a seccomp filter is installed", "may refuse what the sandbox's init needs (mount", "hutch doctor --container-seccomp", "docs/DEPLOY.md"} {
		if !strings.Contains(errOut, s) {
			t.Errorf("hutch run's message lacks %q", s)
		}
	}
}

// TestNestedContainerRoot: hutch as the container's root. With Docker's
// default capabilities the full jail works; with every capability dropped
// (Kubernetes' capabilities: drop: [ALL] without runAsNonRoot) the kernel
// refuses root's id map without CAP_SETFCAP, and hutch says so and how to
// run it instead.
func TestNestedContainerRoot(t *testing.T) {
	runc := needRunc(t)
	prof, err := containerseccomp.Hutch(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	script := "/hutch run --no-discover -- sh -c 'id -u; grep ^CapEff /proc/self/status'; echo hutch-exit=$?"
	t.Run("docker-default-caps", func(t *testing.T) {
		b := newBundle(t, runc, containerShape{userns: true, seccomp: prof, root: true, caps: dockerCaps}, "/bin/sh", "-c", script)
		code, out, errOut := b.run(t)
		t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		if !strings.Contains(out, "1000\nCapEff:\t0000000000000000\nhutch-exit=0") {
			t.Errorf("hutch as root with Docker's default capabilities: want the command run as uid 1000 without capabilities, exit 0")
		}
	})
	t.Run("drop-all", func(t *testing.T) {
		b := newBundle(t, runc, containerShape{userns: true, seccomp: prof, root: true, env: []string{"KUBERNETES_SERVICE_HOST=10.96.0.1"}}, "/bin/sh", "-c", script)
		code, out, errOut := b.run(t)
		t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
		if !strings.Contains(out, "hutch-exit=125") {
			t.Errorf("hutch as root without capabilities: want exit 125")
		}
		for _, s := range []string{"uid_map", "hutch runs as root without CAP_SETFCAP", "runAsUser: 1000", "docs/DEPLOY.md"} {
			if !strings.Contains(errOut, s) {
				t.Errorf("hutch run's message lacks %q", s)
			}
		}
		if strings.Contains(errOut, "seccomp filter") {
			t.Errorf("the message blames a seccomp filter, which allows everything hutch needs here")
		}
	})
}

// TestNestedContainerLandlockSuite (issue 21, 2 and 3a): the landlock
// isolation's end-to-end checks (TestLandlockIsolation*: hardening,
// lifecycle, sessions, auto) pass where user namespaces cannot be had:
// this suite's own binary runs them inside a container as Docker makes it
// by default (its seccomp profile, masked /proc, its capabilities for the
// container's root), with the suite's warm-up in that isolation.
func TestNestedContainerLandlockSuite(t *testing.T) {
	runc := needRunc(t)
	prof, err := containerseccomp.DockerDefault(runtime.GOARCH)
	if err != nil {
		t.Skip(err)
	}
	bin := filepath.Join(t.TempDir(), "e2e.test")
	if out, err := exec.Command("go", "test", "-c", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v\n%s", err, out)
	}
	script := "cp /work/e2e.test /tmp/e2e.test && cd /tmp && HUTCH_BIN=/hutch HUTCH_E2E_ISOLATION=landlock /tmp/e2e.test -test.v -test.count=1 -test.run '^TestLandlockIsolation' 2>&1; echo suite-exit=$?"
	b := newBundle(t, runc, containerShape{masked: true, seccomp: prof, root: true, caps: dockerCaps}, "/bin/sh", "-c", script)
	// Into the workspace volume: the container's root is read-only.
	if out, err := exec.Command("cp", bin, filepath.Join(b.dir, "work-vol", "e2e.test")).CombinedOutput(); err != nil {
		t.Fatalf("copy the suite into the container's volume: %v\n%s", err, out)
	}
	code, out, errOut := b.run(t)
	t.Logf("container exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if !strings.Contains(out, "suite-exit=0") {
		t.Fatalf("the landlock isolation's e2e checks inside Docker's default container did not pass")
	}
	if !strings.Contains(out, "--- PASS: TestLandlockIsolationHardening") || !strings.Contains(out, "--- PASS: TestLandlockIsolationLifecycle") {
		t.Errorf("the hardening and lifecycle checks did not run inside the container")
	}
}
