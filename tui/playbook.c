/*
 * playbook.c - load and validate playbook files (playbook.h).
 *
 * Validation is strict and happens entirely at load time, so that a typo
 * in a stage that would run an hour into a release day is reported before
 * anything starts: every key is known, every value has its type and range,
 * every `needs` names a stage, there is no cycle, every step exists in the
 * engine's registry, every node set parses and every ${VAR} names a
 * built-in variable or one of the playbook's vars.  Each message names the
 * file and the JSON path of the offending value.
 */
#include "playbook.h"
#include "checklist.h"
#include "inventory.h"
#include "step.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The variables the runner defines on every node (playbook.h). */
const char *const playbook_builtins[] = {
    "model", "work",  "session", "node", "cards",
    "card_mem", "world", "nodes", "service_port", NULL,
};

/* Keys of the agent's facts `require` (agent/cmd_facts.c). */
static const char *const require_keys[] = {"cores", "mem_bytes", "disk_free",
					   "cards", "card_mem", NULL};

static const char *const top_keys[] = {"name",	 "description", "model",
				       "inventory", "vars",	  "policy",
				       "stages",	 NULL};
static const char *const stage_keys[] = {
    "id",   "step",	   "description", "on",	      "needs",
    "args", "argv",	   "mpirun_args", "cwd",      "require",
    "np",   "timeout", "retries",	  "required", "checks",
    "rehearsal", "service", "ready", NULL};
static const char *const check_keys[] = {"required", "min", "max", NULL};
static const char *const policy_keys[] = {"fail_fast", "max_fail_percentage",
					  NULL};

static int in_list(const char *const *list, const char *s)
{
	for (int i = 0; list[i]; i++)
		if (!strcmp(list[i], s))
			return 1;
	return 0;
}

static void join_list(const char *const *list, char *out, size_t max)
{
	size_t len = 0;
	out[0] = 0;
	for (int i = 0; list[i] && len < max; i++)
		len += (size_t)snprintf(out + len, max - len, "%s%s",
					i ? ", " : "", list[i]);
}

/* "FILE: PATH: message" into err; always -1. */
static int perr(struct d0_err *err, const char *file, const char *path,
		const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int perr(struct d0_err *err, const char *file, const char *path,
		const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	if (path && *path)
		return d0_errf(err, "%s: %s: %s", file, path, msg);
	return d0_errf(err, "%s: %s", file, msg);
}

/* Every key of object o must be in keys. */
static int known_keys(json_t *o, const char *const *keys, const char *file,
		      const char *path, struct d0_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		char list[512];
		if (in_list(keys, k))
			continue;
		join_list(keys, list, sizeof list);
		return perr(err, file, path, "unknown key '%.64s' (known: %s)",
			    k, list);
	}
	return 0;
}

/* Copy an optional string member into out[max]; 1 if absent. */
static int get_str(json_t *o, const char *key, char *out, size_t max,
		   const char *file, const char *path, struct d0_err *err)
{
	json_t *v = json_object_get(o, key);
	char where[160];
	if (!v)
		return 1;
	snprintf(where, sizeof where, "%s%s%s", path, *path ? "." : "", key);
	if (!json_is_string(v))
		return perr(err, file, where, "expected a string");
	if (strlen(json_string_value(v)) >= max)
		return perr(err, file, where, "longer than %zu bytes",
			    max - 1);
	snprintf(out, max, "%s", json_string_value(v));
	return 0;
}

/* An array of strings into a malloc'd NULL-terminated vector. */
static int get_strv(json_t *v, char ***out, size_t *n, const char *file,
		    const char *where, struct d0_err *err)
{
	size_t i;
	json_t *e;
	if (!json_is_array(v))
		return perr(err, file, where, "expected an array of strings");
	*out = calloc(json_array_size(v) + 1, sizeof **out);
	*n = 0;
	if (!*out)
		return perr(err, file, where, "out of memory");
	json_array_foreach(v, i, e)
	{
		char at[192];
		snprintf(at, sizeof at, "%s[%zu]", where, i);
		if (!json_is_string(e))
			return perr(err, file, at, "expected a string");
		if (!((*out)[i] = strdup(json_string_value(e))))
			return perr(err, file, at, "out of memory");
		*n = i + 1;
	}
	return 0;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static int id_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < 1 || n > 64 || s[0] == '.' || s[0] == '-')
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return 0;
	return 1;
}

static int var_name_ok(const char *s, size_t n)
{
	if (n < 1 || n > 64 || isdigit((unsigned char)s[0]))
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return 0;
	return 1;
}

