// The mount plan executor: builds the sandbox's root filesystem from the
// primitive steps the supervisor computed (mounts/plan.go documents each
// kind) and pivots into it. It runs in the init, in a fresh mount namespace
// whose user namespace the init owns, as pid 1 of a fresh pid namespace.
//
// Ordering, in the spirit of bubblewrap's setup: every bind source is
// opened O_PATH before any mount changes (the new root may hide it, e.g. a
// workspace under /tmp); the root tmpfs is mounted on the staging
// directory (Plan.Stage, outside every bind source); the steps run in
// order; then pivot_root(".", "."), detach the old root, and make "/"
// read-only. Mount attributes are only ever added (mount_setattr), so
// flags locked by a more privileged namespace are kept.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hutch_init.h"
#include "wire.h"

#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_pivot_root
#define SYS_pivot_root 155
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#define H_MOUNT_ATTR_RDONLY 0x00000001
#define H_MOUNT_ATTR_NOSUID 0x00000002
#define H_MOUNT_ATTR_NODEV 0x00000004
#define H_MOUNT_ATTR_NOEXEC 0x00000008
#define H_MOUNT_ATTR__ATIME 0x00000070
#define H_MOUNT_ATTR_NOATIME 0x00000010
#define H_RESOLVE_NO_MAGICLINKS 0x02
#define H_RESOLVE_NO_SYMLINKS 0x04
#define H_RESOLVE_IN_ROOT 0x10

struct h_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};
struct h_open_how {
	uint64_t flags, mode, resolve;
};

// ex is the executor's state for one plan.
struct ex {
	char *err;
	size_t errlen;
	const char *stage;
};

// ex_fail records the error and returns -1, errno unchanged.
__attribute__((format(printf, 2, 3))) static int ex_fail(struct ex *x, const char *fmt, ...) {
	int e = errno;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(x->err, x->errlen, fmt, ap);
	va_end(ap);
	errno = e;
	return -1;
}

static const char *es(int e) {
	static char buf[128];
	return hutch_strerror(e, buf, sizeof buf);
}

static char *fd_path(int fd, char *buf, size_t len) {
	snprintf(buf, len, "/proc/self/fd/%d", fd);
	return buf;
}

// set_attr adds mount attributes to the mount at path (recursively, with
// rec). Before Linux 5.12 it falls back to a bind remount that keeps the
// mount's existing flags (not recursive). H_MOUNT_ATTR_NOATIME replaces
// the mount's atime mode; only hutch's own mounts may ask for it (the
// atime mode of a mount from a more privileged namespace is locked).
static int set_attr_at(int dfd, const char *path, int flags, uint64_t set) {
	struct h_mount_attr a = {set, (set & H_MOUNT_ATTR_NOATIME) ? H_MOUNT_ATTR__ATIME : 0, 0, 0};
	if (syscall(SYS_mount_setattr, dfd, path, (unsigned)flags, &a, sizeof a) == 0)
		return 0;
	if (errno != ENOSYS)
		return -1;
	char pb[64];
	const char *p = path;
	if (flags & AT_EMPTY_PATH)
		p = fd_path(dfd, pb, sizeof pb);
	struct statfs st;
	if (statfs(p, &st) < 0)
		return -1;
	unsigned long mf = (unsigned long)st.f_flags & (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME | MS_NODIRATIME | MS_RELATIME);
	if (set & H_MOUNT_ATTR_RDONLY)
		mf |= MS_RDONLY;
	if (set & H_MOUNT_ATTR_NOSUID)
		mf |= MS_NOSUID;
	if (set & H_MOUNT_ATTR_NODEV)
		mf |= MS_NODEV;
	if (set & H_MOUNT_ATTR_NOEXEC)
		mf |= MS_NOEXEC;
	if (set & H_MOUNT_ATTR_NOATIME)
		mf = (mf & ~(unsigned long)(MS_NODIRATIME | MS_RELATIME)) | MS_NOATIME;
	return mount("", p, "", MS_REMOUNT | MS_BIND | mf, NULL);
}

