/*
 * proto.c - the wire protocol: line framing, the message tables, command
 * and event validation, event formatting.  See proto.h for the contract and
 * docs/protocol.md for the messages.
 *
 * Validation is table-driven: proto_event_types and proto_cmd_types list
 * every message with its fields (type, required, allowed values), and
 * proto_check_fields() walks a table row.  The parsers never trust the
 * input: sizes are checked before anything is copied, UTF-8 is validated
 * before jansson sees the bytes (so the error can say where), and every
 * refusal fills the error with the field and what was expected.
 */
#include "proto.h"
#include "json_scan.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

_Static_assert(PROTO_VERSION == 1, "docs/protocol.md describes version 1");

/* ---------------------------------------------------------------- framing */

void proto_lines_init(struct proto_lines *pl)
{
	memset(pl, 0, sizeof *pl);
}

void proto_lines_free(struct proto_lines *pl)
{
	free(pl->buf);
	memset(pl, 0, sizeof *pl);
}

size_t proto_lines_pending(const struct proto_lines *pl)
{
	return pl->len - pl->start;
}

static void lines_reserve(struct proto_lines *pl, size_t extra)
{
	size_t need;
	if (pl->start > 0 &&
	    (pl->start == pl->len || pl->start >= pl->cap / 2)) {
		memmove(pl->buf, pl->buf + pl->start, pl->len - pl->start);
		pl->len -= pl->start;
		pl->scan -= pl->start;
		pl->start = 0;
	}
	need = pl->len + extra;
	if (need > pl->cap) {
		size_t cap = pl->cap ? pl->cap : 4096;
		while (cap < need)
			cap *= 2;
		pl->buf = realloc(pl->buf, cap);
		if (!pl->buf)
			abort();
		pl->cap = cap;
	}
}

void proto_lines_push(struct proto_lines *pl, const char *data, size_t n)
{
	if (pl->skipping) {
		const char *nl = memchr(data, '\n', n);
		if (!nl) {
			pl->skipping += n;
			return;
		}
		pl->toolong = pl->skipping + (size_t)(nl - data);
		pl->skipping = 0;
		n -= (size_t)(nl - data) + 1;
		data = nl + 1;
	}
	if (n == 0)
		return;
	lines_reserve(pl, n);
	memcpy(pl->buf + pl->len, data, n);
	pl->len += n;
}

enum proto_line_result proto_lines_next(struct proto_lines *pl,
					const char **line, size_t *len)
{
	char *nl;
	size_t n;
	if (pl->toolong) {
		*line = NULL;
		*len = pl->toolong;
		pl->toolong = 0;
		return PL_TOOLONG;
	}
	if (pl->scan < pl->start)
		pl->scan = pl->start;
	nl = pl->len > pl->scan
		 ? memchr(pl->buf + pl->scan, '\n', pl->len - pl->scan)
		 : NULL;
	if (!nl) {
		pl->scan = pl->len;
		n = pl->len - pl->start;
		if (n > PROTO_MAX_LINE) {
			/* Drop the partial line; keep counting until '\n'. */
			pl->skipping = n;
			pl->start = pl->len = pl->scan = 0;
		}
		*line = NULL;
		*len = 0;
		return PL_NONE;
	}
	n = (size_t)(nl - (pl->buf + pl->start));
	*line = pl->buf + pl->start;
	*len = n;
	pl->start += n + 1;
	pl->scan = pl->start;
	if (n > PROTO_MAX_LINE) {
		*line = NULL;
		return PL_TOOLONG;
	}
	return PL_LINE;
}

enum proto_line_result proto_lines_finish(struct proto_lines *pl,
					  const char **line, size_t *len)
{
	enum proto_line_result r = proto_lines_next(pl, line, len);
	size_t n;
	if (r != PL_NONE)
		return r;
	if (pl->skipping) {
		*len = pl->skipping;
		pl->skipping = 0;
		return PL_TOOLONG;
	}
	n = pl->len - pl->start;
	if (n == 0)
		return PL_NONE;
	*line = pl->buf + pl->start;
	*len = n;
	pl->start = pl->len = pl->scan = 0;
	return n > PROTO_MAX_LINE ? PL_TOOLONG : PL_LINE;
}

/* ------------------------------------------------------------------ UTF-8 */

