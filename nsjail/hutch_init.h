// Shared declarations of hutch's C stages (see init.c, mounts.c,
// execstage.c). These run in the re-executed hutch binary before the Go
// runtime starts, so a sandbox costs one Go runtime (the supervisor's) and
// a command costs a fork in C.
#ifndef HUTCH_INIT_H
#define HUTCH_INIT_H

#include <stddef.h>
#include <stdint.h>

// argv[0] of the init stage; must match initMagic in init.go.
#define HUTCH_INIT_MAGIC "hutch:init"

// The init's end of the control socket (SOCK_SEQPACKET).
#define HUTCH_FD_CONTROL 3

// Largest control message; must match maxMsg in proto.go.
#define HUTCH_MAX_MSG (1 << 20)

// Message operations; must match proto.go.
enum {
	HUTCH_OP_SETUP = 1,    // supervisor -> init: build the sandbox (+ BPF memfd)
	HUTCH_OP_READY = 2,    // init -> supervisor: built (+ root fd, proxy sockets)
	HUTCH_OP_FAIL = 3,     // init -> supervisor: setup failed (errno, step, message)
	HUTCH_OP_SPAWN = 4,    // supervisor -> init: start a command (+ fds 0,1,2[,notify])
	HUTCH_OP_STARTED = 5,  // init -> supervisor: command started (pid)
	HUTCH_OP_SPAWNERR = 6, // init -> supervisor: command could not start
	HUTCH_OP_EXIT = 7,     // init -> supervisor: command ended (+ whether the init is alone)
	HUTCH_OP_SIGNAL = 8,   // supervisor -> init: signal a command's reaper
	HUTCH_OP_LANDLOCK = 9, // supervisor -> init: the Landlock ruleset (+ fd)
	HUTCH_OP_SPAWNER = 10, // supervisor -> init: start the session's spawner (+ scope ruleset[, notify])
	HUTCH_OP_SPAWNER_REPLY = 11, // init -> supervisor: the spawner is ready, or why not
	HUTCH_OP_PIDS = 12,          // supervisor -> init: send STARTED for the commands not announced
};

// Between the init and a session's spawner only (not on the supervisor's
// socket): make a reaper ahead (reply: its pid or -errno, + the socket on
// which it takes one spawn request).
#define HUTCH_OP_READY_REAPER 100

// The kind of step a FAIL message names; must match proto.go. Namespaces:
// creating namespaces failed (its errno, e.g. ENOSPC from a zero
// user.max_*_namespaces, gets advice).
enum {
	HUTCH_FAIL_OTHER = 0,
	HUTCH_FAIL_NAMESPACES = 1,
};

// SPAWNERR code for a spawn through a spawner that is gone: the supervisor
// starts the command the direct way instead (never shown to users).
#define HUTCH_CODE_NO_SPAWNER 200

// Setup flags; must match proto.go.
enum {
	HUTCH_SETUP_SECCOMP = 1,
	HUTCH_SETUP_PROXY = 2,
	HUTCH_SETUP_TIMING = 4,
};

// Spawn flags.
enum { HUTCH_SPAWN_NOTIFY = 1, HUTCH_SPAWN_VIA_SPAWNER = 2 };

// Spawner flags.
enum { HUTCH_SPAWNER_NOTIFY = 1 };

// Mount plan step kinds; must match stepKinds in proto.go.
enum {
	HUTCH_STEP_BIND = 1,
	HUTCH_STEP_TMPFS,
	HUTCH_STEP_PROC,
	HUTCH_STEP_DEVPTS,
	HUTCH_STEP_SYSFS,
	HUTCH_STEP_MKDIR,
	HUTCH_STEP_FILE,
	HUTCH_STEP_SYMLINK,
	HUTCH_STEP_MASK_FILE,
	HUTCH_STEP_MASK_DIR,
	HUTCH_STEP_RO,
	HUTCH_STEP_PIN,
	HUTCH_STEP_SEAL,
	HUTCH_STEP_PROTECT,
	HUTCH_STEP_HIDE,
};

// Step flags.
enum {
	HUTCH_STEPF_RO = 1,
	HUTCH_STEPF_OPTIONAL = 2,
	HUTCH_STEPF_NOSYM = 4,
};

// rd reads the fields of one message: native-endian u32 and i64, strings as
// a u32 length, the bytes and a NUL. Any short or malformed field sets bad.
struct hutch_rd {
	const unsigned char *p;
	size_t n;
	int bad;
};
uint32_t hutch_rd_u32(struct hutch_rd *r);
int64_t hutch_rd_i64(struct hutch_rd *r);
const char *hutch_rd_str(struct hutch_rd *r);

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
};

struct hutch_plan {
	int64_t root_size;
	const char *stage;
	uint32_t nsteps;
	struct hutch_step *steps;
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
	int devnull, root;
	int mounted;   // the root tmpfs is on the staging directory
	uint32_t done; // steps applied so far
};
int hutch_mounts_begin(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark, char *err, size_t errlen);
int hutch_mounts_steps(struct hutch_mounts *m, const struct hutch_plan *p, uint32_t upto, hutch_mark_fn mark);
int hutch_mounts_finish(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark);
void hutch_mounts_abandon(struct hutch_mounts *m, const struct hutch_plan *p);

// hutch_strerror is strerror with a lower-case first letter, as Go spells
// errno values, so messages read the same whichever side made them.
const char *hutch_strerror(int e, char *buf, size_t len);

// hutch_exec_command applies the per-command restrictions to the calling
// process (a fresh child of the init in its own nested user namespace,
// with the descriptors of execstage.c in place) and runs argv as the
// command's reaper. It never returns.
void hutch_exec_command(int notify, const char *rlimits, const char *cwd, char **argv) __attribute__((noreturn));

// hutch_spawner_harden applies, once, what a session's spawner passes on to
// every command it starts: default signals, no capabilities, no_new_privs,
// not dumpable, the Landlock ruleset (fd 4) and the seccomp filter (BPF on
// fd 5; with notify, the listener is sent over fd 6). Failures are written
// to fd 3 ("CODE ERRNO what") and end the process.
void hutch_spawner_harden(int notify);

// hutch_spawned_command runs in a child of the spawner with stdio on 0-2,
// the status pipe on 3 and the command's Landlock scope ruleset on 4 (or
// none): working directory, scope layer, subreaper, rlimits, then argv as
// the command's reaper. It never returns.
void hutch_spawned_command(const char *rlimits, const char *cwd, char **argv) __attribute__((noreturn));

// hutch_ready_prepare runs in a reaper the spawner forks ahead of the next
// command (fd 3: the socket its request comes on; 7: the scope ruleset):
// the command's Landlock scope layer, subreaper, rlimits, and every other
// descriptor closed. It exits when any of it fails.
void hutch_ready_prepare(const char *rlimits);

// hutch_reaper_pretouch touches ahead, in a reaper made ahead, what its
// reaper code first touches once the command runs and once it ends.
void hutch_reaper_pretouch(void);

// hutch_ready_command runs a prepared reaper's command once its request
// placed stdio on 0-2 and the status pipe on 3: working directory, then
// argv as the command's reaper. It never returns.
void hutch_ready_command(const char *cwd, char **argv) __attribute__((noreturn));

// hutch_now_usec is CLOCK_MONOTONIC in microseconds.
long hutch_now_usec(void);

#endif
