// The sandbox init, in C. The supervisor starts /proc/self/exe with
// argv[0] == HUTCH_INIT_MAGIC in new user, mount, pid, net, ipc, uts and
// cgroup namespaces; this constructor takes over before the Go runtime
// starts and never returns to Go. It is pid 1 of the sandbox and root of its
// user namespace (mapped to the invoking host user):
//
//  1. receive the setup (hostname, mount plan, seccomp program, rlimits);
//  2. set the hostname, bring up lo, build the root (mounts.c) and pivot;
//  3. make the egress proxy's sockets inside the network namespace;
//  4. send Ready with an O_PATH descriptor of the new root (the supervisor
//     builds the Landlock ruleset beneath it and sends the ruleset back)
//     and the proxy sockets;
//  5. serve: start commands on request (fork, nested user namespace,
//     execstage.c), relay signals to them, reap every process and report
//     the commands' ends; make TCP sockets of its network namespace for
//     the supervisor's published ports.
//
// It exits when the supervisor closes the control socket; the kernel then
// kills everything left in the pid namespace. Nothing from inside the
// sandbox is trusted: the only peer of the control socket is the
// supervisor, and pid 1 ignores every catchable signal and is not
// dumpable, so sandboxed code can neither stop nor inspect it.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hutch_init.h"
#include "wire.h"

#ifndef SYS_close_range
#define SYS_close_range 436
#endif

// ---- messages ------------------------------------------------------------

static int send_raw_on(int sock, const void *p, size_t len, const int *fds, int nfds) {
	struct iovec iov = {(void *)p, len};
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	for (;;) {
		if (sendmsg(sock, &msg, MSG_NOSIGNAL) >= 0)
			return 0;
		if (errno != EINTR)
			return -1;
	}
}

static int send_msg_on(int sock, struct hutch_wr *w, const int *fds, int nfds) { return send_raw_on(sock, w->b, w->n, fds, nfds); }
static int send_msg(struct hutch_wr *w, const int *fds, int nfds) { return send_msg_on(HUTCH_FD_CONTROL, w, fds, nfds); }

// recv_msg_on reads one message and up to 8 descriptors from sock. Returns
// the length, 0 when the peer closed the socket, -1 on error.
static ssize_t recv_msg_on(int sock, unsigned char *buf, size_t len, int *fds, int *nfds) {
	union {
		char buf[CMSG_SPACE(sizeof(int) * 8)];
		struct cmsghdr align;
	} u;
	struct iovec iov = {buf, len};
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	msg.msg_control = u.buf;
	msg.msg_controllen = sizeof u.buf;
	ssize_t n;
	do {
		n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	*nfds = 0;
	if (n < 0)
		return -1;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		int k = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
		for (int i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + sizeof(int) * (size_t)i, sizeof fd);
			if (*nfds < 8)
				fds[(*nfds)++] = fd;
			else
				close(fd);
		}
	}
	if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
		for (int i = 0; i < *nfds; i++)
			close(fds[i]);
		*nfds = 0;
		errno = EMSGSIZE;
		return -1;
	}
	return n;
}

// recv_msg reads from the supervisor's control socket.
static ssize_t recv_msg(unsigned char *buf, size_t len, int *fds, int *nfds) {
	return recv_msg_on(HUTCH_FD_CONTROL, buf, len, fds, nfds);
}

static void close_fds(const int *fds, int n) {
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

// ---- helpers -------------------------------------------------------------

// The init's state. One sandbox, one init, one thread: plain statics.
static struct {
	int timing;
	struct hutch_setup setup; // as received (its strings point into it)
	int bpf_fd, ll_fd;
	struct hutch_wr out;
	// timings, reported with Ready
	struct {
		const char *name;
		long usec;
	} marks[16];
	// loopback_up's failure, when it ran before the setup arrived
	char net_err[256];
	int nmarks;
} in = {.bpf_fd = -1, .ll_fd = -1};

static void mark(const char *name, long usec) {
	if (in.nmarks < 16) { // recorded always, sent only when asked for
		in.marks[in.nmarks].name = name;
		in.marks[in.nmarks].usec = usec;
		in.nmarks++;
	}
}

__attribute__((noreturn, format(printf, 1, 2))) static void setup_fail(const char *fmt, ...) {
	char msg[4096];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	hutch_wr_fail(&in.out, 0, HUTCH_FAIL_OTHER, msg); // the message says why; no step here needs its errno
	send_msg(&in.out, NULL, 0);
	_exit(1);
}

// loopback_up brings up lo; on failure it returns -1 with the reason in err.
static int loopback_up(char *err, size_t errlen) {
	char eb[128];
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		snprintf(err, errlen, "bring up loopback: socket: %s", hutch_strerror(errno, eb, sizeof eb));
		return -1;
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof ifr);
	strcpy(ifr.ifr_name, "lo");
	int rc = -1;
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0) {
		snprintf(err, errlen, "bring up loopback: get flags: %s", hutch_strerror(errno, eb, sizeof eb));
	} else {
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
			snprintf(err, errlen, "bring up loopback: set flags: %s", hutch_strerror(errno, eb, sizeof eb));
		else
			rc = 0;
	}
	close(fd);
	return rc;
}

// proxy_socket makes one of the egress proxy's sockets on 127.0.0.1 inside
// the sandbox's network namespace. The supervisor serves it from the host
// side: a socket keeps the namespace it was made in.
static int proxy_socket(int type, int port, const char *what) {
	char eb[128];
	int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
	if (fd < 0)
		setup_fail("%s socket: %s", what, hutch_strerror(errno, eb, sizeof eb));
	int one = 1;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0)
		setup_fail("%s socket: %s", what, hutch_strerror(errno, eb, sizeof eb));
	struct sockaddr_in sa;
	memset(&sa, 0, sizeof sa);
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
		setup_fail("%s socket: bind 127.0.0.1:%d: %s", what, port, hutch_strerror(errno, eb, sizeof eb));
	if (type == SOCK_STREAM && listen(fd, 128) < 0)
		setup_fail("%s socket: listen: %s", what, hutch_strerror(errno, eb, sizeof eb));
	return fd;
}


// ---- commands ------------------------------------------------------------

struct proc {
	uint64_t id;
	pid_t pid;
	int status_fd;  // read end of the command's status pipe; -1 once at its end
	int reported;   // its end was reported from the reaper's end record
	uint32_t left;  // processes its reaper killed when it ended (end record)
	int announced;  // STARTED (its reaper's pid) was sent
	size_t len;     // bytes of the status pipe read so far
	char text[600]; // what the status pipe said (NUL-terminated)
};
static struct proc *procs;
static size_t nprocs, capprocs;

// hutch_wr_report writes the layout SPAWNERR, EXIT and SPAWNER_REPLY share:
// the raw wait status, the exit code hutch reports, the errno of a failed
// step, what failed, (EXIT) whether no sandboxed process is left, and
// (EXIT) how many processes the reaper killed when the command ended.
void hutch_wr_report(struct hutch_wr *w, uint32_t op, uint64_t id, int64_t status, int64_t code, int64_t eno,
                     const char *what, uint32_t alone, uint32_t leftover) {
	hutch_wr_head(w, op, id);
	hutch_wr_i64(w, status);
	hutch_wr_i64(w, code);
	hutch_wr_i64(w, eno);
	hutch_wr_str(w, what);
	hutch_wr_u32(w, alone);
	hutch_wr_u32(w, leftover);
}