int proto_utf8_valid(const char *str, size_t n, size_t *bad)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0;
	while (i < n) {
		unsigned c = s[i];
		size_t k;
		if (c < 0x80) {
			if (c == 0)
				goto fail;
			i++;
			continue;
		}
		k = jscan_utf8_seq(s, n, i);
		if (!k)
			goto fail;
		i += k;
	}
	return 1;
fail:
	if (bad)
		*bad = i;
	return 0;
}

void proto_excerpt(const char *str, size_t n, char *out, size_t max)
{
	const unsigned char *s = (const unsigned char *)str;
	size_t o = 0;
	if (max == 0)
		return;
	for (size_t i = 0; i < n; i++) {
		if (s[i] >= 0x20 && s[i] < 0x7f) {
			if (o + 1 >= max)
				break;
			out[o++] = (char)s[i];
		} else {
			if (o + 5 >= max)
				break;
			o +=
			    (size_t)snprintf(out + o, max - o, "\\x%02x", s[i]);
		}
	}
	out[o] = 0;
}

/* ------------------------------------------------------------------ tables */

static const char *const stage_states[] = {"start", "progress", "end", NULL};
static const char *const check_status[] = {"pending", "running", "pass", "warn",
					   "fail",    "skip",	 NULL};
static const char *const numerics_levels[] = {"op", "layer", "e2e", NULL};
static const char *const log_levels[] = {"debug", "info", "warn", "error",
					 NULL};

#define END                                                                    \
	{                                                                      \
		NULL, 0, 0, NULL                                               \
	}

static const struct proto_field ev_hello[] = {
    {"agent_version", PF_STR, 1, NULL}, {"engine_version", PF_STR, 0, NULL},
    {"pid", PF_INT, 1, NULL},		{"proto", PF_INT, 0, NULL},
    {"acked", PF_INT, 0, NULL},		{"last_seq", PF_INT, 0, NULL},
    {"cards", PF_INT, 0, NULL},		{"vendor", PF_STR, 0, NULL},
    {"sample_hz", PF_NUM, 0, NULL},	END};
static const struct proto_field ev_facts[] = {
    {"cpu", PF_STR, 1, NULL},	       {"cores", PF_INT, 1, NULL},
    {"mem_bytes", PF_INT, 1, NULL},    {"disk_free", PF_INT, 0, NULL},
    {"disk_path", PF_STR, 0, NULL},    {"kernel", PF_STR, 0, NULL},
    {"glibc", PF_STR, 0, NULL},	       {"mpi_version", PF_STR, 0, NULL},
    {"blas", PF_STR, 0, NULL},	       {"vendor", PF_STR, 0, NULL},
    {"accelerators", PF_ARR, 1, NULL},
    /* The compatibility matrix's (docs/compat.md); optional, so an older
     * agent's facts stay valid and show as "-". */
    {"blas_core", PF_STR, 0, NULL},    {"engine_version", PF_STR, 0, NULL},
    {"engine_build", PF_STR, 0, NULL}, {"agent_build", PF_STR, 0, NULL},
    {"gpu_driver", PF_STR, 0, NULL},   {"gpu_runtime", PF_STR, 0, NULL},
    {"cpu_flags", PF_STR, 0, NULL},    {"overridden", PF_STRARR, 0, NULL},
    {"disk_error", PF_STR, 0, NULL},   END};
/* One card's value, or (`values`) cards card, card+1, ... in one event:
 * an agent with many cards sends one line per metric and tick. */
static const struct proto_field ev_sample[] = {{"card", PF_INT, 1, NULL},
					       {"metric", PF_STR, 1, NULL},
					       {"value", PF_NUM, 0, NULL},
					       {"values", PF_ARR, 0, NULL},
					       END};
static const struct proto_field ev_stage[] = {
    {"stage", PF_STR, 1, NULL},
    {"state", PF_STR, 1, stage_states},
    {"progress", PF_NUM, 0, NULL},
    {"rc", PF_INT, 0, NULL},
    {"msg", PF_STR, 0, NULL},
    {"stage_id", PF_STR, 0, NULL},
    END};
static const struct proto_field ev_check[] = {
    {"item", PF_STR, 1, NULL},	    {"status", PF_STR, 1, check_status},
    {"detail", PF_STR, 0, NULL},    {"value", PF_ANY, 0, NULL},
    {"threshold", PF_ANY, 0, NULL}, END};
