// The user namespace probe of sandbox.isolation = "auto" (ProbeUserNamespaces):
// the supervisor starts /proc/self/exe with argv[0] == HUTCH_PROBE_MAGIC in
// the seven namespaces a sandbox's init gets, with its one-id maps; this
// constructor then does what the init's root needs most and a host that
// only half allows user namespaces refuses: it makes the mounts private and
// mounts a procfs for its pid namespace. Exit 0: a sandbox can be made;
// otherwise the step that failed and its errno are on stderr. It never
// returns to Go.
//
// With argv = {HUTCH_PROBE_MAGIC, "overlay", LOWER1, LOWER2} it is the
// overlay probe instead (ProbeOverlay): after making the mounts private it
// mounts overlayfs read-only from LOWER1 (upper) and LOWER2, with the
// options of the init's read-only image overlay (mounts.c, overlay()),
// onto LOWER1 itself, and checks that LOWER2's file "probe" shows at
// LOWER1/probe.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hutch_init.h"

// probe_overlay is the overlay probe's mount and check; it never returns.
// The lower directories are opened first and named by /proc/self/fd links
// in lowerdir=, as the init names its layers (a path with ':' or ','
// needs no escaping so).
static void probe_overlay(const char *lower1, const char *lower2) {
	char opts[256], target[PATH_MAX + 16];
	int l1 = open(lower1, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (l1 < 0) {
		fprintf(stderr, "open the overlay probe's lower directory %s: %s", lower1, strerror(errno));
		_exit(1);
	}
	int l2 = open(lower2, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (l2 < 0) {
		fprintf(stderr, "open the overlay probe's lower directory %s: %s", lower2, strerror(errno));
		_exit(1);
	}
	snprintf(opts, sizeof opts, "lowerdir=/proc/self/fd/%d:/proc/self/fd/%d,userxattr,index=off", l1, l2);
	if (mount("overlay", lower1, "overlay", MS_NOSUID | MS_NODEV | MS_RDONLY, opts) < 0) {
		int e = errno;
		const char *why = "";
		if (e == EINVAL)
			why = " (overlayfs refuses this filesystem as a lower layer in a user namespace)";
		else if (e == ENODEV)
			why = " (this kernel has no overlayfs)";
		else if (e == EPERM)
			why = " (this kernel does not mount overlayfs in a user namespace: Linux 5.11 or later does)";
		fprintf(stderr, "mount overlayfs (read-only, lower %s:%s) in a user namespace: %s%s", lower1, lower2, strerror(e), why);
		_exit(1);
	}
	struct stat st;
	// lower1 by name, not l1: the fd is the directory beneath the mount.
	if ((size_t)snprintf(target, sizeof target, "%s/probe", lower1) >= sizeof target) {
		fprintf(stderr, "the overlay probe's lower directory name is too long");
		_exit(1);
	}
	if (stat(target, &st) < 0) {
		fprintf(stderr, "stat %s through the overlay (the lower layer's file does not show): %s", target, strerror(errno));
		_exit(1);
	}
	_exit(0);
}

__attribute__((constructor)) static void hutch_probe_stage(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 1 || argv == NULL || argv[0] == NULL || strcmp(argv[0], HUTCH_PROBE_MAGIC) != 0)
		return;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
		fprintf(stderr, "make the mounts private in a new mount namespace: %s", strerror(errno));
		_exit(1);
	}
	if (argc >= 2 && strcmp(argv[1], "overlay") == 0) {
		if (argc != 4) {
			fprintf(stderr, "the overlay probe takes two lower directories, not %d arguments", argc - 2);
			_exit(1);
		}
		probe_overlay(argv[2], argv[3]);
	}
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		fprintf(stderr, "mount a procfs for a new pid namespace: %s", strerror(errno));
		_exit(1);
	}
	_exit(0);
}
