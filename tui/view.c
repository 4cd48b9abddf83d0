/*
 * view.c - the view model: the fold (view_apply), the seek (view_seek)
 * and the dump the tests compare them with.  See view.h for what the view
 * keeps and docs/tui.md for the queries.
 */
#include "view.h"
#include "checklist.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "console.h"
#include "json_scan.h"
#include "reader.h"
#include "proto.h"


/* ------------------------------------------------------------------ rings */

void view_ring_push(struct view_ring *r, double x)
{
	r->v[r->head] = x;
	r->head = (r->head + 1) % VIEW_HIST;
	if (r->n < VIEW_HIST)
		r->n++;
}

double view_ring_get(const struct view_ring *r, int i)
{
	return r->v[(r->head - r->n + i + VIEW_HIST) % VIEW_HIST];
}

/* Bounded vectors: a slot for the next item (the oldest one when full). */
#define VEC_PUSH(vec, maxn)                                                  \
	(vec_slot((void **)&(vec).a, &(vec).n, &(vec).cap, &(vec).head,      \
		  sizeof *(vec).a, (maxn)))

static void *vec_slot(void **a, size_t *n, size_t *cap, size_t *head,
		      size_t size, size_t maxn)
{
	char *p;
	if (*n == maxn) {
		p = (char *)*a + *head * size;
		*head = (*head + 1) % *cap;
		memset(p, 0, size);
		return p;
	}
	if (*n == *cap) {
		/* Grows only while not yet full: head stays 0 until then. */
		size_t nc = *cap ? *cap * 2 : 16;
		if (nc > maxn)
			nc = maxn;
		void *na = realloc(*a, nc * size);
		if (!na)
			abort();
		*a = na;
		*cap = nc;
	}
	p = (char *)*a + (*n)++ * size;
	memset(p, 0, size);
	return p;
}

static void copy(char *dst, size_t max, const char *src)
{
	snprintf(dst, max, "%s", src ? src : "");
}

/* ------------------------------------------------------------- lifecycle */

void view_init(struct view *v)
{
	memset(v, 0, sizeof *v);
	v->verdict = -1;
}

static void view_clear(struct view *v)
{
	for (size_t i = 0; i < v->nnodes; i++) {
		free(v->nodes[i].cards);
		free(v->nodes[i].stix);
		json_decref(v->nodes[i].facts);
	}
	free(v->nodes);
	free(v->checks);
	free(v->stages);
	free(v->stage_hash);
	free(v->comm.a);
	free(v->num.a);
	free(v->perf.a);
	free(v->train.a);
	free(v->marks.a);
	for (size_t i = 0; i < VIEW_LOG; i++)
		free(v->log[i].line);
	json_decref(v->plan);
	json_decref(v->labels);
	v->labels = NULL;
	json_decref(v->pb_doc_stages);
	v->pb_doc_stages = NULL;
}

void view_free(struct view *v)
{
	if (!v)
		return;
	view_clear(v);
	memset(v, 0, sizeof *v);
}

void view_reset(struct view *v)
{
	char name[sizeof v->name], model[sizeof v->model],
	    playbook[sizeof v->playbook];
	char(*pb)[80] = malloc(sizeof v->pb_stages);
	int npb = v->npb_stages;
	json_t *labels = json_incref(v->labels);
	json_t *pbs = json_incref(v->pb_doc_stages);
	if (!pb)
		abort();
	memcpy(pb, v->pb_stages, sizeof v->pb_stages);
	memcpy(name, v->name, sizeof name);
	memcpy(model, v->model, sizeof model);
	memcpy(playbook, v->playbook, sizeof playbook);
	view_clear(v);
	view_init(v);
	memcpy(v->name, name, sizeof name);
	memcpy(v->model, model, sizeof model);
	memcpy(v->playbook, playbook, sizeof playbook);
	memcpy(v->pb_stages, pb, sizeof v->pb_stages);
	v->npb_stages = npb;
	free(pb);
	json_decref(v->labels);
	v->labels = labels;
	json_decref(v->pb_doc_stages);
	v->pb_doc_stages = pbs;
}

void view_set_labels(struct view *v, json_t *labels)
{
	if (!json_is_object(labels))
		return;
	json_decref(v->labels);
	v->labels = json_incref(labels);
}

const char *view_node_labels(const struct view *v, const char *node)
{
	const char *s = json_string_value(json_object_get(v->labels, node));
	return s ? s : "";
}

static const char *jstr(json_t *o, const char *k);

void view_set_manifest(struct view *v, json_t *name, json_t *model,
		       json_t *playbook)
{
	if (json_is_string(name))
		copy(v->name, sizeof v->name, json_string_value(name));
	if (json_is_string(model))
		copy(v->model, sizeof v->model, json_string_value(model));
	/* The playbook document: its "name" (the "name" key is the same
	 * string when the runner wrote both). */
	if (json_is_object(playbook) &&
	    json_is_string(json_object_get(playbook, "name")))
		copy(v->playbook, sizeof v->playbook,
		     json_string_value(json_object_get(playbook, "name")));
	else if (json_is_string(playbook))
		copy(v->playbook, sizeof v->playbook,
		     json_string_value(playbook));
	if (json_is_array(json_object_get(playbook, "stages"))) {
		size_t i;
		json_t *st;
		json_decref(v->pb_doc_stages);
		v->pb_doc_stages = json_incref(json_object_get(playbook, "stages"));
		v->npb_stages = 0;
		json_array_foreach(json_object_get(playbook, "stages"), i, st)
		{
			const char *id = jstr(st, "id");
			if (!*id || v->npb_stages >= VIEW_PB_STAGES)
				continue;
			copy(v->pb_stages[v->npb_stages++], sizeof v->pb_stages[0],
			     id);
		}
	}
}

/* ----------------------------------------------------------------- lookups */

static int node_cmp(const void *key, const void *elem)
{
	return strcmp(key, ((const struct view_node *)elem)->name);
}

const struct view_node *view_node(const struct view *v, const char *name)
{
	if (!v->nnodes)
		return NULL;
	return bsearch(name, v->nodes, v->nnodes, sizeof *v->nodes, node_cmp);
}

/* The node named so, created (sorted in) at ts when new. */
static struct view_node *node_get(struct view *v, const char *name,
				  int64_t ts)
{
	size_t lo = 0, hi = v->nnodes;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(name, v->nodes[mid].name);
		if (!c)
			return &v->nodes[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	if (v->nnodes == v->capnodes) {
		size_t nc = v->capnodes ? v->capnodes * 2 : 16;
		struct view_node *na = realloc(v->nodes, nc * sizeof *na);
		if (!na)
			abort();
		v->nodes = na;
		v->capnodes = nc;
	}
	memmove(&v->nodes[lo + 1], &v->nodes[lo],
		(v->nnodes - lo) * sizeof *v->nodes);
	v->nnodes++;
	struct view_node *n = &v->nodes[lo];
	memset(n, 0, sizeof *n);
	copy(n->name, sizeof n->name, name);
	n->first_ts = ts;
	n->host_used = n->rx = n->tx = NAN;
	for (int i = 0; i < VIEW_SVC_N; i++)
		n->svc[i] = NAN;
	return n;
}

static struct view_card *card_get(struct view_node *n, int card)
{
	if (card >= n->ncards) {
		int nc = card + 1;
		struct view_card *na = realloc(n->cards, (size_t)nc * sizeof *na);
		if (!na)
			abort();
		for (int i = n->ncards; i < nc; i++) {
			memset(&na[i], 0, sizeof na[i]);
			na[i].used = na[i].peak = na[i].budget = na[i].rss = NAN;
			na[i].kv_used = na[i].kv_budget = NAN;
		}
		n->cards = na;
		n->ncards = nc;
	}
	n->cards[card].present = 1;
	return &n->cards[card];
}

const struct view_check *view_check(const struct view *v, const char *node,
				    const char *item)
{
	const struct view_check *worst = NULL;
	/* checks are sorted by (item, node, stage): the first of (item,
	 * node), then its stages */
	size_t lo = 0, hi = v->nchecks;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(v->checks[mid].item, item);
		if (!c)
			c = strcmp(v->checks[mid].node, node);
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo; i < v->nchecks && !strcmp(v->checks[i].item, item) &&
			    !strcmp(v->checks[i].node, node);
	     i++)
		if (!worst || check_status_parse(v->checks[i].status, NULL) >
				  check_status_parse(worst->status, NULL))
			worst = &v->checks[i];
	return worst;
}