// hutch_wr_ready writes READY: the timings (names and microseconds) and
// what became of the plan hint (HUTCH_HINT_*).
void hutch_wr_ready(struct hutch_wr *w, int nmarks, const char *const *names, const long *usecs, uint32_t hint_state) {
	hutch_wr_head(w, HUTCH_OP_READY, 0);
	hutch_wr_u32(w, (uint32_t)nmarks);
	for (int i = 0; i < nmarks; i++) {
		hutch_wr_str(w, names[i]);
		hutch_wr_i64(w, usecs[i]);
	}
	hutch_wr_u32(w, hint_state);
}

// hutch_wr_started writes STARTED: a command's reaper's pid.
void hutch_wr_started(struct hutch_wr *w, uint64_t id, int64_t pid) {
	hutch_wr_head(w, HUTCH_OP_STARTED, id);
	hutch_wr_i64(w, pid);
}

static void spawn_error(uint64_t id, int code, const char *what) {
	hutch_wr_report(&in.out, HUTCH_OP_SPAWNERR, id, 0, code, 0, what, 0, 0);
	send_msg(&in.out, NULL, 0);
}

// userns_fd is the nested user namespace commands enter (uid and gid 1000
// mapped to the init's 0), made once by make_userns at a sandbox's second
// command (a one-off `hutch run` has one command, which makes its own as
// cheaply); -1 until then, or when that failed, and a command then makes
// its own.
static int userns_fd = -1;
static int spawned;

// no_ns: the init was started without namespaces (the landlock isolation,
// argv[1] HUTCH_INIT_NO_NAMESPACES). It is then not pid 1 of anything:
// it is the child subreaper of every sandboxed process, kills them all
// (hutch_kill_all) before it exits, and exits on SIGTERM (its parent-death
// signal, and the supervisor's kill) as on the end of its control socket.
// Commands run as the invoking user, in no user namespace of their own.
static int no_ns;

// The session's spawner (execstage.c): its pid and the init's end of its
// socket; -1 when there is none (not asked for, failed, or gone).
static pid_t spawner_pid = -1;
static int spawner_fd = -1;

// keep_caps is the capability set commands keep: HUTCH_BUILD_CAPS in an
// image build's run step, else none.
static unsigned long long keep_caps(void) {
	return (in.setup.flags & HUTCH_SETUP_BUILD) ? HUTCH_BUILD_CAPS : 0;
}

