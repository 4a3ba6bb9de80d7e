// The exec stage: the last step between hutch's init and the sandboxed
// command. The init (init.c) forks a child per command; the child enters a
// fresh nested user namespace that maps the sandbox uid to the init's uid,
// places its descriptors and calls hutch_exec_command, which applies the
// per-command restrictions and runs the command as its reaper. No Go runtime
// and no re-exec of hutch's binary are on this path.
//
// File descriptors, fixed by the init (-1 / closed when absent):
//   0,1,2  the command's stdio
//   3      status pipe (write end, O_CLOEXEC): on failure, "CODE ERRNO what";
//          the reaper's end record "\n=STATUS\n" last (report_end)
//   4      Landlock ruleset
//   5      seccomp BPF program (memfd holding struct sock_filter[])
//   6      unix socket on which the seccomp listener fd is sent
// rlimits: "" or "RES:CUR:MAX,RES:CUR:MAX,..." (numbers; MAX -1 = infinity),
// set just before the command starts. notify: seccomp with user
// notification. The stage always stays as the command's reaper (see
// reaper() below). The environment (environ) is the command's.
//
// Order matters: capabilities first (the nested user namespace gave this
// process every capability in it, which it drops entirely), then
// no_new_privs, Landlock, and seccomp last so the filter need not allow the
// set-up syscalls. Only fork, execve and the error path run under the filter.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "hutch_init.h"

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif

extern char **environ;

// HUTCH_SIG_TERMINATE asks the reaper to kill the command and everything it
// started (the init sends it on a timeout or a session's kill request).
#define HUTCH_SIG_TERMINATE 40

__attribute__((noreturn)) static void fail(int code, int err, const char *what) {
	char buf[512];
	int n = snprintf(buf, sizeof buf, "%d %d %s", code, err, what);
	if (n > 0) {
		ssize_t w = write(3, buf, (size_t)n);
		(void)w;
	}
	_exit(code);
}

static int valid_fd(int fd) { return fcntl(fd, F_GETFD) != -1; }

static void drop_caps(void) {
	for (int c = 0; c < 64; c++) {
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			fail(125, errno, "drop capability bounding set");
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		fail(125, errno, "clear ambient capabilities");
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0)
		fail(125, errno, "clear capabilities");
}

static void load_seccomp(int notify) {
	struct stat st;
	if (fstat(5, &st) < 0)
		fail(125, errno, "stat seccomp program");
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size > 65536 * (off_t)sizeof(struct sock_filter))
		fail(125, EINVAL, "seccomp program has a bad size");
	struct sock_filter *insns = malloc((size_t)st.st_size);
	if (!insns)
		fail(125, ENOMEM, "allocate seccomp program");
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(5, (char *)insns + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			fail(125, n < 0 ? errno : EIO, "read seccomp program");
		got += (size_t)n;
	}
	close(5);
	struct sock_fprog prog = {(unsigned short)(st.st_size / sizeof(struct sock_filter)), insns};
	unsigned long flags = notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
	long lfd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
	if (lfd < 0)
		fail(125, errno, "load seccomp filter");
	if (notify) {
		// Hand the listener to the supervisor. Sent before execve so that
		// the first denied syscall of the command is already observable.
		char dummy = 'n';
		struct iovec iov = {&dummy, 1};
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} u;
		memset(&u, 0, sizeof u);
		struct msghdr msg = {0};
		msg.msg_iov = &iov;
		msg.msg_iovlen = 1;
		msg.msg_control = u.buf;
		msg.msg_controllen = sizeof u.buf;
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		int ifd = (int)lfd;
		memcpy(CMSG_DATA(cm), &ifd, sizeof ifd);
		if (sendmsg(6, &msg, MSG_NOSIGNAL) < 0)
			fail(125, errno, "send seccomp listener to the supervisor");
		close(ifd);
	}
	free(insns);
}