static uint32_t *stage_slot(const struct view *v, const char *node,
			    const char *id);

/* Has stage id (a producer of item) reported it? */
static int stage_reported(const struct view *v, const char *item,
			  const char *id)
{
	for (size_t i = 0; i < v->nchecks; i++)
		if (!strcmp(v->checks[i].item, item) &&
		    !strcmp(v->checks[i].stage, id))
			return 1;
	return 0;
}

/* Before the verdict: the playbook's stages that declare item (not the
 * rehearsal's), how many of them the console has ended (and of those,
 * how many without reporting it: silent), and whether any requires it
 * (a check without "required": false). */
static int item_producers(const struct view *v, const char *item,
			  int *ended, int *silent, int *required)
{
	size_t i;
	json_t *st;
	int n = 0;
	*ended = *silent = *required = 0;
	if (!json_is_array(v->pb_doc_stages) || checklist_is_rehearsal(item))
		return 0;
	json_array_foreach(v->pb_doc_stages, i, st)
	{
		json_t *c = json_object_get(json_object_get(st, "checks"), item);
		const char *id = json_string_value(json_object_get(st, "id"));
		uint32_t e;
		if (!c || !id || json_is_true(json_object_get(st, "rehearsal")))
			continue;
		n++;
		*required |= !json_is_false(json_object_get(c, "required"));
		e = v->stage_hcap ? *stage_slot(v, CONSOLE_NODE, id) : 0;
		if (e && !strcmp(v->stages[e - 1].state, "end")) {
			(*ended)++;
			*silent += !stage_reported(v, item, id);
		}
	}
	return n;
}

const char *view_item_status(const struct view *v, const char *item)
{
	const char *worst = NULL;
	int ended, silent, required, n;
	for (size_t i = 0; i < v->nitems; i++)
		if (!strcmp(v->items[i].item, item))
			return v->items[i].status;
	for (size_t i = 0; i < v->nchecks; i++)
		if (!strcmp(v->checks[i].item, item) &&
		    (!worst || check_status_parse(v->checks[i].status, NULL) >
				   check_status_parse(worst, NULL)))
			worst = v->checks[i].status;
	n = item_producers(v, item, &ended, &silent, &required);
	/* Evidence, but a stage that declares the item ended without
	 * giving it: the verdict will fold that stage in as "not run"
	 * (checklist_fold), worse than another stage's pass (validate's
	 * text-only numerics.image beside a failed image-check). */
	if (worst && silent &&
	    check_status_parse(worst, NULL) < CHECK_NOT_RUN)
		return check_status_name(CHECK_NOT_RUN);
	if (worst)
		return worst;
	/* No evidence, and every stage that would give it has ended
	 * (failed, skipped, or done without it): the verdict's "not run"
	 * (docs/checklist.md), not "no evidence" while a run is held. */
	return n && ended == n ? "not run" : NULL;
}

int view_item_optional(const struct view *v, const char *item)
{
	int ended, silent, required;
	for (size_t i = 0; i < v->nitems; i++)
		if (!strcmp(v->items[i].item, item))
			return v->items[i].optional;
	/* before the verdict: declared by no stage that requires it */
	return item_producers(v, item, &ended, &silent, &required) && !required;
}

const struct view_stage *view_current_stage(const struct view *v)
{
	const struct view_stage *best = NULL;
	for (int pass = 0; pass < 2 && !best; pass++)
		for (size_t i = 0; i < v->nstages; i++) {
			const struct view_stage *s = &v->stages[i];
			int console = !strcmp(s->node, CONSOLE_NODE);
			if ((pass == 0) != console || !strcmp(s->state, "end"))
				continue;
			if (!best || s->ts >= best->ts)
				best = s;
		}
	return best;
}

int view_stage_superseded(const struct view *v, const struct view_stage *s)
{
	const struct view_node *n;
	char base[sizeof s->id], other[sizeof s->id];
	size_t me = (size_t)(s - v->stages);
	if (!strcmp(s->node, CONSOLE_NODE) || !(n = view_node(v, s->node)))
		return 0;
	checklist_stage_of(s->id, base, sizeof base);
	for (size_t i = 0; i < n->nstix; i++) {
		if (n->stix[i] <= me)
			continue;
		checklist_stage_of(v->stages[n->stix[i]].id, other,
				   sizeof other);
		if (!strcmp(base, other))
			return 1;
	}
	return 0;
}

/* Is s an agent's run of console stage id (id itself or an attempt
 * "id.N")? */
static int stage_of(const struct view_stage *s, const char *id)
{
	size_t n = strlen(id);
	return strcmp(s->node, CONSOLE_NODE) && !strncmp(s->id, id, n) &&
	       (!s->id[n] || s->id[n] == '.');
}

double view_stage_progress(const struct view *v, const struct view_stage *cs,
			   int64_t *eta_ns)
{
	double sum = 0, p;
	int n = 0;
	for (size_t i = 0; i < v->nstages; i++)
		if (stage_of(&v->stages[i], cs->id)) {
			sum += !strcmp(v->stages[i].state, "end")
				   ? 1.0
				   : v->stages[i].progress;
			n++;
		}
	p = !strcmp(cs->state, "end") ? 1.0 : n ? sum / n : cs->progress;
	if (p < 0)
		p = 0;
	if (p > 1)
		p = 1;
	if (eta_ns) {
		int64_t run = v->t - cs->first_ts;
		*eta_ns = p > 0.01 && p < 1 && run > 0
			      ? (int64_t)((double)run * (1 - p) / p)
			      : -1;
	}
	return p;
}

const struct view_line *view_log_get(const struct view *v, size_t i)
{
	if (i >= v->nlog)
		return NULL;
	return &v->log[(v->loghead + VIEW_LOG - 1 - i) % VIEW_LOG];
}

int view_node_stale(const struct view *v, const struct view_node *n,
		    int64_t *age)
{
	int64_t last = n->last_ts ? n->last_ts : n->first_ts;
	int64_t a = v->t - last;
	if (a < 0)
		a = 0;
	if (age)
		*age = a;
	if (n->state[0] || v->verdict_ts)
		return 0;
	return a > VIEW_STALE_NS;
}

int64_t view_elapsed(const struct view *v)
{
	int64_t end = v->verdict_ts && v->verdict_ts < v->t ? v->verdict_ts
							     : v->t;
	return v->start && end > v->start ? end - v->start : 0;
}

/* -------------------------------------------------------------------- fold */

void view_log_push(struct view *v, int64_t ts, const char *line, size_t len)
{
	struct view_line *l = &v->log[v->loghead];
	char *copy_ = malloc(len + 1);
	if (!copy_)
		abort();
	memcpy(copy_, line, len);
	copy_[len] = 0;
	if (l->line && v->log_evict)
		v->log_evict(v->log_evict_arg, l);
	free(l->line);
	l->line = copy_;
	l->ts = ts;
	v->loghead = (v->loghead + 1) % VIEW_LOG;
	if (v->nlog < VIEW_LOG)
		v->nlog++;
}

static const char *jstr(json_t *o, const char *k)
{
	const char *s = json_string_value(json_object_get(o, k));
	return s ? s : "";
}

static double jnum(json_t *o, const char *k)
{
	json_t *j = json_object_get(o, k);
	return json_is_number(j) ? json_number_value(j) : NAN;
}

static int64_t jint(json_t *o, const char *k, int64_t dflt)
{
	json_t *j = json_object_get(o, k);
	if (json_is_integer(j))
		return json_integer_value(j);
	if (json_is_real(j))
		return (int64_t)json_real_value(j);
	return dflt;
}