int playbook_expand(const char *in,
		    const char *(*lookup)(void *arg, const char *name),
		    void *arg, const char *where, char *out, size_t max,
		    struct d0_err *err)
{
	size_t len = 0;
	const char *p = in;
	if (!where)
		where = "value";
	while (*p) {
		const char *piece = p;
		size_t plen = 1;
		if (*p == '$' && p[1] == '$') {
			p += 2;
		} else if (*p == '$' && p[1] == '{') {
			const char *end = strchr(p + 2, '}');
			char name[65];
			size_t n;
			if (!end)
				return d0_errf(err, "%s: unterminated '${' in "
					       "'%.200s'", where, in);
			n = (size_t)(end - (p + 2));
			if (!var_name_ok(p + 2, n))
				return d0_errf(err, "%s: bad variable name "
					       "'${%.*s}' in '%.200s'", where,
					       (int)(n > 64 ? 64 : n), p + 2,
					       in);
			memcpy(name, p + 2, n);
			name[n] = 0;
			piece = lookup ? lookup(arg, name) : NULL;
			if (!piece)
				return d0_errf(err, "%s: unknown variable "
					       "'${%s}' in '%.200s'", where,
					       name, in);
			plen = strlen(piece);
			p = end + 1;
		} else {
			p++;
		}
		if (len + plen >= max)
			return d0_errf(err, "%s: expansion of '%.200s' longer "
				       "than %zu bytes", where, in, max - 1);
		memcpy(out + len, piece, plen);
		len += plen;
	}
	out[len] = 0;
	return 0;
}

/* One level of playbook_expand_deep: the chain of names so far. */
struct deep {
	const char *(*lookup)(void *arg, const char *name);
	int (*nested)(void *arg, const char *name);
	void *arg;
	size_t max;
	int depth;
	const char *chain[PB_VAR_DEPTH + 1];
	char *buf[PB_VAR_DEPTH + 1];
	char why[512]; /* a failure below (a cycle, a runaway) */
};

static const char *deep_lookup(void *arg, const char *name)
{
	struct deep *d = arg;
	const char *raw = d->lookup(d->arg, name);
	struct d0_err e;
	if (!raw || !strchr(raw, '$') || !d->nested(d->arg, name))
		return raw;
	for (int i = 0; i < d->depth; i++)
		if (!strcmp(d->chain[i], name) || d->depth >= PB_VAR_DEPTH) {
			size_t o = 0;
			o += (size_t)snprintf(d->why, sizeof d->why,
					      "variables refer to each other "
					      "in a cycle or too deeply (");
			for (int k = 0; k < d->depth && o < sizeof d->why; k++)
				o += (size_t)snprintf(d->why + o,
						      sizeof d->why - o,
						      "%.40s -> ", d->chain[k]);
			if (o < sizeof d->why)
				snprintf(d->why + o, sizeof d->why - o,
					 "%.40s)", name);
			return NULL;
		}
	if (!d->buf[d->depth] && !(d->buf[d->depth] = malloc(d->max)))
		return NULL;
	d->chain[d->depth++] = name;
	if (playbook_expand(raw, deep_lookup, d, name, d->buf[d->depth - 1],
			    d->max, &e) < 0) {
		if (!d->why[0])
			snprintf(d->why, sizeof d->why, "%.500s", e.msg);
		d->depth--;
		return NULL;
	}
	d->depth--;
	return d->buf[d->depth];
}

int playbook_expand_deep(const char *in,
			 const char *(*lookup)(void *arg, const char *name),
			 int (*nested)(void *arg, const char *name), void *arg,
			 const char *where, char *out, size_t max,
			 struct d0_err *err)
{
	struct deep d = {lookup, nested, arg, max, 0, {0}, {0}, ""};
	int rc = playbook_expand(in, deep_lookup, &d, where, out, max, err);
	if (rc < 0 && d.why[0])
		d0_errf(err, "%s: %s", where ? where : "value", d.why);
	for (int i = 0; i <= PB_VAR_DEPTH; i++)
		free(d.buf[i]);
	return rc;
}

int playbook_stage(const struct playbook *pb, const char *id)
{
	for (size_t i = 0; i < pb->n; i++)
		if (!strcmp(pb->stages[i].id, id))
			return (int)i;
	return -1;
}

void playbook_free(struct playbook *pb)
{
	for (size_t i = 0; pb->stages && i < pb->n; i++) {
		struct pb_stage *s = &pb->stages[i];
		free(s->needs);
		free_strv(s->args, s->n_args);
		free_strv(s->argv, s->n_argv);
		free_strv(s->mpirun_args, s->n_mpirun_args);
		json_decref(s->require);
		free(s->checks);
	}
	free(pb->stages);
	free(pb->order);
	json_decref(pb->vars);
	json_decref(pb->doc);
	memset(pb, 0, sizeof *pb);
}

