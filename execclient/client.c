// The fast path of `hutch exec NAME [--] COMMAND [ARG...]`: a constructor
// that runs before the Go runtime starts, speaks the session protocol
// (session/session.go: one JSON object per SOCK_SEQPACKET message; an exec
// request is {"op":"exec"} with the caller's stdin, stdout and stderr and a
// sealed memfd holding the request, passed as SCM_RIGHTS) and exits with
// the command's status. A Go runtime start costs more than the rest of an
// exec into a warm session, and `hutch exec` is what an agent calls for
// every command.
//
// It handles only the plain form, and only when everything is in order: a
// valid session name, no options, open stdio none of which is a terminal,
// a private session directory, a session that accepts the connection. In every other case it returns
// and the Go implementation runs, which also owns every error message
// about bad input. HUTCH_NO_FAST_EXEC=1 forces the Go path.
//
// Once the request is sent, this path owns the outcome: it relays SIGINT,
// SIGTERM, SIGHUP and SIGQUIT to the session as signal requests (as the Go
// client does), prints the result's messages to stderr, and exits with the
// command's exit code.

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

// Must match session's maxMsg and maxBody.
#define MAX_MSG (1 << 20)
#define MAX_BODY (64 << 20)

// ---- JSON out -----------------------------------------------------------

struct buf {
	char *p;
	size_t n, cap;
	int over;
};

static void put(struct buf *b, const char *s, size_t n) {
	if (b->over || b->n + n > b->cap) {
		b->over = 1;
		return;
	}
	memcpy(b->p + b->n, s, n);
	b->n += n;
}
static void puts_(struct buf *b, const char *s) { put(b, s, strlen(s)); }

// put_json_string writes s as a JSON string. Bytes >= 0x80 pass through:
// the server's decoder (encoding/json) replaces invalid UTF-8 with U+FFFD,
// exactly as the Go client's encoder does.
static void put_json_string(struct buf *b, const char *s) {
	static const char hex[] = "0123456789abcdef";
	put(b, "\"", 1);
	for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
		if (*c == '"' || *c == '\\') {
			char e[2] = {'\\', (char)*c};
			put(b, e, 2);
		} else if (*c < 0x20) {
			char e[6] = {'\\', 'u', '0', '0', hex[*c >> 4], hex[*c & 15]};
			put(b, e, 6);
		} else {
			put(b, (const char *)c, 1);
		}
	}
	put(b, "\"", 1);
}

static void put_json_strings(struct buf *b, char **v) {
	put(b, "[", 1);
	for (int i = 0; v[i]; i++) {
		if (i)
			put(b, ",", 1);
		put_json_string(b, v[i]);
	}
	put(b, "]", 1);
}

// ---- JSON in (just what a reply needs) ---------------------------------

struct js {
	const char *p, *end;
	int bad;
};

static void ws(struct js *j) {
	while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
		j->p++;
}

