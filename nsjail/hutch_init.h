// The wire schema between hutch's supervisor (Go) and its C stages (init.c,
// mounts.c, execstage.c, prestart/prestart.c), and their shared
// declarations. These stages run in the re-executed hutch binary before the
// Go runtime starts, so a sandbox costs one Go runtime (the supervisor's)
// and a command costs a fork in C.
//
// Every number both sides use is defined here once: the Go side reads them
// through cgo (nsjail/proto.go), and nsjail/wire_test.go checks the Go
// encoder against init.c's decoder and init.c's encoder against the Go
// decoder, so that the two cannot drift apart.
#ifndef HUTCH_INIT_H
#define HUTCH_INIT_H

#include <stddef.h>
#include <stdint.h>

// argv[0] of the init stage (nsjail.Launch, prestart.c).
#define HUTCH_INIT_MAGIC "hutch:init"

// Role names (PR_SET_NAME, the comm that ps shows) of hutch's processes in
// a sandbox. A command's own comm is its executable's, from execve.
#define HUTCH_NAME_INIT "hutch:init"
#define HUTCH_NAME_SPAWNER "hutch:spawner"
#define HUTCH_NAME_REAPER "hutch:reaper"
#define HUTCH_NAME_USERNS "hutch:userns"

// Largest control message either way.
#define HUTCH_MAX_MSG (1 << 20)

// Every message starts with a header: u32 op, u32 zero, u64 id (the
// command's, for ops about one). Fields follow as native-endian u32 and
// i64 values and strings (u32 length, the bytes, a NUL).
#define HUTCH_HEADER_SIZE 16

// Message operations.
enum {
	HUTCH_OP_SETUP = 1,    // supervisor -> init: build the sandbox (+ BPF memfd)
	HUTCH_OP_READY = 2,    // init -> supervisor: built (+ root fd, proxy sockets)
	HUTCH_OP_FAIL = 3,     // init -> supervisor: setup failed (errno, step, message)
	HUTCH_OP_SPAWN = 4,    // supervisor -> init: start a command (+ fds 0,1,2, payload[, notify])
	HUTCH_OP_STARTED = 5,  // init -> supervisor: command started (pid)
	HUTCH_OP_SPAWNERR = 6, // init -> supervisor: command could not start
	HUTCH_OP_EXIT = 7,     // init -> supervisor: command ended (+ whether the init is alone)
	HUTCH_OP_SIGNAL = 8,   // supervisor -> init: signal a command's reaper
	HUTCH_OP_LANDLOCK = 9, // supervisor -> init: the Landlock ruleset (+ fd)
	HUTCH_OP_SPAWNER = 10, // supervisor -> init: start the session's spawner (+ scope ruleset[, notify])
	HUTCH_OP_SPAWNER_REPLY = 11, // init -> supervisor: the spawner is ready, or why not
	HUTCH_OP_PIDS = 12,          // supervisor -> init: send STARTED for the commands not announced
	HUTCH_OP_SOCKET = 13,        // supervisor -> init: make a TCP socket in the sandbox's network namespace (family)
	HUTCH_OP_SOCKET_REPLY = 14,  // init -> supervisor: the socket (+ fd, code 0), or why not
	// Between the init and a session's spawner only (not on the
	// supervisor's socket): make a reaper ahead (reply: its pid or -errno,
	// + the socket on which it takes one spawn request).
	HUTCH_OP_READY_REAPER = 100,
};

// The kind of step a FAIL message names. Namespaces: creating namespaces
// failed (its errno, e.g. ENOSPC from a zero user.max_*_namespaces, gets
// advice).
enum {
	HUTCH_FAIL_OTHER = 0,
	HUTCH_FAIL_NAMESPACES = 1,
};

// SPAWNERR code for a spawn through a spawner that is gone: the supervisor
// starts the command the direct way instead (never shown to users).
enum { HUTCH_CODE_NO_SPAWNER = 200 };

