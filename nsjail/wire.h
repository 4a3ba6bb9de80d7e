// The wire format's reader and writer, and the helpers every C stage
// shares (init.c, mounts.c, execstage.c, prestart/prestart.c), as static
// inline functions: the prestart constructor is linked into another Go
// package, and each C file gets its own copy of what it uses.
#ifndef HUTCH_WIRE_H
#define HUTCH_WIRE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "hutch_init.h"

// rd reads the fields of one message: native-endian u32 and i64, strings as
// a u32 length, the bytes and a NUL. Any short or malformed field sets bad;
// reads after that return zeros and "".
struct hutch_rd {
	const unsigned char *p;
	size_t n;
	int bad;
};

static inline uint32_t hutch_rd_u32(struct hutch_rd *r) {
	uint32_t v = 0;
	if (r->bad || r->n < 4) {
		r->bad = 1;
		return 0;
	}
	memcpy(&v, r->p, 4);
	r->p += 4;
	r->n -= 4;
	return v;
}

static inline int64_t hutch_rd_i64(struct hutch_rd *r) {
	int64_t v = 0;
	if (r->bad || r->n < 8) {
		r->bad = 1;
		return 0;
	}
	memcpy(&v, r->p, 8);
	r->p += 8;
	r->n -= 8;
	return v;
}

// hutch_rd_str checks what the Go reader checks: the length fits, a NUL
// follows, and there is no NUL inside.
static inline const char *hutch_rd_str(struct hutch_rd *r) {
	uint32_t len = hutch_rd_u32(r);
	if (r->bad || r->n < (size_t)len + 1 || r->p[len] != 0 || memchr(r->p, 0, len) != NULL) {
		r->bad = 1;
		return "";
	}
	const char *s = (const char *)r->p;
	r->p += (size_t)len + 1;
	r->n -= (size_t)len + 1;
	return s;
}

// hutch_rd_header reads a message header; the op, or 0 when it is short.
static inline uint32_t hutch_rd_header(struct hutch_rd *r, uint64_t *id) {
	uint32_t op = hutch_rd_u32(r);
	hutch_rd_u32(r);
	*id = (uint64_t)hutch_rd_i64(r);
	return r->bad ? 0 : op;
}

// wr builds one outgoing message in a fixed buffer; what does not fit is
// cut off (messages out of the C stages are small: strings are capped).
struct hutch_wr {
	unsigned char b[65536];
	size_t n;
};

enum { HUTCH_WR_MAX_STR = 16384 };

static inline void hutch_wr_bytes(struct hutch_wr *w, const void *p, size_t n) {
	if (w->n + n > sizeof w->b)
		n = sizeof w->b - w->n;
	memcpy(w->b + w->n, p, n);
	w->n += n;
}
static inline void hutch_wr_u32(struct hutch_wr *w, uint32_t v) { hutch_wr_bytes(w, &v, 4); }
static inline void hutch_wr_i64(struct hutch_wr *w, int64_t v) { hutch_wr_bytes(w, &v, 8); }
static inline void hutch_wr_str(struct hutch_wr *w, const char *s) {
	size_t len = strlen(s);
	if (len > HUTCH_WR_MAX_STR)
		len = HUTCH_WR_MAX_STR;
	hutch_wr_u32(w, (uint32_t)len);
	hutch_wr_bytes(w, s, len);
	hutch_wr_bytes(w, "", 1);
}
static inline void hutch_wr_head(struct hutch_wr *w, uint32_t op, uint64_t id) {
	w->n = 0;
	hutch_wr_u32(w, op);
	hutch_wr_u32(w, 0);
	hutch_wr_bytes(w, &id, 8);
}

// hutch_wr_fail writes a FAIL message: the errno of the failed step (0 when
// the message says all), its kind (HUTCH_FAIL_*), and the message.
static inline void hutch_wr_fail(struct hutch_wr *w, int64_t err, uint32_t step, const char *msg) {
	hutch_wr_head(w, HUTCH_OP_FAIL, 0);
	hutch_wr_i64(w, err);
	hutch_wr_u32(w, step);
	hutch_wr_str(w, msg);
}

// The messages the init builds and parses (init.c): the layout SPAWNERR,
// EXIT, SPAWNER_REPLY and SOCKET_REPLY share, STARTED, READY; the setup, a
// spawn request and a socket request.
void hutch_wr_report(struct hutch_wr *w, uint32_t op, uint64_t id, int64_t status, int64_t code, int64_t eno,
                     const char *what, uint32_t alone, uint32_t leftover);
void hutch_wr_started(struct hutch_wr *w, uint64_t id, int64_t pid);
void hutch_wr_ready(struct hutch_wr *w, int nmarks, const char *const *names, const long *usecs, uint32_t hint_state);
int hutch_read_payload(const unsigned char *b, size_t n, const char **cwd, char ***argv, char ***envp);
unsigned char *hutch_load_payload(int fd, size_t *n);
int hutch_parse_setup(struct hutch_rd *r, struct hutch_setup *s, const unsigned char **plan_at, const char **what);
int hutch_read_socket(struct hutch_rd *r, int *family);

// hutch_strerror is strerror with a lower-case first letter, as Go spells
// errno values, so messages read the same whichever side made them.
static inline const char *hutch_strerror(int e, char *buf, size_t len) {
	snprintf(buf, len, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z'))
		buf[0] = (char)(buf[0] - 'A' + 'a');
	return buf;
}

// hutch_now_usec is CLOCK_MONOTONIC in microseconds.
static inline long hutch_now_usec(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long)ts.tv_sec * 1000000L + ts.tv_nsec / 1000;
}

#endif
