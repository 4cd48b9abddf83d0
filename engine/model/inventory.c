/*
 * inventory.c - the cluster inventory (docs/inventory.md): nodes written in
 * node-set syntax (n[01-16], 10.0.0.[1-16], lists, exclusions), with
 * cards, card memory, SSH settings, labels and link bandwidths.  The
 * planner reads it today; the console will reach the nodes it lists.
 */
#include "engine.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

struct strlist {
	char **v;
	size_t n;
};

static void sl_push(struct strlist *l, char *s)
{
	l->v = realloc(l->v, (l->n + 1) * sizeof *l->v);
	if (!l->v)
		abort();
	l->v[l->n++] = s;
}

static void sl_free(struct strlist *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
	l->v = NULL;
	l->n = 0;
}

#define NODESET_MAX 16384 /* nodes in one set: a 4,000-node fleet fits, a runaway cross product does not */

/* Expand one term (no top-level commas) with bracket groups into out. */
static int expand_term(const char *prefix, const char *s, struct strlist *out,
		       struct d0_err *err)
{
	const char *open = strchr(s, '['), *close;
	char *items, *tok, *save = NULL;
	size_t plen = strlen(prefix);
	if (!open) {
		char *r = malloc(plen + strlen(s) + 1);
		memcpy(r, prefix, plen);
		strcpy(r + plen, s);
		if (out->n >= NODESET_MAX) {
			free(r);
			return d0_errf(err, "node set expands to more than %d "
				       "names", NODESET_MAX);
		}
		sl_push(out, r);
		return 0;
	}
	close = strchr(open, ']');
	if (!close || memchr(open + 1, '[', (size_t)(close - open - 1)))
		return d0_errf(err, "unbalanced '[' in node set '%s'", s);
	items = strndup(open + 1, (size_t)(close - open - 1));
	for (tok = strtok_r(items, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(tok, '-'), *end;
		long lo, hi;
		int width = dash ? (int)(dash - tok) : (int)strlen(tok);
		lo = strtol(tok, &end, 10);
		if (end == tok || (dash ? end != dash : *end != 0)) {
			d0_errf(err, "'%s' in node set '%s' is not a number or "
				"range", tok, s);
			free(items); /* tok points into items */
			return -1;
		}
		hi = lo;
		if (dash) {
			hi = strtol(dash + 1, &end, 10);
			if (end == dash + 1 || *end || hi < lo) {
				d0_errf(err, "'%s' in node set '%s' is not an "
					"ascending range", tok, s);
				free(items);
				return -1;
			}
		}
		/* at most 18 digits, as nodeset_fold folds them: the loop
		 * below can then never overflow */
		if (width > 18 || (dash && strlen(dash + 1) > 18) || lo < 0) {
			d0_errf(err, "'%s' in node set '%s': node numbers have "
				"at most 18 digits", tok, s);
			free(items);
			return -1;
		}
		if (hi - lo >= NODESET_MAX) {
			d0_errf(err, "range '%s' in node set '%s' is too large",
				tok, s);
			free(items);
			return -1;
		}
		for (long v = lo; v <= hi; v++) {
			size_t n = plen + (size_t)(open - s) + 32;
			char *p = malloc(n);
			int rc;
			snprintf(p, n, "%s%.*s%0*ld", prefix, (int)(open - s), s,
				 width, v);
			rc = expand_term(p, close + 1, out, err);
			free(p);
			if (rc < 0) {
				free(items);
				return -1;
			}
		}
	}
	free(items);
	return 0;
}

int nodeset_expand(const char *set, char ***names, size_t *n,
		   struct d0_err *err)
{
	struct strlist out = {0};
	const char *p = set;
	int depth = 0;
	const char *start = set;
	if (!*set)
		return d0_errf(err, "empty node set");
	for (;; p++) {
		if (*p == '[')
			depth++;
		else if (*p == ']')
			depth--;
		if ((*p == ',' && depth == 0) || !*p) {
			char *term = strndup(start, (size_t)(p - start));
			int rc = *term ? expand_term("", term, &out, err)
				       : d0_errf(err, "empty name in node set "
						 "'%s'", set);
			free(term);
			if (rc < 0) {
				sl_free(&out);
				return -1;
			}
			if (!*p)
				break;
			start = p + 1;
		}
	}
	*names = out.v;
	*n = out.n;
	return 0;
}

static int get_size(json_t *o, const char *key, uint64_t *out)
{
	json_t *v = json_object_get(o, key);
	if (!v)
		return 1; /* absent */
	if (json_is_integer(v) && json_integer_value(v) > 0) {
		*out = (uint64_t)json_integer_value(v);
		return 0;
	}
	if (json_is_string(v) && parse_size(json_string_value(v), out) == 0 &&
	    *out > 0)
		return 0;
	return -1;
}

/* The keys each level of the file may hold (docs/inventory.md). */
#define NODE_SETTINGS "cards", "card_mem", "port", "user", "identity", \
		      "transport", "links", "labels"
static const char *const top_keys[] = {"name", "description", "defaults",
				       "nodes", "agent_args", "mpirun_args",
				       NODE_SETTINGS, NULL};
static const char *const defaults_keys[] = {NODE_SETTINGS, NULL};
static const char *const entry_keys[] = {"name", "host", "exclude",
					 NODE_SETTINGS, NULL};
static const char *const links_keys[] = {
	"intra_node_gbps", "inter_node_gbps", "intra_node_latency_us",
	"inter_node_latency_us", "straggler_per_node", NULL};

/* Edit distance (insert, delete, substitute, swap), small strings. */
static size_t key_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b), d[40][40];
	if (la >= 40 || lb >= 40)
		return 99;
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			size_t c = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < c)
				c = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < c)
				c = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
			    a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < c)
				c = d[i - 2][j - 2] + 1;
			d[i][j] = c;
		}
	return d[la][lb];
}