// set_rlimits applies "RES:CUR:MAX,..." (RLIM_INFINITY as -1).
static void set_rlimits(const char *spec) {
	const char *p = spec;
	while (p && *p) {
		char *end;
		long res = strtol(p, &end, 10);
		if (*end != ':')
			fail(125, EINVAL, "parse resource limits");
		long long cur = strtoll(end + 1, &end, 10);
		if (*end != ':')
			fail(125, EINVAL, "parse resource limits");
		long long max = strtoll(end + 1, &end, 10);
		struct rlimit rl = {cur < 0 ? RLIM_INFINITY : (rlim_t)cur, max < 0 ? RLIM_INFINITY : (rlim_t)max};
		if (setrlimit((int)res, &rl) < 0)
			fail(125, errno, "set a resource limit");
		p = (*end == ',') ? end + 1 : NULL;
	}
}

// Signals the reaper relays to the command's process group.
static const int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT, SIGTSTP};

// children lists the direct children of this process by scanning /proc
// (CONFIG_PROC_CHILDREN is not everywhere). Returns how many were found.
static int children(pid_t self, pid_t *out, int max) {
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	char path[300], buf[512];
	while ((e = readdir(d)) != NULL && n < max) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t k = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (k <= 0)
			continue;
		buf[k] = 0;
		char *rp = strrchr(buf, ')'); // comm may contain anything but ends at the last ')'
		if (!rp)
			continue;
		char state;
		int ppid;
		if (sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == self)
			out[n++] = (pid_t)atoi(e->d_name);
	}
	closedir(d);
	return n;
}

// kill_all kills every descendant. Orphans re-parent to this process (a
// child subreaper), so killing the direct children repeatedly, and reaping,
// reaches the whole tree, also processes that left the session.
static void kill_all(pid_t self) {
	pid_t kids[1024];
	for (int round = 0; round < 100000; round++) {
		int st;
		// No child at all: nothing is left (orphans re-parent to this
		// subreaper as their parent exits, before it is reaped), so the
		// common case needs no /proc scan.
		while (waitpid(-1, &st, WNOHANG) > 0)
			;
		if (waitpid(-1, &st, WNOHANG) < 0 && errno == ECHILD)
			return;
		int n = children(self, kids, 1024);
		for (int i = 0; i < n; i++)
			kill(kids[i], SIGKILL);
		while (waitpid(-1, &st, WNOHANG) > 0)
			;
		struct timespec ts = {0, n == 0 ? 1000000 : 100000};
		nanosleep(&ts, NULL);
	}
}

// report_end writes the end record on the status pipe (fd 3): the wait
// status the init will see for this reaper, "\n=STATUS\n". Nothing of the
// command is left by then, so the init may report the command's end at
// once instead of after this process has exited (its teardown, ~0.1 ms
// here, is then off the caller's path).
//
// The init, woken by the write, is often placed on this CPU; a spawned
// command's reaper then yields it the CPU, or the init would wait for this
// process's teardown after all. (Only there: the built-in seccomp profile,
// which a spawner requires, allows sched_yield; a user's profile may not.)
static int yield_after_end;

static void report_end(int st) {
	char buf[32];
	int n = snprintf(buf, sizeof buf, "\n=%d\n", st);
	ssize_t w = write(3, buf, (size_t)n);
	(void)w;
	if (yield_after_end)
		sched_yield();
}

// mirror exits the way the command did, after the end record.
__attribute__((noreturn)) static void mirror(int st) {
	if (WIFEXITED(st)) {
		report_end(st & 0xff00);
		_exit(WEXITSTATUS(st));
	}
	int sig = WTERMSIG(st);
	report_end(sig); // no core: RLIMIT_CORE is 0 below
	struct rlimit none = {0, 0};
	setrlimit(RLIMIT_CORE, &none);
	signal(sig, SIG_DFL);
	sigset_t s;
	sigemptyset(&s);
	sigaddset(&s, sig);
	sigprocmask(SIG_UNBLOCK, &s, NULL);
	kill(getpid(), sig);
	_exit(128 + sig);
}