static const struct proto_field ev_comm[] = {{"op", PF_STR, 1, NULL},
					     {"bytes", PF_INT, 1, NULL},
					     {"ranks", PF_INT, 1, NULL},
					     {"time_us", PF_NUM, 1, NULL},
					     {"algbw", PF_NUM, 1, NULL},
					     {"busbw", PF_NUM, 1, NULL},
					     {"wrong", PF_INT, 1, NULL},
					     {"group", PF_STR, 0, NULL},
					     END};
static const struct proto_field ev_numerics[] = {
    {"level", PF_STR, 1, numerics_levels},
    {"name", PF_STR, 1, NULL},
    {"max_abs", PF_NUM, 0, NULL},
    {"max_rel", PF_NUM, 0, NULL},
    {"kl", PF_NUM, 0, NULL},
    {"top1", PF_NUM, 0, NULL},
    {"ppl_ref", PF_NUM, 0, NULL},
    {"ppl", PF_NUM, 0, NULL},
    END};
static const struct proto_field ev_perf[] = {
    {"ttft_ms", PF_NUM, 0, NULL},      {"tpot_ms", PF_NUM, 0, NULL},
    {"tokens_per_s", PF_NUM, 0, NULL}, {"prompt_tokens", PF_INT, 0, NULL},
    {"gen_tokens", PF_INT, 0, NULL},   {"kernel", PF_STR, 0, NULL},
    {"blas_core", PF_STR, 0, NULL},    END};
static const struct proto_field ev_log[] = {
    {"level", PF_STR, 1, log_levels}, {"msg", PF_STR, 1, NULL}, END};
static const struct proto_field ev_error[] = {{"msg", PF_STR, 1, NULL},
					      {"cmd", PF_STR, 0, NULL},
					      {"line", PF_STR, 0, NULL},
					      END};
static const struct proto_field ev_heartbeat[] = {
    {"running", PF_INT, 1, NULL}, {"acked", PF_INT, 0, NULL}, END};
static const struct proto_field ev_bye[] = {{"reason", PF_STR, 1, NULL}, END};
/* One optimizer step of `day0-engine train` (docs/training.md).  Only the
 * step is required: a figure that is not finite (the loss or gradient norm
 * of an overflowed f16 step) cannot be JSON and is left out; skipped is 0
 * or 1 (the loss scaler skipped the update).  Times are seconds of this
 * step: forward, backward, optimizer, and communication not hidden behind
 * compute. */
static const struct proto_field ev_train[] = {
    {"step", PF_INT, 1, NULL},	      {"loss", PF_NUM, 0, NULL},
    {"grad_norm", PF_NUM, 0, NULL},   {"loss_scale", PF_NUM, 0, NULL},
    {"skipped", PF_INT, 0, NULL},     {"lr", PF_NUM, 0, NULL},
    {"tokens", PF_INT, 0, NULL},      {"t_fwd_s", PF_NUM, 0, NULL},
    {"t_bwd_s", PF_NUM, 0, NULL},     {"t_opt_s", PF_NUM, 0, NULL},
    {"t_comm_s", PF_NUM, 0, NULL},    {"layout", PF_STR, 0, NULL},
    /* the pipeline: micro-batches a step; under PP each stage's idle
     * share of the step's forward-backward span, their mean, and the
     * 1F1B schedule's (p-1)/(m+p-1) */
    {"micro_batches", PF_INT, 0, NULL}, {"bubble_stages", PF_ARR, 0, NULL},
    {"bubble", PF_NUM, 0, NULL},      {"bubble_theory", PF_NUM, 0, NULL},
    END};

const struct proto_type proto_event_types[] = {
    {"hello", ev_hello, "who the agent is and where its seq stands"},
    {"facts", ev_facts, "the host: CPU, memory, disk, versions, cards"},
    {"sample", ev_sample, "one measurement of one card (-1: the host)"},
    {"stage", ev_stage, "a stage started, progressed or ended"},
    {"check", ev_check, "a checklist item's state"},
    {"comm", ev_comm, "one collective measurement"},
    {"numerics", ev_numerics, "an alignment measurement"},
    {"perf", ev_perf, "a performance measurement"},
    {"log", ev_log, "a line of text"},
    {"error", ev_error, "a refused command or an agent-side failure"},
    {"heartbeat", ev_heartbeat, "the agent is alive and idle"},
    {"bye", ev_bye, "the agent is exiting cleanly"},
    {"train", ev_train, "one optimizer step of a fine-tuning run"},
    {NULL, NULL, NULL},
};