// write_maps gives the calling process's new user namespace its one-line
// maps. Returns 0, or -1 with errno set and *what naming the step.
static int write_maps(int uid, int gid, const char **what) {
	char map[64];
	const char *files[3] = {"/proc/self/setgroups", "/proc/self/uid_map", "/proc/self/gid_map"};
	const char *whats[3] = {"deny setgroups in the command's user namespace", "map the command's uid", "map the command's gid"};
	for (int i = 0; i < 3; i++) {
		if (i == 0)
			snprintf(map, sizeof map, "deny");
		else
			snprintf(map, sizeof map, "%d 0 1", i == 1 ? uid : gid);
		*what = whats[i];
		int fd = open(files[i], O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
		size_t len = strlen(map);
		ssize_t w = write(fd, map, len);
		int e = errno;
		close(fd);
		if (w != (ssize_t)len) {
			errno = w < 0 ? e : EIO;
			return -1;
		}
	}
	return 0;
}

// make_userns creates the commands' user namespace once, in a helper child
// that unshares and maps it, and keeps a descriptor of it: entering it with
// setns costs a command far less than creating one.
static int make_userns(int uid, int gid) {
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid_t pid = fork();
	if (pid < 0) {
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		const char *what;
		close(p[0]);
		prctl(PR_SET_NAME, HUTCH_NAME_USERNS, 0, 0, 0);
		if (unshare(CLONE_NEWUSER) < 0 || write_maps(uid, gid, &what) < 0)
			_exit(1);
		if (write(p[1], "k", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	char c;
	ssize_t n;
	do {
		n = read(p[0], &c, 1);
	} while (n < 0 && errno == EINTR);
	close(p[0]);
	int fd = -1;
	if (n == 1) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/ns/user", (int)pid);
		fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return fd;
}

static void take_payload(const char **cwd, char ***argv);

// A spawn request as the init passes it to the spawner or a reaper made
// ahead: the supervisor's message, with stdio, the status pipe and the
// payload.
enum { REQUEST_FDS = 5 };

// place puts src[i] into slot i (0-2 stdio, then the slots of
// hutch_init.h; -1 leaves the slot closed), by way of high duplicates so
// that no source is overwritten before it is moved.
static void place(const int *src, int n) {
	int tmp[HUTCH_SLOT_END];
	for (int i = 0; i < n; i++)
		tmp[i] = src[i] >= 0 ? fcntl(src[i], F_DUPFD_CLOEXEC, 16) : -1;
	for (int i = 0; i < n; i++) {
		if (tmp[i] >= 0)
			dup2(tmp[i], i);
		else
			close(i);
	}
}

// close_from_fd closes every descriptor from fd up.
static void close_from_fd(int fd) {
	if (syscall(SYS_close_range, fd, ~0U, 0) < 0) {
		for (int i = fd; i < 1024; i++)
			close(i);
	}
}

// child runs in the forked child of a command started the direct way: it
// places its descriptors in their slots (src: stdio, the status pipe, the
// Landlock ruleset, the seccomp program, the notification socket, no scope
// layer: the command's domain is its own, the payload), reads its request,
// enters the nested user namespace that maps uid and gid to the init's 0
// (the invoking host user), runs every hardening step and starts the
// command as its reaper.
__attribute__((noreturn)) static void child(int uid, int gid, const int src[HUTCH_SLOT_END], int notify, int terminal) {
	prctl(PR_SET_NAME, HUTCH_NAME_REAPER, 0, 0, 0);
	int ns = userns_fd >= 0 ? fcntl(userns_fd, F_DUPFD_CLOEXEC, 16) : -1;
	place(src, HUTCH_SLOT_END);
	const char *cwd;
	char **argv;
	take_payload(&cwd, &argv);
	if (no_ns) {
		// No user namespace: the command is the invoking user.
	} else if (ns >= 0) {
		// Every capability in the namespace, as after unshare.
		if (setns(ns, CLONE_NEWUSER) < 0)
			hutch_fail(125, errno, "enter the commands' user namespace");
	} else {
		const char *what;
		if (unshare(CLONE_NEWUSER) < 0)
			hutch_fail(125, errno, "create the command's user namespace");
		if (write_maps(uid, gid, &what) < 0)
			hutch_fail(125, errno, what);
	}
	close_from_fd(HUTCH_SLOT_END);
	struct hutch_harden h = {.notify = notify, .no_namespaces = no_ns, .keep_caps = keep_caps(), .rlimits = &in.setup.rlimits};
	if (hutch_harden(&h, 0, HUTCH_HARDEN_STEPS) < 0)
		hutch_fail(125, h.err, h.what);
	hutch_start_command(cwd, argv, 0, terminal);
}

// announce tells the supervisor a command's reaper pid (STARTED).
static void announce(struct proc *p) {
	p->announced = 1;
	hutch_wr_started(&in.out, p->id, p->pid);
	send_msg(&in.out, NULL, 0);
}

// add_proc records a started command (its reaper's pid and the read end
// of its status pipe) and, when now is set, tells the supervisor. A
// command from the spawner is announced when the supervisor asks
// (HUTCH_OP_PIDS: it needs the pids only to attribute a seccomp
// notification): a message on every command's path would wake the
// supervisor while the command starts (docs/PERFORMANCE.md has the cost).
static void add_proc(uint64_t id, pid_t pid, int status_fd, int now) {
	fcntl(status_fd, F_SETFL, O_NONBLOCK);
	struct proc *p = &procs[nprocs++];
	p->id = id;
	p->pid = pid;
	p->status_fd = status_fd;
	p->reported = 0;
	p->announced = 0;
	p->len = 0;
	p->text[0] = 0;
	if (now)
		announce(p);
}

// A reaper the spawner forked ahead (make_ready): its pid and the socket on
// which it takes the next spawn request; -1 when there is none.
static pid_t ready_pid = -1;
static int ready_fd = -1;

// drop_child forgets a helper child of the init (the spawner, a reaper
// made ahead): closes its socket and kills it while *pid is set (the init
// reaps it like any child; set *pid to -1 first to leave it running).
static void drop_child(pid_t *pid, int *fd) {
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
	if (*pid > 0)
		kill(*pid, SIGKILL);
	*pid = -1;
}

static void drop_ready(void) { drop_child(&ready_pid, &ready_fd); }

// drop_spawner forgets a spawner that failed or is gone, and its reaper
// made ahead.
static void drop_spawner(void) {
	drop_child(&spawner_pid, &spawner_fd);
	drop_ready();
}

// get_ready asks the spawner for a reaper made ahead of the next command,
// so that starting it costs neither the spawner's fork nor the per-command
// set-up that does not depend on the command (its Landlock scope layer,
// subreaper, rlimits: the per-command hardening steps). Without one, a command starts
// through the spawner as before.
static void get_ready(void) {
	if (spawner_pid <= 0 || ready_fd >= 0)
		return;
	unsigned char b[HUTCH_HEADER_SIZE] = {0}; // a message header with the op alone
	uint32_t op = HUTCH_OP_READY_REAPER;
	memcpy(b, &op, sizeof op);
	if (send_raw_on(spawner_fd, b, sizeof b, NULL, 0) < 0) {
		drop_spawner();
		return;
	}
	int64_t v = 0;
	int fds[8], nfds = 0;
	ssize_t n;
	do {
		n = recv_msg_on(spawner_fd, (unsigned char *)&v, sizeof v, fds, &nfds);
	} while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof v) {
		close_fds(fds, nfds);
		drop_spawner();
		return;
	}
	if (v > 0 && nfds == 1) {
		ready_pid = (pid_t)v;
		ready_fd = fds[0];
	} else {
		close_fds(fds, nfds);
	}
}

// spawn_via_ready hands the spawn request and the command's descriptors to
// the reaper made ahead. Returns its pid, or 0 when there is none (or it
// could not take the request).
static pid_t spawn_via_ready(const unsigned char *raw, size_t rawlen, const int *fds, int status_w) {
	if (ready_fd < 0)
		return 0;
	int out[REQUEST_FDS] = {fds[0], fds[1], fds[2], status_w, fds[3]};
	pid_t pid = 0;
	if (send_raw_on(ready_fd, raw, rawlen, out, REQUEST_FDS) == 0) {
		pid = ready_pid;
		ready_pid = -1; // it runs the command now
	}
	drop_ready(); // kills it only if it could not take the request
	return pid;
}


// spawn_via_spawner hands the spawn request (the supervisor's message as it
// came) and the command's descriptors to the spawner, which forks the
// command's reaper as a child of the init (CLONE_PARENT) and answers with
// its pid. Returns the pid, 0 when there is no spawner (or it is gone), or
// -errno when its fork failed.
static pid_t spawn_via_spawner(const unsigned char *raw, size_t rawlen, const int *fds, int status_w) {
	if (spawner_pid <= 0)
		return 0;
	int out[REQUEST_FDS] = {fds[0], fds[1], fds[2], status_w, fds[3]};
	if (send_raw_on(spawner_fd, raw, rawlen, out, REQUEST_FDS) < 0) {
		drop_spawner();
		return 0;
	}
	int64_t v = 0;
	ssize_t n;
	do {
		n = recv(spawner_fd, &v, sizeof v, 0);
	} while (n < 0 && errno == EINTR);
	if (n != (ssize_t)sizeof v) {
		drop_spawner();
		return 0;
	}
	return (pid_t)v;
}

// hutch_read_payload reads a spawn request's payload: the working
// directory, argv and the environment (NULL-terminated arrays of pointers
// into b, to free). Returns -1, with nothing to free, when it is malformed.
int hutch_read_payload(const unsigned char *b, size_t n, const char **cwd, char ***argv, char ***envp) {
	struct hutch_rd r = {b, n, 0};
	*cwd = hutch_rd_str(&r);
	*argv = *envp = NULL;
	uint32_t argc = hutch_rd_u32(&r);
	if (r.bad || argc == 0 || argc > n)
		return -1;
	char **av = calloc((size_t)argc + 1, sizeof *av);
	for (uint32_t i = 0; av && i < argc; i++)
		av[i] = (char *)hutch_rd_str(&r);
	uint32_t envc = hutch_rd_u32(&r);
	char **ev = av && !r.bad && envc <= n ? calloc((size_t)envc + 1, sizeof *ev) : NULL;
	for (uint32_t i = 0; ev && i < envc; i++)
		ev[i] = (char *)hutch_rd_str(&r);
	if (!ev || r.bad || r.n != 0) {
		free(av);
		free(ev);
		return -1;
	}
	*argv = av;
	*envp = ev;
	return 0;
}

// hutch_load_payload reads the whole payload memfd fd into a new buffer,
// at most HUTCH_MAX_PAYLOAD bytes; NULL (errno set) when it cannot.
unsigned char *hutch_load_payload(int fd, size_t *n) {
	struct stat st;
	if (fstat(fd, &st) < 0)
		return NULL;
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 || st.st_size > HUTCH_MAX_PAYLOAD) {
		errno = EINVAL;
		return NULL;
	}
	unsigned char *b = malloc((size_t)st.st_size);
	if (!b)
		return NULL;
	size_t got = 0;
	while (got < (size_t)st.st_size) {
		ssize_t k = pread(fd, b + got, (size_t)st.st_size - got, (off_t)got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			free(b);
			errno = k < 0 ? errno : EIO;
			return NULL;
		}
		got += (size_t)k;
	}
	*n = got;
	return b;
}

uint32_t hutch_spawn_flags(const unsigned char *msg, size_t n) {
	struct hutch_rd r = {msg, n, 0};
	uint64_t id;
	hutch_rd_header(&r, &id);
	uint32_t flags = hutch_rd_u32(&r);
	return r.bad ? 0 : flags;
}

// take_payload reads the spawn request's payload from its slot (placed) and
// closes it; a payload that cannot be read or parsed is reported on the
// status pipe and ends the process.
static void take_payload(const char **cwd, char ***argv) {
	size_t n;
	unsigned char *b = hutch_load_payload(HUTCH_SLOT_PAYLOAD, &n);
	if (!b)
		hutch_fail(125, errno, "read the spawn request's payload");
	close(HUTCH_SLOT_PAYLOAD);
	char **envp;
	if (hutch_read_payload(b, n, cwd, argv, &envp) < 0)
		hutch_fail(125, EINVAL, "malformed spawn request");
	environ = envp;
}

// place_request puts a spawn request's descriptors (stdio, the status
// pipe, the payload) where the command's reaper expects them: 0-2, the
// channel and the payload slot. The other slots are left as they are.
static void place_request(const int *fds) {
	static const int slot[REQUEST_FDS] = {0, 1, 2, HUTCH_SLOT_CHANNEL, HUTCH_SLOT_PAYLOAD};
	int tmp[REQUEST_FDS];
	for (int i = 0; i < REQUEST_FDS; i++)
		tmp[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 16);
	for (int i = 0; i < REQUEST_FDS; i++) {
		if (tmp[i] >= 0)
			dup2(tmp[i], slot[i]);
		else
			close(slot[i]);
	}
}

// pretouch writes to the stack and heap a reaper will use, and runs the
// code it will run, so that their page faults (see
// hutch_reaper_pretouch) are taken while it waits, not while a command
// starts: the request's parsing (memchr, the allocator's state: a block
// too large for its per-thread cache goes through the arena), environ.
__attribute__((noinline)) static void pretouch(unsigned char *buf) {
	volatile unsigned char stack[32 << 10];
	for (size_t i = 0; i < sizeof stack; i += 4096)
		stack[i] = 0;
	stack[sizeof stack - 1] = 0; // the page next to the callers' frames
	memset(buf, 0, 64 << 10);
	// The empty asm statements keep the calls: a compiler drops a free of
	// an unused allocation, and a call whose result is unused.
	const void *m = memchr(buf, 1, 64);
	__asm__ volatile("" : : "r"(m) : "memory");
	void *small = calloc(64, sizeof(char *)), *large = malloc(4096);
	__asm__ volatile("" : : "r"(small), "r"(large) : "memory");
	free(small);
	free(large);
	char **volatile *ep = &environ;
	*ep = *ep;
	hutch_reaper_pretouch();
}

// ready_main is a reaper forked ahead by the spawner: it runs the
// per-command hardening steps (which do not depend on the command), takes
// its first copy-on-write faults, then waits on its channel for one spawn
// request from the init and runs that command. A step that failed is
// reported on the request's status pipe, so the command fails with the
// reason. The end of the socket (the init dropped it) ends it.
__attribute__((noreturn)) static void ready_main(unsigned char *buf) {
	prctl(PR_SET_NAME, HUTCH_NAME_REAPER, 0, 0, 0);
	pretouch(buf); // before the rlimits, which may be small
	struct hutch_harden h = {.keep_caps = keep_caps(), .rlimits = &in.setup.rlimits};
	int failed = hutch_harden(&h, HUTCH_HARDEN_SHARED, HUTCH_HARDEN_STEPS) < 0;
	int fds[8], nfds;
	ssize_t n;
	do {
		n = recv_msg_on(HUTCH_SLOT_CHANNEL, buf, HUTCH_MAX_MSG, fds, &nfds);
	} while (n < 0 && errno == EINTR);
	if (n < HUTCH_HEADER_SIZE || nfds != REQUEST_FDS)
		_exit(0);
	uint32_t flags = hutch_spawn_flags(buf, (size_t)n);
	place_request(fds); // replaces the socket on the channel with the status pipe
	if (failed)
		hutch_fail(125, h.err, h.what);
	const char *cwd;
	char **argv;
	take_payload(&cwd, &argv);
	close_from_fd(HUTCH_SLOT_CHANNEL + 1);
	hutch_start_command(cwd, argv, 1, (flags & HUTCH_SPAWN_TERMINAL) != 0);
}

// make_ready forks a reaper ahead (a child of the init, like the others) and
// answers the init with its pid and the socket it takes its request on.
static void make_ready(unsigned char *buf) {
	int rs[2];
	int64_t v;
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rs) < 0) {
		v = -(int64_t)errno;
		send(HUTCH_FD_CONTROL, &v, sizeof v, MSG_NOSIGNAL);
		return;
	}
	long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
	if (pid == 0) {
		close(rs[0]);
		dup2(rs[1], HUTCH_SLOT_CHANNEL); // the init's socket goes: the request comes on this one
		ready_main(buf);
	}
	close(rs[1]);
	v = pid > 0 ? pid : -(int64_t)errno;
	send_raw_on(HUTCH_FD_CONTROL, &v, sizeof v, pid > 0 ? &rs[0] : NULL, pid > 0 ? 1 : 0);
	close(rs[0]);
}

