// The early start of `hutch run`'s init: a constructor that runs before the
// Go runtime starts. When the command line is `hutch run ...`, it clones
// the sandbox's init into its new namespaces right away, so that the init's
// clone and exec overlap with the Go runtime's start, the
// CLI, the policy and the planning instead of following them.
//
// It does what nsjail.Launch does and nothing that depends on the policy:
// the same seven namespaces (the clone makes the user and pid namespaces,
// the child the other five, so that their cost is not the hutch process's),
// the invoking user mapped to root of the new user namespace (setgroups
// denied), the parent-death signal, an empty
// environment, /dev/null on stdin and stdout, the caller's stderr, and the
// control socket on fd 3. The init then waits for its setup, as it does
// after Launch. A failed clone (no user namespaces) leaves nothing started:
// the Go side launches the init the usual way and owns the error message;
// a failure after the clone reaches the supervisor as the init's own setup
// failures do (a FAIL message naming the step). HUTCH_NO_PRESTART=1 turns this off.
//
// The Go side (prestart.go) takes the init over once, or discards it (closes
// the control socket, which makes the init exit, kills and reaps it).

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "../hutch_init.h"
#include "../wire.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

// Read once by the Go side (prestart.go) after the runtime started; written
// only here, before it.
int hutch_prestart_pid = 0;
int hutch_prestart_ctrl = -1;
long long hutch_prestart_forked_ns = 0;
// The plan hint's file ("" when there is no cache directory): the mount
// plan the supervisor stored the last time the same command line ran in the
// same directory. See "plan hint" in init.c.
char hutch_prestart_hint[4096];

// hint_path names the plan hint of this command line: in hutch's cache
// directory (as hostdirs.Cache computes it), a file named by the FNV-1a hash
// of the uid, the working directory and the arguments before "--" (the
// command itself does not change the plan). Only a hint: whatever it holds,
// the init builds the plan the supervisor sends. HUTCH_NO_PLAN_HINT=1 turns
// hints off.
static void hint_path(int argc, char **argv) {
	const char *off = getenv("HUTCH_NO_PLAN_HINT");
	if (off && off[0] && strcmp(off, "0") != 0)
		return;
	const char *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
	char dir[2048], cwd[2048];
	if (x && x[0] == '/')
		snprintf(dir, sizeof dir, "%s/hutch/plans", x);
	else if (h && h[0] == '/' && strcmp(h, "/nonexistent") != 0)
		snprintf(dir, sizeof dir, "%s/.cache/hutch/plans", h);
	else
		return;
	if (getcwd(cwd, sizeof cwd) == NULL)
		return;
	uint64_t k = 0xcbf29ce484222325ULL;
	char uid[32];
	snprintf(uid, sizeof uid, "%u", (unsigned)getuid());
	const char *fixed[] = {"hutch-plan-hint-v1", uid, cwd};
	for (int i = 0; i < 3 + argc - 1; i++) {
		const char *s = i < 3 ? fixed[i] : argv[i - 2]; // argv[1], ...
		if (s == NULL || (i >= 3 && strcmp(s, "--") == 0))
			break;
		for (const unsigned char *c = (const unsigned char *)s;; c++) {
			k = (k ^ *c) * 0x100000001b3ULL; // the NUL too
			if (!*c)
				break;
		}
	}
	snprintf(hutch_prestart_hint, sizeof hutch_prestart_hint, "%s/%016llx", dir, (unsigned long long)k);
}

// wants reports whether argv asks for `hutch run` with a command (not help,
// not --json).
static int wants(int argc, char **argv) {
	if (argc < 3 || argv == NULL || argv[0] == NULL || argv[1] == NULL || strcmp(argv[1], "run") != 0)
		return 0;
	for (int i = 2; i < argc && argv[i] != NULL; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-help") == 0)
			return 0;
		// --json runs through the agent interface, which launches its own.
		if (strcmp(argv[i], "--json") == 0 || strncmp(argv[i], "--json=", 7) == 0 || strcmp(argv[i], "-json") == 0)
			return 0;
	}
	const char *off = getenv("HUTCH_NO_PRESTART");
	if (off && off[0] && strcmp(off, "0") != 0)
		return 0;
	return 1;
}

static int write_file(const char *path, const char *s) {
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(s);
	ssize_t w = write(fd, s, n);
	close(fd);
	return w == (ssize_t)n ? 0 : -1;
}