// reaper starts the command as its child and stays: it relays signals to
// the command's process group, and when the command exits (or the init
// sends HUTCH_SIG_TERMINATE) it kills everything the command left behind
// and exits with the command's status. This is how one exec in a shared
// session sandbox is cleaned up without cgroups.
__attribute__((noreturn)) static void reaper(const char *file, char **cargv) {
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigaddset(&set, HUTCH_SIG_TERMINATE);
	for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
		sigaddset(&set, forwarded[i]);
	sigprocmask(SIG_BLOCK, &set, &old);
	// vfork: no copy of the reaper's page tables for a child that only
	// execs (or reports why it could not, on the stack, and _exits); the
	// reaper waits until then. (posix_spawn would do the same through
	// clone3, which the default seccomp profile does not allow.)
	pid_t pid = vfork();
	if (pid < 0)
		fail(125, errno, "fork the command");
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		// Its own process group (the reaper relays signals to it), in
		// the sandbox's session, which has no controlling terminal.
		setpgid(0, 0);
		execvpe(file, cargv, environ);
		int e = errno;
		fail((e == ENOENT || e == ENOTDIR) ? 127 : 126, e, "execute the command");
	}
	// The command held the status pipe until it executed (close-on-exec);
	// the reaper keeps it for the end record. Stdio is the command's own.
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	for (int fd = 0; fd < 3; fd++) {
		if (devnull >= 0)
			dup2(devnull, fd);
		else
			close(fd);
	}
	if (devnull > 2)
		close(devnull);
	pid_t self = getpid();
	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&set, &si);
		if (sig < 0)
			continue;
		if (sig == SIGCHLD) {
			int st;
			pid_t w;
			while ((w = waitpid(-1, &st, WNOHANG)) > 0) {
				if (w == pid) {
					kill_all(self);
					mirror(st);
				}
			}
		} else if (sig == HUTCH_SIG_TERMINATE) {
			kill(pid, SIGKILL);
			kill_all(self);
			report_end((128 + SIGKILL) << 8);
			_exit(128 + SIGKILL);
		} else if (kill(-pid, sig) < 0) {
			kill(pid, sig);
		}
	}
}