// Setup flags.
enum {
	HUTCH_SETUP_SECCOMP = 1, // a BPF memfd accompanies the setup
	HUTCH_SETUP_PROXY = 2,   // make the egress proxy's sockets
	HUTCH_SETUP_TIMING = 4,  // report per-stage timings with READY
	// An image build's run step (plan.Identity.BuildCaps): the commands
	// keep HUTCH_BUILD_CAPS in their user namespace, where they are uid 0.
	HUTCH_SETUP_BUILD = 8,
};

// The capabilities an image build's run step keeps (in its own user
// namespace, which maps uid 0 to the invoking user and nothing else):
// CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, what apt and dpkg need of root
// on files. (1 << 0, 1 << 1, 1 << 3.)
#define HUTCH_BUILD_CAPS ((1ULL << 0) | (1ULL << 1) | (1ULL << 3))

// Spawn flags.
enum {
	HUTCH_SPAWN_NOTIFY = 1,      // a 5th fd: the socket for the seccomp listener
	HUTCH_SPAWN_VIA_SPAWNER = 2, // the session's spawner starts it
	HUTCH_SPAWN_TERMINAL = 4,    // stdio holds the command's own terminal: it leads a session with it
};

// Spawner flags.
enum { HUTCH_SPAWNER_NOTIFY = 1 };

// The address family a SOCKET request asks for. The socket is a
// non-blocking, unconnected TCP socket of the sandbox's network namespace
// (a socket keeps the namespace it was made in, and the supervisor cannot
// enter that one): the supervisor connects it to a published port's server
// on the sandbox's loopback. A SOCKET_REPLY has the layout of an EXIT
// report; code 0 carries the socket, any other code says why not.
enum {
	HUTCH_SOCKET_INET = 1,
	HUTCH_SOCKET_INET6 = 2,
};

// What a READY message says of the plan hint (see "plan hint" in init.c).
enum {
	HUTCH_HINT_NONE = 0,   // the init had none
	HUTCH_HINT_USED = 1,   // the setup's plan was the hint's: part of it was built ahead
	HUTCH_HINT_UNUSED = 2, // a hint that could not be used (differs, malformed, failed)
};

// A command's reaper kills the command and everything it started on this
// signal (the init sends it on a timeout or a session's kill request).
enum { HUTCH_SIG_TERMINATE = 40 };

// Mount plan step kinds (mounts/plan.go names each).
enum {
	HUTCH_STEP_BIND = 1,
	HUTCH_STEP_TMPFS = 2,
	HUTCH_STEP_PROC = 3,
	HUTCH_STEP_DEVPTS = 4,
	HUTCH_STEP_SYSFS = 5,
	HUTCH_STEP_MKDIR = 6,
	HUTCH_STEP_FILE = 7,
	HUTCH_STEP_SYMLINK = 8,
	HUTCH_STEP_MASK_FILE = 9,
	HUTCH_STEP_MASK_DIR = 10,
	HUTCH_STEP_RO = 11,
	HUTCH_STEP_PIN = 12,
	HUTCH_STEP_SEAL = 13,
	HUTCH_STEP_PROTECT = 14,
	HUTCH_STEP_HIDE = 15,
	HUTCH_STEP_COVER = 16,
	HUTCH_STEP_OVERLAY = 17,
	HUTCH_STEP_KINDS = 17, // the highest kind
};

// Step flags.
enum {
	HUTCH_STEPF_RO = 1,
	HUTCH_STEPF_OPTIONAL = 2,
	HUTCH_STEPF_NOSYM = 4,
};

// The most resource limits a setup carries.
enum { HUTCH_MAX_RLIMITS = 16 };

// A spawn request's payload (the working directory, argv and the
// environment: str, u32 count + strs, u32 count + strs) travels in a
// sealed memfd beside the message, so that a command may have as many
// arguments as execve takes (ARG_MAX, megabytes; a control message is
// bounded by the socket's buffer). At most this many bytes.
#define HUTCH_MAX_PAYLOAD (64 << 20)

