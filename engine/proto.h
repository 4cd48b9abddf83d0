/*
 * proto.h - the day0 wire protocol, shared by day0-agent and the console.
 *
 * One JSON object per line, UTF-8, at most PROTO_MAX_LINE bytes a line
 * (the newline excluded).  Events (agent -> console) carry the envelope
 * v, seq, ts, node, type and then their type's fields; commands (console
 * -> agent) carry "cmd" and their fields.  docs/protocol.md has an example
 * of every message.
 *
 * The pieces:
 *   proto_lines   framing: bytes in, whole lines out, overlong lines
 *                 reported (with their size) and skipped, memory bounded;
 *   proto_cmd_*   parse and validate one command line (every failure has a
 *                 message that says what is wrong with which field);
 *   proto_event_* parse and validate one event line, and format events with
 *                 the envelope first;
 *   the tables    proto_event_types / proto_cmd_types: one entry per
 *                 message with its fields, which validation walks (adding a
 *                 type is a table row, not new parsing code).
 *
 * Nothing here does I/O or allocates beyond what the caller frees: a line
 * parser that cannot crash is what the fuzz target (tests/fuzz/
 * fuzz_proto.c) holds it to.
 */
#ifndef DAY0_PROTO_H
#define DAY0_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "util.h"

#define PROTO_VERSION  DAY0_PROTO_VERSION
#define PROTO_MAX_LINE 65536 /* bytes of one line, newline excluded */
#define PROTO_MAX_VALUES 4096 /* cards in one `sample` event's values */

/* ---------------------------------------------------------------- framing */

struct proto_lines {
	char *buf;
	size_t start, len, cap; /* unconsumed bytes are buf[start, len) */
	size_t scan;		/* no '\n' in buf[start, scan) */
	size_t skipping;	/* > 0: inside an overlong line, bytes so far */
	size_t toolong;		/* > 0: an overlong line ended, its size */
};

enum proto_line_result {
	PL_NONE,    /* no complete line buffered: push more bytes */
	PL_LINE,    /* *line, *len: one line without its '\n' */
	PL_TOOLONG, /* a line over PROTO_MAX_LINE was dropped; *len = its size
		     */
};

void proto_lines_init(struct proto_lines *pl);
void proto_lines_free(struct proto_lines *pl);
/*
 * Append bytes read from a stream.  Call proto_lines_next() until it
 * returns PL_NONE before pushing again: memory stays bounded by
 * PROTO_MAX_LINE plus one push.
 */
void proto_lines_push(struct proto_lines *pl, const char *data, size_t n);
/* The next line; *line stays valid until the next push or next call. */
enum proto_line_result proto_lines_next(struct proto_lines *pl,
					const char **line, size_t *len);
/*
 * At end of stream: the unterminated last line, if any (PL_LINE or
 * PL_TOOLONG), then PL_NONE.  Call it until PL_NONE.
 */
enum proto_line_result proto_lines_finish(struct proto_lines *pl,
					  const char **line, size_t *len);
/* Bytes buffered but not yet returned (a partial line). */
size_t proto_lines_pending(const struct proto_lines *pl);

/* -------------------------------------------------------------- validation */

/*
 * Is s[0..n) valid UTF-8 (no overlong forms, no surrogates, nothing above
 * U+10FFFF, no NUL)?  On failure *bad is the offset of the first bad byte.
 */
int proto_utf8_valid(const char *s, size_t n, size_t *bad);

/* A short printable excerpt of a bad line for error messages: at most
 * max bytes of s, invalid bytes and controls written as \xNN. */
void proto_excerpt(const char *s, size_t n, char *out, size_t max);

enum proto_ftype {
	PF_STR,	   /* string */
	PF_INT,	   /* integer */
	PF_NUM,	   /* integer or real */
	PF_BOOL,   /* true / false */
	PF_OBJ,	   /* object */
	PF_ARR,	   /* array of anything */
	PF_STRARR, /* array of strings */
	PF_ANY,	   /* any JSON value */
};

struct proto_field {
	const char *name;
	enum proto_ftype type;
	int required;
	const char *const
	    *allowed; /* NULL-terminated, for enumerated strings */
};

struct proto_type {
	const char *name;
	const struct proto_field *fields; /* terminated by {NULL} */
	const char *summary;
};

/* Event types (agent -> console) and commands (console -> agent). */
extern const struct proto_type proto_event_types[]; /* {NULL}-terminated */
extern const struct proto_type proto_cmd_types[];
const struct proto_type *proto_event_type(const char *name);
const struct proto_type *proto_cmd_type(const char *name);

/*
 * Check obj's fields against t.  Unknown fields are refused when
 * strict_fields (commands: a typo must not pass silently) and allowed
 * otherwise (events: newer agents may add fields).
 */
int proto_check_fields(const struct proto_type *t, json_t *obj,
		       int strict_fields, struct d0_err *err);

/* ---------------------------------------------------------------- commands */