/* A check's value or threshold as shown: numbers, strings, JSON text. */
static void json_text(json_t *j, char *out, size_t max)
{
	if (!j || json_is_null(j))
		out[0] = 0;
	else if (json_is_integer(j))
		snprintf(out, max, "%lld", (long long)json_integer_value(j));
	else if (json_is_real(j))
		snprintf(out, max, "%.6g", json_real_value(j));
	else if (json_is_string(j))
		copy(out, max, json_string_value(j));
	else {
		char *s = json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY);
		copy(out, max, s ? s : "?");
		free(s);
	}
}

static void mark_push(struct view *v, int kind, int64_t ts, const char *node,
		      const char *fmt, const char *a, const char *b)
{
	struct view_mark *m = VEC_PUSH(v->marks, VIEW_MARKS);
	m->kind = kind;
	m->ts = ts;
	copy(m->node, sizeof m->node, node);
	snprintf(m->text, sizeof m->text, fmt, a, b);
}

const char *const view_svc_metric[VIEW_SVC_N] = {
    [SVC_CONC] = "load.concurrency",	[SVC_INFLIGHT] = "load.inflight",
    [SVC_REQUESTS] = "load.requests",	[SVC_RPS] = "load.requests_per_s",
    [SVC_TPS] = "load.tokens_per_s",	[SVC_ERRORS] = "load.errors",
    [SVC_STALLS] = "load.stalls",	[SVC_TTFT_P50] = "load.ttft_p50_ms",
    [SVC_TTFT_P90] = "load.ttft_p90_ms", [SVC_TTFT_P99] = "load.ttft_p99_ms",
    [SVC_TPOT_P50] = "load.tpot_p50_ms", [SVC_TPOT_P90] = "load.tpot_p90_ms",
    [SVC_TPOT_P99] = "load.tpot_p99_ms", [SVC_E2E_P50] = "load.e2e_p50_ms",
    [SVC_E2E_P90] = "load.e2e_p90_ms",	[SVC_E2E_P99] = "load.e2e_p99_ms",
    [SVC_QUEUE] = "serve.queue",	[SVC_RUNNING] = "serve.running",
    [SVC_GEN_TOKENS] = "serve.gen_tokens",
    [SVC_KV_USED] = "serve.kv_blocks_used",
    [SVC_KV_SHARED] = "serve.kv_blocks_shared",
    [SVC_KV_CACHED] = "serve.kv_blocks_cached",
    [SVC_KV_TOTAL] = "serve.kv_blocks_total",
    [SVC_PREEMPTIONS] = "serve.preemptions",
    [SVC_ERR0 + 0] = "load.error.http_400",
    [SVC_ERR0 + 1] = "load.error.http_404",
    [SVC_ERR0 + 2] = "load.error.http_413",
    [SVC_ERR0 + 3] = "load.error.http_429",
    [SVC_ERR0 + 4] = "load.error.http_500",
    [SVC_ERR0 + 5] = "load.error.http_503",
    [SVC_ERR0 + 6] = "load.error.http_other",
    [SVC_ERR0 + 7] = "load.error.timeout",
    [SVC_ERR0 + 8] = "load.error.connect",
    [SVC_ERR0 + 9] = "load.error.broken",
};

const char *view_svc_err_class(int i)
{
	return view_svc_metric[SVC_ERR0 + i] + strlen("load.error.");
}

int view_metric_ringed(const char *metric)
{
	return !strcmp(metric, "mem.used") || !strcmp(metric, "net.rx_bps") ||
	       !strcmp(metric, "net.tx_bps") ||
	       !strcmp(metric, view_svc_metric[SVC_TPS]);
}

static int svc_index(const char *metric)
{
	if (strncmp(metric, "load.", 5) && strncmp(metric, "serve.", 6))
		return -1;
	for (int i = 0; i < VIEW_SVC_N; i++)
		if (!strcmp(metric, view_svc_metric[i]))
			return i;
	return -1;
}

static void view_sample(struct view *v, const char *node, int card,
		 const char *metric, int64_t ts, double value)
{
	struct view_node *n = node_get(v, node, ts);
	if (ts > n->last_ts)
		n->last_ts = ts;
	if (ts > n->last_sample_ts)
		n->last_sample_ts = ts;
	if (card < 0) {
		if (!strcmp(metric, "host.mem.used"))
			n->host_used = value;
		else if (!strcmp(metric, "net.rx_bps")) {
			n->rx = value;
			n->rx_ts[n->rx_hist.head] = ts;
			view_ring_push(&n->rx_hist, value);
		} else if (!strcmp(metric, "net.tx_bps")) {
			n->tx = value;
			view_ring_push(&n->tx_hist, value);
		} else {
			int k = svc_index(metric);
			if (k < 0)
				return;
			n->svc[k] = value;
			n->has_svc = 1;
			if (k == SVC_TPS)
				view_ring_push(&n->tps_hist, value);
		}
		return;
	}
	if (card > 65535)
		return; /* not a card number any agent sends */
	struct view_card *c = card_get(n, card);
	if (ts > c->ts)
		c->ts = ts;
	if (!strcmp(metric, "mem.used")) {
		c->used = value;
		view_ring_push(&c->hist, value);
	} else if (!strcmp(metric, "mem.peak"))
		c->peak = value;
	else if (!strcmp(metric, "mem.budget"))
		c->budget = value;
	else if (!strcmp(metric, "rank.rss"))
		c->rss = value;
	else if (!strcmp(metric, "kv.used")) {
		c->kv_used = value;
		n->has_svc = 1;
	} else if (!strcmp(metric, "kv.budget"))
		c->kv_budget = value;
}

/* (node, id) hashed with the engine's FNV-1a (hash_str64) */
static uint64_t stage_key_hash(const char *node, const char *id)
{
	return hash_str64(node) * 31 + hash_str64(id);
}

/* The slot of (node, id) in the stage hash: its entry, or the empty
 * slot where it goes.  The table has room (stage_index_add keeps it at
 * most half full). */
static uint32_t *stage_slot(const struct view *v, const char *node,
			    const char *id)
{
	size_t mask = v->stage_hcap - 1,
	       i = (size_t)stage_key_hash(node, id) & mask;
	for (;; i = (i + 1) & mask) {
		uint32_t e = v->stage_hash[i];
		if (!e || (!strcmp(v->stages[e - 1].id, id) &&
			   !strcmp(v->stages[e - 1].node, node)))
			return &v->stage_hash[i];
	}
}

/* Index stage k (just appended) by (node, id). */
static void stage_index_add(struct view *v, size_t k)
{
	if (2 * v->nstages > v->stage_hcap) {
		size_t cap = v->stage_hcap ? v->stage_hcap * 2 : 64;
		while (2 * v->nstages > cap)
			cap *= 2;
		free(v->stage_hash);
		v->stage_hash = calloc(cap, sizeof *v->stage_hash);
		if (!v->stage_hash)
			abort();
		v->stage_hcap = cap;
		for (size_t i = 0; i < v->nstages; i++)
			*stage_slot(v, v->stages[i].node, v->stages[i].id) =
			    (uint32_t)i + 1;
		return;
	}
	*stage_slot(v, v->stages[k].node, v->stages[k].id) = (uint32_t)k + 1;
}