static int set_attr(const char *path, int rec, uint64_t set) {
	return set_attr_at(AT_FDCWD, path, rec ? AT_RECURSIVE : 0, set);
}

// mkdir_all creates path and its missing parents with mode, like Go's
// os.MkdirAll: an existing directory is fine, anything else is an error.
static int mkdir_all(struct ex *x, const char *path, mode_t mode) {
	char buf[4096];
	size_t len = strlen(path);
	if (len >= sizeof buf)
		return ex_fail(x, "mkdir %s: %s", path, es(ENAMETOOLONG));
	memcpy(buf, path, len + 1);
	for (size_t i = 1; i <= len; i++) {
		if (buf[i] != '/' && buf[i] != 0)
			continue;
		char c = buf[i];
		buf[i] = 0;
		if (mkdir(buf, mode) < 0 && errno != EEXIST) {
			int e = errno;
			buf[i] = c;
			errno = e;
			return ex_fail(x, "mkdir %s: %s", path, es(e));
		}
		buf[i] = c;
	}
	struct stat st;
	if (stat(path, &st) < 0)
		return ex_fail(x, "mkdir %s: %s", path, es(errno));
	if (!S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		return ex_fail(x, "mkdir %s: %s", path, es(ENOTDIR));
	}
	return 0;
}

static int mkdir_parent(struct ex *x, const char *path) {
	char buf[4096];
	snprintf(buf, sizeof buf, "%s", path);
	char *slash = strrchr(buf, '/');
	if (slash && slash != buf)
		*slash = 0;
	else
		return 0;
	return mkdir_all(x, buf, 0755);
}

