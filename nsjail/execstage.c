// The per-command hardening and the command's reaper: the last steps
// between hutch's init and a sandboxed command. No Go runtime and no re-exec
// of hutch's binary are on this path.
//
// Every command passes one ordered list of steps (hutch_harden, below;
// hutch_init.h names them), wherever it starts:
//   - the direct way: the init forks a child per command, which enters the
//     commands' nested user namespace (uid 1000 mapped to the init's 0),
//     places its descriptors in their slots (hutch_init.h) and runs every
//     step;
//   - from a session's spawner: the spawner runs the shared steps once and
//     forks each command's reaper, which runs the per-command ones; a
//     reaper made ahead runs them before its command arrives.
// Then hutch_start_command changes to the command's directory and runs it
// as the reaper's child. Order matters: capabilities first (the user
// namespace gave this process every capability in it, which it drops
// entirely), no_new_privs, not dumpable (after the credential changes,
// which may reset the flag), Landlock, seccomp (so that the filter need not
// allow the set-up before it), then what each command needs of its own.
// Only the steps after SECCOMP, fork, execve and the error path run under
// the filter; seccompprofiles checks that a profile allows them.

#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hutch_init.h"
#include "wire.h"

#ifndef SYS_landlock_restrict_self
#define SYS_landlock_restrict_self 446
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT 47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif
#ifndef SECCOMP_FILTER_FLAG_NEW_LISTENER
#define SECCOMP_FILTER_FLAG_NEW_LISTENER (1UL << 3)
#endif

extern char **environ;

void hutch_fail(int code, int err, const char *what) {
	char buf[512];
	int n = snprintf(buf, sizeof buf, "%d %d %s", code, err, what);
	if (n > 0) {
		ssize_t w = write(HUTCH_SLOT_CHANNEL, buf, (size_t)n);
		(void)w;
	}
	_exit(code);
}

static int valid_fd(int fd) { return fcntl(fd, F_GETFD) != -1; }

// A step returns 0, or -1 with errno set and *what naming what failed.
typedef int (*step_fn)(struct hutch_harden *h, const char **what);

// reset_signals gives the process default dispositions and an empty signal
// mask. The init ignores catchable signals (so sandboxed code cannot stop
// it), and ignored dispositions survive fork and execve. The raw system
// call: glibc's signal() refuses its reserved real-time signals (32, 33),
// which an ignoring parent would otherwise pass on.
static int step_signals(struct hutch_harden *h, const char **what) {
	(void)h;
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
	*what = "reset the signal mask";
	return sigprocmask(SIG_SETMASK, &none, NULL);
}

// step_caps drops every capability but h->keep_caps: from the bounding
// set, the ambient set and the process's own sets. A kept capability stays
// permitted and effective: the command, uid 0 in its user namespace (an
// image build's run step), gets the bounding set's at execve, which
// no_new_privs caps at what it had (permitted) before.
static int step_caps(struct hutch_harden *h, const char **what) {
	*what = "drop capability bounding set";
	for (int c = 0; c < 64; c++) {
		if ((h->keep_caps >> c) & 1)
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL) {
			// Without a user namespace an unprivileged process may not
			// (EPERM: no CAP_SETPCAP); it has no capability to lose, and
			// no_new_privs keeps execve from granting any.
			if (h->no_namespaces && errno == EPERM)
				break;
			return -1;
		}
	}
	*what = "clear ambient capabilities";
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -1;
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof data);
	data[0].permitted = data[0].effective = (uint32_t)h->keep_caps;
	data[1].permitted = data[1].effective = (uint32_t)(h->keep_caps >> 32);
	*what = "clear capabilities";
	return (int)syscall(SYS_capset, &hdr, data);
}

static int step_nnp(struct hutch_harden *h, const char **what) {
	(void)h;
	*what = "set no_new_privs";
	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
}