static void apply_stage(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	const char *id = jstr(o, "stage_id");
	struct view_stage *s = NULL;
	/* A stage the console starts again (a rerun) ends a hold. */
	if (!strcmp(ev->node, CONSOLE_NODE) &&
	    !strcmp(jstr(o, "state"), "start"))
		v->held = 0;
	if (!*id)
		id = jstr(o, "stage");
	/* the stored key is the copy (names past the field's size are
	 * cut), so look up what copy() keeps */
	char node[sizeof s->node], sid[sizeof s->id];
	copy(node, sizeof node, ev->node);
	copy(sid, sizeof sid, id);
	if (v->stage_hcap) {
		uint32_t e = *stage_slot(v, node, sid);
		if (e)
			s = &v->stages[e - 1];
	}
	if (!s) {
		if (v->nstages == v->capstages) {
			size_t nc = v->capstages ? v->capstages * 2 : 16;
			struct view_stage *na =
			    realloc(v->stages, nc * sizeof *na);
			if (!na)
				abort();
			v->stages = na;
			v->capstages = nc;
		}
		s = &v->stages[v->nstages++];
		memset(s, 0, sizeof *s);
		copy(s->node, sizeof s->node, node);
		copy(s->id, sizeof s->id, sid);
		s->first_ts = ev->ts;
		stage_index_add(v, v->nstages - 1);
		if (strcmp(ev->node, CONSOLE_NODE)) {
			struct view_node *n = node_get(v, ev->node, ev->ts);
			if (n->nstix == n->capstix) {
				size_t nc = n->capstix ? n->capstix * 2 : 16;
				uint32_t *na =
				    realloc(n->stix, nc * sizeof *na);
				if (!na)
					abort();
				n->stix = na;
				n->capstix = nc;
			}
			n->stix[n->nstix++] = (uint32_t)(v->nstages - 1);
		}
	}
	copy(s->step, sizeof s->step, jstr(o, "stage"));
	copy(s->state, sizeof s->state, jstr(o, "state"));
	double p = jnum(o, "progress");
	if (!isnan(p))
		s->progress = p;
	if (json_is_integer(json_object_get(o, "rc"))) {
		s->has_rc = 1;
		s->rc = (int)jint(o, "rc", 0);
	} else if (strcmp(s->state, "end"))
		s->has_rc = 0;
	copy(s->msg, sizeof s->msg, jstr(o, "msg"));
	copy(s->result, sizeof s->result, jstr(o, "result"));
	s->ts = ev->ts;
	if (!strcmp(s->state, "start"))
		s->has_rc = 0;
	/* A stage the console skipped (a stage it needs did not succeed)
	 * is not a failure of its own: the one it needed has its mark. */
	if (!strcmp(s->state, "end") && s->has_rc && s->rc != 0 &&
	    json_object_get(o, "rank") == NULL && strcmp(s->result, "skipped")) {
		/* A service the console ended done (it was up) and the agent
		 * then stopped at the playbook's end (bye: reason shutdown)
		 * did not fail: no failure marker on a GO day's screen. */
		if (!strcmp(jstr(o, "reason"), "shutdown") && v->stage_hcap) {
			char csid[sizeof s->id];
			uint32_t e;
			copy(csid, sizeof csid, id);
			e = *stage_slot(v, CONSOLE_NODE, csid);
			if (e && !strcmp(v->stages[e - 1].state, "end") &&
			    !strcmp(v->stages[e - 1].result, "done"))
				return;
		}
		mark_push(v, VIEW_FAILURE, ev->ts, ev->node,
			  "stage %s failed: %s", id, s->msg);
	}
}

static int check_cmp(const struct view_check *a, const char *item,
		     const char *node, const char *stage)
{
	int c = strcmp(a->item, item);
	if (!c)
		c = strcmp(a->node, node);
	return c ? c : strcmp(a->stage, stage);
}

static void apply_check(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	const char *item = jstr(o, "item");
	const char *node = json_is_string(json_object_get(o, "for"))
			       ? jstr(o, "for")
			       : ev->node;
	char stage[80];
	size_t i = 0;
	struct view_check *c;
	checklist_stage_of(json_string_value(json_object_get(o, "stage_id")),
			   stage, sizeof stage);
	while (i < v->nchecks &&
	       check_cmp(&v->checks[i], item, node, stage) < 0)
		i++;
	if (i == v->nchecks || check_cmp(&v->checks[i], item, node, stage)) {
		if (v->nchecks == v->capchecks) {
			size_t nc = v->capchecks ? v->capchecks * 2 : 32;
			struct view_check *na =
			    realloc(v->checks, nc * sizeof *na);
			if (!na)
				abort();
			v->checks = na;
			v->capchecks = nc;
		}
		memmove(&v->checks[i + 1], &v->checks[i],
			(v->nchecks - i) * sizeof *v->checks);
		v->nchecks++;
		memset(&v->checks[i], 0, sizeof v->checks[i]);
		copy(v->checks[i].item, sizeof v->checks[i].item, item);
		copy(v->checks[i].node, sizeof v->checks[i].node, node);
		copy(v->checks[i].stage, sizeof v->checks[i].stage, stage);
	}
	c = &v->checks[i];
	copy(c->status, sizeof c->status, jstr(o, "status"));
	copy(c->detail, sizeof c->detail, jstr(o, "detail"));
	json_text(json_object_get(o, "value"), c->value, sizeof c->value);
	json_text(json_object_get(o, "threshold"), c->threshold,
		  sizeof c->threshold);
	c->ts = ev->ts;
	if (!strcmp(c->status, "fail"))
		mark_push(v, VIEW_FAILURE, ev->ts, node, "%s failed: %s",
			  item, c->detail);
	if (!strcmp(item, "memory.plan")) {
		json_t *plan = json_object_get(o, "plan");
		if (!json_is_object(plan))
			plan = json_object_get(o, "value");
		copy(v->plan_status, sizeof v->plan_status, c->status);
		copy(v->plan_detail, sizeof v->plan_detail, c->detail);
		json_decref(v->plan);
		v->plan = json_is_object(plan) ? json_incref(plan) : NULL;
	}
}

static void apply_comm(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_comm *c;
	/* A run's in-run totals (one row per group and op over "calls")
	 * are not a size sweep: they stay off the bandwidth bars.  Those
	 * over an interval (soak) are what the stage moves now: kept for
	 * the Overview, marked inrun. */
	int inrun = json_object_get(o, "interval_s") != NULL;
	if (json_object_get(o, "calls") && !inrun)
		return;
	c = VEC_PUSH(v->comm, VIEW_COMM);
	c->inrun = inrun;
	copy(c->node, sizeof c->node, ev->node);
	copy(c->op, sizeof c->op, jstr(o, "op"));
	copy(c->group, sizeof c->group, jstr(o, "group"));
	c->bytes = jint(o, "bytes", 0);
	if (inrun && jint(o, "calls", 0) > 0)
		c->bytes /= jint(o, "calls", 0);
	c->wrong = jint(o, "wrong", 0);
	c->ranks = (int)jint(o, "ranks", 0);
	c->from = (int)jint(o, "from", -1);
	c->to = (int)jint(o, "to", -1);
	c->time_us = jnum(o, "time_us");
	c->algbw = jnum(o, "algbw");
	c->busbw = jnum(o, "busbw");
	/* A pair's bandwidth may come as "gbps". */
	if (isnan(c->busbw))
		c->busbw = jnum(o, "gbps");
	c->ts = ev->ts;
}

static void apply_num(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_num *x = VEC_PUSH(v->num, VIEW_NUM);
	copy(x->node, sizeof x->node, ev->node);
	copy(x->level, sizeof x->level, jstr(o, "level"));
	copy(x->name, sizeof x->name, jstr(o, "name"));
	x->max_abs = jnum(o, "max_abs");
	x->max_rel = jnum(o, "max_rel");
	x->kl = jnum(o, "kl");
	x->top1 = jnum(o, "top1");
	x->ppl_ref = jnum(o, "ppl_ref");
	x->ppl = jnum(o, "ppl");
	x->ts = ev->ts;
}

static void apply_perf(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_perf *x = VEC_PUSH(v->perf, VIEW_PERF);
	copy(x->node, sizeof x->node, ev->node);
	copy(x->stage_id, sizeof x->stage_id, jstr(o, "stage_id"));
	x->ttft_ms = jnum(o, "ttft_ms");
	x->tpot_ms = jnum(o, "tpot_ms");
	x->tokens_per_s = jnum(o, "tokens_per_s");
	x->prompt_tokens = jint(o, "prompt_tokens", -1);
	x->gen_tokens = jint(o, "gen_tokens", -1);
	x->ts = ev->ts;
	x->concurrency = (int)jint(o, "concurrency", -1);
	x->requests_per_s = jnum(o, "requests_per_s");
	{
		static const char *const lat[] = {"ttft", "tpot", "e2e"};
		static const char *const ps[] = {"p50", "p90", "p99"};
		double *dst[] = {x->ttft_p, x->tpot_p, x->e2e_p};
		char k[32];
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 3; j++) {
				snprintf(k, sizeof k, "%s_%s_ms", lat[i], ps[j]);
				dst[i][j] = jnum(o, k);
			}
	}
	x->requests = jint(o, "requests", -1);
	x->errors = jint(o, "errors", -1);
	x->stalls = jint(o, "stalls", -1);
	x->classes[0] = 0;
	{
		json_t *cl = json_object_get(o, "error_classes"), *c;
		const char *k;
		size_t used = 0;
		json_object_foreach(cl, k, c) {
			int m;
			if (!json_is_integer(c) || !json_integer_value(c))
				continue;
			m = snprintf(x->classes + used, sizeof x->classes - used,
				     "%s%s %lld", used ? " " : "", k,
				     (long long)json_integer_value(c));
			if (m < 0 || (size_t)m >= sizeof x->classes - used) {
				x->classes[used] = 0;
				break;
			}
			used += (size_t)m;
		}
	}
}

