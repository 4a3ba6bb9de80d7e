// The C side of nsjail/wire_test.go: it runs init.c's own parsers on
// messages the Go encoder made and describes what they read, and makes
// messages with init.c's own encoders for the Go decoder. Nothing in hutch
// calls these; they exist so that a test fails when the two sides disagree.

#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "hutch_init.h"
#include "wire.h"

struct out {
	char *p;
	size_t len, n;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o, const char *fmt, ...) {
	if (o->n >= o->len)
		return;
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(o->p + o->n, o->len - o->n, fmt, ap);
	va_end(ap);
	if (k > 0)
		o->n += (size_t)k < o->len - o->n ? (size_t)k : o->len - o->n - 1;
}

// hutch_wirecheck_setup parses a whole setup message as the init does and
// describes its fields in out, one "key=value" a line; it returns -1 with
// the parser's complaint in out when the message does not parse.
int hutch_wirecheck_setup(const unsigned char *b, size_t n, char *outp, size_t len) {
	struct out o = {outp, len, 0};
	outp[0] = 0;
	struct hutch_rd r = {b, n, 0};
	uint64_t id;
	uint32_t op = hutch_rd_header(&r, &id);
	struct hutch_setup s;
	const unsigned char *plan_at;
	const char *what;
	if (op != HUTCH_OP_SETUP || hutch_parse_setup(&r, &s, &plan_at, &what) < 0) {
		put(&o, "error=%s", op != HUTCH_OP_SETUP ? "not a setup" : what);
		return -1;
	}
	put(&o, "id=%llu\nflags=%u\nhostname=%s\nuid=%lld\ngid=%lld\nports=%u,%u,%u\nplan_at=%zu\n", (unsigned long long)id, s.flags,
	    s.hostname, (long long)s.uid, (long long)s.gid, s.port_http, s.port_socks, s.port_dns, (size_t)(plan_at - b));
	for (uint32_t i = 0; i < s.rlimits.n; i++)
		put(&o, "rlimit=%d:%llu:%llu\n", s.rlimits.r[i].resource, (unsigned long long)s.rlimits.r[i].cur,
		    (unsigned long long)s.rlimits.r[i].max);
	put(&o, "root_size=%lld\nstage=%s\n", (long long)s.plan.root_size, s.plan.stage);
	for (uint32_t i = 0; i < s.plan.nsteps; i++) {
		const struct hutch_step *st = &s.plan.steps[i];
		put(&o, "step=%u,%u,%o,%lld,%s,%s,%s,%s,%s,%s\n", st->kind, st->flags, st->mode, (long long)st->size, st->name,
		    st->source, st->target, st->staged, st->data, st->why);
		for (uint32_t j = 0; j < st->nlower; j++)
			put(&o, "lower=%s\n", st->lower[j]);
		if (st->kind == HUTCH_STEP_OVERLAY)
			put(&o, "upper=%s\nwork=%s\n", st->upper, st->work);
	}
	free(s.plan.steps);
	return 0;
}

// hutch_wirecheck_spawn parses a spawn request (the message, then its
// payload) as the init and a reaper do and describes it in out.
int hutch_wirecheck_spawn(const unsigned char *b, size_t n, const unsigned char *payload, size_t plen, char *outp, size_t len) {
	struct out o = {outp, len, 0};
	outp[0] = 0;
	struct hutch_rd r = {b, n, 0};
	uint64_t id;
	uint32_t op = hutch_rd_header(&r, &id);
	hutch_rd_u32(&r);
	uint32_t flags = hutch_spawn_flags(b, n); // as a reaper reads them
	const char *cwd;
	char **argv, **envp;
	if (op != HUTCH_OP_SPAWN || r.bad || r.n != 0 || hutch_read_payload(payload, plen, &cwd, &argv, &envp) < 0) {
		put(&o, "error=malformed spawn request");
		return -1;
	}
	put(&o, "id=%llu\nflags=%u\ncwd=%s\n", (unsigned long long)id, flags, cwd);
	for (char **a = argv; *a; a++)
		put(&o, "arg=%s\n", *a);
	for (char **e = envp; *e; e++)
		put(&o, "env=%s\n", *e);
	free(argv);
	free(envp);
	return 0;
}

// hutch_wirecheck_socket parses a socket request as the init does and
// describes it in out.
int hutch_wirecheck_socket(const unsigned char *b, size_t n, char *outp, size_t len) {
	struct out o = {outp, len, 0};
	outp[0] = 0;
	struct hutch_rd r = {b, n, 0};
	uint64_t id;
	int family;
	if (hutch_rd_header(&r, &id) != HUTCH_OP_SOCKET || hutch_read_socket(&r, &family) < 0) {
		put(&o, "error=malformed socket request");
		return -1;
	}
	put(&o, "id=%llu\nfamily=%s\n", (unsigned long long)id, family == AF_INET ? "inet" : family == AF_INET6 ? "inet6" : "?");
	return 0;
}

// hutch_wirecheck_sample writes into buf a message of op as the init sends
// it, with the fields the test expects (see wire_test.go), and returns its
// length.
size_t hutch_wirecheck_sample(uint32_t op, unsigned char *buf, size_t len) {
	static struct hutch_wr w;
	static const char *const names[2] = {"@entered", "mounts.pivot"};
	static const long usecs[2] = {123456789, 42};
	switch (op) {
	case HUTCH_OP_READY:
		hutch_wr_ready(&w, 2, names, usecs, HUTCH_HINT_UNUSED);
		break;
	case HUTCH_OP_FAIL:
		hutch_wr_fail(&w, 28, HUTCH_FAIL_NAMESPACES, "create the namespaces: no space left on device");
		break;
	case HUTCH_OP_STARTED:
		hutch_wr_started(&w, 7, 42);
		break;
	case HUTCH_OP_SPAWNERR:
	case HUTCH_OP_EXIT:
	case HUTCH_OP_SPAWNER_REPLY:
	case HUTCH_OP_SOCKET_REPLY:
		hutch_wr_report(&w, op, 9, 0x0900, 127, 2, "execute the command", 1, 33);
		break;
	default:
		return 0;
	}
	if (w.n > len)
		return 0;
	memcpy(buf, w.b, w.n);
	return w.n;
}