// Not dumpable: /proc/PID/{mem,fd,environ} of hutch's processes stay closed
// to the commands (same uid, no capability to override it). A command's own
// execve makes it dumpable again.
static int step_not_dumpable(struct hutch_harden *h, const char **what) {
	(void)h;
	*what = "clear the dumpable flag";
	return prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

// restrict_slot applies the Landlock ruleset in slot, when there is one,
// and closes it.
static int restrict_slot(int slot) {
	if (!valid_fd(slot))
		return 0;
	if (syscall(SYS_landlock_restrict_self, slot, 0) < 0)
		return -1;
	close(slot);
	return 0;
}

static int step_landlock(struct hutch_harden *h, const char **what) {
	(void)h;
	*what = "apply Landlock ruleset";
	return restrict_slot(HUTCH_SLOT_LANDLOCK);
}

// send_listener hands the seccomp listener to the supervisor on the notify
// slot, before the command runs, so that its first denied syscall is
// already observable.
static int send_listener(int lfd) {
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
	memcpy(CMSG_DATA(cm), &lfd, sizeof lfd);
	return sendmsg(HUTCH_SLOT_NOTIFY, &msg, MSG_NOSIGNAL) < 0 ? -1 : 0;
}

static int step_seccomp(struct hutch_harden *h, const char **what) {
	int notify = h->notify && valid_fd(HUTCH_SLOT_NOTIFY);
	if (!valid_fd(HUTCH_SLOT_SECCOMP)) {
		close(HUTCH_SLOT_NOTIFY);
		return 0;
	}
	struct stat st;
	*what = "stat seccomp program";
	if (fstat(HUTCH_SLOT_SECCOMP, &st) < 0)
		return -1;
	*what = "seccomp program has a bad size";
	if (st.st_size <= 0 || st.st_size % sizeof(struct sock_filter) != 0 ||
	    st.st_size > 65536 * (off_t)sizeof(struct sock_filter)) {
		errno = EINVAL;
		return -1;
	}
	*what = "allocate seccomp program";
	struct sock_filter *insns = malloc((size_t)st.st_size);
	if (!insns)
		return -1;
	*what = "read seccomp program";
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t n = pread(HUTCH_SLOT_SECCOMP, (char *)insns + got, (size_t)st.st_size - got, (off_t)got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			if (n == 0)
				errno = EIO;
			free(insns);
			return -1;
		}
		got += (size_t)n;
	}
	close(HUTCH_SLOT_SECCOMP);
	struct sock_fprog prog = {(unsigned short)(st.st_size / sizeof(struct sock_filter)), insns};
	unsigned long flags = notify ? SECCOMP_FILTER_FLAG_NEW_LISTENER : 0;
	*what = "load seccomp filter";
	long lfd = syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog);
	int e = errno;
	free(insns);
	if (lfd < 0) {
		errno = e;
		return -1;
	}
	if (notify) {
		*what = "send seccomp listener to the supervisor";
		if (send_listener((int)lfd) < 0)
			return -1;
		close((int)lfd);
	}
	close(HUTCH_SLOT_NOTIFY);
	return 0;
}

// The command's own Landlock layer, from a session's spawner: it scopes
// signals and abstract unix sockets to this command (and its reaper), away
// from the spawner and the session's other commands. A command started the
// direct way has a domain of its own already and gets none.
static int step_scope(struct hutch_harden *h, const char **what) {
	(void)h;
	*what = "apply the command's Landlock scope";
	return restrict_slot(HUTCH_SLOT_SCOPE);
}

static int step_subreaper(struct hutch_harden *h, const char **what) {
	(void)h;
	*what = "become the command's subreaper";
	return prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
}

// close_from closes every descriptor from fd up.
static void close_from(int fd) {
	if (syscall(SYS_close_range, fd, ~0U, 0) < 0) {
		for (int i = fd; i < 1024; i++)
			close(i);
	}
}

// Only 0, 1, 2 survive execve; the channel (the status pipe) closes on
// success.
static int step_close_fds(struct hutch_harden *h, const char **what) {
	(void)h;
	close_from(HUTCH_SLOT_CHANNEL + 1);
	*what = "make the status pipe close-on-exec";
	return fcntl(HUTCH_SLOT_CHANNEL, F_SETFD, FD_CLOEXEC) < 0 && errno != EBADF ? -1 : 0;
}

static int step_rlimits(struct hutch_harden *h, const char **what) {
	*what = "set a resource limit";
	for (uint32_t i = 0; h->rlimits && i < h->rlimits->n; i++) {
		const struct hutch_rlimit *r = &h->rlimits->r[i];
		struct rlimit rl = {(rlim_t)r->cur, (rlim_t)r->max};
		if (setrlimit(r->resource, &rl) < 0)
			return -1;
	}
	return 0;
}

// The steps, in the order of enum hutch_harden_step.
static const step_fn steps[HUTCH_HARDEN_STEPS] = {
	[HUTCH_HARDEN_SIGNALS] = step_signals,
	[HUTCH_HARDEN_CAPS] = step_caps,
	[HUTCH_HARDEN_NO_NEW_PRIVS] = step_nnp,
	[HUTCH_HARDEN_NOT_DUMPABLE] = step_not_dumpable,
	[HUTCH_HARDEN_LANDLOCK] = step_landlock,
	[HUTCH_HARDEN_SECCOMP] = step_seccomp,
	[HUTCH_HARDEN_SCOPE] = step_scope,
	[HUTCH_HARDEN_SUBREAPER] = step_subreaper,
	[HUTCH_HARDEN_CLOSE_FDS] = step_close_fds,
	[HUTCH_HARDEN_RLIMITS] = step_rlimits,
};