// spawner_main is the spawner's loop (after the shared hardening steps):
// one request per message on its channel — a spawn request, answered with
// the reaper's pid or -errno, or HUTCH_OP_READY_REAPER (make_ready).

__attribute__((noreturn)) static void spawner_main(unsigned char *buf) {
	for (;;) {
		int fds[8], nfds;
		ssize_t n = recv_msg(buf, HUTCH_MAX_MSG, fds, &nfds);
		if (n == 0 || (n < 0 && errno != EMSGSIZE && errno != EINTR))
			_exit(0); // the init is gone
		if (n >= HUTCH_HEADER_SIZE && nfds == 0) {
			uint32_t op;
			memcpy(&op, buf, sizeof op);
			if (op == HUTCH_OP_READY_REAPER) {
				make_ready(buf);
				continue;
			}
		}
		if (n < HUTCH_HEADER_SIZE || nfds != REQUEST_FDS) {
			close_fds(fds, nfds);
			int64_t v = -EINVAL;
			send(HUTCH_FD_CONTROL, &v, sizeof v, MSG_NOSIGNAL);
			continue;
		}
		// The reaper becomes the init's child, so the init reaps it and
		// reports its end as for any command.
		long pid = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, NULL, NULL, 0);
		if (pid == 0) {
			prctl(PR_SET_NAME, HUTCH_NAME_REAPER, 0, 0, 0);
			place_request(fds);
			const char *cwd;
			char **argv;
			take_payload(&cwd, &argv);
			struct hutch_harden h = {.keep_caps = keep_caps(), .rlimits = &in.setup.rlimits};
			if (hutch_harden(&h, HUTCH_HARDEN_SHARED, HUTCH_HARDEN_STEPS) < 0)
				hutch_fail(125, h.err, h.what);
			hutch_start_command(cwd, argv, 1, (hutch_spawn_flags(buf, (size_t)n) & HUTCH_SPAWN_TERMINAL) != 0);
		}
		close_fds(fds, nfds);
		int64_t v = pid > 0 ? pid : -(int64_t)errno;
		send(HUTCH_FD_CONTROL, &v, sizeof v, MSG_NOSIGNAL);
	}
}

