// probe: attempts the operations hutch's hardening must refuse, one per
// argument, and prints "NAME ok" or "NAME ERRNO_NAME" for each. Built
// static by the end-to-end tests and run inside the sandbox.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/io_uring.h>
#include <linux/keyctl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

static const char *ename(int e) {
	switch (e) {
	case EPERM: return "EPERM";
	case EACCES: return "EACCES";
	case ENOSYS: return "ENOSYS";
	case EINVAL: return "EINVAL";
	case ENOENT: return "ENOENT";
	case EFAULT: return "EFAULT";
	case ECONNREFUSED: return "ECONNREFUSED";
	case ENETUNREACH: return "ENETUNREACH";
	case EBADF: return "EBADF";
	case EIO: return "EIO";
	case ENOTTY: return "ENOTTY";
	default: return strerror(e);
	}
}

static long tiocsti(void) {
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	if (m < 0 || grantpt(m) < 0 || unlockpt(m) < 0)
		return -2;
	int s = open(ptsname(m), O_RDWR | O_NOCTTY);
	if (s < 0)
		return -2;
	char c = 'x';
	return ioctl(s, TIOCSTI, &c);
}

static long tcp(int port, int do_bind) {
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	struct sockaddr_in a = {0};
	a.sin_family = AF_INET;
	a.sin_port = htons((unsigned short)port);
	a.sin_addr.s_addr = do_bind == 2 ? inet_addr("203.0.113.1") : htonl(INADDR_LOOPBACK);
	return do_bind == 1 ? bind(fd, (void *)&a, sizeof a) : connect(fd, (void *)&a, sizeof a);
}

int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		long r = -2;
		errno = 0;
		if (!strcmp(a, "unshare")) r = unshare(CLONE_NEWUSER);
		else if (!strcmp(a, "unshare-ns")) r = unshare(CLONE_NEWNS);
		else if (!strcmp(a, "clone-newuser")) {
			r = syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0);
			if (r == 0) _exit(0);
			if (r > 0) { waitpid((pid_t)r, NULL, 0); r = 0; }
		}
		else if (!strcmp(a, "clone3")) r = syscall(SYS_clone3, NULL, 0);
		else if (!strcmp(a, "mount")) r = mount("none", "/tmp", "tmpfs", 0, NULL);
		else if (!strcmp(a, "ptrace")) r = ptrace(PTRACE_TRACEME, 0, 0, 0);
		else if (!strcmp(a, "keyctl")) r = syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0);
		else if (!strcmp(a, "bpf")) r = syscall(SYS_bpf, BPF_PROG_LOAD, NULL, 0);
		else if (!strcmp(a, "perf_event_open")) {
			struct perf_event_attr pa = {0};
			pa.size = sizeof pa;
			pa.type = PERF_TYPE_SOFTWARE;
			pa.config = PERF_COUNT_SW_CPU_CLOCK;
			r = syscall(SYS_perf_event_open, &pa, 0, -1, -1, 0);
		}
		else if (!strcmp(a, "userfaultfd")) r = syscall(SYS_userfaultfd, 0);
		else if (!strcmp(a, "io_uring_setup")) {
			struct io_uring_params p = {0};
			r = syscall(SYS_io_uring_setup, 1, &p);
		}
		else if (!strcmp(a, "open_by_handle_at")) r = syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0);
		else if (!strcmp(a, "tiocsti")) r = tiocsti();
		else if (!strcmp(a, "kill1")) r = kill(1, 0);
		else if (!strncmp(a, "connect:", 8)) r = tcp(atoi(a + 8), 0);
		else if (!strncmp(a, "bind:", 5)) r = tcp(atoi(a + 5), 1);
		else if (!strncmp(a, "direct:", 7)) r = tcp(atoi(a + 7), 2);
		else if (!strcmp(a, "getpid")) r = getpid() > 0 ? 0 : -1;
		else { printf("%s unknown\n", a); continue; }
		if (r == -2) printf("%s setup-failed\n", a);
		else if (r < 0) printf("%s %s\n", a, ename(errno));
		else printf("%s ok\n", a);
		fflush(stdout);
	}
	return 0;
}