// fail_step tells the supervisor, as the init would (a FAIL message on the
// control socket: errno, the kind of step, the message), which step failed
// and why, and exits.
__attribute__((noreturn)) static void fail_step(int ctrl, const char *what, uint32_t step) {
	int e = errno;
	char msg[256], eb[128];
	snprintf(msg, sizeof msg, "start the sandbox's init: %s: %s", what, hutch_strerror(e, eb, sizeof eb));
	static struct hutch_wr w;
	hutch_wr_fail(&w, e, step, msg);
	ssize_t n = send(ctrl, w.b, w.n, MSG_NOSIGNAL);
	(void)n;
	_exit(1);
}

// fail is fail_step for a step of no particular kind.
__attribute__((noreturn)) static void fail(int ctrl, const char *what) { fail_step(ctrl, what, HUTCH_FAIL_OTHER); }

// child runs in the new namespaces: maps itself, places its descriptors and
// execs the init. Only async-signal-safe calls, in a process with one
// thread; a failure is reported like an init's setup failure.
__attribute__((noreturn)) static void child(int ctrl, uid_t uid, gid_t gid) {
	if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) < 0)
		fail(ctrl, "set the parent-death signal");
	char line[64];
	// A process may map only its own outer ids into its new user
	// namespace, after denying setgroups; exactly what Launch writes.
	if (write_file("/proc/self/setgroups", "deny") < 0)
		fail(ctrl, "write /proc/self/setgroups");
	snprintf(line, sizeof line, "0 %u 1", (unsigned)uid);
	if (write_file("/proc/self/uid_map", line) < 0)
		fail(ctrl, "write /proc/self/uid_map");
	snprintf(line, sizeof line, "0 %u 1", (unsigned)gid);
	if (write_file("/proc/self/gid_map", line) < 0)
		fail(ctrl, "write /proc/self/gid_map");
	// The other namespaces, made here rather than by the clone: creating
	// them (the network namespace above all) then costs this child's
	// time, not the time of the hutch process, whose Go runtime is starting.
	// Made by root of the new user namespace, they belong to it, as
	// clone's would.
	if (unshare(CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP) < 0)
		fail_step(ctrl, "create the mount, network, IPC, UTS and cgroup namespaces", HUTCH_FAIL_NAMESPACES);
	// The plan hint goes to fd 4, out of the way of the control socket.
	int hint = -1;
	if (hutch_prestart_hint[0]) {
		int fd = open(hutch_prestart_hint, O_RDONLY | O_CLOEXEC);
		if (fd >= 0) {
			hint = fcntl(fd, F_DUPFD_CLOEXEC, 16);
			close(fd);
		}
	}
	int null = open("/dev/null", O_RDWR);
	if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0)
		fail(ctrl, "open /dev/null");
	if (ctrl == HUTCH_FD_CONTROL) {
		if (fcntl(HUTCH_FD_CONTROL, F_SETFD, 0) < 0) // dup2 onto itself keeps close-on-exec
			fail(ctrl, "place the control socket");
	} else if (dup2(ctrl, HUTCH_FD_CONTROL) < 0) {
		fail(ctrl, "place the control socket");
	}
	if (hint >= 0 && dup2(hint, HUTCH_FD_PLAN_HINT) < 0)
		hint = -1;
	int keep = hint >= 0 ? HUTCH_FD_PLAN_HINT + 1 : HUTCH_FD_CONTROL + 1;
	if (syscall(SYS_close_range, keep, ~0U, 0) < 0) {
		for (int fd = keep; fd < 4096; fd++)
			close(fd);
	}
	char *argv[] = {HUTCH_INIT_MAGIC, hint >= 0 ? "--plan-hint" : NULL, NULL};
	char *envp[] = {NULL};
	execve("/proc/self/exe", argv, envp);
	fail(HUTCH_FD_CONTROL, "execute /proc/self/exe");
}

__attribute__((constructor)) static void hutch_prestart(int argc, char **argv, char **envp) {
	(void)envp;
	if (!wants(argc, argv))
		return;
	// With a standard descriptor closed, the socket could land on it; the
	// Go path handles such callers.
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0)
			return;
	int pair[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) < 0)
		return;
	uid_t uid = getuid();
	gid_t gid = getgid();
	hint_path(argc, argv);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	// The user and pid namespaces only (the init must be pid 1 of its pid
	// namespace); the child unshares the other five itself.
	long flags = CLONE_NEWUSER | CLONE_NEWPID | SIGCHLD;
	// The raw system call: a fork into new namespaces, before any thread
	// exists in this process.
	long pid = syscall(SYS_clone, flags, 0, NULL, NULL, 0);
	if (pid == 0)
		child(pair[1], uid, gid);
	close(pair[1]);
	if (pid < 0) {
		close(pair[0]);
		return;
	}
	hutch_prestart_pid = (int)pid;
	hutch_prestart_ctrl = pair[0];
	hutch_prestart_forked_ns = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