/* --------------------------------------------------------------- stages */

struct ctx {
	const char *file;
	struct playbook *pb;
	struct d0_err *err;
};

static int parse_checks(struct ctx *c, json_t *v, struct pb_stage *s,
			const char *sp)
{
	const char *item;
	json_t *spec;
	char where[192];
	snprintf(where, sizeof where, "%s.checks", sp);
	if (!json_is_object(v))
		return perr(c->err, c->file, where,
			    "expected an object of item -> {required, min, "
			    "max}");
	s->checks = calloc(json_object_size(v) + 1, sizeof *s->checks);
	if (!s->checks)
		return perr(c->err, c->file, where, "out of memory");
	json_object_foreach(v, item, spec)
	{
		struct pb_check *k = &s->checks[s->n_checks];
		char at[256], list[512];
		json_t *x;
		snprintf(at, sizeof at, "%s.%s", where, item);
		const struct checklist_item *ci = checklist_find(item);
		if (!ci || checklist_is_rehearsal(item)) {
			size_t n = 0;
			for (size_t i = 0; i < checklist_n && n < sizeof list; i++)
				n += (size_t)snprintf(list + n, sizeof list - n,
						      "%s%s", i ? ", " : "",
						      checklist_items[i].id);
			return perr(c->err, c->file, where,
				    "unknown checklist item '%.64s' (items: "
				    "%s)", item, list);
		}
		if (!checklist_step_produces(ci, s->step)) {
			size_t n = 0;
			for (int i = 0; i < 4 && ci->steps[i] && n < sizeof list; i++)
				n += (size_t)snprintf(list + n, sizeof list - n,
						      "%s%s", i ? ", " : "",
						      ci->steps[i]);
			return perr(c->err, c->file, at,
				    "step %s does not produce %s (produced "
				    "by %s)", s->step, item, list);
		}
		if (!json_is_object(spec))
			return perr(c->err, c->file, at,
				    "expected an object {required, min, max}");
		if (known_keys(spec, check_keys, c->file, at, c->err) < 0)
			return -1;
		snprintf(k->item, sizeof k->item, "%s", item);
		k->required = 1;
		if ((x = json_object_get(spec, "required"))) {
			if (!json_is_boolean(x))
				return perr(c->err, c->file, at,
					    "'required' must be true or false");
			k->required = json_is_true(x);
		}
		if ((x = json_object_get(spec, "min"))) {
			if (!json_is_number(x))
				return perr(c->err, c->file, at,
					    "'min' must be a number");
			k->has_min = 1;
			k->min = json_number_value(x);
		}
		if ((x = json_object_get(spec, "max"))) {
			if (!json_is_number(x))
				return perr(c->err, c->file, at,
					    "'max' must be a number");
			k->has_max = 1;
			k->max = json_number_value(x);
		}
		if (k->has_min && k->has_max && k->min > k->max)
			return perr(c->err, c->file, at,
				    "'min' %g is above 'max' %g", k->min,
				    k->max);
		s->n_checks++;
	}
	return 0;
}

static int parse_on(struct ctx *c, json_t *v, struct pb_stage *s,
		    const char *sp)
{
	char where[192], **names = NULL;
	size_t n = 0;
	struct d0_err e;
	const char *on;
	snprintf(where, sizeof where, "%s.on", sp);
	if (!v) {
		s->on = PB_ON_ALL;
		return 0;
	}
	if (!json_is_string(v))
		return perr(c->err, c->file, where,
			    "expected all, first, cluster or a node set");
	on = json_string_value(v);
	if (!strcmp(on, "all")) {
		s->on = PB_ON_ALL;
		return 0;
	}
	if (!strcmp(on, "first")) {
		s->on = PB_ON_FIRST;
		return 0;
	}
	if (!strcmp(on, "cluster")) {
		s->on = PB_ON_CLUSTER;
		return 0;
	}
	if (strlen(on) >= sizeof s->on_set)
		return perr(c->err, c->file, where, "node set longer than "
			    "%zu bytes", sizeof s->on_set - 1);
	if (nodeset_expand(on, &names, &n, &e) < 0)
		return perr(c->err, c->file, where,
			    "'%.200s' is not all, first, cluster or a node set "
			    "(%s)", on, e.msg);
	free_strv(names, n);
	s->on = PB_ON_SET;
	snprintf(s->on_set, sizeof s->on_set, "%s", on);
	return 0;
}