static void apply_train(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_train *x = VEC_PUSH(v->train, VIEW_TRAIN);
	copy(x->node, sizeof x->node, ev->node);
	copy(x->stage_id, sizeof x->stage_id, jstr(o, "stage_id"));
	copy(x->layout, sizeof x->layout, jstr(o, "layout"));
	x->rank = (int)jint(o, "rank", -1);
	x->step = jint(o, "step", 0);
	x->skipped = jint(o, "skipped", 0) != 0;
	x->tokens = jint(o, "tokens", -1);
	x->loss = jnum(o, "loss");
	x->grad_norm = jnum(o, "grad_norm");
	x->loss_scale = jnum(o, "loss_scale");
	x->lr = jnum(o, "lr");
	x->t_fwd = jnum(o, "t_fwd_s");
	x->t_bwd = jnum(o, "t_bwd_s");
	x->t_opt = jnum(o, "t_opt_s");
	x->t_comm = jnum(o, "t_comm_s");
	x->ts = ev->ts;
}

/* A console alert: a node's refused input (count per reason), or the
 * store's state (shown until it is writable again). */
static void apply_alert(struct view *v, const struct proto_event *ev)
{
	const char *kind = jstr(ev->obj, "kind"), *node = jstr(ev->obj, "for");
	const char *reason = jstr(ev->obj, "reason");
	struct view_alert *a = NULL;
	if (!strcmp(kind, "store")) {
		copy(v->store_alert, sizeof v->store_alert,
		     strcmp(jstr(ev->obj, "state"), "ok") ? jstr(ev->obj, "msg")
							  : "");
		return;
	}
	for (size_t i = 0; i < v->nalerts && !a; i++)
		if (!strcmp(v->alerts[i].node, node) &&
		    !strcmp(v->alerts[i].reason, reason))
			a = &v->alerts[i];
	if (!a && v->nalerts < VIEW_ALERTS) {
		a = &v->alerts[v->nalerts++];
		copy(a->node, sizeof a->node, node);
		copy(a->reason, sizeof a->reason, reason);
	}
	if (!a)
		return;
	a->count = (uint64_t)jint(ev->obj, "count", 0);
	a->rate = !strcmp(kind, "rate");
}

uint64_t view_node_refused(const struct view *v, const char *node,
			   const char **reason)
{
	uint64_t n = 0;
	if (reason)
		*reason = NULL;
	for (size_t i = 0; i < v->nalerts; i++)
		if (!strcmp(v->alerts[i].node, node)) {
			n += v->alerts[i].count;
			if (reason)
				*reason = v->alerts[i].reason;
		}
	return n;
}

/* validate's text.generation check carries the texts. */
static void apply_text(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_text *x = &v->text;
	if (strcmp(jstr(o, "item"), "text.generation") ||
	    !json_object_get(o, "text"))
		return;
	copy(x->node, sizeof x->node, ev->node);
	copy(x->prompt, sizeof x->prompt, jstr(o, "prompt_text"));
	copy(x->text, sizeof x->text, jstr(o, "text"));
	copy(x->ref_text, sizeof x->ref_text, jstr(o, "ref_text"));
	x->agree = (int)jint(o, "agree", 0);
	x->n = (int)jint(o, "n", 0);
}

/* image-check's perf.image check carries the TTFT split. */
static void apply_image(struct view *v, const struct proto_event *ev)
{
	json_t *o = ev->obj;
	struct view_image *x = &v->image;
	static const char *const q[2] = {"p50", "p99"};
	if (strcmp(jstr(o, "item"), "perf.image") ||
	    !json_is_object(json_object_get(o, "ttft_ms")))
		return;
	copy(x->node, sizeof x->node, ev->node);
	x->n = (int)jint(o, "n", 0);
	for (int k = 0; k < 2; k++) {
		x->pre[k] = jnum(json_object_get(o, "preprocess_ms"), q[k]);
		x->enc[k] = jnum(json_object_get(o, "encode_ms"), q[k]);
		x->fill[k] = jnum(json_object_get(o, "prefill_ms"), q[k]);
		x->ttft[k] = jnum(json_object_get(o, "ttft_ms"), q[k]);
	}
}

/* The session's start is its earliest event, on the console's clock:
 * node events (agents' hellos come before the first stage) count when
 * they are within VIEW_CLOCK_SKEW of the console's first event; a node
 * clock wrong by years (or forged) never stretches the run's elapsed
 * time.  Before the console has spoken, the earliest event stands in.
 * store/reader.c's SRQ_SPAN applies the same rule to a file. */
static void note_start(struct view *v, int console, int64_t ts)
{
	if (console && !v->start_console) {
		v->start_console = 1;
		if (!v->start || v->start > ts || v->start < ts - VIEW_CLOCK_SKEW)
			v->start = ts;
	} else if (!v->start || (ts < v->start && (!v->start_console ||
						   ts >= v->start - VIEW_CLOCK_SKEW))) {
		v->start = ts;
	}
}

void view_apply(struct view *v, const struct proto_event *ev)
{
	int console = !strcmp(ev->node, CONSOLE_NODE);
	v->applied++;
	note_start(v, console, ev->ts);
	if (ev->ts > v->t)
		v->t = ev->ts;
	if (ev->kind == EV_SAMPLE) {
		json_t *c = json_object_get(ev->obj, "card");
		json_t *vs = json_object_get(ev->obj, "values"), *x;
		size_t i;
		if (console || !json_is_integer(c))
			return;
		if (json_is_array(vs)) /* cards card, card+1, ... */
			json_array_foreach(vs, i, x) view_sample(
			    v, ev->node, (int)(json_integer_value(c) + (int)i),
			    jstr(ev->obj, "metric"), ev->ts,
			    json_is_number(x) ? json_number_value(x) : NAN);
		else
			view_sample(v, ev->node, (int)json_integer_value(c),
				    jstr(ev->obj, "metric"), ev->ts,
				    jnum(ev->obj, "value"));
		return;
	}
	if (!console) {
		struct view_node *n = node_get(v, ev->node, ev->ts);
		switch (ev->kind) {
		case EV_STAGE: case EV_CHECK: case EV_COMM: case EV_NUMERICS:
		case EV_PERF: case EV_TRAIN:
			if (ev->ts > n->last_ts)
				n->last_ts = ev->ts;
			break;
		case EV_FACTS: {
			static const char *const env[] = {"v", "seq", "ts",
							  "node", "type", NULL};
			json_decref(n->facts);
			n->facts = json_deep_copy(ev->obj);
			for (int k = 0; env[k]; k++)
				json_object_del(n->facts, env[k]);
			break;
		}
		case EV_HELLO:
			if (!n->sim &&
			    json_is_true(json_object_get(ev->obj, "sim"))) {
				n->sim = 1;
				v->sim_nodes++;
			}
			break;
		default:
			break;
		}
	}
	switch (ev->kind) {
	case EV_STAGE:
		apply_stage(v, ev);
		return;
	case EV_CHECK:
		apply_check(v, ev);
		apply_text(v, ev);
		apply_image(v, ev);
		return;
	case EV_COMM:
		apply_comm(v, ev);
		return;
	case EV_NUMERICS:
		apply_num(v, ev);
		return;
	case EV_PERF:
		apply_perf(v, ev);
		return;
	case EV_TRAIN:
		if (!console)
			apply_train(v, ev);
		return;
	default:
		break;
	}
	if (!console) /* hold, marker, verdict: the console's decisions only */
		return;
	if (ev->kind == EV_HOLD) {
		v->held = 1;
		copy(v->held_msg, sizeof v->held_msg, jstr(ev->obj, "msg"));
	} else if (ev->kind == EV_MARKER)
		mark_push(v, VIEW_MARKER, ev->ts, ev->node, "%s%s",
			  jstr(ev->obj, "note"), "");
	else if (ev->kind == EV_ALERT)
		apply_alert(v, ev);
	else if (ev->kind == EV_NODE && *jstr(ev->obj, "name")) {
		struct view_node *n = node_get(v, jstr(ev->obj, "name"), ev->ts);
		copy(n->state, sizeof n->state, jstr(ev->obj, "state"));
		copy(n->why, sizeof n->why, jstr(ev->obj, "msg"));
	} else if (ev->kind == EV_VERDICT) {
		json_t *failed = json_object_get(ev->obj, "failed");
		size_t i, off = 0;
		json_t *it;
		const char *key;
		json_t *st;
		v->verdict = json_is_true(json_object_get(ev->obj, "go"));
		v->verdict_ts = ev->ts;
		v->held = 0;
		v->nitems = 0;
		json_object_foreach(json_object_get(ev->obj, "items"), key, st)
		{
			if (v->nitems == VIEW_ITEMS)
				break;
			copy(v->items[v->nitems].item,
			     sizeof v->items[v->nitems].item, key);
			copy(v->items[v->nitems].status,
			     sizeof v->items[v->nitems].status,
			     json_string_value(st) ? json_string_value(st) : "");
			v->items[v->nitems].optional = 0;
			json_array_foreach(json_object_get(ev->obj, "optional"),
					   i, it)
			{
				if (json_string_value(it) &&
				    !strcmp(json_string_value(it), key))
					v->items[v->nitems].optional = 1;
			}
			v->nitems++;
		}
		v->verdict_failed[0] = 0;
		json_array_foreach(failed, i, it)
		{
			int k = snprintf(v->verdict_failed + off,
					 sizeof v->verdict_failed - off,
					 "%s%s", i ? " " : "",
					 json_string_value(it)
					     ? json_string_value(it)
					     : "?");
			if (k < 0 || (size_t)k >= sizeof v->verdict_failed - off)
				break;
			off += (size_t)k;
		}
	}
}