// mount_point creates an empty directory or file at p to mount onto.
static int mount_point(struct ex *x, const struct hutch_step *s, int dir) {
	int rc;
	if (dir) {
		rc = mkdir_all(x, s->staged, 0755);
	} else {
		rc = mkdir_parent(x, s->staged);
		if (rc == 0) {
			int fd = open(s->staged, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
			if (fd < 0)
				rc = ex_fail(x, "open %s: %s", s->staged, es(errno));
			else
				close(fd);
		}
	}
	if (rc < 0 && errno == EROFS) {
		char inner[1024];
		snprintf(inner, sizeof inner, "%s", x->err);
		return ex_fail(x, "the mount point %s does not exist inside an already mounted read-only tree, and cannot be created there; "
		                  "choose a target that exists, or one outside the tooling tree (e.g. /mnt/NAME): create mount point: %s",
		               s->target, inner);
	}
	if (rc < 0) {
		char inner[1024];
		snprintf(inner, sizeof inner, "%s", x->err);
		return ex_fail(x, "create mount point: %s", inner);
	}
	return 0;
}

static int exists(const char *p) {
	struct stat st;
	return lstat(p, &st) == 0;
}

// open_beneath opens the step's target beneath the new root as O_PATH.
// With NOSYM, no component may be a symlink: workspace contents are
// controlled by sandboxed code and must not redirect a mount.
static int open_beneath(struct ex *x, int root, const struct hutch_step *s) {
	struct h_open_how how = {O_PATH | O_CLOEXEC | O_NOFOLLOW, 0, H_RESOLVE_IN_ROOT | H_RESOLVE_NO_MAGICLINKS};
	if (s->flags & HUTCH_STEPF_NOSYM)
		how.resolve |= H_RESOLVE_NO_SYMLINKS;
	const char *rel = s->target[0] == '/' ? s->target + 1 : s->target;
	if (rel[0] == 0)
		rel = ".";
	long fd = syscall(SYS_openat2, root, rel, &how, sizeof how);
	if (fd < 0) {
		if (errno == ELOOP)
			return ex_fail(x, "open %s: a path component is a symlink, which hutch refuses here: %s", s->target, es(ELOOP));
		return ex_fail(x, "open %s: %s", s->target, es(errno));
	}
	return (int)fd;
}

// write_all writes the string data to fd; -1 with errno on failure.
static int write_all(int fd, const char *data) {
	size_t len = strlen(data), off = 0;
	while (off < len) {
		ssize_t w = write(fd, data + off, len - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			if (w == 0)
				errno = EIO;
			return -1;
		}
		off += (size_t)w;
	}
	return 0;
}

// cover binds a file holding the step's data over the existing regular
// file at its target, resolved beneath the new root. The data is written to
// a file in the root tmpfs first, which is unlinked once bound: the mount
// keeps it, and no name of it is left in the sandbox.
static int cover(struct ex *x, int root, const struct hutch_step *s) {
	int dst = open_beneath(x, root, s);
	if (dst < 0)
		return -1;
	struct stat st;
	if (fstat(dst, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(dst);
		return ex_fail(x, "%s is not a regular file (it was when the plan was made; the tree changed since)", s->target);
	}
	static const char tmp[] = ".hutch-cover";
	mode_t mode = s->mode ? s->mode : 0644;
	int fd = openat(root, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 0777);
	if (fd < 0) {
		close(dst);
		return ex_fail(x, "create %s in the new root: %s", tmp, es(errno));
	}
	if (write_all(fd, s->data) < 0) {
		int e = errno;
		close(fd);
		close(dst);
		unlinkat(root, tmp, 0);
		return ex_fail(x, "write %s: %s", tmp, es(e));
	}
	char src[64], pb[64];
	int rc = mount(fd_path(fd, src, sizeof src), fd_path(dst, pb, sizeof pb), "", MS_BIND, NULL);
	int e = errno;
	close(fd);
	close(dst);
	unlinkat(root, tmp, 0);
	if (rc < 0)
		return ex_fail(x, "bind over %s: %s", s->target, es(e));
	// The new mount now sits on top of the target's dentry; reopen to reach it.
	if ((dst = open_beneath(x, root, s)) < 0)
		return -1;
	rc = set_attr_at(dst, "", AT_EMPTY_PATH, H_MOUNT_ATTR_RDONLY | H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NODEV | H_MOUNT_ATTR_NOEXEC);
	e = errno;
	close(dst);
	if (rc < 0)
		return ex_fail(x, "mount_setattr %s: %s", s->target, es(e));
	return 0;
}

// overlay mounts an overlayfs at the step's target from its layers, opened
// before any mount changed (layers: the lowers, then upper and work). In a
// user namespace overlayfs keeps its own xattrs (opaque directories) in the
// user.overlay. namespace (userxattr; redirect_dir and metacopy are off with
// it), and index=off: nothing outside the upper layer is written. Whiteouts
// are 0/0 character devices in the upper layer.
static int overlay(struct ex *x, const struct hutch_step *s, const int *layers) {
	char opts[8192], pb[64];
	size_t n = 0;
	n += (size_t)snprintf(opts + n, sizeof opts - n, "lowerdir=");
	for (uint32_t i = 0; i < s->nlower && n < sizeof opts; i++)
		n += (size_t)snprintf(opts + n, sizeof opts - n, "%s%s", i ? ":" : "", fd_path(layers[i], pb, sizeof pb));
	if (s->upper[0] && n < sizeof opts) {
		n += (size_t)snprintf(opts + n, sizeof opts - n, ",upperdir=%s", fd_path(layers[s->nlower], pb, sizeof pb));
		if (n < sizeof opts)
			n += (size_t)snprintf(opts + n, sizeof opts - n, ",workdir=%s", fd_path(layers[s->nlower + 1], pb, sizeof pb));
	}
	if (n < sizeof opts)
		n += (size_t)snprintf(opts + n, sizeof opts - n, ",userxattr,index=off");
	if (n >= sizeof opts)
		return ex_fail(x, "overlay: too many layers for one mount");
	if (mount_point(x, s, 1) < 0)
		return -1;
	unsigned long fl = MS_NOSUID | MS_NODEV | (s->upper[0] ? 0 : MS_RDONLY);
	if (mount("overlay", s->staged, "overlay", fl, opts) < 0) {
		int e = errno;
		const char *why = "";
		if (e == EINVAL)
			why = " (overlayfs refuses these layers: the upper directory's filesystem may lack user extended attributes "
			      "(a tmpfs before Linux 6.6), or the layers overlap)";
		else if (e == ENODEV)
			why = " (this kernel has no overlayfs)";
		else if (e == EPERM)
			why = " (this kernel does not mount overlayfs in a user namespace: Linux 5.11 or later does)";
		return ex_fail(x, "mount overlayfs (upper %s): %s%s", s->upper[0] ? s->upper : "none", es(e), why);
	}
	return 0;
}

static int apply(struct ex *x, int root, const struct hutch_step *s, int src, const int *layers, int devnull) {
	char pb[64], opts[128];
	const char *t = s->staged;
	switch (s->kind) {
	case HUTCH_STEP_OVERLAY:
		return overlay(x, s, layers);
	case HUTCH_STEP_BIND: {
		if (src < 0)
			return 0; // optional and missing
		struct stat st;
		if (fstat(src, &st) < 0)
			return ex_fail(x, "stat source: %s", es(errno));
		if (mount_point(x, s, S_ISDIR(st.st_mode)) < 0)
			return -1;
		if (mount(fd_path(src, pb, sizeof pb), t, "", MS_BIND | MS_REC, NULL) < 0)
			return ex_fail(x, "bind %s: %s", s->source, es(errno));
		uint64_t attr = H_MOUNT_ATTR_NOSUID;
		if (!S_ISCHR(st.st_mode) && !S_ISBLK(st.st_mode))
			attr |= H_MOUNT_ATTR_NODEV;
		if (s->flags & HUTCH_STEPF_RO)
			attr |= H_MOUNT_ATTR_RDONLY;
		if (set_attr(t, 1, attr) < 0)
			return ex_fail(x, "mount_setattr %s: %s", t, es(errno));
		return 0;
	}
	case HUTCH_STEP_PIN:
	case HUTCH_STEP_PROTECT: {
		int fd = open_beneath(x, root, s);
		if (fd < 0)
			return -1;
		fd_path(fd, pb, sizeof pb);
		int rc = mount(pb, pb, "", MS_BIND | MS_REC, NULL);
		int e = errno;
		close(fd);
		if (rc < 0)
			return ex_fail(x, "bind onto itself: %s", es(e));
		uint64_t attr = H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NODEV;
		if (s->kind == HUTCH_STEP_PROTECT)
			attr |= H_MOUNT_ATTR_RDONLY;
		// The new mount now sits on top of fd's dentry; reopen to reach it.
		fd = open_beneath(x, root, s);
		if (fd < 0)
			return -1;
		rc = set_attr_at(fd, "", AT_EMPTY_PATH | AT_RECURSIVE, attr);
		e = errno;
		close(fd);
		if (rc < 0)
			return ex_fail(x, "mount_setattr: %s", es(e));
		return 0;
	}
	case HUTCH_STEP_HIDE: {
		int fd = open_beneath(x, root, s);
		if (fd < 0)
			return -1;
		int rc = mount("tmpfs", fd_path(fd, pb, sizeof pb), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME,
		               "size=4096,nr_inodes=1,mode=0500");
		int e = errno;
		close(fd);
		if (rc < 0)
			return ex_fail(x, "cover with an empty directory: %s", es(e));
		return 0;
	}
	case HUTCH_STEP_TMPFS: {
		if (mount_point(x, s, 1) < 0)
			return -1;
		unsigned mode = s->mode ? s->mode : 0755;
		if (s->size > 0)
			snprintf(opts, sizeof opts, "mode=%o,size=%lld", mode, (long long)s->size);
		else
			snprintf(opts, sizeof opts, "mode=%o", mode);
		if (mount("tmpfs", t, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
			return ex_fail(x, "%s", es(errno));
		return 0;
	}
	case HUTCH_STEP_PROC:
		if (mount_point(x, s, 1) < 0)
			return -1;
		if (mount("proc", t, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			return ex_fail(x, "%s", es(errno));
		return 0;
	case HUTCH_STEP_DEVPTS:
		if (mount_point(x, s, 1) < 0)
			return -1;
		if (mount("devpts", t, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") < 0)
			return ex_fail(x, "%s", es(errno));
		return 0;
	case HUTCH_STEP_SYSFS:
		if (mount_point(x, s, 1) < 0)
			return -1;
		if (mount("sysfs", t, "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, NULL) < 0)
			return ex_fail(x, "%s", es(errno));
		return 0;
	case HUTCH_STEP_MKDIR: {
		mode_t mode = s->mode ? s->mode : 0755;
		if (mkdir_all(x, t, mode & 0777) < 0)
			return -1;
		if (chmod(t, mode & 07777) < 0)
			return ex_fail(x, "chmod %s: %s", t, es(errno));
		return 0;
	}
	case HUTCH_STEP_FILE: {
		if (mkdir_parent(x, t) < 0)
			return -1;
		mode_t mode = s->mode ? s->mode : 0644;
		int fd = open(t, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode & 07777);
		if (fd < 0)
			return ex_fail(x, "open %s: %s", t, es(errno));
		if (write_all(fd, s->data) < 0) {
			int e = errno;
			close(fd);
			return ex_fail(x, "write %s: %s", t, es(e));
		}
		if (close(fd) < 0)
			return ex_fail(x, "close %s: %s", t, es(errno));
		return 0;
	}
	case HUTCH_STEP_SYMLINK:
		if (mkdir_parent(x, t) < 0)
			return -1;
		if (symlink(s->data, t) < 0)
			return ex_fail(x, "symlink %s %s: %s", s->data, t, es(errno));
		return 0;
	case HUTCH_STEP_MASK_FILE:
	case HUTCH_STEP_MASK_DIR: {
		// Resolved beneath the new root: a symlink in a tree (an /etc
		// entry) cannot lead the mask onto a host path.
		int fd = open_beneath(x, root, s);
		if (fd < 0)
			return errno == ENOENT ? 0 : -1;
		struct stat st;
		if (fstat(fd, &st) < 0 || S_ISLNK(st.st_mode)) {
			close(fd);
			return ex_fail(x, "%s is a symlink (it was not when the plan was made; the tree changed since)", s->target);
		}
		fd_path(fd, pb, sizeof pb);
		int rc;
		if (s->kind == HUTCH_STEP_MASK_FILE) {
			rc = mount(fd_path(devnull, opts, sizeof opts), pb, "", MS_BIND, NULL);
			if (rc == 0) {
				close(fd);
				if ((fd = open_beneath(x, root, s)) < 0)
					return -1;
				rc = set_attr_at(fd, "", AT_EMPTY_PATH, H_MOUNT_ATTR_RDONLY | H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NOEXEC);
			}
		} else {
			rc = mount("tmpfs", pb, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_NOATIME, "size=4096,nr_inodes=1,mode=0555");
		}
		int e = errno;
		close(fd);
		if (rc < 0)
			return ex_fail(x, "%s", es(e));
		return 0;
	}
	case HUTCH_STEP_COVER:
		return cover(x, root, s);
	case HUTCH_STEP_SEAL:
		// Seal only ever targets a tmpfs hutch mounted itself (/dev), whose
		// atime mode is not locked: noatime, as for the root.
		if (set_attr(t, 0, H_MOUNT_ATTR_RDONLY | H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NODEV | H_MOUNT_ATTR_NOATIME) < 0)
			return ex_fail(x, "mount_setattr %s: %s", t, es(errno));
		return 0;
	case HUTCH_STEP_RO:
		if (!exists(t))
			return 0;
		if (mount(t, t, "", MS_BIND | MS_REC, NULL) < 0)
			return ex_fail(x, "%s", es(errno));
		if (set_attr(t, 1, H_MOUNT_ATTR_RDONLY | H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NODEV) < 0)
			return ex_fail(x, "mount_setattr %s: %s", t, es(errno));
		return 0;
	}
	return ex_fail(x, "unknown step kind %u", s->kind);
}

// hutch_mounts_begin opens every bind source of the plan (afterwards the
// host paths may be hidden, a workspace under /tmp, say), makes "/" private
// and mounts the root tmpfs on the staging directory.
int hutch_mounts_begin(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark, char *err, size_t errlen) {
	memset(m, 0, sizeof *m);
	m->err = err;
	m->errlen = errlen;
	m->devnull = m->root = -1;
	struct ex x = {err, errlen, p->stage[0] ? p->stage : "/tmp"};
	long t0 = hutch_now_usec();
	m->srcs = calloc(p->nsteps ? p->nsteps : 1, sizeof *m->srcs);
	if (!m->srcs)
		return ex_fail(&x, "out of memory");
	for (uint32_t i = 0; i < p->nsteps; i++)
		m->srcs[i] = -1;
	for (uint32_t i = 0; i < p->nsteps; i++) {
		const struct hutch_step *s = &p->steps[i];
		if (s->kind == HUTCH_STEP_BIND) {
			m->srcs[i] = open(s->source, O_PATH | O_CLOEXEC);
			if (m->srcs[i] < 0 && !(errno == ENOENT && (s->flags & HUTCH_STEPF_OPTIONAL)))
				return ex_fail(&x, "open %s for %s: %s", s->source, s->why[0] ? s->why : s->name, es(errno));
		} else if (s->kind == HUTCH_STEP_OVERLAY) {
			uint32_t nl = s->nlower + (s->upper[0] ? 2 : 0);
			if (!m->layers && !(m->layers = calloc(p->nsteps, sizeof *m->layers)))
				return ex_fail(&x, "out of memory");
			if (!(m->layers[i] = malloc(nl * sizeof(int))))
				return ex_fail(&x, "out of memory");
			for (uint32_t j = 0; j < nl; j++)
				m->layers[i][j] = -1;
			for (uint32_t j = 0; j < nl; j++) {
				const char *l = j < s->nlower ? s->lower[j] : j == s->nlower ? s->upper : s->work;
				m->layers[i][j] = open(l, O_PATH | O_DIRECTORY | O_CLOEXEC);
				if (m->layers[i][j] < 0)
					return ex_fail(&x, "open %s for %s: %s", l, s->why[0] ? s->why : s->name, es(errno));
			}
		} else if (s->kind == HUTCH_STEP_MASK_FILE && m->devnull < 0) {
			m->devnull = open("/dev/null", O_PATH | O_CLOEXEC);
			if (m->devnull < 0)
				return ex_fail(&x, "open /dev/null for masking: %s", es(errno));
		}
	}
	mark("mounts.open", hutch_now_usec() - t0);

	t0 = hutch_now_usec();
	if (mount("", "/", "", MS_REC | MS_PRIVATE, NULL) < 0)
		return ex_fail(&x, "make / private in the new mount namespace: %s", es(errno));
	char opts[128];
	snprintf(opts, sizeof opts, "size=%lld,nr_inodes=8192,mode=0755", (long long)(p->root_size > 0 ? p->root_size : 8 << 20));
	// noatime: the root becomes read-only, and on a read-only mount a
	// relatime atime that wants an update can never get it, so the kernel
	// would leave its lockless path walk (RCU) at every symlink it follows
	// (/bin, /lib, /lib64, for every exec and library load) to try again.
	// Measured here: ~1% of each fork+exec of /bin/true.
	if (mount("hutch-root", x.stage, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOATIME, opts) < 0)
		return ex_fail(&x, "mount the root tmpfs on %s: %s", x.stage, es(errno));
	m->mounted = 1;
	m->root = open(x.stage, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (m->root < 0)
		return ex_fail(&x, "open new root: %s", es(errno));
	mark("mounts.root", hutch_now_usec() - t0);
	return 0;
}

// hutch_mounts_steps applies the plan's steps from the first not yet
// applied up to (not including) step upto.
int hutch_mounts_steps(struct hutch_mounts *m, const struct hutch_plan *p, uint32_t upto, hutch_mark_fn mark) {
	struct ex x = {m->err, m->errlen, p->stage[0] ? p->stage : "/tmp"};
	long t0 = hutch_now_usec();
	if (upto > p->nsteps)
		upto = p->nsteps;
	for (; m->done < upto; m->done++) {
		const struct hutch_step *s = &p->steps[m->done];
		if (apply(&x, m->root, s, m->srcs[m->done], m->layers ? m->layers[m->done] : NULL, m->devnull) < 0) {
			char inner[2048];
			snprintf(inner, sizeof inner, "%s", m->err);
			return ex_fail(&x, "%s %s (%s): %s", s->name, s->target, s->why[0] ? s->why : s->name, inner);
		}
	}
	mark("mounts.steps", hutch_now_usec() - t0);
	return 0;
}

static void mounts_close(struct hutch_mounts *m, const struct hutch_plan *p) {
	if (m->srcs) {
		for (uint32_t i = 0; i < p->nsteps; i++)
			if (m->srcs[i] >= 0 && m->srcs[i] != m->devnull)
				close(m->srcs[i]);
		free(m->srcs);
		m->srcs = NULL;
	}
	if (m->layers) {
		for (uint32_t i = 0; i < p->nsteps; i++) {
			if (!m->layers[i])
				continue;
			const struct hutch_step *s = &p->steps[i];
			for (uint32_t j = 0; j < s->nlower + (s->upper[0] ? 2 : 0); j++)
				if (m->layers[i][j] >= 0)
					close(m->layers[i][j]);
			free(m->layers[i]);
		}
		free(m->layers);
		m->layers = NULL;
	}
	if (m->devnull >= 0)
		close(m->devnull);
	if (m->root >= 0)
		close(m->root);
	m->devnull = m->root = -1;
}

// hutch_mounts_finish applies the remaining steps, pivots into the new root,
// detaches the old one and makes "/" read-only; it releases m either way.
int hutch_mounts_finish(struct hutch_mounts *m, const struct hutch_plan *p, hutch_mark_fn mark) {
	struct ex x = {m->err, m->errlen, p->stage[0] ? p->stage : "/tmp"};
	int rc = -1;
	if (hutch_mounts_steps(m, p, p->nsteps, mark) < 0)
		goto out;
	long t0 = hutch_now_usec();
	if (chdir(x.stage) < 0) {
		ex_fail(&x, "chdir to new root: %s", es(errno));
		goto out;
	}
	if (syscall(SYS_pivot_root, ".", ".") < 0) {
		ex_fail(&x, "pivot_root into the new root: %s", es(errno));
		goto out;
	}
	if (umount2(".", MNT_DETACH) < 0) {
		ex_fail(&x, "detach the old root: %s", es(errno));
		goto out;
	}
	if (chdir("/") < 0) {
		ex_fail(&x, "chdir / after pivot_root: %s", es(errno));
		goto out;
	}
	if (set_attr("/", 0, H_MOUNT_ATTR_RDONLY | H_MOUNT_ATTR_NOSUID | H_MOUNT_ATTR_NODEV) < 0) {
		ex_fail(&x, "make the root read-only: %s", es(errno));
		goto out;
	}
	mark("mounts.pivot", hutch_now_usec() - t0);
	rc = 0;
out:
	mounts_close(m, p);
	return rc;
}

// hutch_mounts_abandon drops a root built only in part: it detaches the
// root tmpfs from the staging directory with everything mounted beneath it,
// and releases m.
void hutch_mounts_abandon(struct hutch_mounts *m, const struct hutch_plan *p) {
	mounts_close(m, p);
	if (m->mounted)
		umount2(p->stage[0] ? p->stage : "/tmp", MNT_DETACH);
	m->mounted = 0;
}

int hutch_mounts_execute(const struct hutch_plan *p, hutch_mark_fn mark, char *err, size_t errlen) {
	struct hutch_mounts m;
	if (hutch_mounts_begin(&m, p, mark, err, errlen) < 0) {
		hutch_mounts_abandon(&m, p);
		return -1;
	}
	return hutch_mounts_finish(&m, p, mark);
}