static int get_int(struct ctx *c, json_t *o, const char *key, long min,
		   long max, int *out, const char *sp)
{
	json_t *v = json_object_get(o, key);
	char where[192];
	if (!v)
		return 1;
	snprintf(where, sizeof where, "%s.%s", sp, key);
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max)
		return perr(c->err, c->file, where,
			    "expected an integer %ld..%ld", min, max);
	*out = (int)json_integer_value(v);
	return 0;
}

/*
 * service: true keeps the stage's process running until the playbook ends
 * (then the agent stops its process group); ready {url, timeout} (or just
 * the URL) is polled by the agent, and the stage counts as done for the
 * stages that need it once the URL answers 200.
 */
static int parse_service(struct ctx *c, json_t *o, struct pb_stage *s,
			 const char *sp, int is_facts)
{
	char where[192];
	json_t *v = json_object_get(o, "service"), *r = json_object_get(o, "ready");
	if (v) {
		snprintf(where, sizeof where, "%s.service", sp);
		if (!json_is_boolean(v))
			return perr(c->err, c->file, where, "expected true or false");
		if (is_facts && json_is_true(v))
			return perr(c->err, c->file, where,
				    "facts stages cannot be services");
		s->service = json_is_true(v);
	}
	if (!r)
		return 0;
	snprintf(where, sizeof where, "%s.ready", sp);
	if (!s->service)
		return perr(c->err, c->file, where,
			    "only a service stage ('service': true) has 'ready'");
	s->ready_timeout = 300;
	if (json_is_object(r)) {
		json_t *u = json_object_get(r, "url"), *t = json_object_get(r, "timeout");
		const char *k;
		json_t *x;
		json_object_foreach(r, k, x)
			if (strcmp(k, "url") && strcmp(k, "timeout"))
				return perr(c->err, c->file, where,
					    "unknown key '%.64s' (known: url, timeout)", k);
		if (t && (!json_is_number(t) || json_number_value(t) <= 0))
			return perr(c->err, c->file, where,
				    "timeout: expected seconds > 0");
		if (t)
			s->ready_timeout = json_number_value(t);
		r = u;
	}
	if (!json_is_string(r) || strncmp(json_string_value(r), "http://", 7))
		return perr(c->err, c->file, where,
			    "expected a URL http://HOST:PORT/PATH (or {url, timeout})");
	snprintf(s->ready_url, sizeof s->ready_url, "%s", json_string_value(r));
	return 0;
}