/*
 * Samples are most of the traffic (1024 cards at 10 Hz is 20k lines a
 * second): they take a path without jansson, through the store's own
 * allocation-free scanner, and fall back to the full parse if anything is
 * unusual.
 */

/* The `values` form: cards card, card+1, ... in one line. */
/*
 * The hot path for sample lines: the scanner (no tree), the protocol's one
 * envelope check, then the sample's own fields.  Anything unusual (escapes,
 * odd types) returns -1 and takes the general path through jansson, which
 * decides the same way.
 */
static int sample_fast(struct view *v, const char *line, size_t len)
{
	static double vals[PROTO_MAX_VALUES];
	struct jscan j;
	struct proto_envelope env;
	char node[PROTO_MAX_NODE + 1], metric[32];
	int n = 1;
	if (json_scan_object(line, len, &j) < 0 ||
	    proto_envelope_scan(&j, &env, NULL) < 0 || env.kind != EV_SAMPLE ||
	    env.node_esc)
		return -1;
	const struct jmember *mm = jscan_get(&j, "metric"),
			     *mc = jscan_get(&j, "card"),
			     *mv = jscan_get(&j, "value"),
			     *mvs = jscan_get(&j, "values");
	if (!mm || !mc || mm->kind != J_STR || mm->vesc ||
	    mm->vlen >= sizeof metric || mc->kind != J_INT || !mv == !mvs)
		return -1;
	if (mv) {
		if (mv->kind != J_INT && mv->kind != J_REAL)
			return -1;
		vals[0] = jscan_real(mv);
	} else if ((n = jscan_numbers(mvs, vals, PROTO_MAX_VALUES)) < 1) {
		return -1;
	}
	memcpy(node, env.node, env.node_len);
	node[env.node_len] = 0;
	memcpy(metric, mm->val, mm->vlen);
	metric[mm->vlen] = 0;
	int64_t card = jscan_int(mc);
	v->applied++;
	note_start(v, !strcmp(node, CONSOLE_NODE), env.ts);
	if (env.ts > v->t)
		v->t = env.ts;
	if (strcmp(node, CONSOLE_NODE) && card >= (mv ? INT32_MIN : 0) &&
	    card + n <= INT32_MAX)
		for (int i = 0; i < n; i++)
			view_sample(v, node, (int)card + i, metric, env.ts,
				    vals[i]);
	if (!v->no_log)
		view_log_push(v, env.ts, line, len);
	return 0;
}

int view_apply_line(struct view *v, const char *line, size_t len)
{
	struct proto_event ev;
	struct d0_err err;
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	if (len > 20 && memmem(line, len, "\"type\":\"sample\"", 15) &&
	    sample_fast(v, line, len) == 0)
		return 0;
	if (proto_event_parse(line, len, &ev, &err) < 0)
		return -1;
	view_apply_parsed(v, &ev, line, len);
	proto_event_free(&ev);
	return 0;
}

void view_apply_parsed(struct view *v, const struct proto_event *ev,
		       const char *line, size_t len)
{
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	view_apply(v, ev);
	if (!v->no_log)
		view_log_push(v, ev->ts, line, len);
}

/* -------------------------------------------------------------------- dump */

static void dnum(FILE *f, const char *k, double x)
{
	if (isnan(x))
		fprintf(f, " %s=-", k);
	else
		fprintf(f, " %s=%.6g", k, x);
}