// Descriptor slots. The init holds its control socket on CONTROL (and,
// prestarted, its plan hint on PLAN_HINT until it read it). Every stage that
// runs or passes on sandboxed code (a command's exec stage and reaper, the
// session's spawner, a reaper made ahead) holds its descriptors in the same
// slots: CHANNEL is its way back (a command's status pipe, close-on-exec,
// with "CODE ERRNO what" on failure and the reaper's end record at the end;
// the spawner's and a reaper-ahead's socket to the init), then the Landlock
// ruleset, the seccomp program (a memfd of struct sock_filter[]), the socket
// the seccomp listener is sent on, and the command's own Landlock scope
// layer, and a spawn request's payload until the reaper read it. A slot not
// in use is closed. Descriptors from SLOT_END on are not kept across a
// stage.
enum {
	HUTCH_FD_CONTROL = 3,
	HUTCH_FD_PLAN_HINT = 4,

	HUTCH_SLOT_CHANNEL = 3,
	HUTCH_SLOT_LANDLOCK = 4,
	HUTCH_SLOT_SECCOMP = 5,
	HUTCH_SLOT_NOTIFY = 6,
	HUTCH_SLOT_SCOPE = 7,
	HUTCH_SLOT_PAYLOAD = 8,
	HUTCH_SLOT_END = 9,
};

// One resource limit (cur, max: RLIM_INFINITY is ~0).
struct hutch_rlimit {
	int resource;
	uint64_t cur, max;
};

struct hutch_rlimits {
	uint32_t n;
	struct hutch_rlimit r[HUTCH_MAX_RLIMITS];
};

// One step of the mount plan, as the supervisor computed it.
struct hutch_step {
	uint32_t kind, flags, mode;
	int64_t size;
	const char *name;   // the kind's name, for messages
	const char *source; // host path (bind)
	const char *target; // path inside the sandbox, cleaned and absolute
	const char *staged; // the same beneath the staging directory
	const char *data;   // file contents or symlink target
	const char *why;    // what the step is for
	// An overlay step's layers (host paths), on the wire after why and
	// only for HUTCH_STEP_OVERLAY: nlower lower dirs (topmost first), then
	// upper and work ("" for a read-only overlay).
	uint32_t nlower;
	const char **lower;
	const char *upper, *work;
};

// The most lower layers one overlay step may have.
enum { HUTCH_MAX_LOWER = 128 };

struct hutch_plan {
	int64_t root_size;
	const char *stage;
	uint32_t nsteps;
	struct hutch_step *steps;
};

// The setup message's fields, in their order on the wire. The plan is last:
// a prestarted init compares it with its plan hint byte for byte.
struct hutch_setup {
	uint32_t flags; // HUTCH_SETUP_*
	const char *hostname;
	int64_t uid, gid;                      // the commands' ids inside
	uint32_t port_http, port_socks, port_dns; // the proxy's loopback ports (0 without)
	struct hutch_rlimits rlimits;          // every command's
	struct hutch_plan plan;
};

// Timing callback of the mount executor.
typedef void (*hutch_mark_fn)(const char *name, long usec);

// hutch_mounts_execute builds the plan's root and pivots into it. On
// failure it returns -1 with a message in err.
int hutch_mounts_execute(const struct hutch_plan *p, hutch_mark_fn mark, char *err, size_t errlen);

// The same in phases, so that the init can build a root from a plan hint
// before its setup arrives (see init.c): begin (open the bind sources, make
// "/" private, mount the root tmpfs), steps (apply steps up to a bound),
// then finish (the remaining steps, pivot_root; releases the state) or
// abandon (detach the half-built root; releases the state). On failure
// begin, steps and finish return -1 with a message in err; after a failed
// begin or steps, call abandon.
struct hutch_mounts {
	char *err;
	size_t errlen;
	int *srcs; // O_PATH descriptors of the bind sources, by step
	int **layers; // an overlay step's: its lowers, then upper and work
	int devnull, root;
	int mounted;   // the root tmpfs is on the staging directory
	uint32_t done; // steps applied so far
};
int hutch_mounts_begin(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark, char *err, size_t errlen);
int hutch_mounts_steps(struct hutch_mounts *m, const struct hutch_plan *p, uint32_t upto, hutch_mark_fn mark);
int hutch_mounts_finish(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark);
void hutch_mounts_abandon(struct hutch_mounts *m, const struct hutch_plan *p);

