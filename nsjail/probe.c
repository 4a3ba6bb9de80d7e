// The user namespace probe of sandbox.isolation = "auto" (ProbeUserNamespaces):
// the supervisor starts /proc/self/exe with argv[0] == HUTCH_PROBE_MAGIC in
// the seven namespaces a sandbox's init gets, with its one-id maps; this
// constructor then does what the init's root needs most and a host that
// only half allows user namespaces refuses: it makes the mounts private and
// mounts a procfs for its pid namespace. Exit 0: a sandbox can be made;
// otherwise the step that failed and its errno are on stderr. It never
// returns to Go.
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "hutch_init.h"

__attribute__((constructor)) static void hutch_probe_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], HUTCH_PROBE_MAGIC) != 0)
		return;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		fprintf(stderr, "make the mounts private in a new mount namespace: %s", strerror(errno));
		_exit(1);
	}
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		fprintf(stderr, "mount a procfs for a new pid namespace: %s", strerror(errno));
		_exit(1);
	}
	_exit(0);
}
