// Package mounts describes the sandbox's root filesystem as a plan of
// primitive steps, and prepares the host side of it (protected-path
// placeholders).
//
// The plan is computed on the host side (the supervisor), where policy and
// host paths are known; the init executes it inside the new mount namespace,
// before pivot_root (nsjail/mounts.c, in C, before any Go runtime starts).
// Keeping the steps primitive (bind, tmpfs, mkdir, file, symlink,
// read-only) keeps the executor small and auditable, in the spirit of
// bubblewrap's ordered setup operations.
package mounts

// Kind is the kind of one plan step.
type Kind string

// Plan step kinds.
const (
	// Bind binds the host path Source at Target (recursively). Source is
	// opened O_PATH before any mount changes, so it may live anywhere on the
	// host, including under directories the new root later hides.
	Bind Kind = "bind"
	// Tmpfs mounts a fresh tmpfs at Target with Size bytes and Mode.
	Tmpfs Kind = "tmpfs"
	// Proc mounts the sandbox's own procfs at Target.
	Proc Kind = "proc"
	// Devpts mounts a new devpts instance at Target.
	Devpts Kind = "devpts"
	// Sysfs mounts a sysfs of the sandbox's network namespace at Target.
	Sysfs Kind = "sysfs"
	// Mkdir creates the directory Target with Mode.
	Mkdir Kind = "mkdir"
	// File writes Data to a new file at Target with Mode.
	File Kind = "file"
	// Cover binds a read-only file holding Data over the existing regular
	// file Target (in a read-only tree, where nothing can be created): the
	// synthesized /etc files. Target is resolved beneath the new root and
	// must not be a symlink.
	Cover Kind = "cover"
	// Symlink creates Target as a symlink to Data.
	Symlink Kind = "symlink"
	// MaskFile covers the file Target with an empty, read-only file (the
	// host's /dev/null), if Target exists. Target is resolved beneath the
	// new root.
	MaskFile Kind = "mask-file"
	// MaskDir covers the directory Target with an empty read-only tmpfs, if
	// Target exists. Target is resolved beneath the new root.
	MaskDir Kind = "mask-dir"
	// ReadOnly makes the mount at Target read-only, if Target exists.
	ReadOnly Kind = "ro"
	// Pin binds Target onto itself (read-write) so that it becomes a mount
	// point: it can then not be renamed, replaced or removed from inside.
	Pin Kind = "pin"
	// Seal makes the mount at Target read-only, but not the mounts beneath
	// it (e.g. /dev, while /dev/shm and /dev/pts stay writable).
	Seal Kind = "seal"
	// Protect binds Target onto itself read-only (a protected path inside
	// the workspace).
	Protect Kind = "protect"
	// Hide covers the directory Target with an empty read-only tmpfs,
	// resolving Target like Protect (hutch's own directories when they lie
	// inside the workspace; see package hostdirs).
	Hide Kind = "hide"
	// Overlay mounts an overlayfs at Target: Lower are its lower layers
	// (host directories, the topmost first), Upper and Work its writable
	// layer and the kernel's work directory (both host directories on one
	// filesystem; both empty means a read-only overlay of the lowers).
	// Every layer is opened O_PATH before any mount changes, like a Bind
	// source. In a user namespace the mount uses userxattr (overlay's
	// xattrs in the user.overlay. namespace; redirect_dir and metacopy are
	// then off) and index=off: package review reads the upper layer. A
	// read-only overlay's Source, when set, is a host tree showing what
	// the overlay shows (an image's flattened tree): the plan's own path
	// resolution reads it; the executor ignores it.
	Overlay Kind = "overlay"
)

// Step is one primitive operation. Targets are absolute paths inside the
// sandbox; the executor resolves them beneath the new root.
type Step struct {
	Kind   Kind   `json:"kind"`
	Source string `json:"source,omitempty"`
	Target string `json:"target"`
	// ReadOnly applies to Bind: the bind (and everything beneath it) is
	// made read-only.
	ReadOnly bool `json:"ro,omitempty"`
	// Optional skips a Bind whose source is missing instead of failing.
	Optional bool `json:"optional,omitempty"`
	// NoSymlinks resolves Target without following any symlink (used for
	// paths inside the workspace, which sandboxed code controls).
	NoSymlinks bool   `json:"nosym,omitempty"`
	Mode       uint32 `json:"mode,omitempty"`
	Size       int64  `json:"size,omitempty"`
	Data       string `json:"data,omitempty"`
	// Why says, for error messages, what the step is for.
	Why string `json:"why,omitempty"`
	// Lower, Upper and Work are an Overlay step's layers (host paths).
	Lower []string `json:"lower,omitempty"`
	Upper string   `json:"upper,omitempty"`
	Work  string   `json:"work,omitempty"`
}

// Sources are the host paths the step reads from, each opened before any
// mount changes: a Bind's Source, an Overlay's layers.
func (s Step) Sources() []string {
	switch s.Kind {
	case Bind:
		return []string{s.Source}
	case Overlay:
		out := append([]string(nil), s.Lower...)
		if s.Upper != "" {
			out = append(out, s.Upper, s.Work)
		}
		return out
	}
	return nil
}

// Plan is the ordered list of steps that builds the sandbox's root.
type Plan struct {
	// RootSize caps the root tmpfs (it holds only mount points and the
	// synthesized /etc files, and is made read-only after setup).
	RootSize int64 `json:"root_size"`
	// Stage is the existing host directory that the new root is mounted
	// on while it is built; no bind source may contain it, or a recursive
	// bind would copy the half-built root into the sandbox.
	Stage string `json:"stage"`
	Steps []Step `json:"steps"`
	// Synthesized are the paths inside where the synthesized /etc files
	// are (File or Cover steps), each with every symlink resolved: the
	// sandbox reads them wherever /etc's symlinks lead.
	Synthesized []string `json:"synthesized,omitempty"`
}

// Add appends steps to the plan.
func (p *Plan) Add(s ...Step) { p.Steps = append(p.Steps, s...) }