void view_dump(const struct view *v, FILE *f)
{
	const struct view_stage *cur = view_current_stage(v);
	fprintf(f, "t=%lld start=%lld name=%s model=%s playbook=%s\n",
		(long long)v->t, (long long)v->start, v->name, v->model,
		v->playbook);
	if (cur)
		fprintf(f, "current %s/%s %s %.3f\n", cur->node, cur->id,
			cur->state, cur->progress);
	for (size_t i = 0; i < v->nnodes; i++) {
		const struct view_node *n = &v->nodes[i];
		int64_t age;
		int stale = view_node_stale(v, n, &age);
		fprintf(f, "node %s first=%lld last=%lld sample=%lld stale=%d",
			n->name, (long long)n->first_ts, (long long)n->last_ts,
			(long long)n->last_sample_ts, stale);
		if (n->state[0])
			fprintf(f, " state=%s why=%s", n->state, n->why);
		if (n->facts) {
			char *s = json_dumps(n->facts, JSON_COMPACT |
							   JSON_SORT_KEYS);
			fprintf(f, " facts=%s", s ? s : "?");
			free(s);
		}
		dnum(f, "host", n->host_used);
		dnum(f, "rx", n->rx);
		dnum(f, "tx", n->tx);
		fprintf(f, " rxh=");
		for (int k = 0; k < n->rx_hist.n; k++)
			fprintf(f, "%s%.6g", k ? "," : "",
				view_ring_get(&n->rx_hist, k));
		fprintf(f, " rxt=");
		for (int k = 0; k < n->rx_hist.n; k++)
			fprintf(f, "%s%lld", k ? "," : "",
				(long long)VIEW_RX_TS(n, k));
		fprintf(f, " txh=");
		for (int k = 0; k < n->tx_hist.n; k++)
			fprintf(f, "%s%.6g", k ? "," : "",
				view_ring_get(&n->tx_hist, k));
		fputc('\n', f);
		if (n->has_svc) {
			fprintf(f, "  service");
			for (int k = 0; k < VIEW_SVC_N; k++)
				dnum(f, view_svc_metric[k], n->svc[k]);
			fprintf(f, " tpsh=");
			for (int k = 0; k < n->tps_hist.n; k++)
				fprintf(f, "%s%.6g", k ? "," : "",
					view_ring_get(&n->tps_hist, k));
			fputc('\n', f);
		}
		for (int c = 0; c < n->ncards; c++) {
			const struct view_card *k = &n->cards[c];
			if (!k->present)
				continue;
			fprintf(f, "  card %d ts=%lld", c, (long long)k->ts);
			dnum(f, "used", k->used);
			dnum(f, "peak", k->peak);
			dnum(f, "budget", k->budget);
			dnum(f, "rss", k->rss);
			dnum(f, "kv", k->kv_used);
			dnum(f, "kvb", k->kv_budget);
			fprintf(f, " hist=");
			for (int h = 0; h < k->hist.n; h++)
				fprintf(f, "%s%.6g", h ? "," : "",
					view_ring_get(&k->hist, h));
			fputc('\n', f);
		}
	}
	for (size_t i = 0; i < v->nchecks; i++) {
		const struct view_check *c = &v->checks[i];
		fprintf(f, "check %s %s %s stage=%s value=%s threshold=%s "
			   "ts=%lld %s\n",
			c->item, c->node, c->status, c->stage, c->value,
			c->threshold, (long long)c->ts, c->detail);
	}
	for (size_t i = 0; i < v->nstages; i++) {
		const struct view_stage *s = &v->stages[i];
		fprintf(f, "stage %s %s step=%s %s %.3f rc=%s%d first=%lld "
			   "ts=%lld %s\n",
			s->node, s->id, s->step, s->state, s->progress,
			s->has_rc ? "" : "none:", s->has_rc ? s->rc : 0,
			(long long)s->first_ts, (long long)s->ts, s->msg);
	}
	for (size_t i = 0; i < v->comm.n; i++) {
		const struct view_comm *c = VIEW_AT(v->comm, i);
		fprintf(f, "comm %s %s %lld ranks=%d %s %d>%d", c->node, c->op,
			(long long)c->bytes, c->ranks, c->group, c->from,
			c->to);
		dnum(f, "busbw", c->busbw);
		dnum(f, "algbw", c->algbw);
		fprintf(f, " wrong=%lld%s\n", (long long)c->wrong,
			c->inrun ? " inrun" : "");
	}
	for (size_t i = 0; i < v->num.n; i++) {
		const struct view_num *x = VIEW_AT(v->num, i);
		fprintf(f, "numerics %s %s %s", x->node, x->level, x->name);
		dnum(f, "max_abs", x->max_abs);
		dnum(f, "max_rel", x->max_rel);
		dnum(f, "kl", x->kl);
		dnum(f, "top1", x->top1);
		fputc('\n', f);
	}
	for (size_t i = 0; i < v->perf.n; i++) {
		const struct view_perf *x = VIEW_AT(v->perf, i);
		fprintf(f, "perf %s %s", x->node, x->stage_id);
		dnum(f, "ttft", x->ttft_ms);
		dnum(f, "tpot", x->tpot_ms);
		dnum(f, "tps", x->tokens_per_s);
		if (x->concurrency >= 0) {
			fprintf(f, " conc=%d reqs=%lld errors=%lld stalls=%lld",
				x->concurrency, (long long)x->requests,
				(long long)x->errors, (long long)x->stalls);
			dnum(f, "rps", x->requests_per_s);
			for (int k = 0; k < 3; k++) {
				dnum(f, "ttft", x->ttft_p[k]);
				dnum(f, "tpot", x->tpot_p[k]);
				dnum(f, "e2e", x->e2e_p[k]);
			}
			fprintf(f, " classes=%s", x->classes);
		}
		fputc('\n', f);
	}
	for (size_t i = 0; i < v->train.n; i++) {
		const struct view_train *x = VIEW_AT(v->train, i);
		fprintf(f, "train %s %s %s rank=%d step=%lld skipped=%d "
			   "tokens=%lld",
			x->node, x->stage_id, x->layout, x->rank,
			(long long)x->step, x->skipped, (long long)x->tokens);
		dnum(f, "loss", x->loss);
		dnum(f, "gnorm", x->grad_norm);
		dnum(f, "scale", x->loss_scale);
		dnum(f, "lr", x->lr);
		dnum(f, "fwd", x->t_fwd);
		dnum(f, "bwd", x->t_bwd);
		dnum(f, "opt", x->t_opt);
		dnum(f, "comm", x->t_comm);
		fputc('\n', f);
	}
	for (size_t i = 0; i < v->marks.n; i++) {
		const struct view_mark *m = VIEW_AT(v->marks, i);
		fprintf(f, "mark %c %lld %s %s\n", m->kind, (long long)m->ts,
			m->node, m->text);
	}
	fprintf(f, "plan %s %s%s\n", v->plan_status, v->plan_detail,
		v->plan ? " (object)" : "");
	fprintf(f, "verdict %d %s ts=%lld elapsed=%lld\n", v->verdict,
		v->verdict_failed, (long long)v->verdict_ts,
		(long long)view_elapsed(v));
	for (size_t i = 0; i < v->nitems; i++)
		fprintf(f, "item %s %s%s\n", v->items[i].item, v->items[i].status,
			v->items[i].optional ? " optional" : "");
	for (size_t i = 0; i < v->nalerts; i++)
		fprintf(f, "alert %s %s %llu%s\n", v->alerts[i].node,
			v->alerts[i].reason,
			(unsigned long long)v->alerts[i].count,
			v->alerts[i].rate ? " rate" : "");
	fprintf(f, "store %s\n", v->store_alert);
	if (v->held)
		fprintf(f, "held %s\n", v->held_msg);
	fprintf(f, "log %zu\n", v->nlog);
	for (size_t i = 0; i < v->nlog && i < 20; i++)
		fprintf(f, "  %s\n", view_log_get(v, i)->line);
}

/* -------------------------------------------------------------------- seek */

struct series {
	int64_t id;
	char node[64], metric[32];
	int card;
};

struct view_src {
	struct store_reader *rd; /* the SQL is the store's (store/reader.c) */
	struct series *series;
	size_t nseries;
	char **nodes; /* every node but the console, with its first ts */
	int64_t *node_first;
	size_t nnodes;
};

int view_src_open(const char *path, struct view_src **out, struct d0_err *err)
{
	struct view_src *src = calloc(1, sizeof *src);
	*out = NULL;
	if (!src)
		return d0_errf(err, "%s: out of memory", path);
	if (store_reader_open(path, &src->rd, err) < 0) {
		free(src);
		return -1;
	}
	*out = src;
	return 0;
}

void view_src_close(struct view_src *src)
{
	if (!src)
		return;
	store_reader_close(src->rd);
	free(src->series);
	for (size_t i = 0; i < src->nnodes; i++)
		free(src->nodes[i]);
	free(src->nodes);
	free(src->node_first);
	free(src);
}

static int row_span(void *arg, const struct store_row *r)
{
	int64_t *fl = arg;
	fl[0] = r->i[0];
	fl[1] = r->i[1];
	return 1;
}

int view_src_span(struct view_src *src, int64_t *first, int64_t *last)
{
	int64_t fl[2] = {0, 0};
	store_reader_each(src->rd, SRQ_SPAN, NULL, 0, NULL, row_span, fl, NULL);
	*first = fl[0];
	*last = fl[1];
	return 0;
}

struct manifest_keys {
	struct view *v;
	json_t *name, *model, *pb;
};

static int row_manifest(void *arg, const struct store_row *r)
{
	struct manifest_keys *m = arg;
	const char *k = r->s[0];
	json_t *j = r->s[1] ? json_loads(r->s[1], JSON_DECODE_ANY, NULL) : NULL;
	if (!k) {
		json_decref(j);
		return 0;
	}
	if (!strcmp(k, "name"))
		json_decref(m->name), m->name = j;
	else if (!strcmp(k, "model"))
		json_decref(m->model), m->model = j;
	else if (!strcmp(k, "labels")) {
		view_set_labels(m->v, j);
		json_decref(j);
	} else
		json_decref(m->pb), m->pb = j;
	return 0;
}

void view_src_manifest(struct view_src *src, struct view *v)
{
	struct manifest_keys m = {v, NULL, NULL, NULL};
	if (store_reader_each(src->rd, SRQ_MANIFEST, NULL, 0, NULL,
			      row_manifest, &m, NULL) == 0)
		view_set_manifest(v, m.name, m.model, m.pb);
	json_decref(m.name);
	json_decref(m.model);
	json_decref(m.pb);
}