/* Every key of o is one of keys; else an error naming the file, where,
 * the key and the nearest valid one. */
static int known_keys(json_t *o, const char *const *keys, const char *where,
		      const char *path, struct d0_err *err)
{
	const char *k;
	json_t *v;
	json_object_foreach(o, k, v)
	{
		const char *best = NULL;
		size_t bd = 99;
		int found = 0;
		for (size_t i = 0; keys[i]; i++) {
			size_t d;
			if (!strcmp(keys[i], k)) {
				found = 1;
				break;
			}
			d = key_distance(k, keys[i]);
			if (d < bd) {
				bd = d;
				best = keys[i];
			}
		}
		if (found)
			continue;
		if (best && bd <= 3 && bd < strlen(k))
			return d0_errf(err, "%s: %s: unknown key '%.64s' (did "
				       "you mean '%s'?)", path, where, k, best);
		return d0_errf(err, "%s: %s: unknown key '%.64s'", path, where,
			       k);
	}
	return 0;
}

/* Apply the keys of o (defaults or a node entry) onto node. */
static int node_fields(json_t *o, struct inv_node *nd, const char *where,
		       const char *path, struct d0_err *err)
{
	json_t *v;
	int rc;
	if ((v = json_object_get(o, "cards"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 4096)
			return d0_errf(err, "%s: %s: 'cards' must be an integer "
				       "1..4096", path, where);
		nd->cards = (int)json_integer_value(v);
	}
	rc = get_size(o, "card_mem", &nd->card_mem);
	if (rc < 0)
		return d0_errf(err, "%s: %s: 'card_mem' must be a byte count "
			       "(e.g. 141GiB or 151397597184)", path, where);
	if ((v = json_object_get(o, "port"))) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 65535)
			return d0_errf(err, "%s: %s: 'port' must be 1..65535",
				       path, where);
		nd->port = (int)json_integer_value(v);
	}
#define STR(key, field)                                                       \
	if ((v = json_object_get(o, key))) {                                  \
		if (!json_is_string(v))                                       \
			return d0_errf(err, "%s: %s: '%s' must be a string",  \
				       path, where, key);                     \
		snprintf(nd->field, sizeof nd->field, "%s",                   \
			 json_string_value(v));                               \
	}
	STR("user", user);
	STR("identity", identity);
	STR("transport", transport);
#undef STR
	if (strcmp(nd->transport, "ssh") && strcmp(nd->transport, "local"))
		return d0_errf(err, "%s: %s: 'transport' must be ssh or local",
			       path, where);
	if ((v = json_object_get(o, "links"))) {
		/* bandwidths (Gbit/s), per-message latencies (us) and the
		 * straggler factor: numbers >= 0, each with its ceiling */
		static const struct {
			const char *key;
			size_t off;
			double max;
		} lk[] = {
			{"intra_node_gbps", offsetof(struct inv_node, intra_gbps), 1e9},
			{"inter_node_gbps", offsetof(struct inv_node, inter_gbps), 1e9},
			{"intra_node_latency_us", offsetof(struct inv_node, intra_lat_us), 1e6},
			{"inter_node_latency_us", offsetof(struct inv_node, inter_lat_us), 1e6},
			{"straggler_per_node", offsetof(struct inv_node, straggler), 10},
		};
		char at[96];
		snprintf(at, sizeof at, "%s.links", where);
		if (!json_is_object(v))
			return d0_errf(err, "%s: %s: 'links' must be an object "
				       "(intra_node_gbps, inter_node_gbps, ...)",
				       path, where);
		if (known_keys(v, links_keys, at, path, err) < 0)
			return -1;
		for (size_t k = 0; k < sizeof lk / sizeof *lk; k++) {
			json_t *x = json_object_get(v, lk[k].key);
			double d;
			if (!x)
				continue;
			d = json_is_number(x) ? json_number_value(x) : -1;
			if (!(d >= 0) || d > lk[k].max)
				return d0_errf(err, "%s: %s.%s: expected a number "
					       "from 0 to %g", path, at, lk[k].key,
					       lk[k].max);
			*(double *)((char *)nd + lk[k].off) = d;
		}
	}
	if ((v = json_object_get(o, "labels"))) {
		size_t i;
		json_t *x;
		if (!json_is_array(v))
			return d0_errf(err, "%s: %s: 'labels' must be a list of "
				       "strings", path, where);
		nd->labels[0] = 0;
		json_array_foreach(v, i, x) {
			if (!json_is_string(x))
				return d0_errf(err, "%s: %s: 'labels' must be a "
					       "list of strings", path, where);
			if (strlen(nd->labels) + strlen(json_string_value(x)) + 2 <
			    sizeof nd->labels) {
				if (nd->labels[0])
					strcat(nd->labels, ",");
				strcat(nd->labels, json_string_value(x));
			}
		}
	}
	return 0;
}