static int hexval(char c) {
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static void put_utf8(struct buf *out, unsigned cp) {
	char u[4];
	size_t n;
	if (cp < 0x80) {
		u[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		u[0] = (char)(0xc0 | (cp >> 6));
		u[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		u[0] = (char)(0xe0 | (cp >> 12));
		u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else {
		u[0] = (char)(0xf0 | (cp >> 18));
		u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		u[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	}
	put(out, u, n);
}

static unsigned hex4(struct js *j) {
	if (j->end - j->p < 4) {
		j->bad = 1;
		return 0;
	}
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		int h = hexval(j->p[i]);
		if (h < 0)
			j->bad = 1;
		v = v << 4 | (unsigned)(h < 0 ? 0 : h);
	}
	j->p += 4;
	return v;
}

// str parses a JSON string into out (when out is not NULL).
static void str(struct js *j, struct buf *out) {
	ws(j);
	if (j->p >= j->end || *j->p != '"') {
		j->bad = 1;
		return;
	}
	j->p++;
	while (j->p < j->end && *j->p != '"') {
		char c = *j->p++;
		if (c != '\\') {
			if (out)
				put(out, &c, 1);
			continue;
		}
		if (j->p >= j->end) {
			j->bad = 1;
			return;
		}
		char e = *j->p++;
		const char *simple = strchr("\"\\/bfnrt", e);
		if (e && simple) {
			static const char repl[] = "\"\\/\b\f\n\r\t";
			if (out)
				put(out, &repl[simple - "\"\\/bfnrt"], 1);
		} else if (e == 'u') {
			unsigned cp = hex4(j);
			if (cp >= 0xd800 && cp < 0xdc00 && j->end - j->p >= 6 && j->p[0] == '\\' && j->p[1] == 'u') {
				j->p += 2;
				unsigned lo = hex4(j);
				if (lo >= 0xdc00 && lo < 0xe000)
					cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				else
					cp = 0xfffd;
			} else if (cp >= 0xd800 && cp < 0xe000) {
				cp = 0xfffd;
			}
			if (out)
				put_utf8(out, cp);
		} else {
			j->bad = 1;
			return;
		}
	}
	if (j->p >= j->end) {
		j->bad = 1;
		return;
	}
	j->p++;
}

static void skip_value(struct js *j, int depth);

static void skip_container(struct js *j, char close, int depth) {
	j->p++;
	ws(j);
	if (j->p < j->end && *j->p == close) {
		j->p++;
		return;
	}
	for (;;) {
		if (close == '}') {
			str(j, NULL);
			ws(j);
			if (j->p >= j->end || *j->p != ':') {
				j->bad = 1;
				return;
			}
			j->p++;
		}
		skip_value(j, depth + 1);
		ws(j);
		if (j->bad || j->p >= j->end) {
			j->bad = 1;
			return;
		}
		if (*j->p == ',') {
			j->p++;
			continue;
		}
		if (*j->p == close) {
			j->p++;
			return;
		}
		j->bad = 1;
		return;
	}
}

static void skip_value(struct js *j, int depth) {
	ws(j);
	if (j->p >= j->end || depth > 64) {
		j->bad = 1;
		return;
	}
	switch (*j->p) {
	case '"':
		str(j, NULL);
		return;
	case '{':
		skip_container(j, '}', depth);
		return;
	case '[':
		skip_container(j, ']', depth);
		return;
	default:
		while (j->p < j->end && strchr(",}] \t\r\n", *j->p) == NULL)
			j->p++;
	}
}

// reply is what this client needs of a session Reply.
struct reply {
	char op[16];
	long exit_code;
	struct buf messages; // each message followed by '\n'
	struct buf error;
};

static void parse_reply(const char *p, size_t n, struct reply *r) {
	struct js j = {p, p + n, 0};
	ws(&j);
	if (j.p >= j.end || *j.p != '{') {
		j.bad = 1;
		goto out;
	}
	j.p++;
	ws(&j);
	if (j.p < j.end && *j.p == '}')
		goto out;
	for (;;) {
		char key[32];
		struct buf kb = {key, 0, sizeof key - 1, 0};
		str(&j, &kb);
		key[kb.over ? 0 : kb.n] = 0;
		ws(&j);
		if (j.bad || j.p >= j.end || *j.p != ':') {
			j.bad = 1;
			goto out;
		}
		j.p++;
		ws(&j);
		if (strcmp(key, "op") == 0) {
			struct buf ob = {r->op, 0, sizeof r->op - 1, 0};
			str(&j, &ob);
			r->op[ob.over ? 0 : ob.n] = 0;
		} else if (strcmp(key, "exit_code") == 0) {
			char *e;
			r->exit_code = strtol(j.p, &e, 10);
			if (e == j.p)
				j.bad = 1;
			j.p = e;
		} else if (strcmp(key, "error") == 0) {
			str(&j, &r->error);
		} else if (strcmp(key, "messages") == 0 && j.p < j.end && *j.p == '[') {
			j.p++;
			ws(&j);
			if (j.p < j.end && *j.p == ']') {
				j.p++;
			} else {
				for (;;) {
					str(&j, &r->messages);
					put(&r->messages, "\n", 1);
					ws(&j);
					if (j.bad || j.p >= j.end)
						break;
					if (*j.p == ',') {
						j.p++;
						continue;
					}
					if (*j.p == ']')
						j.p++;
					else
						j.bad = 1;
					break;
				}
			}
		} else {
			skip_value(&j, 0);
		}
		ws(&j);
		if (j.bad || j.p >= j.end) {
			j.bad = 1;
			goto out;
		}
		if (*j.p == ',') {
			j.p++;
			continue;
		}
		if (*j.p != '}')
			j.bad = 1;
		break;
	}
out:
	if (j.bad)
		strcpy(r->op, "?");
}

// ---- the client ---------------------------------------------------------

static int valid_name(const char *s) {
	size_t n = strlen(s);
	if (n < 1 || n > 64)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		int alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && !(i > 0 && (c == '.' || c == '_' || c == '-')))
			return 0;
	}
	return 1;
}

// session_socket connects to session name, or returns -1 for the Go path.
static int session_socket(const char *name) {
	char dir[4096];
	const char *rt = getenv("XDG_RUNTIME_DIR");
	if (rt && rt[0] == '/') {
		snprintf(dir, sizeof dir, "%s/hutch", rt);
	} else {
		const char *tmp = getenv("TMPDIR");
		if (!tmp || !tmp[0])
			tmp = "/tmp";
		snprintf(dir, sizeof dir, "%s/hutch-%u", tmp, (unsigned)getuid());
	}
	struct stat st;
	if (lstat(dir, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0)
		return -1;
	struct sockaddr_un sa;
	memset(&sa, 0, sizeof sa);
	sa.sun_family = AF_UNIX;
	if ((size_t)snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s.sock", dir, name) >= sizeof sa.sun_path)
		return -1;
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

// send_json sends b, with the descriptors fds (SCM_RIGHTS) when nfds > 0.
static int send_json(int fd, struct buf *b, const int *fds, int nfds) {
	struct iovec iov = {b->p, b->n};
	union {
		char buf[CMSG_SPACE(4 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr msg = {0};
	msg.msg_iov = &iov;
	msg.msg_iovlen = 1;
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		msg.msg_control = u.buf;
		msg.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	ssize_t n;
	do {
		n = sendmsg(fd, &msg, MSG_NOSIGNAL);
	} while (n < 0 && errno == EINTR);
	return n < 0 ? -1 : 0;
}

#ifndef MFD_NOEXEC_SEAL
#define MFD_NOEXEC_SEAL 0x0008U
#endif
#ifndef F_SEAL_SEAL
#define F_SEAL_SEAL 0x0001
#define F_SEAL_SHRINK 0x0002
#define F_SEAL_GROW 0x0004
#define F_SEAL_WRITE 0x0008
#endif

// sealed_body puts the request in a memfd nothing can change any more
// (as session.sealedBody does); -1 when it cannot.
static int sealed_body(const struct buf *b) {
	int fd = memfd_create("hutch-exec", MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_NOEXEC_SEAL);
	if (fd < 0 && errno == EINVAL)
		fd = memfd_create("hutch-exec", MFD_CLOEXEC | MFD_ALLOW_SEALING); // before Linux 6.3
	if (fd < 0)
		return -1;
	size_t off = 0;
	while (off < b->n) {
		ssize_t w = write(fd, b->p + off, b->n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

__attribute__((noreturn)) static void die(const char *why) {
	dprintf(2, "hutch: the session ended before the command did (%s)\n", why);
	_exit(125);
}

extern char **environ;

__attribute__((constructor)) static void hutch_fast_exec(int argc, char **argv, char **envp) {
	(void)envp;
	if (argc < 4 || argv == NULL || argv[1] == NULL || strcmp(argv[1], "exec") != 0)
		return;
	const char *off = getenv("HUTCH_NO_FAST_EXEC");
	if (off && off[0] && strcmp(off, "0") != 0)
		return;
	const char *name = argv[2];
	int first = 3;
	if (strcmp(argv[3], "--") == 0)
		first = 4;
	else if (argv[3][0] == '-')
		return;
	if (first >= argc || !valid_name(name))
		return;
	// A terminal among the stdio: the Go client relays it to a terminal
	// of the sandbox's own (session.Client.Exec, package terminal).
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0 || isatty(fd))
			return;

	// Reserved, not touched: the pages a request uses are the only ones
	// the kernel gives it.
	char *mem = mmap(NULL, MAX_BODY, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (mem == MAP_FAILED)
		return;
	struct buf req = {mem, 0, MAX_BODY, 0};
	puts_(&req, "{\"op\":\"exec\",\"argv\":");
	put_json_strings(&req, &argv[first]);
	puts_(&req, ",\"env\":");
	put_json_strings(&req, environ);
	// The caller's directory: the command starts at the same place in
	// the workspace when it lies there (session.Request.HostCwd).
	char wd[4096];
	if (getcwd(wd, sizeof wd) != NULL) {
		puts_(&req, ",\"host_cwd\":");
		put_json_string(&req, wd);
	}
	puts_(&req, "}");
	if (req.over) {
		munmap(mem, MAX_BODY);
		return; // too large: the Go path says so
	}
	int body = sealed_body(&req);
	if (body < 0) {
		munmap(mem, MAX_BODY);
		return; // the Go path explains
	}
	int s = session_socket(name);
	if (s < 0) {
		close(body);
		munmap(mem, MAX_BODY);
		return; // no such session, or something odd: the Go path explains
	}
	// From here on this path owns the outcome.
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGINT);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGHUP);
	sigaddset(&sigs, SIGQUIT);
	sigprocmask(SIG_BLOCK, &sigs, NULL);
	int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
	char head[] = "{\"op\":\"exec\"}";
	struct buf hb = {head, sizeof head - 1, sizeof head, 0};
	int fds[4] = {0, 1, 2, body};
	if (send_json(s, &hb, fds, 4) < 0) {
		dprintf(2, "hutch: send to session: %s\n", strerror(errno));
		_exit(125);
	}
	close(body);
	char *in = req.p; // reused for replies
	struct pollfd pfd[2] = {{s, POLLIN, 0}, {sfd, POLLIN, 0}};
	for (;;) {
		if (poll(pfd, sfd >= 0 ? 2 : 1, -1) < 0) {
			if (errno == EINTR)
				continue;
			die(strerror(errno));
		}
		if (sfd >= 0 && (pfd[1].revents & POLLIN)) {
			struct signalfd_siginfo si;
			if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
				char m[64];
				struct buf b = {m, 0, sizeof m, 0};
				int n = snprintf(m, sizeof m, "{\"op\":\"signal\",\"signal\":%u}", si.ssi_signo);
				b.n = (size_t)n;
				send_json(s, &b, NULL, 0);
			}
		}
		if (!pfd[0].revents)
			continue;
		ssize_t n;
		do {
			n = recv(s, in, MAX_MSG, 0);
		} while (n < 0 && errno == EINTR);
		if (n < 0)
			die(strerror(errno));
		if (n == 0)
			die("session connection closed");
		struct reply r;
		memset(&r, 0, sizeof r);
		char mb[65536], eb[4096];
		r.messages = (struct buf){mb, 0, sizeof mb, 0};
		r.error = (struct buf){eb, 0, sizeof eb - 1, 0};
		parse_reply(in, (size_t)n, &r);
		if (strcmp(r.op, "started") == 0)
			continue;
		if (strcmp(r.op, "exit") == 0) {
			if (r.messages.n && write(2, mb, r.messages.n) < 0) {
				// nothing more to do about a failed stderr
			}
			_exit((int)(r.exit_code & 0xff));
		}
		if (strcmp(r.op, "error") == 0) {
			eb[r.error.n] = 0;
			dprintf(2, "hutch: %s\n", eb);
			_exit(125);
		}
		die("unexpected reply from the session");
	}
}