// ---- the per-command hardening (execstage.c) -------------------------------
//
// One ordered list of steps that every command passes, wherever it starts:
// the direct way (a fork of the init runs every step), or from a session's
// spawner (the spawner runs the shared steps once, each command's reaper the
// per-command ones; a reaper made ahead runs them before its command
// arrives). So every command ends with the same restrictions, by
// construction.
enum hutch_harden_step {
	HUTCH_HARDEN_SIGNALS,     // default dispositions, an empty mask
	HUTCH_HARDEN_CAPS,        // empty bounding, ambient and every capability set
	HUTCH_HARDEN_NO_NEW_PRIVS,
	HUTCH_HARDEN_NOT_DUMPABLE, // after the credential changes, which may reset it
	HUTCH_HARDEN_LANDLOCK,     // the sandbox's ruleset (SLOT_LANDLOCK)
	HUTCH_HARDEN_SECCOMP,      // the filter (SLOT_SECCOMP; listener sent on SLOT_NOTIFY)
	// Steps before SHARED are what a session's commands share: its spawner
	// applies them once. The rest are each command's own.
	HUTCH_HARDEN_SHARED,
	HUTCH_HARDEN_SCOPE = HUTCH_HARDEN_SHARED, // the command's own scope layer (SLOT_SCOPE), when there is one
	HUTCH_HARDEN_SUBREAPER,
	HUTCH_HARDEN_CLOSE_FDS, // everything but 0-2 and the channel
	HUTCH_HARDEN_RLIMITS,
	HUTCH_HARDEN_STEPS,
};

// What the hardening steps need; err and what report a failed step.
struct hutch_harden {
	int notify; // send the seccomp listener on SLOT_NOTIFY
	// no_namespaces: the landlock isolation (no user namespace), where an
	// unprivileged process has no CAP_SETPCAP to empty its bounding set
	// (no_new_privs keeps it from gaining anything through execve).
	int no_namespaces;
	// keep_caps: the capabilities kept (bit N: capability N), 0 but in an
	// image build's run step (HUTCH_BUILD_CAPS).
	unsigned long long keep_caps;
	const struct hutch_rlimits *rlimits;
	int err;          // errno of the failed step
	const char *what; // the failed step, in words
};

// hutch_harden applies steps [from, to) to the calling process, in order.
// It returns 0, or -1 with h->err and h->what set by the first step that
// failed (the rest are not applied).
int hutch_harden(struct hutch_harden *h, int from, int to);

// hutch_kill_all kills every descendant of the calling process, a child
// subreaper, until none is left, and returns how many it killed.
unsigned hutch_kill_all(void);

// argv[0] of the user namespace probe (probe.c, ProbeUserNamespaces).
#define HUTCH_PROBE_MAGIC "hutch:probe-userns"

// argv[1] of an init started without namespaces (the landlock isolation).
#define HUTCH_INIT_NO_NAMESPACES "--no-namespaces"

// hutch_fail reports a failure on the channel ("CODE ERRNO what") and exits
// with code.
void hutch_fail(int code, int err, const char *what) __attribute__((noreturn));

// hutch_start_command runs argv as the command, in cwd, from a hardened
// process whose channel is the command's status pipe, and stays as its
// reaper. It never returns. yield: the reaper yields the CPU after its end
// record (only under the built-in seccomp profile, which allows sched_yield).
// terminal (HUTCH_SPAWN_TERMINAL): the command leads a session of its own
// whose controlling terminal is the first of its descriptors 0-2 that is
// a terminal; otherwise it leads a process group in the sandbox's session.
void hutch_start_command(const char *cwd, char **argv, int yield, int terminal) __attribute__((noreturn));

// hutch_spawn_flags reads a spawn request's flags (HUTCH_SPAWN_*) from the
// message as the supervisor sent it; 0 when it is short.
uint32_t hutch_spawn_flags(const unsigned char *msg, size_t n);

// hutch_reaper_pretouch touches ahead, in a reaper made ahead, what its
// reaper code first touches once the command runs and once it ends.
void hutch_reaper_pretouch(void);

#endif
