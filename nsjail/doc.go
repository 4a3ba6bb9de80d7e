// Package nsjail is hutch's namespace jail: it makes a sandbox from its plan
// (package plan) and runs commands in it. The name is nsjail's (Google's
// namespace jail, whose one-file-per-concern layout this follows); none of
// its code is nsjail's.
//
// Processes, from the host down:
//
//	supervisor (hutch, Go, host side, the invoking user)
//	  └─ init "hutch:init": /proc/self/exe in new user, mount, pid, net,
//	     ipc, uts and cgroup namespaces; the host uid mapped to 0; pid 1.
//	     A C constructor (init.c) takes over before the Go runtime starts:
//	     it builds the root (mounts.c), pivots, makes the proxy's sockets,
//	     then serves spawn requests (and sockets for published ports:
//	     loopback.go) and reaps every process.
//	       ├─ spawner "hutch:spawner" (a session's, from its second
//	       │  command, where the plan allows): the commands' shared
//	       │  restrictions applied once; forks each later command's reaper
//	       │  as the init's child, and one reaper ahead of the next command
//	       └─ reaper "hutch:reaper": per command, in a nested user namespace
//	          mapping the sandbox uid (1000) to the init's 0, hardened
//	          (execstage.c) and the command's child subreaper
//	            └─ the command (uid 1000, no capabilities, no_new_privs,
//	               Landlock, seccomp)
//
// Launch starts the init (or adopts one started before the Go runtime by
// package nsjail/prestart, for `hutch run`), Configure hands it the setup
// (the plan's root, identity, network, rlimits, the seccomp program) and the
// Landlock ruleset built beneath the new root, and Exec runs commands.
//
// Every command passes one ordered hardening sequence (execstage.c,
// hutch_harden), whichever way it starts: a fork of the init runs it whole;
// the spawner runs the shared part once and each of its reapers the
// per-command part. The wire schema between this Go side and the C side is
// defined once, in hutch_init.h; proto.go reads its numbers through cgo and
// wire_test.go checks both encoders against both decoders.
//
// The supervisor talks to the init over a private socketpair that nothing
// inside the sandbox can reach; the init dies with the supervisor (its
// parent-death signal), and with pid 1 the kernel kills every process of the
// sandbox.
//
// Without namespaces (Config.NoNamespaces: the landlock isolation,
// docs/ISOLATION.md) the same init starts with no clone flag and
// HUTCH_INIT_NO_NAMESPACES: it builds no root, makes the proxy's sockets on
// ephemeral ports of the host's loopback (Sandbox.ProxyPorts; the Landlock
// ruleset then allows TCP connect to those only), is the child subreaper of
// every sandboxed process, and, since no pid namespace ends with it, kills
// them all itself (hutch_kill_all) when its socket ends or SIGTERM comes
// (its parent-death signal, and Kill). Commands skip the nested user
// namespace and run every other hardening step. ProbeUserNamespaces (probe.c)
// tells sandbox.isolation = "auto" whether namespaces can be made.
package nsjail
