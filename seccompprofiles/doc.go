// Package seccompprofiles parses, compiles and serves hutch's seccomp
// profiles.
//
// Profiles use the Docker/OCI JSON format (Parse, LoadFile); Default is
// hutch's own allowlist. Compile turns a profile into the raw BPF program
// that hutch's exec stage loads with seccomp(SECCOMP_SET_MODE_FILTER) right
// before execve, and Cache keeps compiled programs on disk. With
// Options.Notify, denials become SCMP_ACT_NOTIFY and Serve, run by the
// supervisor on the listener fd, answers each with its errno and reports it.
// Describe renders a profile's effective rules for `hutch seccomp show`.
// docs/SECCOMP.md documents the default profile and the conventions.
package seccompprofiles
