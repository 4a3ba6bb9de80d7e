// The terminal guard: a constructor that runs before the Go runtime starts
// in a process started as HUTCH_GUARD_MAGIC (guard.go). It waits for the
// end of the pipe on fd 3: a byte means the relaying process restored the
// caller's terminal modes itself; the pipe's end without one means that
// process is gone (SIGKILL), and the guard restores the saved modes on fd
// 0 if the terminal still has the raw ones the relay set. It ignores the
// terminal's signals (it may be in the foreground process group when the
// relaying process dies, and in the background when it restores).

#define _GNU_SOURCE
#include <asm/ioctls.h>
#include <asm/termbits.h>
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "guard.h"

int hutch_guard_termios_len(void) { return (int)sizeof(struct termios); }

// unhex decodes the 2*n hex digits of s into out; -1 when s is not that.
static int unhex(const char *s, unsigned char *out, size_t n) {
	if (strlen(s) != 2 * n)
		return -1;
	for (size_t i = 0; i < 2 * n; i++) {
		char c = s[i];
		int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
		if (v < 0)
			return -1;
		out[i / 2] = (unsigned char)(i % 2 ? out[i / 2] << 4 | v : v);
	}
	return 0;
}

__attribute__((constructor)) static void hutch_tty_guard(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc != 3 || argv == NULL || argv[0] == NULL || strcmp(argv[0], HUTCH_GUARD_MAGIC) != 0)
		return;
	struct termios saved, raw, now;
	if (unhex(argv[1], (unsigned char *)&saved, sizeof saved) < 0 || unhex(argv[2], (unsigned char *)&raw, sizeof raw) < 0)
		_exit(2);
	static const int ignored[] = {SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGPIPE, SIGWINCH};
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		signal(ignored[i], SIG_IGN);
	for (int fd = 1; fd < 1024; fd++)
		if (fd != 3)
			close(fd);
	char c;
	ssize_t n;
	do {
		n = read(3, &c, 1);
	} while (n < 0 && errno == EINTR);
	if (n == 0 && syscall(SYS_ioctl, 0, TCGETS, &now) == 0 && memcmp(&now, &raw, sizeof now) == 0)
		syscall(SYS_ioctl, 0, TCSETS, &saved);
	_exit(0);
}