static const struct proto_field cmd_hello[] = {{"acked", PF_INT, 0, NULL}, END};
static const struct proto_field cmd_facts[] = {
    {"dir", PF_STR, 0, NULL}, {"require", PF_OBJ, 0, NULL},
    {"stage_id", PF_STR, 0, NULL}, END};
static const struct proto_field cmd_run[] = {
    {"stage_id", PF_STR, 1, NULL},
    {"step", PF_STR, 1, NULL},
    {"args", PF_STRARR, 0, NULL},
    {"argv", PF_STRARR, 0, NULL},
    {"cwd", PF_STR, 0, NULL},
    {"timeout", PF_NUM, 0, NULL},
    {"np", PF_INT, 0, NULL},
    {"mpirun_args", PF_STRARR, 0, NULL},
    {"ranks", PF_STR, 0, NULL},
    {"ssh_config", PF_STR, 0, NULL},
    {"known_hosts", PF_STR, 0, NULL},
    {"rehearsal", PF_BOOL, 0, NULL},
    {"ready", PF_OBJ, 0, NULL}, /* a service: {url, timeout} polled */
    END};
static const struct proto_field cmd_cancel[] = {{"stage_id", PF_STR, 1, NULL},
						END};
static const struct proto_field cmd_ack[] = {{"seq", PF_INT, 1, NULL}, END};
static const struct proto_field cmd_bye[] = {END};

/* Same order as enum proto_cmd_kind. */
const struct proto_type proto_cmd_types[] = {
    {"hello", cmd_hello, "introduce; acked: resend everything after it"},
    {"facts", cmd_facts, "report host facts (and check requirements)"},
    {"run", cmd_run, "start a stage: an engine step or an exec argv"},
    {"cancel", cmd_cancel, "kill a running stage's processes"},
    {"ack", cmd_ack, "everything up to seq is stored: drop it from the spool"},
    {"bye", cmd_bye, "stop every stage and exit"},
    {NULL, NULL, NULL},
};

static const struct proto_type *type_find(const struct proto_type *t,
					  const char *name)
{
	for (; t->name; t++)
		if (!strcmp(t->name, name))
			return t;
	return NULL;
}

const struct proto_type *proto_event_type(const char *name)
{
	return type_find(proto_event_types, name);
}

const struct proto_type *proto_cmd_type(const char *name)
{
	return type_find(proto_cmd_types, name);
}

static const char *ftype_name(enum proto_ftype t)
{
	switch (t) {
	case PF_STR:
		return "a string";
	case PF_INT:
		return "an integer";
	case PF_NUM:
		return "a number";
	case PF_BOOL:
		return "true or false";
	case PF_OBJ:
		return "an object";
	case PF_ARR:
		return "an array";
	case PF_STRARR:
		return "an array of strings";
	case PF_ANY:
		return "a value";
	}
	return "?";
}

static int ftype_ok(enum proto_ftype t, json_t *v)
{
	size_t i;
	json_t *e;
	switch (t) {
	case PF_STR:
		return json_is_string(v);
	case PF_INT:
		return json_is_integer(v);
	case PF_NUM:
		return json_is_number(v);
	case PF_BOOL:
		return json_is_boolean(v);
	case PF_OBJ:
		return json_is_object(v);
	case PF_ARR:
		return json_is_array(v);
	case PF_STRARR:
		if (!json_is_array(v))
			return 0;
		json_array_foreach(v, i, e)
		{
			if (!json_is_string(e))
				return 0;
		}
		return 1;
	case PF_ANY:
		return 1;
	}
	return 0;
}

int proto_is_envelope(const char *key)
{
	return !strcmp(key, "v") || !strcmp(key, "seq") || !strcmp(key, "ts") ||
	       !strcmp(key, "node") || !strcmp(key, "type");
}