// start_spawner forks the session's spawner: in the commands' nested user
// namespace, hardened once (execstage.c), serving spawn requests from the
// init. fds: the scope ruleset, then (with notify) the socket on which the
// spawner sends its seccomp listener to the supervisor. On failure it
// returns -1 with a message in err.
static int start_spawner(int notify, const int *fds, int nfds, char *err, size_t errlen) {
	char eb[128];
	if (in.ll_fd < 0 || nfds < 1 + notify) {
		snprintf(err, errlen, "no Landlock ruleset or descriptors for the spawner");
		return -1;
	}
	if (no_ns) {
		snprintf(err, errlen, "no spawner without namespaces");
		return -1;
	}
	if (userns_fd < 0)
		userns_fd = make_userns((int)in.setup.uid, (int)in.setup.gid);
	if (userns_fd < 0) {
		snprintf(err, errlen, "create the commands' user namespace: %s", hutch_strerror(errno, eb, sizeof eb));
		return -1;
	}
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		snprintf(err, errlen, "spawner socket: %s", hutch_strerror(errno, eb, sizeof eb));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork the spawner: %s", hutch_strerror(errno, eb, sizeof eb));
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	if (pid == 0) {
		// The channel is the init's socket; the scope ruleset stays in its
		// slot for every command's reaper.
		prctl(PR_SET_NAME, HUTCH_NAME_SPAWNER, 0, 0, 0);
		int null = open("/dev/null", O_RDWR | O_CLOEXEC);
		int src[HUTCH_SLOT_END] = {null, null, null, sp[1], in.ll_fd, in.bpf_fd, notify ? fds[1] : -1, fds[0]};
		int ns = fcntl(userns_fd, F_DUPFD_CLOEXEC, 16);
		place(src, HUTCH_SLOT_END);
		if (setns(ns, CLONE_NEWUSER) < 0)
			hutch_fail(125, errno, "spawner: enter the commands' user namespace");
		close_from_fd(HUTCH_SLOT_END);
		// Not in a command's way: the spawner is no command's parent.
		if (chdir("/") < 0)
			hutch_fail(125, errno, "spawner: change to /");
		struct hutch_harden h = {.notify = notify, .keep_caps = keep_caps(), .rlimits = &in.setup.rlimits};
		if (hutch_harden(&h, 0, HUTCH_HARDEN_SHARED) < 0) {
			char what[256];
			snprintf(what, sizeof what, "spawner: %s", h.what);
			hutch_fail(125, h.err, what);
		}
		if (send(HUTCH_SLOT_CHANNEL, "k", 1, MSG_NOSIGNAL) != 1)
			_exit(1);
		unsigned char *buf = malloc(HUTCH_MAX_MSG);
		if (!buf)
			_exit(1);
		spawner_main(buf);
	}
	close(sp[1]);
	// Wait for "k" (ready) or "CODE ERRNO what" (failed), bounded.
	char rb[512];
	struct pollfd pfd = {sp[0], POLLIN, 0};
	ssize_t n = -1;
	if (poll(&pfd, 1, 5000) == 1) {
		do {
			n = recv(sp[0], rb, sizeof rb - 1, 0);
		} while (n < 0 && errno == EINTR);
	}
	if (n == 1 && rb[0] == 'k') {
		spawner_pid = pid;
		spawner_fd = sp[0];
		return 0;
	}
	close(sp[0]);
	kill(pid, SIGKILL);
	if (n > 0) {
		rb[n] = 0;
		char *end;
		strtol(rb, &end, 10);
		int e = (int)strtol(end, &end, 10);
		snprintf(err, errlen, "%s: %s", *end == ' ' ? end + 1 : end, hutch_strerror(e, eb, sizeof eb));
	} else {
		snprintf(err, errlen, "the spawner did not start within 5 s");
	}
	return -1;
}

static void do_start_spawner(uint64_t id, struct hutch_rd *r, int *fds, int nfds) {
	uint32_t flags = hutch_rd_u32(r);
	char err[1024];
	int rc = -1;
	if (r->bad)
		snprintf(err, sizeof err, "malformed spawner request");
	else if (spawner_pid > 0)
		rc = 0;
	else
		rc = start_spawner((flags & HUTCH_SPAWNER_NOTIFY) != 0, fds, nfds, err, sizeof err);
	close_fds(fds, nfds);
	if (rc == 0)
		get_ready();
	hutch_wr_report(&in.out, HUTCH_OP_SPAWNER_REPLY, id, 0, rc == 0 ? 0 : 125, 0, rc == 0 ? "" : err, 0, 0);
	send_msg(&in.out, NULL, 0);
}

// do_spawn starts a command: fds are its stdio, the payload memfd and, for
// one started the direct way with notification, the listener's socket.
static void do_spawn(uint64_t id, struct hutch_rd *r, const unsigned char *raw, size_t rawlen, int *fds, int nfds) {
	uint32_t flags = hutch_rd_u32(r);
	int notify = (flags & HUTCH_SPAWN_NOTIFY) != 0 && !(flags & HUTCH_SPAWN_VIA_SPAWNER);
	if (r->bad || nfds < 4 + notify) {
		spawn_error(id, 125, "malformed spawn request");
		goto out;
	}
	int pr[2];
	if (pipe2(pr, O_CLOEXEC) < 0) {
		spawn_error(id, 125, "create status pipe");
		goto out;
	}
	if (nprocs == capprocs) {
		size_t nc = capprocs ? capprocs * 2 : 16;
		struct proc *np = realloc(procs, nc * sizeof *np);
		if (!np) {
			close(pr[0]);
			close(pr[1]);
			spawn_error(id, 125, "out of memory");
			goto out;
		}
		procs = np;
		capprocs = nc;
	}
	if (flags & HUTCH_SPAWN_VIA_SPAWNER) {
		pid_t pid = spawn_via_ready(raw, rawlen, fds, pr[1]);
		if (pid == 0)
			pid = spawn_via_spawner(raw, rawlen, fds, pr[1]);
		close(pr[1]);
		if (pid <= 0) {
			char eb[128], msg[256];
			close(pr[0]);
			if (pid == 0) {
				spawn_error(id, HUTCH_CODE_NO_SPAWNER, "the session's spawner is gone");
			} else {
				snprintf(msg, sizeof msg, "start the command: fork: %s", hutch_strerror((int)-pid, eb, sizeof eb));
				spawn_error(id, 125, msg);
			}
			goto out;
		}
		add_proc(id, pid, pr[0], 0);
		get_ready(); // the next command's, while this one starts
		goto out;
	}
	if (spawned++ == 1 && userns_fd < 0 && !no_ns)
		userns_fd = make_userns((int)in.setup.uid, (int)in.setup.gid);
	int src[HUTCH_SLOT_END] = {fds[0], fds[1], fds[2], pr[1], in.ll_fd, in.bpf_fd, notify ? fds[4] : -1, -1, fds[3]};
	if (in.bpf_fd < 0)
		notify = 0;
	pid_t pid = fork();
	if (pid == 0)
		child((int)in.setup.uid, (int)in.setup.gid, src, notify, (flags & HUTCH_SPAWN_TERMINAL) != 0);
	close(pr[1]);
	if (pid < 0) {
		char eb[128], msg[256];
		close(pr[0]);
		snprintf(msg, sizeof msg, "start the command: fork: %s", hutch_strerror(errno, eb, sizeof eb));
		spawn_error(id, 125, msg);
		goto out;
	}
	add_proc(id, pid, pr[0], 1);
out:
	close_fds(fds, nfds);
}

// no_child_left reports whether pid 1 has no child at all (reaped ones
// aside): no sandboxed process is left.
static uint32_t no_child_left(void) {
	siginfo_t si;
	memset(&si, 0, sizeof si);
	return waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 && errno == ECHILD;
}

// read_status reads what the command's status pipe holds so far into
// p->text; at its end (every writer gone) it closes the pipe.
static void read_status(struct proc *p) {
	while (p->status_fd >= 0) {
		ssize_t n = read(p->status_fd, p->text + p->len, sizeof p->text - 1 - p->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n > 0) {
			p->len += (size_t)n;
			p->text[p->len] = 0;
			if (p->len < sizeof p->text - 1)
				continue;
		} else if (n < 0 && errno == EAGAIN) {
			return;
		}
		close(p->status_fd); // end of the pipe, an error or full
		p->status_fd = -1;
	}
}

// end_record finds the reaper's end record ("\n=STATUS LEFTOVER\n",
// execstage.c) at the end of what the status pipe said, stores the wait
// status it gives in *st and the leftover count in p->left, and cuts it
// off; 0 when there is none (yet).
static int end_record(struct proc *p, int *st) {
	if (p->len < 4 || p->text[p->len - 1] != '\n')
		return 0;
	char *nl = p->text + p->len - 1;
	char *eq = nl;
	while (eq > p->text && eq[-1] != '=')
		eq--;
	if (eq - 2 < p->text || eq[-2] != '\n' || eq == nl)
		return 0;
	char *end;
	long v = strtol(eq, &end, 10);
	if (end == eq || *end != ' ' || v < 0 || v > 0xffff)
		return 0;
	char *lend;
	unsigned long left = strtoul(end + 1, &lend, 10);
	if (lend == end + 1 || lend != nl || left > 0xffffffffUL)
		return 0;
	*st = (int)v;
	p->left = (uint32_t)left;
	p->len = (size_t)(eq - 2 - p->text);
	p->text[p->len] = 0;
	return 1;
}