/* nodeset_expand for one key of nodes[i]: errors name the file, the entry
 * and the key. */
static int entry_set(const char *set, const char *key, char ***names,
		     size_t *n, const char *where, const char *path,
		     struct d0_err *err)
{
	struct d0_err e;
	if (nodeset_expand(set, names, n, &e) == 0)
		return 0;
	return d0_errf(err, "%s: %s.%s: %s", path, where, key, e.msg);
}

/* Two names on one ssh host:port would be one machine counted twice. */
static int distinct_addresses(const struct inventory *inv, const char *path,
			      struct d0_err *err)
{
	for (size_t i = 0; i < inv->n; i++)
		for (size_t j = 0; j < i; j++)
			if (!strcmp(inv->nodes[i].transport, "ssh") &&
			    !strcmp(inv->nodes[j].transport, "ssh") &&
			    inv->nodes[i].port == inv->nodes[j].port &&
			    !strcmp(inv->nodes[i].host, inv->nodes[j].host))
				return d0_errf(err, "%s: nodes '%s' and '%s' are "
					       "both %s:%d (one machine, two "
					       "names)", path,
					       inv->nodes[j].name,
					       inv->nodes[i].name,
					       inv->nodes[i].host,
					       inv->nodes[i].port);
	return 0;
}

static int inventory_from_json(json_t *root, const char *path,
			       struct inventory *inv, struct d0_err *err);

int inventory_load(const char *path, struct inventory *inv,
		   struct d0_err *err)
{
	json_error_t jerr;
	json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	memset(inv, 0, sizeof *inv);
	if (!root)
		return d0_errf(err, "%s: %s", path,
			       path_exists(path) ? jerr.text : "no such file");
	return inventory_from_json(root, path, inv, err);
}

int inventory_parse(const char *text, size_t len, const char *name,
		    struct inventory *inv, struct d0_err *err)
{
	json_error_t jerr;
	json_t *root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	memset(inv, 0, sizeof *inv);
	if (!root)
		return d0_errf(err, "%s: %s (line %d)", name, jerr.text,
			       jerr.line);
	return inventory_from_json(root, name, inv, err);
}

/* The inventory in root (its reference is taken). */
static int inventory_from_json(json_t *root, const char *path,
			       struct inventory *inv, struct d0_err *err)
{
	json_t *nodes, *defaults, *e;
	struct inv_node base;
	size_t i;