int proto_check_fields(const struct proto_type *t, json_t *obj,
		       int strict_fields, struct d0_err *err)
{
	const struct proto_field *f;
	const char *key;
	json_t *v;
	for (f = t->fields; f->name; f++) {
		v = json_object_get(obj, f->name);
		if (!v) {
			if (f->required)
				return d0_errf(err,
					       "%s: missing field '%s' "
					       "(%s)",
					       t->name, f->name,
					       ftype_name(f->type));
			continue;
		}
		if (!ftype_ok(f->type, v))
			return d0_errf(err, "%s: field '%s': expected %s",
				       t->name, f->name, ftype_name(f->type));
		if (f->allowed) {
			const char *s = json_string_value(v);
			const char *const *a;
			char list[256] = "";
			for (a = f->allowed; *a; a++)
				if (!strcmp(*a, s))
					break;
			if (*a)
				continue;
			for (a = f->allowed; *a; a++) {
				size_t l = strlen(list);
				snprintf(list + l, sizeof list - l, "%s%s",
					 l ? "|" : "", *a);
			}
			char ex[80];
			proto_excerpt(s, strlen(s), ex, sizeof ex);
			return d0_errf(err,
				       "%s: field '%s': '%s' is not one "
				       "of %s",
				       t->name, f->name, ex, list);
		}
	}
	if (!strict_fields)
		return 0;
	json_object_foreach(obj, key, v)
	{
		if (!strcmp(key, "cmd"))
			continue;
		for (f = t->fields; f->name; f++)
			if (!strcmp(f->name, key))
				break;
		if (!f->name) {
			char ex[80];
			proto_excerpt(key, strlen(key), ex, sizeof ex);
			return d0_errf(err, "%s: unknown field '%s'", t->name,
				       ex);
		}
	}
	return 0;
}

/* --------------------------------------------------------------- parsing */

int proto_blank(const char *line, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
			return 0;
	return 1;
}

/* UTF-8, then JSON, then "is an object": the checks both parsers share. */
static json_t *parse_object(const char *line, size_t len, const char *what,
			    struct d0_err *err)
{
	json_error_t je;
	json_t *o;
	size_t bad;
	if (len > PROTO_MAX_LINE) {
		d0_errf(err, "%s: line of %zu bytes is over the %d-byte limit",
			what, len, PROTO_MAX_LINE);
		return NULL;
	}
	if (!proto_utf8_valid(line, len, &bad)) {
		d0_errf(err, "%s: invalid UTF-8 at byte %zu", what, bad);
		return NULL;
	}
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES, &je);
	if (!o) {
		d0_errf(err, "%s: invalid JSON at column %d: %s", what,
			je.column, je.text);
		return NULL;
	}
	if (!json_is_object(o)) {
		json_decref(o);
		d0_errf(err, "%s: expected a JSON object", what);
		return NULL;
	}
	return o;
}

int proto_cmd_parse(const char *line, size_t len, struct proto_cmd *cmd,
		    struct d0_err *err)
{
	json_t *o = parse_object(line, len, "command", err), *c;
	const struct proto_type *t;
	memset(cmd, 0, sizeof *cmd);
	if (!o)
		return -1;
	c = json_object_get(o, "cmd");
	if (!c) {
		json_decref(o);
		return d0_errf(err, "command: missing field 'cmd'");
	}
	if (!json_is_string(c)) {
		json_decref(o);
		return d0_errf(err, "command: field 'cmd': expected a string");
	}
	t = proto_cmd_type(json_string_value(c));
	if (!t) {
		char ex[80];
		proto_excerpt(json_string_value(c), json_string_length(c), ex,
			      sizeof ex);
		json_decref(o);
		return d0_errf(err,
			       "unknown command '%s' (commands: hello, "
			       "facts, run, cancel, ack, bye)",
			       ex);
	}
	if (proto_check_fields(t, o, 1, err) < 0) {
		json_decref(o);
		return -1;
	}
	cmd->kind = (enum proto_cmd_kind)(t - proto_cmd_types);
	cmd->name = t->name;
	cmd->obj = o;
	return 0;
}

void proto_cmd_free(struct proto_cmd *cmd)
{
	json_decref(cmd->obj);
	cmd->obj = NULL;
}

const char *proto_str(json_t *obj, const char *key, const char *dflt)
{
	json_t *v = json_object_get(obj, key);
	return json_is_string(v) ? json_string_value(v) : dflt;
}