// report_exit sends a command's end with what its status pipe said: only
// an end record when the command was executed, "CODE ERRNO what" before it
// when it was not.
static void report_exit(const struct proc *p, int status) {
	int64_t code = 0, eno = 0;
	const char *what = "";
	if (p->len > 0) {
		char *end;
		code = strtol(p->text, &end, 10);
		eno = strtol(end, &end, 10);
		what = *end == ' ' ? end + 1 : end;
		if (code == 0)
			code = 125;
	}
	// alone: pid 1 has no other child, so no sandboxed process is left
	// (every one descends from the init; a reaper's orphans are the
	// reaper's children, a dead reaper's are the init's). With a session's
	// spawner alive pid 1 always has a child, and telling it apart would
	// take reading the kernel's list of pid 1's children (/proc) on every
	// command's exit report: a session then says "not alone", which only
	// means that a session's close cannot assume nothing is left.
	uint32_t alone = spawner_pid > 0 ? 0 : no_child_left();
	hutch_wr_report(&in.out, HUTCH_OP_EXIT, p->id, status, code, eno, what, alone, p->left);
	send_msg(&in.out, NULL, 0);
}

// status_ready reads a command's status pipe when the init's loop saw it
// readable. With a session's spawner alive, the reaper's end record is
// reported at once: every process of the command is gone by then, and the
// reaper only exits (it is reaped later without a second report). Without
// a spawner the init waits for the reaper itself, so that the report can
// say whether any sandboxed process is left (a one-off sandbox's teardown
// follows the report anyway).
static void status_ready(struct proc *p) {
	read_status(p);
	int st;
	if (spawner_pid > 0 && !p->reported && end_record(p, &st)) {
		p->reported = 1;
		report_exit(p, st);
	}
}

// reap collects every child of pid 1, reporting the commands it started
// that were not reported yet.
static void reap(void) {
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid < 0 && errno == EINTR)
			continue;
		if (pid <= 0)
			return;
		if (pid == spawner_pid) {
			spawner_pid = -1; // reaped: the next spawn through it says so
			drop_spawner();
			continue;
		}
		if (pid == ready_pid) { // gone before it was used
			ready_pid = -1;
			drop_ready();
			continue;
		}
		for (size_t i = 0; i < nprocs; i++) {
			if (procs[i].pid == pid) {
				struct proc *p = &procs[i];
				read_status(p);
				if (p->status_fd >= 0)
					close(p->status_fd);
				int rec;
				if (!p->reported)
					report_exit(p, end_record(p, &rec) ? rec : st);
				procs[i] = procs[--nprocs];
				break;
			}
		}
	}
}

// hutch_read_socket reads a SOCKET request's field after its header: the
// address family (HUTCH_SOCKET_*) as socket(2) takes it in *family. It
// returns -1 when the request is malformed.
int hutch_read_socket(struct hutch_rd *r, int *family) {
	uint32_t f = hutch_rd_u32(r);
	if (r->bad || r->n != 0)
		return -1;
	switch (f) {
	case HUTCH_SOCKET_INET:
		*family = AF_INET;
		return 0;
	case HUTCH_SOCKET_INET6:
		*family = AF_INET6;
		return 0;
	}
	return -1;
}

// do_socket makes a TCP socket in the sandbox's network namespace for the
// supervisor, which connects it to a published port's server on the
// sandbox's loopback and relays a host connection through it (a socket
// keeps the namespace it was made in). Only the supervisor asks, on its
// own socket; the init neither connects nor reads it, so a server that is
// slow to accept never holds the init up.
static void do_socket(uint64_t id, struct hutch_rd *r) {
	int family;
	if (hutch_read_socket(r, &family) < 0) {
		hutch_wr_report(&in.out, HUTCH_OP_SOCKET_REPLY, id, 0, 125, EINVAL, "malformed socket request", 0, 0);
		send_msg(&in.out, NULL, 0);
		return;
	}
	int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) { // the supervisor words the errno
		hutch_wr_report(&in.out, HUTCH_OP_SOCKET_REPLY, id, 0, 125, errno, "make a socket in the sandbox's network namespace", 0, 0);
		send_msg(&in.out, NULL, 0);
		return;
	}
	hutch_wr_report(&in.out, HUTCH_OP_SOCKET_REPLY, id, 0, 0, 0, "", 0, 0);
	send_msg(&in.out, &fd, 1);
	close(fd);
}

static void do_signal(uint64_t id, struct hutch_rd *r) {
	int64_t sig = hutch_rd_i64(r);
	if (r->bad || sig <= 0 || sig > 64)
		return;
	// The pid is the command's reaper: it relays the signal to the
	// command's process group, or, for HUTCH_SIG_TERMINATE, kills the
	// command and everything it started.
	for (size_t i = 0; i < nprocs; i++)
		if (procs[i].id == id)
			kill(procs[i].pid, (int)sig);
}

// end_no_ns ends an init without namespaces: nothing takes its sandbox
// down with it (no pid namespace), so it kills every process of the
// sandbox itself first. They all descend from it: it is their child
// subreaper, and a command's reaper killed before its children leaves them
// to it.
__attribute__((noreturn)) static void end_no_ns(void) {
	hutch_kill_all();
	_exit(0);
}