enum proto_cmd_kind {
	CMD_HELLO,
	CMD_FACTS,
	CMD_RUN,
	CMD_CANCEL,
	CMD_ACK,
	CMD_BYE,
};

struct proto_cmd {
	enum proto_cmd_kind kind;
	const char *name; /* "run", ... (static) */
	json_t *obj;	  /* the whole command; fields have their types */
};

/*
 * Parse one command line (without '\n').  Refused: invalid UTF-8, not JSON,
 * not an object, duplicate keys, no "cmd", an unknown command, a missing,
 * unknown or wrongly typed field.  err then says which and why; blank
 * lines are not commands (the caller skips them: proto_blank()).
 */
int proto_cmd_parse(const char *line, size_t len, struct proto_cmd *cmd,
		    struct d0_err *err);
void proto_cmd_free(struct proto_cmd *cmd);
/* Only spaces, tabs and '\r'? */
int proto_blank(const char *line, size_t len);

/* Field accessors for validated commands (defaults when absent). */
const char *proto_str(json_t *obj, const char *key, const char *dflt);
int64_t proto_int(json_t *obj, const char *key, int64_t dflt);
double proto_num(json_t *obj, const char *key, double dflt);

/* ------------------------------------------------------------------ events */

/*
 * Every event type by kind, so consumers dispatch with a switch (or a table
 * indexed by kind) instead of strcmp chains.  The agent's types are those of
 * proto_event_types; the console's own decisions (node "console") add hold,
 * marker, verdict and alert.  EV_UNKNOWN: a type this build does not know (newer
 * agents may add types; they are stored, not folded).
 */
enum proto_event_kind {
	EV_UNKNOWN,
	EV_HELLO,
	EV_FACTS,
	EV_SAMPLE,
	EV_STAGE,
	EV_CHECK,
	EV_COMM,
	EV_NUMERICS,
	EV_PERF,
	EV_LOG,
	EV_ERROR,
	EV_HEARTBEAT,
	EV_BYE,
	EV_TRAIN,   /* one optimizer step of a fine-tuning run */
	EV_HOLD,    /* console */
	EV_MARKER,  /* console */
	EV_VERDICT, /* console */
	EV_ALERT,   /* console: refused input, the store's state */
	EV_NODE,    /* console: a node's state (unreachable, excluded, done) */
	EV_KINDS
};
/* The kind of type name type[0..len) (EV_UNKNOWN when not one of ours). */
enum proto_event_kind proto_event_kind_of(const char *type, size_t len);
const char *proto_event_kind_name(enum proto_event_kind k);

/* Longest node name, in bytes (the store and the screens size to it). */
#define PROTO_MAX_NODE 63

/*
 * The envelope as read, by either parser (jansson's tree or the fast
 * scanner the store and the view use for the hot path): a field absent or
 * of the wrong JSON type leaves its have_ flag 0 / pointer NULL.
 * proto_envelope_check() is the ONE place the envelope's rules live.
 */
struct proto_envelope {
	int have_v, have_seq, have_ts; /* present as JSON integers */
	int64_t v, seq, ts;
	const char *node, *type; /* raw spans (scanner) or C strings */
	size_t node_len, type_len;
	int node_esc, type_esc; /* scanner: span holds escapes */
	enum proto_event_kind kind;
};
int proto_envelope_check(struct proto_envelope *e, struct d0_err *err);

struct jscan;
/* Fill e from a scanned object (engine/json_scan.h); then check it. */
int proto_envelope_scan(const struct jscan *j, struct proto_envelope *e,
			struct d0_err *err);

struct proto_event {
	json_t *obj;	  /* owned */
	const char *type; /* point into obj */
	const char *node;
	int64_t seq, ts;
	enum proto_event_kind kind;
	int known; /* type is in proto_event_types */
};

/*
 * Parse one event line: UTF-8, JSON object, the envelope (v == PROTO_VERSION,
 * seq >= 1, ts >= 0 integers, node and type non-empty strings) and, for
 * known types, their fields.  Unknown types pass with known = 0.
 */
int proto_event_parse(const char *line, size_t len, struct proto_event *ev,
		      struct d0_err *err);
void proto_event_free(struct proto_event *ev);
/* The same checks on an object already parsed. */
int proto_event_check(json_t *obj, struct proto_event *ev, struct d0_err *err);

/* Is key one of the envelope fields (v, seq, ts, node, type)? */
int proto_is_envelope(const char *key);

/*
 * Format an event: envelope first (v, seq, ts, node, type), then fields'
 * members other than envelope keys, in their order; one line, ASCII
 * (non-ASCII escaped), '\n' appended.  Returns a malloc'd string and its
 * length, or NULL when the line would exceed PROTO_MAX_LINE (or a value
 * cannot be encoded); err says which.
 */
char *proto_event_format(const char *node, int64_t seq, int64_t ts,
			 const char *type, json_t *fields, size_t *len,
			 struct d0_err *err);

/* Unix time in nanoseconds (CLOCK_REALTIME). */
int64_t proto_now_ns(void);

#endif