int64_t proto_int(json_t *obj, const char *key, int64_t dflt)
{
	json_t *v = json_object_get(obj, key);
	return json_is_integer(v) ? (int64_t)json_integer_value(v) : dflt;
}

double proto_num(json_t *obj, const char *key, double dflt)
{
	json_t *v = json_object_get(obj, key);
	return json_is_number(v) ? json_number_value(v) : dflt;
}

/* A sample has `value` or `values` (numbers, 1..PROTO_MAX_VALUES), not
 * both; with `values` its cards are card .. card + n - 1. */
static int sample_values_check(json_t *o, struct d0_err *err)
{
	json_t *one = json_object_get(o, "value"),
	       *many = json_object_get(o, "values"), *x;
	size_t i;
	if (!one == !many)
		return d0_errf(err, "event: sample: expected exactly one of "
				    "'value' (one card) and 'values' (cards "
				    "card, card+1, ...)");
	if (!many)
		return 0;
	if (json_array_size(many) < 1 ||
	    json_array_size(many) > PROTO_MAX_VALUES)
		return d0_errf(err, "event: sample: 'values' must hold 1..%d "
				    "numbers",
			       PROTO_MAX_VALUES);
	json_array_foreach(many, i, x) if (!json_is_number(x)) return d0_errf(
	    err, "event: sample: values[%zu]: expected a number", i);
	return 0;
}

static const char *const kind_names[EV_KINDS] = {
    [EV_UNKNOWN] = "", [EV_HELLO] = "hello", [EV_FACTS] = "facts",
    [EV_SAMPLE] = "sample", [EV_STAGE] = "stage", [EV_CHECK] = "check",
    [EV_COMM] = "comm", [EV_NUMERICS] = "numerics", [EV_PERF] = "perf",
    [EV_LOG] = "log", [EV_ERROR] = "error", [EV_HEARTBEAT] = "heartbeat",
    [EV_BYE] = "bye", [EV_TRAIN] = "train", [EV_HOLD] = "hold", [EV_MARKER] = "marker",
    [EV_VERDICT] = "verdict", [EV_ALERT] = "alert", [EV_NODE] = "node",
};

enum proto_event_kind proto_event_kind_of(const char *type, size_t len)
{
	for (int k = 1; k < EV_KINDS; k++)
		if (strlen(kind_names[k]) == len &&
		    !memcmp(kind_names[k], type, len))
			return (enum proto_event_kind)k;
	return EV_UNKNOWN;
}

const char *proto_event_kind_name(enum proto_event_kind k)
{
	return k > EV_UNKNOWN && k < EV_KINDS ? kind_names[k] : "unknown";
}

int proto_envelope_check(struct proto_envelope *e, struct d0_err *err)
{
	if (!e->have_v)
		return d0_errf(err, "event: field 'v': expected an integer");
	if (e->v != PROTO_VERSION)
		return d0_errf(err, "event: protocol version %lld, expected %d",
			       (long long)e->v, PROTO_VERSION);
	if (!e->have_seq || e->seq < 1)
		return d0_errf(err, "event: field 'seq': expected an integer "
				    ">= 1");
	if (!e->have_ts || e->ts < 0)
		return d0_errf(err, "event: field 'ts': expected an integer "
				    ">= 0 (unix ns)");
	if (!e->node || e->node_len == 0)
		return d0_errf(err, "event: field 'node': expected a "
				    "non-empty string");
	if (e->node_len > PROTO_MAX_NODE)
		return d0_errf(err, "event: field 'node': %zu bytes, at most "
				    "%d",
			       e->node_len, PROTO_MAX_NODE);
	if (!e->type || e->type_len == 0)
		return d0_errf(err, "event: field 'type': expected a "
				    "non-empty string");
	if (memchr(e->node, 0, e->node_len) || memchr(e->type, 0, e->type_len))
		return d0_errf(err, "event: NUL in node or type");
	e->kind = e->type_esc ? EV_UNKNOWN
			      : proto_event_kind_of(e->type, e->type_len);
	return 0;
}