// reset_signals gives the process default dispositions and an empty signal
// mask. The init ignores catchable signals (so sandboxed code cannot stop
// it), and ignored dispositions survive fork and execve. The raw system
// call: glibc's signal() refuses its reserved real-time signals (32, 33),
// which an ignoring parent would otherwise pass on.
static void reset_signals(void) {
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		unsigned long mask;
	} dfl = {0};
	for (int sig = 1; sig <= 64; sig++) {
		if (sig != SIGKILL && sig != SIGSTOP)
			syscall(SYS_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

// close_from closes every descriptor from fd up.
static void close_from(int fd) {
	if (syscall(SYS_close_range, fd, ~0U, 0) < 0) {
		for (int i = fd; i < 1024; i++)
			close(i);
	}
}

// base_hardening is the start of every process that runs or passes on
// sandboxed code: default signals, the working directory, no capabilities
// at all, no_new_privs.
static void base_hardening(const char *dir, const char *chdir_what) {
	reset_signals();
	if (chdir(dir) < 0)
		fail(125, errno, chdir_what);
	drop_caps();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail(125, errno, "set no_new_privs");
}

void hutch_exec_command(int notify, const char *rlimits, const char *cwd, char **argv) {
	const char *file = argv[0];
	char **cargv = argv;

	// The init dup2()ed the status pipe to 3, which clears close-on-exec.
	fcntl(3, F_SETFD, FD_CLOEXEC);
	base_hardening(cwd, "change to the working directory");
	// Before seccomp, which a user's profile may make strict about prctl.
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		fail(125, errno, "become the command's subreaper");
	if (valid_fd(4)) {
		if (syscall(SYS_landlock_restrict_self, 4, 0) < 0)
			fail(125, errno, "apply Landlock ruleset");
		close(4);
	}
	int have_seccomp = valid_fd(5);
	if (!notify && valid_fd(6))
		close(6);
	if (have_seccomp)
		load_seccomp(notify);
	if (notify)
		close(6);
	// Only 0, 1, 2 survive execve; the status pipe closes on success.
	close_from(4);
	set_rlimits(rlimits);
	reaper(file, cargv); // never returns
}

// ---- the session's spawner -------------------------------------------------
//
// A session's commands after the first can start from a spawner: a process
// the init forks once, in the commands' nested user namespace, that applies
// everything a command shares with every other one (no capabilities,
// no_new_privs, the Landlock ruleset, the seccomp filter) a single time and
// then forks each command's reaper, which inherits them. Loading the seccomp
// filter is the largest per-command cost of the exec stage (the kernel
// checks, converts and compiles the program each time, ~0.3 ms here). Each
// command still gets a Landlock layer of its own, which scopes signals and
// abstract unix sockets to that command: commands can signal neither the
// spawner nor each other (the init uses the spawner only when the kernel
// scopes signals, Landlock ABI >= 6). The spawner is not dumpable, so its
// memory and descriptors are closed to sandboxed code, and it runs only
// hutch's code: it receives requests from the init on fd 3 and nothing
// else.

void hutch_spawner_harden(int notify) {
	// Failures go to fd 3, the init's end of the spawner's socket, in the
	// status pipe's "CODE ERRNO what" form.
	base_hardening("/", "spawner: change to /");
	// Not dumpable: /proc/PID/{mem,fd,environ} of the spawner stay closed
	// to the commands (same uid, no capability to override it). After the
	// credential changes (setns, capset), which may reset the flag.
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		fail(125, errno, "spawner: clear the dumpable flag");
	if (syscall(SYS_landlock_restrict_self, 4, 0) < 0)
		fail(125, errno, "spawner: apply Landlock ruleset");
	close(4);
	if (valid_fd(5))
		load_seccomp(notify);
	else if (valid_fd(6))
		close(6);
	if (notify)
		close(6);
}

// A forked process takes a page fault on each page of code or read-only
// data it first uses (fork does not copy the page tables of file-backed
// mappings) and on its first write to each data page (copied then): ~10
// us each in this VM. A reaper made ahead runs this while it waits, so
// that its faults of starting the command (errno) and of writing the end
// record (snprintf's code and tables) do not fall on the caller's path.
void hutch_reaper_pretouch(void) {
	char buf[32];
	volatile int n = snprintf(buf, sizeof buf, "\n=%d\n", 0x7f00);
	(void)n;
	errno = 0;
	volatile int *y = &yield_after_end;
	*y = *y;
	volatile int s = forwarded[0];
	(void)s;
}

void hutch_ready_prepare(const char *rlimits) {
	if (valid_fd(7) && syscall(SYS_landlock_restrict_self, 7, 0) < 0)
		_exit(125);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		_exit(125);
	close_from(4);
	set_rlimits(rlimits);
}

void hutch_ready_command(const char *cwd, char **argv) {
	fcntl(3, F_SETFD, FD_CLOEXEC);
	yield_after_end = 1;
	if (chdir(cwd) < 0)
		fail(125, errno, "change to the working directory");
	reaper(argv[0], argv);
}

void hutch_spawned_command(const char *rlimits, const char *cwd, char **argv) {
	fcntl(3, F_SETFD, FD_CLOEXEC);
	yield_after_end = 1;
	if (chdir(cwd) < 0)
		fail(125, errno, "change to the working directory");
	// The command's own Landlock layer: it scopes signals and abstract unix
	// sockets to this command (and its reaper), away from the spawner and
	// the session's other commands.
	if (valid_fd(4)) {
		if (syscall(SYS_landlock_restrict_self, 4, 0) < 0)
			fail(125, errno, "apply the command's Landlock scope");
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		fail(125, errno, "become the command's subreaper");
	close_from(4);
	set_rlimits(rlimits);
	reaper(argv[0], argv);
}
