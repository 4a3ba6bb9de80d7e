// ignsig: ignores signals 32-34 with the raw rt_sigaction syscall (glibc's
// signal() refuses its reserved ones) and execs argv[1...]: a parent that
// passes ignored signals on, as some CI runners do.
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
	struct {
		void *handler;
		unsigned long flags;
		void *restorer;
		unsigned long mask;
	} ign = {(void *)1, 0, 0, 0};
	for (int sig = 32; sig <= 34; sig++)
		syscall(SYS_rt_sigaction, sig, &ign, NULL, sizeof ign.mask);
	if (argc < 2)
		return 2;
	execv(argv[1], &argv[1]);
	perror("execv");
	return 127;
}