__attribute__((noreturn)) static void serve(unsigned char *buf) {
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (no_ns)
		sigaddset(&chld, SIGTERM); // blocked since init_main
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(1);
	// The control socket, SIGCHLD and, with a spawner, the status pipes of
	// the commands not reported yet (see status_ready).
	struct pollfd *pfd = NULL;
	size_t cap = 0;
	for (;;) {
		size_t npfd = 2;
		if (cap < 2 + nprocs) {
			struct pollfd *np = realloc(pfd, (2 + capprocs) * sizeof *np);
			if (!np)
				_exit(1);
			pfd = np;
			cap = 2 + capprocs;
		}
		pfd[0] = (struct pollfd){HUTCH_FD_CONTROL, POLLIN, 0};
		pfd[1] = (struct pollfd){sfd, POLLIN, 0};
		for (size_t i = 0; spawner_pid > 0 && i < nprocs; i++)
			if (!procs[i].reported && procs[i].status_fd >= 0)
				pfd[npfd++] = (struct pollfd){procs[i].status_fd, POLLIN, 0};
		if (poll(pfd, (nfds_t)npfd, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(1);
		}
		for (size_t k = 2; k < npfd; k++) {
			if (!pfd[k].revents)
				continue;
			for (size_t i = 0; i < nprocs; i++)
				if (procs[i].status_fd == pfd[k].fd)
					status_ready(&procs[i]);
		}
		if (pfd[1].revents) {
			struct signalfd_siginfo si;
			int term = 0;
			while (read(sfd, &si, sizeof si) > 0)
				term |= si.ssi_signo == SIGTERM;
			if (term && no_ns)
				end_no_ns();
			reap();
		}
		if (!pfd[0].revents)
			continue;
		int fds[8], nfds;
		ssize_t n = recv_msg(buf, HUTCH_MAX_MSG, fds, &nfds);
		if (n == 0 || (n < 0 && errno != EMSGSIZE)) {
			if (no_ns)
				end_no_ns();
			_exit(0); // supervisor gone: exiting kills the sandbox
		}
		if (n < HUTCH_HEADER_SIZE) {
			close_fds(fds, nfds);
			continue;
		}
		struct hutch_rd r = {buf, (size_t)n, 0};
		uint64_t id;
		uint32_t op = hutch_rd_header(&r, &id);
		switch (op) {
		case HUTCH_OP_SPAWN:
			do_spawn(id, &r, buf, (size_t)n, fds, nfds);
			break;
		case HUTCH_OP_SPAWNER:
			do_start_spawner(id, &r, fds, nfds);
			break;
		case HUTCH_OP_SIGNAL:
			close_fds(fds, nfds);
			do_signal(id, &r);
			break;
		case HUTCH_OP_SOCKET:
			close_fds(fds, nfds);
			do_socket(id, &r);
			break;
		case HUTCH_OP_PIDS:
			close_fds(fds, nfds);
			for (size_t i = 0; i < nprocs; i++)
				if (!procs[i].announced && !procs[i].reported)
					announce(&procs[i]);
			break;
		case HUTCH_OP_LANDLOCK:
			if (nfds == 1) {
				if (in.ll_fd >= 0)
					close(in.ll_fd);
				in.ll_fd = fds[0];
			} else {
				close_fds(fds, nfds);
			}
			break;
		default:
			close_fds(fds, nfds);
		}
	}
}

// ---- set-up --------------------------------------------------------------

// parse_plan reads a mount plan; -1 when it is malformed.
static int parse_plan(struct hutch_rd *r, struct hutch_plan *p) {
	p->root_size = hutch_rd_i64(r);
	p->stage = hutch_rd_str(r);
	p->nsteps = hutch_rd_u32(r);
	p->steps = NULL;
	if (r->bad || p->nsteps > 100000)
		return -1;
	p->steps = calloc(p->nsteps ? p->nsteps : 1, sizeof *p->steps);
	if (!p->steps)
		return -1;
	for (uint32_t i = 0; i < p->nsteps; i++) {
		struct hutch_step *s = &p->steps[i];
		s->kind = hutch_rd_u32(r);
		s->flags = hutch_rd_u32(r);
		s->mode = hutch_rd_u32(r);
		s->size = hutch_rd_i64(r);
		s->name = hutch_rd_str(r);
		s->source = hutch_rd_str(r);
		s->target = hutch_rd_str(r);
		s->staged = hutch_rd_str(r);
		s->data = hutch_rd_str(r);
		s->why = hutch_rd_str(r);
		if (s->kind == HUTCH_STEP_OVERLAY) {
			s->nlower = hutch_rd_u32(r);
			if (r->bad || s->nlower == 0 || s->nlower > HUTCH_MAX_LOWER)
				return -1;
			s->lower = calloc(s->nlower, sizeof *s->lower);
			if (!s->lower)
				return -1;
			for (uint32_t j = 0; j < s->nlower; j++)
				s->lower[j] = hutch_rd_str(r);
			s->upper = hutch_rd_str(r);
			s->work = hutch_rd_str(r);
			if ((s->upper[0] == 0) != (s->work[0] == 0))
				return -1;
		}
	}
	return r->bad ? -1 : 0;
}

// hutch_parse_setup reads a setup message's fields after its header, in
// the order of struct hutch_setup; *plan_at is where the plan starts (a
// prestarted init compares the rest with its plan hint). It returns 0, or
// -1 with what was malformed in *what.
int hutch_parse_setup(struct hutch_rd *r, struct hutch_setup *s, const unsigned char **plan_at, const char **what) {
	memset(s, 0, sizeof *s);
	*what = "malformed message";
	s->flags = hutch_rd_u32(r);
	s->hostname = hutch_rd_str(r);
	s->uid = hutch_rd_i64(r);
	s->gid = hutch_rd_i64(r);
	s->port_http = hutch_rd_u32(r);
	s->port_socks = hutch_rd_u32(r);
	s->port_dns = hutch_rd_u32(r);
	s->rlimits.n = hutch_rd_u32(r);
	if (r->bad)
		return -1;
	if (s->rlimits.n > HUTCH_MAX_RLIMITS) {
		*what = "too many resource limits";
		return -1;
	}
	for (uint32_t i = 0; i < s->rlimits.n; i++) {
		s->rlimits.r[i].resource = (int)hutch_rd_u32(r);
		s->rlimits.r[i].cur = (uint64_t)hutch_rd_i64(r);
		s->rlimits.r[i].max = (uint64_t)hutch_rd_i64(r);
	}
	if (r->bad)
		return -1;
	*plan_at = r->p;
	*what = "malformed mount plan";
	return parse_plan(r, &s->plan) < 0 || r->n != 0 ? -1 : 0;
}

// ---- plan hint -----------------------------------------------------------
//
// The supervisor plans the sandbox's root only once its Go runtime has
// started, well after a prestarted init is ready to build it. The prestart
// constructor therefore hands the init, on fd 4 (argv[1] "--plan-hint"), the
// plan that the supervisor stored in hutch's cache the last time it ran with
// the same command line in the same directory. The init builds that root's
// policy-independent part while it waits: it opens the bind sources, mounts
// the root tmpfs and applies the steps before the first pin, protect or hide
// (those depend on the workspace as the supervisor finds it at the start,
// and follow in the real phase). When the setup's plan is byte for byte the
// hint's, the init finishes that root; otherwise it detaches the half-built
// root and builds the setup's plan from scratch. So the root is always the
// one the supervisor planned, built at most a few milliseconds earlier; the
// hint only decides whether part of the work was done while waiting.
//
// The hint is trusted as much as the seccomp filter cache beside it: both
// live in hutch's cache directory, which only the user can write (a sandbox
// whose workspace contains it sees an empty read-only directory instead,
// see package hostdirs). Its steps are still checked to stay beneath the
// staging directory before any of them runs.

static struct {
	unsigned char *buf; // the hint's bytes: a plan as the setup encodes it
	size_t len;
	struct hutch_plan plan;
	struct hutch_mounts m;
	int built; // the plan's prefix is built
	int state; // HINT_*, reported with Ready
	char err[1024];
} hint;

static void no_mark(const char *name, long usec) {
	(void)name;
	(void)usec;
}

// hint_prefix is the number of leading steps that depend on nothing the
// supervisor prepares on the host after planning.
static uint32_t hint_prefix(const struct hutch_plan *p) {
	for (uint32_t i = 0; i < p->nsteps; i++) {
		uint32_t k = p->steps[i].kind;
		// An overlay's upper layer is a change set made after planning; a
		// read-only overlay (an image's layers) has only lowers, which
		// exist when the plan is made, like a bind's source.
		if (k == HUTCH_STEP_PIN || k == HUTCH_STEP_PROTECT || k == HUTCH_STEP_HIDE ||
		    (k == HUTCH_STEP_OVERLAY && p->steps[i].upper[0]))
			return i;
	}
	return p->nsteps;
}

// dotdot reports whether path has a ".." component.
static int dotdot(const char *path) {
	size_t n = strlen(path);
	return strcmp(path, "..") == 0 || strncmp(path, "../", 3) == 0 || strstr(path, "/../") != NULL ||
	       (n >= 3 && strcmp(path + n - 3, "/..") == 0);
}

// beneath reports whether path is dir or lies beneath it, without "..".
static int beneath(const char *path, const char *dir) {
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '/' || path[n] == 0) && !dotdot(path);
}

static int hint_plausible(const struct hutch_plan *p) {
	if (p->stage[0] != '/' || strcmp(p->stage, "/") == 0 || dotdot(p->stage))
		return 0;
	for (uint32_t i = 0; i < p->nsteps; i++)
		if (p->steps[i].target[0] != '/' || !beneath(p->steps[i].staged, p->stage))
			return 0;
	return 1;
}