static int parse_stage(struct ctx *c, json_t *o, size_t idx)
{
	struct pb_stage *s = &c->pb->stages[idx];
	char sp[64], where[192], list[1024];
	json_t *v;
	int is_exec, is_facts;
	snprintf(sp, sizeof sp, "stages[%zu]", idx);
	if (!json_is_object(o))
		return perr(c->err, c->file, sp, "expected an object");
	if (known_keys(o, stage_keys, c->file, sp, c->err) < 0)
		return -1;
	s->required = 1;

	v = json_object_get(o, "id");
	if (!v)
		return perr(c->err, c->file, sp, "missing 'id'");
	snprintf(where, sizeof where, "%s.id", sp);
	if (!json_is_string(v) || !id_ok(json_string_value(v)))
		return perr(c->err, c->file, where,
			    "expected 1-64 of [A-Za-z0-9._-], not starting "
			    "with '.' or '-'");
	snprintf(s->id, sizeof s->id, "%s", json_string_value(v));
	{
		/* "ID.n" names the n-th attempt of ID (checklist_stage_of). */
		char base[sizeof s->id];
		checklist_stage_of(s->id, base, sizeof base);
		if (strcmp(base, s->id))
			return perr(c->err, c->file, where,
				    "'%s' ends like an attempt of stage '%s' "
				    "(.N is the runner's retry suffix)",
				    s->id, base);
	}
	for (size_t j = 0; j < idx; j++)
		if (!strcmp(c->pb->stages[j].id, s->id))
			return perr(c->err, c->file, where,
				    "duplicate id '%s' (also stages[%zu])",
				    s->id, j);

	v = json_object_get(o, "step");
	if (!v)
		return perr(c->err, c->file, sp, "missing 'step'");
	snprintf(where, sizeof where, "%s.step", sp);
	if (!json_is_string(v))
		return perr(c->err, c->file, where, "expected a string");
	is_exec = !strcmp(json_string_value(v), "exec");
	is_facts = !strcmp(json_string_value(v), "facts");
	if (!is_exec && !is_facts && !step_find(json_string_value(v))) {
		size_t len = 0;
		for (int i = 0; step_table[i] && len < sizeof list; i++)
			len += (size_t)snprintf(list + len, sizeof list - len,
						"%s, ", step_table[i]->name);
		return perr(c->err, c->file, where,
			    "unknown step '%.64s' (day0-engine has: %sand "
			    "the console's facts, exec)",
			    json_string_value(v), list);
	}
	snprintf(s->step, sizeof s->step, "%s", json_string_value(v));

	if (get_str(o, "description", s->description, sizeof s->description,
		    c->file, sp, c->err) < 0 ||
	    get_str(o, "cwd", s->cwd, sizeof s->cwd, c->file, sp, c->err) < 0)
		return -1;
	if (parse_on(c, json_object_get(o, "on"), s, sp) < 0)
		return -1;
	snprintf(where, sizeof where, "%s.on", sp);
	if (is_facts && s->on == PB_ON_CLUSTER)
		return perr(c->err, c->file, where,
			    "facts runs on every node of all, first or a "
			    "node set, not 'cluster'");

	if ((v = json_object_get(o, "args"))) {
		snprintf(where, sizeof where, "%s.args", sp);
		if (is_exec)
			return perr(c->err, c->file, where,
				    "exec stages take 'argv', not 'args'");
		if (is_facts)
			return perr(c->err, c->file, where,
				    "facts stages take no arguments (use "
				    "'require')");
		if (get_strv(v, &s->args, &s->n_args, c->file, where,
			     c->err) < 0)
			return -1;
	}
	snprintf(where, sizeof where, "%s.argv", sp);
	if ((v = json_object_get(o, "argv"))) {
		if (!is_exec)
			return perr(c->err, c->file, where,
				    "only exec stages take 'argv' (engine "
				    "steps take 'args')");
		if (get_strv(v, &s->argv, &s->n_argv, c->file, where,
			     c->err) < 0)
			return -1;
		if (!s->n_argv)
			return perr(c->err, c->file, where,
				    "empty: name the program to run");
	} else if (is_exec) {
		return perr(c->err, c->file, sp,
			    "exec stage without 'argv'");
	}
	if ((v = json_object_get(o, "mpirun_args"))) {
		snprintf(where, sizeof where, "%s.mpirun_args", sp);
		if (s->on != PB_ON_CLUSTER)
			return perr(c->err, c->file, where,
				    "only 'cluster' stages run mpirun");
		if (get_strv(v, &s->mpirun_args, &s->n_mpirun_args, c->file,
			     where, c->err) < 0)
			return -1;
	}
	if ((v = json_object_get(o, "require"))) {
		const char *k;
		json_t *x;
		snprintf(where, sizeof where, "%s.require", sp);
		if (!is_facts)
			return perr(c->err, c->file, where,
				    "only facts stages take 'require'");
		if (!json_is_object(v))
			return perr(c->err, c->file, where,
				    "expected an object of minimums");
		json_object_foreach(v, k, x)
		{
			char at[256];
			snprintf(at, sizeof at, "%s.%s", where, k);
			if (!in_list(require_keys, k)) {
				join_list(require_keys, list, sizeof list);
				return perr(c->err, c->file, where,
					    "unknown requirement '%.64s' "
					    "(known: %s)", k, list);
			}
			if (!json_is_integer(x) || json_integer_value(x) < 0)
				return perr(c->err, c->file, at,
					    "expected an integer >= 0");
		}
		s->require = json_incref(v);
	}

	if (get_int(c, o, "np", 0, 1 << 20, &s->np, sp) < 0 ||
	    get_int(c, o, "retries", 0, 10, &s->retries, sp) < 0)
		return -1;
	if (s->np && is_facts)
		return perr(c->err, c->file, sp,
			    "facts stages take no 'np'");
	if ((v = json_object_get(o, "timeout"))) {
		snprintf(where, sizeof where, "%s.timeout", sp);
		if (!json_is_number(v) || json_number_value(v) < 0 ||
		    json_number_value(v) > PB_TIMEOUT_MAX)
			return perr(c->err, c->file, where,
				    "expected seconds 0..%d (0: none)",
				    PB_TIMEOUT_MAX);
		s->timeout = json_number_value(v);
	}
	if ((v = json_object_get(o, "required"))) {
		snprintf(where, sizeof where, "%s.required", sp);
		if (!json_is_boolean(v))
			return perr(c->err, c->file, where,
				    "expected true or false");
		s->required = json_is_true(v);
	}
	if ((v = json_object_get(o, "rehearsal"))) {
		snprintf(where, sizeof where, "%s.rehearsal", sp);
		if (!json_is_boolean(v))
			return perr(c->err, c->file, where,
				    "expected true or false");
		s->rehearsal = json_is_true(v);
	}
	if ((v = json_object_get(o, "checks")) &&
	    parse_checks(c, v, s, sp) < 0)
		return -1;
	return parse_service(c, o, s, sp, is_facts);
}

