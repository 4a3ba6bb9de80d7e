// The exec stage: the last step between hutch's init and the sandboxed
// command. The init starts /proc/self/exe with argv[0] == HUTCH_EXEC_MAGIC in
// a fresh nested user namespace that maps the sandbox uid to the init's uid;
// this constructor runs before the Go runtime starts (no threads, no
// allocator of Go's), applies the per-command restrictions and execs the
// command. It never returns to Go.
//
// File descriptors, fixed by the init (-1 / closed when absent):
//   0,1,2  the command's stdio
//   3      status pipe (write end, O_CLOEXEC): on failure, "CODE ERRNO what"
//   4      Landlock ruleset
//   5      seccomp BPF program (memfd holding struct sock_filter[])
//   6      unix socket on which the seccomp listener fd is sent
// argv: MAGIC, flags, cwd, file, argv0, args...
// flags: a string of letters: 'n' = seccomp with user notification.
// The environment is the command's.
//
// Order matters: capabilities first (dropping the bounding set needs
// CAP_SETPCAP, which arrives as the only ambient capability), then
// no_new_privs, Landlock, and seccomp last so the filter need not allow the
// set-up syscalls. Only execve and the error path run under the filter.

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
#include <unistd.h>

#define HUTCH_EXEC_MAGIC "hutch:exec"

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

static void fail(int code, int err, const char *what) {
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

__attribute__((constructor)) static void hutch_exec_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 5 || argv == NULL || argv[0] == NULL || strcmp(argv[0], HUTCH_EXEC_MAGIC) != 0)
		return;
	const char *flags = argv[1];
	const char *cwd = argv[2];
	const char *file = argv[3];
	char **cargv = &argv[4];
	int notify = strchr(flags, 'n') != NULL;

	// The init dup2()ed the status pipe to 3, which clears close-on-exec.
	fcntl(3, F_SETFD, FD_CLOEXEC);
	if (chdir(cwd) < 0)
		fail(125, errno, "change to the working directory");
	drop_caps();
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail(125, errno, "set no_new_privs");
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
	if (syscall(SYS_close_range, 4, ~0U, 0) < 0) {
		for (int fd = 4; fd < 1024; fd++)
			close(fd);
	}
	execvpe(file, cargv, environ);
	int e = errno;
	int code = (e == ENOENT || e == ENOTDIR) ? 127 : 126;
	fail(code, e, "execute the command");
}