struct series_list {
	struct view_src *src;
	size_t cap;
};

static int row_series(void *arg, const struct store_row *r)
{
	struct series_list *l = arg;
	struct view_src *src = l->src;
	if (src->nseries == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 256;
		struct series *na = realloc(src->series, l->cap * sizeof *na);
		if (!na)
			abort();
		src->series = na;
	}
	struct series *s = &src->series[src->nseries++];
	s->id = r->i[0];
	copy(s->node, sizeof s->node, r->s[1] ? r->s[1] : "");
	s->card = (int)r->i[2];
	copy(s->metric, sizeof s->metric, r->s[3] ? r->s[3] : "");
	return 0;
}

static int row_first_ts(void *arg, const struct store_row *r)
{
	*(int64_t *)arg = r->i[0];
	return 1;
}

struct node_list {
	char **names;
	size_t n, cap;
};

static int row_node(void *arg, const struct store_row *r)
{
	struct node_list *l = arg;
	if (l->n == l->cap) {
		l->cap = l->cap ? l->cap * 2 : 64;
		l->names = realloc(l->names, l->cap * sizeof *l->names);
		if (!l->names)
			abort();
	}
	l->names[l->n] = strdup(r->s[0] ? r->s[0] : "");
	if (!l->names[l->n])
		abort();
	l->n++;
	return 0;
}

/* The series and node lists (re-read when the file grew new ones). */
static int src_refresh(struct view_src *src, struct d0_err *err)
{
	struct node_list l = {0};
	struct series_list sl = {src, 0};
	free(src->series); /* re-read whole: the file may have grown */
	src->series = NULL;
	src->nseries = 0;
	if (store_reader_each(src->rd, SRQ_SERIES, NULL, 0, NULL, row_series,
			      &sl, err) < 0)
		return -1;
	if (store_reader_each(src->rd, SRQ_NODES, NULL, 0, NULL, row_node, &l,
			      err) < 0) {
		for (size_t i = 0; i < l.n; i++)
			free(l.names[i]);
		free(l.names);
		return -1;
	}
	for (size_t i = 0; i < src->nnodes; i++)
		free(src->nodes[i]);
	free(src->nodes);
	free(src->node_first);
	src->nodes = l.names;
	src->nnodes = l.n;
	src->node_first = calloc(l.n ? l.n : 1, sizeof *src->node_first);
	if (!src->node_first)
		abort();
	for (size_t i = 0; i < l.n; i++) {
		src->node_first[i] = INT64_MAX;
		store_reader_each(src->rd, SRQ_FIRST_TS, NULL, 0, l.names[i],
				  row_first_ts, &src->node_first[i], NULL);
	}
	return 0;
}

/* Fold an event body (column col of a row) into the view. */
struct fold_arg {
	struct view *v;
	int col;
};

static int row_fold(void *arg, const struct store_row *r)
{
	struct fold_arg *f = arg;
	if (r->s[f->col])
		view_apply_line(f->v, r->s[f->col], r->len[f->col]);
	return 0;
}

struct hist_rows {
	int64_t ts[VIEW_HIST];
	double val[VIEW_HIST];
	int n;
};

static int row_hist(void *arg, const struct store_row *r)
{
	struct hist_rows *h = arg;
	if (h->n >= VIEW_HIST)
		return 1;
	h->ts[h->n] = r->i[0];
	h->val[h->n] = r->null[1] ? NAN : r->d[1];
	h->n++;
	return 0;
}

struct log_rows {
	struct {
		int64_t ts;
		char *body;
		size_t n;
	} *tmp;
	int n;
};

static int row_log(void *arg, const struct store_row *r)
{
	struct log_rows *l = arg;
	if (l->n >= VIEW_LOG)
		return 1;
	l->tmp[l->n].ts = r->i[0];
	l->tmp[l->n].n = r->len[1];
	l->tmp[l->n].body = malloc(r->len[1] + 1);
	if (!l->tmp[l->n].body)
		abort();
	memcpy(l->tmp[l->n].body, r->s[1] ? r->s[1] : "", r->len[1]);
	l->n++;
	return 0;
}

int view_seek(struct view_src *src, struct view *v, int64_t t,
	      struct d0_err *err)
{
	int64_t first, last;
	struct fold_arg fold = {v, 3};
	if (src_refresh(src, err) < 0)
		return -1;
	view_src_span(src, &first, &last);
	view_reset(v);
	v->no_log = 1;
	/* Nodes: those whose first event is in. */
	for (size_t i = 0; i < src->nnodes; i++)
		if (src->node_first[i] <= t)
			node_get(v, src->nodes[i], src->node_first[i]);
	/* Samples: the last VIEW_HIST points of ringed series, the last one
	 * of the others; one primary-key range each. */
	for (size_t i = 0; i < src->nseries; i++) {
		struct series *s = &src->series[i];
		int ringed = view_metric_ringed(s->metric);
		struct hist_rows h;
		int64_t b[3] = {s->id, t, ringed ? VIEW_HIST : 1};
		if (!strcmp(s->node, CONSOLE_NODE))
			continue;
		h.n = 0;
		if (store_reader_each(src->rd, SRQ_HISTORY, b, 3, NULL,
				      row_hist, &h, err) < 0)
			return -1;
		while (h.n-- > 0)
			view_sample(v, s->node, s->card, s->metric, h.ts[h.n],
				    h.val[h.n]);
	}
	/* Stages, checks, comm, numerics, perf, console events: folded. */
	if (store_reader_each(src->rd, SRQ_SPARSE, &t, 1, NULL, row_fold,
			      &fold, err) < 0)
		return -1;
	/* Each node's facts (the last one, when in by t). */
	if (store_reader_each(src->rd, SRQ_FACTS, &t, 1, NULL, row_fold, &fold,
			      err) < 0)
		return -1;
	/* The log ring: the last VIEW_LOG events, backwards on events_ts. */
	v->no_log = 0;
	{
		struct log_rows l = {calloc(VIEW_LOG, sizeof *l.tmp), 0};
		int64_t b[2] = {t, VIEW_LOG};
		int rc;
		if (!l.tmp)
			abort();
		rc = store_reader_each(src->rd, SRQ_LOG, b, 2, NULL, row_log,
				       &l, err);
		while (l.n-- > 0) {
			if (rc == 0)
				view_log_push(v, l.tmp[l.n].ts, l.tmp[l.n].body,
					      l.tmp[l.n].n);
			free(l.tmp[l.n].body);
		}
		free(l.tmp);
		if (rc < 0)
			return -1;
	}
	v->start = first <= t ? first : 0;
	v->start_console = v->start != 0;
	v->t = t;
	return 0;
}

int view_forward(struct view_src *src, struct view *v, int64_t from,
		 int64_t to, struct d0_err *err)
{
	struct fold_arg fold = {v, 0};
	int64_t b[2] = {from, to};
	if (to <= from)
		return 0;
	if (store_reader_each(src->rd, SRQ_FORWARD, b, 2, NULL, row_fold,
			      &fold, err) < 0)
		return -1;
	v->t = to;
	return 0;
}

int view_fold_to(struct view_src *src, struct view *v, int64_t t,
		 struct d0_err *err)
{
	view_reset(v);
	if (view_forward(src, v, INT64_MIN, t, err) < 0)
		return -1;
	return 0;
}

int view_src_marks(struct view_src *src, struct view_mark **out, size_t *n,
		   struct d0_err *err)
{
	/* Fold the marker/failure events into a scratch view: the same
	 * texts as the live fold's. */
	struct view tmp;
	struct fold_arg fold = {&tmp, 3};
	view_init(&tmp);
	tmp.no_log = 1;
	if (store_reader_each(src->rd, SRQ_MARKS, NULL, 0, NULL, row_fold,
			      &fold, err) < 0) {
		view_free(&tmp);
		return -1;
	}
	*n = tmp.marks.n;
	*out = calloc(*n ? *n : 1, sizeof **out);
	if (!*out)
		abort();
	for (size_t i = 0; i < *n; i++)
		(*out)[i] = *VIEW_AT(tmp.marks, i);
	view_free(&tmp);
	return 0;
}