/* needs: resolve ids to indices (all stages are known by now). */
static int parse_needs(struct ctx *c, json_t *o, size_t idx)
{
	struct pb_stage *s = &c->pb->stages[idx];
	json_t *v = json_object_get(o, "needs"), *e;
	char where[192];
	size_t i;
	if (!v)
		return 0;
	snprintf(where, sizeof where, "stages[%zu].needs", idx);
	if (!json_is_array(v))
		return perr(c->err, c->file, where,
			    "expected an array of stage ids");
	s->needs = calloc(json_array_size(v) + 1, sizeof *s->needs);
	if (!s->needs)
		return perr(c->err, c->file, where, "out of memory");
	json_array_foreach(v, i, e)
	{
		char at[224];
		int j;
		snprintf(at, sizeof at, "%s[%zu]", where, i);
		if (!json_is_string(e))
			return perr(c->err, c->file, at,
				    "expected a stage id");
		j = playbook_stage(c->pb, json_string_value(e));
		if (j < 0)
			return perr(c->err, c->file, at, "no stage '%.64s'",
				    json_string_value(e));
		for (size_t k = 0; k < s->n_needs; k++)
			if (s->needs[k] == (size_t)j)
				return perr(c->err, c->file, at,
					    "'%s' listed twice",
					    json_string_value(e));
		s->needs[s->n_needs++] = (size_t)j;
	}
	return 0;
}

/*
 * A topological order that keeps file order where the dependencies allow:
 * each stage in file order, preceded by whatever it needs that is not
 * placed yet (depth first), so "verify needs facts" puts facts just
 * before verify wherever facts is written.  A need met while its stage is
 * still on the walk's stack closes a cycle, printed as the chain of needs.
 */
struct walk {
	struct ctx *c;
	int *state;	/* 0 new, 1 on the stack, 2 placed */
	size_t *stack;	/* the walk's stages, outermost first */
	size_t depth, placed;
};

static int visit(struct walk *w, size_t i)
{
	struct playbook *pb = w->c->pb;
	const struct pb_stage *s = &pb->stages[i];
	if (w->state[i] == 2)
		return 0;
	w->state[i] = 1;
	w->stack[w->depth++] = i;
	for (size_t k = 0; k < s->n_needs; k++) {
		size_t j = s->needs[k];
		if (w->state[j] == 1) {
			char msg[768], where[64];
			size_t len = 0, from = 0;
			while (w->stack[from] != j)
				from++;
			for (size_t d = from; d < w->depth && len < sizeof msg;
			     d++)
				len += (size_t)snprintf(
				    msg + len, sizeof msg - len, "%s -> ",
				    pb->stages[w->stack[d]].id);
			if (len < sizeof msg)
				snprintf(msg + len, sizeof msg - len, "%s",
					 pb->stages[j].id);
			snprintf(where, sizeof where, "stages[%zu].needs[%zu]",
				 i, k);
			return perr(w->c->err, w->c->file, where,
				    "dependency cycle: %s", msg);
		}
		if (visit(w, j) < 0)
			return -1;
	}
	w->depth--;
	w->state[i] = 2;
	pb->order[w->placed++] = i;
	return 0;
}

static int order_stages(struct ctx *c)
{
	struct playbook *pb = c->pb;
	struct walk w = {c, calloc(pb->n + 1, sizeof(int)),
			 calloc(pb->n + 1, sizeof(size_t)), 0, 0};
	int rc = 0;
	pb->order = calloc(pb->n + 1, sizeof *pb->order);
	if (!w.state || !w.stack || !pb->order)
		rc = perr(c->err, c->file, "stages", "out of memory");
	for (size_t i = 0; rc == 0 && i < pb->n; i++)
		rc = visit(&w, i);
	free(w.state);
	free(w.stack);
	return rc;
}

/* ------------------------------------------------------------ variables */

struct var_ctx {
	json_t *vars;
};

static const char *check_lookup(void *arg, const char *name)
{
	struct var_ctx *v = arg;
	if (in_list(playbook_builtins, name) || json_object_get(v->vars, name))
		return "";
	return NULL;
}