	if (!json_is_object(root)) {
		json_decref(root);
		return d0_errf(err, "%s: not a JSON object", path);
	}
	memset(&base, 0, sizeof base);
	base.port = 22;
	base.cards = 1;
	base.intra_lat_us = base.inter_lat_us = base.straggler = -1;
	snprintf(base.user, sizeof base.user, "root");
	snprintf(base.transport, sizeof base.transport, "ssh");
	if (known_keys(root, top_keys, "top level", path, err) < 0) {
		json_decref(root);
		return -1;
	}
	defaults = json_object_get(root, "defaults");
	if (json_is_object(defaults) &&
	    known_keys(defaults, defaults_keys, "defaults", path, err) < 0) {
		json_decref(root);
		return -1;
	}
	if (defaults && (!json_is_object(defaults) ||
			 node_fields(defaults, &base, "defaults", path, err) < 0)) {
		if (!json_is_object(defaults))
			d0_errf(err, "%s: 'defaults' must be an object", path);
		json_decref(root);
		return -1;
	}
	if (node_fields(root, &base, "top level", path, err) < 0) {
		json_decref(root);
		return -1;
	}
	nodes = json_object_get(root, "nodes");
	if (!json_is_array(nodes) || json_array_size(nodes) == 0) {
		json_decref(root);
		return d0_errf(err, "%s: 'nodes' must be a non-empty list", path);
	}
	json_array_foreach(nodes, i, e) {
		char where[64], **names = NULL, **hosts = NULL, **excl = NULL;
		size_t nn = 0, nh = 0, nx = 0;
		struct inv_node nd = base;
		json_t *name = json_object_get(e, "name"), *host, *ex;
		int rc = 0;
		snprintf(where, sizeof where, "nodes[%zu]", i);
		if (!json_is_object(e) || !json_is_string(name)) {
			json_decref(root);
			inventory_free(inv);
			return d0_errf(err, "%s: %s: needs a string 'name' (a "
				       "node set such as n[01-16])", path, where);
		}
		host = json_object_get(e, "host");
		ex = json_object_get(e, "exclude");
		if (known_keys(e, entry_keys, where, path, err) < 0 ||
		    node_fields(e, &nd, where, path, err) < 0 ||
		    entry_set(json_string_value(name), "name", &names, &nn,
			      where, path, err) < 0 ||
		    (json_is_string(host) &&
		     entry_set(json_string_value(host), "host", &hosts, &nh,
			       where, path, err) < 0) ||
		    (json_is_string(ex) &&
		     entry_set(json_string_value(ex), "exclude", &excl, &nx,
			       where, path, err) < 0))
			rc = -1;
		if (rc == 0 && host && !json_is_string(host))
			rc = d0_errf(err, "%s: %s: 'host' must be a string",
				     path, where);
		if (rc == 0 && ex && !json_is_string(ex))
			rc = d0_errf(err, "%s: %s: 'exclude' must be a string",
				     path, where);
		if (rc == 0 && hosts && nh != nn && nh != 1)
			rc = d0_errf(err, "%s: %s: 'name' gives %zu nodes but "
				     "'host' %zu hosts", path, where, nn, nh);
		if (rc == 0 && nd.card_mem == 0)
			rc = d0_errf(err, "%s: %s: no 'card_mem' (set it on the "
				     "node or in 'defaults')", path, where);
		for (size_t k = 0; rc == 0 && k < nn; k++) {
			struct inv_node *o;
			int skip = 0;
			for (size_t x = 0; x < nx; x++)
				skip |= !strcmp(excl[x], names[k]);
			/* A name or host cut to its field would make two nodes
			 * one (a fuzzed r[1-2]%%%...c[01-04] did): refuse it. */
			if (!skip && strlen(names[k]) >= sizeof nd.name)
				rc = d0_errf(err, "%s: %s: node name '%.40s...' is "
					     "longer than %zu bytes", path, where,
					     names[k], sizeof nd.name - 1);
			else if (!skip && hosts &&
				 strlen(hosts[nh == 1 ? 0 : k]) >= sizeof nd.host)
				rc = d0_errf(err, "%s: %s: host '%.40s...' is "
					     "longer than %zu bytes", path, where,
					     hosts[nh == 1 ? 0 : k], sizeof nd.host - 1);
			for (size_t q = 0; q < inv->n && !skip && rc == 0; q++)
				if (!strcmp(inv->nodes[q].name, names[k]))
					rc = d0_errf(err, "%s: node '%s' listed "
						     "twice", path, names[k]);
			if (skip || rc < 0)
				continue;
			inv->nodes = realloc(inv->nodes,
					     (inv->n + 1) * sizeof *inv->nodes);
			o = &inv->nodes[inv->n++];
			*o = nd;
			snprintf(o->name, sizeof o->name, "%s", names[k]);
			snprintf(o->host, sizeof o->host, "%s",
				 hosts ? hosts[nh == 1 ? 0 : k] : names[k]);
		}
		for (size_t k = 0; k < nn; k++)
			free(names[k]);
		for (size_t k = 0; k < nh; k++)
			free(hosts[k]);
		for (size_t k = 0; k < nx; k++)
			free(excl[k]);
		free(names);
		free(hosts);
		free(excl);
		if (rc < 0) {
			json_decref(root);
			inventory_free(inv);
			return -1;
		}
	}
	if (inv->n == 0) {
		json_decref(root);
		return d0_errf(err, "%s: every node is excluded", path);
	}
	if (distinct_addresses(inv, path, err) < 0) {
		json_decref(root);
		inventory_free(inv);
		return -1;
	}
	json_t *nm = json_object_get(root, "name");
	snprintf(inv->name, sizeof inv->name, "%s",
		 json_is_string(nm) ? json_string_value(nm) : path);
	json_decref(root);
	return 0;
}

void inventory_free(struct inventory *inv)
{
	free(inv->nodes);
	memset(inv, 0, sizeof *inv);
}