int hutch_harden(struct hutch_harden *h, int from, int to) {
	for (int i = from; i < to && i < HUTCH_HARDEN_STEPS; i++) {
		const char *what = "harden the command";
		if (steps[i](h, &what) < 0) {
			h->err = errno;
			h->what = what;
			return -1;
		}
	}
	return 0;
}

// ---- the reaper -------------------------------------------------------------

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

// leftover counts the processes kill_all killed: what the command left
// behind, reported in the end record (a tree near the process limit is a
// fork bomb the limit stopped, which no counter of the rlimit backend saw).
static unsigned leftover;

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
			if (kill(kids[i], SIGKILL) == 0)
				leftover++;
		while (waitpid(-1, &st, WNOHANG) > 0)
			;
		struct timespec ts = {0, n == 0 ? 1000000 : 100000};
		nanosleep(&ts, NULL);
	}
}

unsigned hutch_kill_all(void) {
	leftover = 0;
	kill_all(getpid());
	return leftover;
}

// report_end writes the end record on the status pipe: the wait status the
// init will see for this reaper and the processes kill_all killed,
// "\n=STATUS LEFTOVER\n". Nothing of the command is
// left by then, so the init may report the command's end at once instead
// of after this process has exited (its teardown is then off the caller's
// path).
//
// The init, woken by the write, is often placed on this CPU; a spawned
// command's reaper then yields it the CPU, or the init would wait for this
// process's teardown after all. (Only there: the built-in seccomp profile,
// which a spawner requires, allows sched_yield; a user's profile may not.)
static int yield_after_end;

static void report_end(int st) {
	char buf[32];
	int n = snprintf(buf, sizeof buf, "\n=%d %u\n", st, leftover);
	ssize_t w = write(HUTCH_SLOT_CHANNEL, buf, (size_t)n);
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

// take_terminal makes the calling process (the command, before it
// executes) the leader of a session of its own whose controlling terminal
// is the first of its descriptors 0-2 that is a terminal: the pseudo-
// terminal the supervisor made for it in the sandbox's devpts, never the
// caller's (which the supervisor does not pass when it makes one). Its
// process group is then the terminal's foreground group: what the line
// discipline signals (^C, ^Z, a window size change) reaches it, and
// /dev/tty opens its terminal. Returns -1 when it could not lead a session.
static int take_terminal(void) {
	if (setsid() < 0)
		return -1;
	for (int fd = 0; fd < 3; fd++)
		if (ioctl(fd, TIOCSCTTY, 0) == 0)
			break;
	return 0;
}

// reaper starts the command as its child and stays: it relays signals to
// the command's process group, and when the command exits (or the init
// sends HUTCH_SIG_TERMINATE) it kills everything the command left behind
// and exits with the command's status. This is how one exec in a shared
// session sandbox is cleaned up without cgroups. With terminal, the
// command leads a session of its own on its terminal (take_terminal); its
// process group is the same as without (its pid), so relaying is too.
__attribute__((noreturn)) static void reaper(const char *file, char **cargv, int terminal) {
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
		hutch_fail(125, errno, "fork the command");
	if (pid == 0) {
		sigprocmask(SIG_SETMASK, &old, NULL);
		// Its own process group (the reaper relays signals to it), in
		// the sandbox's session, which has no controlling terminal; or,
		// on a terminal of its own, its own session.
		if (!terminal || take_terminal() < 0)
			setpgid(0, 0);
		execvpe(file, cargv, environ);
		int e = errno;
		hutch_fail((e == ENOENT || e == ENOTDIR) ? 127 : 126, e, "execute the command");
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

void hutch_start_command(const char *cwd, char **argv, int yield, int terminal) {
	// The channel is the command's status pipe; dup2 into its slot
	// cleared close-on-exec.
	fcntl(HUTCH_SLOT_CHANNEL, F_SETFD, FD_CLOEXEC);
	yield_after_end = yield;
	if (chdir(cwd) < 0)
		hutch_fail(125, errno, "change to the working directory");
	reaper(argv[0], argv, terminal);
}

// A forked process takes a page fault on each page of code or read-only
// data it first uses (fork does not copy the page tables of file-backed
// mappings) and on its first write to each data page (copied then). A
// reaper made ahead runs this while it waits, so that its faults of
// starting the command (errno) and of writing the end record (snprintf's
// code and tables) do not fall on the caller's path.
void hutch_reaper_pretouch(void) {
	char buf[32];
	volatile int n = snprintf(buf, sizeof buf, "\n=%d %u\n", 0x7f00, leftover);
	(void)n;
	errno = 0;
	volatile int *y = &yield_after_end;
	*y = *y;
	volatile int s = forwarded[0];
	(void)s;
}