/* Every ${VAR} in one stage's strings must be known (and well formed). */
static int check_refs(struct ctx *c, size_t idx)
{
	struct pb_stage *s = &c->pb->stages[idx];
	struct var_ctx vc = {c->pb->vars};
	char where[224], *tmp = malloc(65536);
	struct d0_err e;
	int rc = 0;
	const struct {
		const char *what;
		char **v;
		size_t n;
	} lists[] = {{"args", s->args, s->n_args},
		     {"argv", s->argv, s->n_argv},
		     {"mpirun_args", s->mpirun_args, s->n_mpirun_args}};
	if (!tmp)
		return perr(c->err, c->file, "stages", "out of memory");
	for (size_t l = 0; rc == 0 && l < 3; l++)
		for (size_t i = 0; rc == 0 && i < lists[l].n; i++) {
			snprintf(where, sizeof where, "stages[%zu].%s[%zu]",
				 idx, lists[l].what, i);
			if (playbook_expand(lists[l].v[i], check_lookup, &vc,
					    where, tmp, 65536, &e) < 0)
				rc = d0_errf(c->err, "%s: %s (built-ins: "
					     "model, work, session, node, "
					     "cards, card_mem, world, nodes; "
					     "others go in \"vars\")",
					     c->file, e.msg);
		}
	snprintf(where, sizeof where, "stages[%zu].cwd", idx);
	if (rc == 0 && s->cwd[0] &&
	    playbook_expand(s->cwd, check_lookup, &vc, where, tmp, 65536,
			    &e) < 0)
		rc = d0_errf(c->err, "%s: %s", c->file, e.msg);
	free(tmp);
	return rc;
}

static int parse_vars(struct ctx *c, json_t *v)
{
	const char *k;
	json_t *x;
	c->pb->vars = json_object();
	if (!c->pb->vars)
		return perr(c->err, c->file, "vars", "out of memory");
	if (!v)
		return 0;
	if (!json_is_object(v))
		return perr(c->err, c->file, "vars",
			    "expected an object of name -> string");
	json_object_foreach(v, k, x)
	{
		char at[160], num[64];
		snprintf(at, sizeof at, "vars.%.64s", k);
		if (!var_name_ok(k, strlen(k)))
			return perr(c->err, c->file, at,
				    "a variable name is 1-64 of [A-Za-z0-9_], "
				    "not starting with a digit");
		if (in_list(playbook_builtins, k))
			return perr(c->err, c->file, at,
				    "'%s' is a built-in variable the runner "
				    "sets", k);
		/* numbers are accepted for convenience ("tp": 2) */
		if (json_is_integer(x)) {
			snprintf(num, sizeof num, "%lld",
				 (long long)json_integer_value(x));
			json_object_set_new(c->pb->vars, k, json_string(num));
		} else if (json_is_string(x)) {
			json_object_set(c->pb->vars, k, x);
		} else {
			return perr(c->err, c->file, at,
				    "expected a string or an integer");
		}
	}
	return 0;
}

/* The vars' values expand (built-ins as themselves): no cycle, no
 * runaway, no unknown name. */
static const char *vars_lookup(void *arg, const char *name)
{
	struct var_ctx *v = arg;
	json_t *x;
	if (in_list(playbook_builtins, name))
		return "";
	x = json_object_get(v->vars, name);
	return json_is_string(x) ? json_string_value(x) : NULL;
}

static int vars_nested(void *arg, const char *name)
{
	return !in_list(playbook_builtins, name);
}

static int check_vars(struct ctx *c)
{
	struct var_ctx vc = {c->pb->vars};
	const char *k;
	json_t *x;
	char *tmp = malloc(65536);
	int rc = 0;
	if (!tmp)
		return perr(c->err, c->file, "vars", "out of memory");
	json_object_foreach(c->pb->vars, k, x)
	{
		char at[160];
		struct d0_err e;
		snprintf(at, sizeof at, "vars.%.64s", k);
		if (playbook_expand_deep(json_string_value(x), vars_lookup,
					 vars_nested, &vc, at, tmp, 65536,
					 &e) < 0) {
			rc = d0_errf(c->err, "%s: %s", c->file, e.msg);
			break;
		}
	}
	free(tmp);
	return rc;
}