// speculate reads the hint on fd 4 and builds its prefix.
static void speculate(void) {
	struct stat st;
	int ok = fstat(HUTCH_FD_PLAN_HINT, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && st.st_size <= HUTCH_MAX_MSG;
	if (ok && (hint.buf = malloc((size_t)st.st_size)) != NULL) {
		while (hint.len < (size_t)st.st_size) {
			ssize_t n = pread(HUTCH_FD_PLAN_HINT, hint.buf + hint.len, (size_t)st.st_size - hint.len, (off_t)hint.len);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			hint.len += (size_t)n;
		}
		ok = hint.len == (size_t)st.st_size;
	}
	close(HUTCH_FD_PLAN_HINT);
	hint.state = HUTCH_HINT_UNUSED;
	if (!ok || !hint.buf)
		return;
	struct hutch_rd r = {hint.buf, hint.len, 0};
	if (parse_plan(&r, &hint.plan) < 0 || r.n != 0 || !hint_plausible(&hint.plan))
		return;
	if (hutch_mounts_begin(&hint.m, &hint.plan, no_mark, hint.err, sizeof hint.err) < 0 ||
	    hutch_mounts_steps(&hint.m, &hint.plan, hint_prefix(&hint.plan), no_mark) < 0) {
		hutch_mounts_abandon(&hint.m, &hint.plan);
		return;
	}
	hint.built = 1;
}

__attribute__((noreturn)) static void init_main(long entered, int with_hint) {
	// Pid 1 gets only the signals it has handlers for from inside its pid
	// namespace; ignore every catchable one so sandboxed code cannot stop
	// it. SIGCHLD is blocked and read from a signalfd instead.
	struct sigaction ign;
	memset(&ign, 0, sizeof ign);
	ign.sa_handler = SIG_IGN;
	static const int ignored[] = {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE, SIGALRM,
	                              SIGTSTP, SIGTTIN, SIGTTOU, SIGWINCH, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO};
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		if (!(no_ns && ignored[i] == SIGTERM))
			sigaction(ignored[i], &ign, NULL);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	if (no_ns) {
		// SIGTERM (the parent-death signal) is read from the signalfd: an
		// ignored signal would be discarded, not queued. Sandboxed code
		// cannot send it (Landlock's signal scoping).
		sigaddset(&chld, SIGTERM);
		// Every orphan of the sandbox is re-parented here.
		prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	}
	sigprocmask(SIG_BLOCK, &chld, NULL);
	// Not dumpable: /proc/1/{mem,fd,environ} stay closed to sandboxed code.
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_NAME, HUTCH_NAME_INIT, 0, 0, 0);
	// The sandbox's one session, without a controlling terminal: every
	// process in the sandbox stays in it (each command leads its own
	// process group), so no sandboxed code can reach the caller's terminal
	// as its controlling one (TIOCSTI). One setsid per sandbox, here while
	// the supervisor's runtime starts: each also makes a scheduler
	// autogroup, which two per command would pay for.
	setsid();

	// What needs no policy happens while the supervisor's runtime starts.
	long t0 = hutch_now_usec();
	if (!no_ns)
		loopback_up(in.net_err, sizeof in.net_err); // reported once the setup arrives
	if (with_hint)
		speculate();
	long early = hutch_now_usec() - t0;

	unsigned char *buf = malloc(HUTCH_MAX_MSG);
	if (!buf)
		_exit(1);
	int fds[8], nfds;
	ssize_t n = recv_msg(buf, HUTCH_MAX_MSG, fds, &nfds);
	if (n <= 0)
		_exit(1);
	// The setup stays in its own buffer: the plan's strings point into it.
	unsigned char *setup = malloc((size_t)n);
	if (!setup)
		setup_fail("receive setup: out of memory");
	memcpy(setup, buf, (size_t)n);
	struct hutch_rd r = {setup, (size_t)n, 0};
	uint64_t id;
	uint32_t op = hutch_rd_header(&r, &id);
	if (op != HUTCH_OP_SETUP)
		setup_fail("receive setup: unexpected message %u", op);
	const unsigned char *plan_at = NULL;
	const char *what;
	if (hutch_parse_setup(&r, &in.setup, &plan_at, &what) < 0)
		setup_fail("receive setup: %s", what);
	uint32_t flags = in.setup.flags;
	in.timing = (flags & HUTCH_SETUP_TIMING) != 0;
	// "@entered" is absolute (CLOCK_MONOTONIC): the supervisor turns it
	// into the time from its fork to this constructor.
	mark("@entered", entered);
	mark("init.early", early);
	mark("init.wait-setup", hutch_now_usec() - entered);
	if (flags & HUTCH_SETUP_SECCOMP) {
		if (nfds != 1)
			setup_fail("receive setup: seccomp program descriptor missing");
		in.bpf_fd = fds[0];
	} else {
		close_fds(fds, nfds);
	}
	// The plan is the setup's last part.
	size_t plan_len = (size_t)(setup + n - plan_at);
	int use_hint = hint.built && plan_len == hint.len && memcmp(plan_at, hint.buf, plan_len) == 0;
	struct hutch_plan *plan = &in.setup.plan;
	const char *hostname = in.setup.hostname;

	char eb[128], err[4096];
	t0 = hutch_now_usec();
	if (in.net_err[0])
		setup_fail("%s", in.net_err);
	if (!no_ns && sethostname(hostname, strlen(hostname)) < 0)
		setup_fail("set hostname: %s", hutch_strerror(errno, eb, sizeof eb));
	mark("init.net", hutch_now_usec() - t0);
	if (no_ns) {
		// No root to build: the host's, as Landlock restricts it.
	} else if (use_hint) {
		hint.state = HUTCH_HINT_USED;
		if (hutch_mounts_finish(&hint.m, &hint.plan, mark) < 0) {
			snprintf(err, sizeof err, "%s", hint.err);
			setup_fail("build the sandbox's root filesystem: %s", err);
		}
	} else {
		if (hint.built)
			hutch_mounts_abandon(&hint.m, &hint.plan);
		if (hutch_mounts_execute(plan, mark, err, sizeof err) < 0)
			setup_fail("build the sandbox's root filesystem: %s", err);
	}
	free(hint.plan.steps);
	free(hint.buf);
	hint.buf = NULL;
	int out[4], nout = 0;
	out[nout] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (out[nout++] < 0)
		setup_fail("open the new root: %s", hutch_strerror(errno, eb, sizeof eb));
	if (flags & HUTCH_SETUP_PROXY) {
		t0 = hutch_now_usec();
		out[nout++] = proxy_socket(SOCK_STREAM, (int)in.setup.port_http, "HTTP proxy");
		out[nout++] = proxy_socket(SOCK_STREAM, (int)in.setup.port_socks, "SOCKS5 proxy");
		out[nout++] = proxy_socket(SOCK_DGRAM, (int)in.setup.port_dns, "DNS");
		mark("init.proxy-sockets", hutch_now_usec() - t0);
	}
	const char *names[16];
	long usecs[16];
	int nmarks = in.timing ? in.nmarks : 0;
	for (int i = 0; i < nmarks; i++)
		names[i] = in.marks[i].name, usecs[i] = in.marks[i].usec;
	hutch_wr_ready(&in.out, nmarks, names, usecs, (uint32_t)hint.state);
	if (send_msg(&in.out, out, nout) < 0)
		_exit(1);
	close_fds(out, nout);
	free(plan->steps);
	plan->steps = NULL;
	plan->nsteps = 0;
	serve(buf);
}

__attribute__((constructor)) static void hutch_init_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], HUTCH_INIT_MAGIC) != 0)
		return;
	no_ns = argc > 1 && argv[1] != NULL && strcmp(argv[1], HUTCH_INIT_NO_NAMESPACES) == 0;
	init_main(hutch_now_usec(), argc > 1 && argv[1] != NULL && strcmp(argv[1], "--plan-hint") == 0);
}