int proto_envelope_scan(const struct jscan *j, struct proto_envelope *e,
			struct d0_err *err)
{
	const struct jmember *v = jscan_get(j, "v"), *seq = jscan_get(j, "seq"),
			     *ts = jscan_get(j, "ts"),
			     *node = jscan_get(j, "node"),
			     *type = jscan_get(j, "type");
	memset(e, 0, sizeof *e);
	if (v && v->kind == J_INT)
		e->have_v = 1, e->v = jscan_int(v);
	if (seq && seq->kind == J_INT)
		e->have_seq = 1, e->seq = jscan_int(seq);
	if (ts && ts->kind == J_INT)
		e->have_ts = 1, e->ts = jscan_int(ts);
	if (node && node->kind == J_STR)
		e->node = node->val, e->node_len = node->vlen,
		e->node_esc = node->vesc;
	if (type && type->kind == J_STR)
		e->type = type->val, e->type_len = type->vlen,
		e->type_esc = type->vesc;
	return proto_envelope_check(e, err);
}

int proto_event_check(json_t *o, struct proto_event *ev, struct d0_err *err)
{
	json_t *v = json_object_get(o, "v"), *seq = json_object_get(o, "seq"),
	       *ts = json_object_get(o, "ts"),
	       *node = json_object_get(o, "node"),
	       *type = json_object_get(o, "type");
	struct proto_envelope e = {0};
	const struct proto_type *t;
	if (json_is_integer(v))
		e.have_v = 1, e.v = json_integer_value(v);
	if (json_is_integer(seq))
		e.have_seq = 1, e.seq = json_integer_value(seq);
	if (json_is_integer(ts))
		e.have_ts = 1, e.ts = json_integer_value(ts);
	if (json_is_string(node))
		e.node = json_string_value(node),
		e.node_len = json_string_length(node);
	if (json_is_string(type))
		e.type = json_string_value(type),
		e.type_len = json_string_length(type);
	if (proto_envelope_check(&e, err) < 0)
		return -1;
	t = proto_event_type(e.type);
	if (t && proto_check_fields(t, o, 0, err) < 0)
		return -1;
	if (e.kind == EV_SAMPLE && sample_values_check(o, err) < 0)
		return -1;
	if (ev) {
		ev->type = e.type;
		ev->node = e.node;
		ev->seq = e.seq;
		ev->ts = e.ts;
		ev->kind = e.kind;
		ev->known = t != NULL;
	}
	return 0;
}

int proto_event_parse(const char *line, size_t len, struct proto_event *ev,
		      struct d0_err *err)
{
	json_t *o = parse_object(line, len, "event", err);
	memset(ev, 0, sizeof *ev);
	if (!o)
		return -1;
	if (proto_event_check(o, ev, err) < 0) {
		json_decref(o);
		memset(ev, 0, sizeof *ev);
		return -1;
	}
	ev->obj = o;
	return 0;
}

void proto_event_free(struct proto_event *ev)
{
	json_decref(ev->obj);
	memset(ev, 0, sizeof *ev);
}

/* ------------------------------------------------------------- formatting */

char *proto_event_format(const char *node, int64_t seq, int64_t ts,
			 const char *type, json_t *fields, size_t *len,
			 struct d0_err *err)
{
	json_t *line = json_object(), *v;
	const char *key;
	char *s;
	size_t n;
	json_object_set_new(line, "v", json_integer(PROTO_VERSION));
	json_object_set_new(line, "seq", json_integer(seq));
	json_object_set_new(line, "ts", json_integer(ts));
	json_object_set_new(line, "node", json_string(node));
	json_object_set_new(line, "type", json_string(type));
	if (!json_object_get(line, "node") || !json_object_get(line, "type")) {
		json_decref(line);
		d0_errf(err, "event: node or type is not valid UTF-8");
		return NULL;
	}
	if (fields)
		json_object_foreach(fields, key, v)
		{
			if (!proto_is_envelope(key))
				json_object_set(line, key, v);
		}
	s = json_dumps(line,
		       JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
	json_decref(line);
	if (!s) {
		d0_errf(err, "event %s: cannot be encoded as JSON", type);
		return NULL;
	}
	n = strlen(s);
	if (n > PROTO_MAX_LINE) {
		free(s);
		d0_errf(err, "event %s: %zu bytes, over the %d-byte line limit",
			type, n, PROTO_MAX_LINE);
		return NULL;
	}
	s = realloc(s, n + 2);
	if (!s)
		abort();
	s[n] = '\n';
	s[n + 1] = 0;
	*len = n + 1;
	return s;
}

int64_t proto_now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