static int parse_policy(struct ctx *c, json_t *v)
{
	json_t *ff, *mf;
	c->pb->fail_fast = 1;
	c->pb->max_fail_pct = -1;
	if (!v)
		return 0;
	if (!json_is_object(v))
		return perr(c->err, c->file, "policy",
			    "expected {\"fail_fast\": BOOL} or "
			    "{\"max_fail_percentage\": 0..100}");
	if (known_keys(v, policy_keys, c->file, "policy", c->err) < 0)
		return -1;
	ff = json_object_get(v, "fail_fast");
	mf = json_object_get(v, "max_fail_percentage");
	if (ff && mf)
		return perr(c->err, c->file, "policy",
			    "fail_fast and max_fail_percentage exclude each "
			    "other");
	if (ff) {
		if (!json_is_boolean(ff))
			return perr(c->err, c->file, "policy.fail_fast",
				    "expected true or false");
		c->pb->fail_fast = json_is_true(ff);
	}
	if (mf) {
		if (!json_is_number(mf) || json_number_value(mf) < 0 ||
		    json_number_value(mf) > 100)
			return perr(c->err, c->file,
				    "policy.max_fail_percentage",
				    "expected a number 0..100");
		c->pb->fail_fast = 0;
		c->pb->max_fail_pct = json_number_value(mf);
	}
	return 0;
}

static int parse_doc(struct ctx *c)
{
	struct playbook *pb = c->pb;
	json_t *root = pb->doc, *stages, *st;
	size_t i;
	const char *base;
	if (!json_is_object(root))
		return perr(c->err, c->file, NULL,
			    "a playbook is a JSON object");
	if (known_keys(root, top_keys, c->file, NULL, c->err) < 0)
		return -1;
	/* the name defaults to the file's base name without .json */
	base = strrchr(c->file, '/');
	base = base ? base + 1 : c->file;
	snprintf(pb->name, sizeof pb->name, "%.*s",
		 (int)(strlen(base) > 5 &&
			       !strcmp(base + strlen(base) - 5, ".json")
			   ? strlen(base) - 5
			   : strlen(base)),
		 base);
	if (get_str(root, "name", pb->name, sizeof pb->name, c->file, "",
		    c->err) < 0 ||
	    get_str(root, "description", pb->description,
		    sizeof pb->description, c->file, "", c->err) < 0 ||
	    get_str(root, "model", pb->model, sizeof pb->model, c->file, "",
		    c->err) < 0 ||
	    get_str(root, "inventory", pb->inventory, sizeof pb->inventory,
		    c->file, "", c->err) < 0)
		return -1;
	if (!pb->name[0])
		return perr(c->err, c->file, "name", "empty");
	if (parse_vars(c, json_object_get(root, "vars")) < 0 ||
	    check_vars(c) < 0 ||
	    parse_policy(c, json_object_get(root, "policy")) < 0)
		return -1;
	stages = json_object_get(root, "stages");
	if (!stages)
		return perr(c->err, c->file, NULL, "missing 'stages'");
	if (!json_is_array(stages) || !json_array_size(stages))
		return perr(c->err, c->file, "stages",
			    "expected a non-empty array of stages");
	pb->stages = calloc(json_array_size(stages), sizeof *pb->stages);
	if (!pb->stages)
		return perr(c->err, c->file, "stages", "out of memory");
	json_array_foreach(stages, i, st)
	{
		pb->n = i + 1; /* so playbook_free sees what was filled */
		if (parse_stage(c, st, i) < 0)
			return -1;
	}
	json_array_foreach(stages, i, st)
	{
		if (parse_needs(c, st, i) < 0 || check_refs(c, i) < 0)
			return -1;
	}
	return order_stages(c);
}

int playbook_parse(const char *text, const char *name, struct playbook *pb,
		   struct d0_err *err)
{
	json_error_t je;
	struct ctx c = {name ? name : "playbook", pb, err};
	memset(pb, 0, sizeof *pb);
	pb->max_fail_pct = -1;
	pb->fail_fast = 1;
	snprintf(pb->path, sizeof pb->path, "%s", c.file);
	pb->doc = json_loads(text, JSON_REJECT_DUPLICATES, &je);
	if (!pb->doc) {
		d0_errf(err, "%s:%d:%d: %s", c.file, je.line, je.column,
			je.text);
		playbook_free(pb);
		return -1;
	}
	if (parse_doc(&c) < 0) {
		playbook_free(pb);
		return -1;
	}
	return 0;
}

int playbook_load(const char *path, struct playbook *pb, struct d0_err *err)
{
	char *text;
	size_t len;
	int rc;
	memset(pb, 0, sizeof *pb);
	if (file_read_all(path, 4 << 20, &text, &len, err) < 0)
		return -1;
	if (strlen(text) != len) {
		free(text);
		return d0_errf(err, "%s: contains a NUL byte", path);
	}
	rc = playbook_parse(text, path, pb, err);
	free(text);
	return rc;
}
