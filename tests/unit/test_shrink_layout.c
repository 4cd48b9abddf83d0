/*
 * gen-model --like --for-layout: for every shipped config and every
 * tp x pp x ep of at most 64 ranks that the real model can take (a
 * superset of what plan accepts on h200-8x8), the shrunk model written
 * as gen-model writes it (config.json and back) splits under layout.c's
 * rules and needs exactly the operators of the plain --like model.
 */
#include "engine.h"
#include "shrink_layout.h"
#include "unit.h"

#include <glob.h>
#include <string.h>

/* The config gen-model writes: through JSON and the parser verify uses. */
static int roundtrip(struct model_config *c, struct d0_err *err)
{
	json_t *doc = model_config_to_json(c);
	int rc;
	model_config_free(c);
	rc = model_config_from_json(doc, "generated config.json", c, err);
	json_decref(doc);
	return rc;
}

static int same_operators(const struct model_config *a,
			  const struct model_config *b)
{
	const char *la[32], *lb[32];
	char sa[256], sb[256];
	size_t na = model_operators(a, la, sa, sizeof sa);
	size_t nb = model_operators(b, lb, sb, sizeof sb);
	if (na != nb)
		return 0;
	for (size_t i = 0; i < na; i++)
		if (strcmp(la[i], lb[i]))
			return 0;
	return 1;
}

/* One layout: 0 when the rehearsal model splits and keeps its features. */
static int one_layout(const struct model_config *real,
		      const struct model_config *plain,
		      const struct layout_dims *d, const char *path)
{
	struct model_config c;
	struct tensor_spec *t = NULL;
	struct d0_err err;
	size_t n;
	int bad = 0;
	if (model_config_shrink(real, "tiny", 0, &c, &err) < 0 ||
	    model_config_fit_layout(real, d, &c, &err) < 0 ||
	    roundtrip(&c, &err) < 0 || layout_check(&c, d, &err) < 0 ||
	    model_tensors(&c, &t, &n, &err) < 0)
		bad = 1;
	else if (!same_operators(&c, plain))
		bad = snprintf(err.msg, sizeof err.msg, "operators differ") > 0;
	else if (c.layers > (d->pp > plain->layers ? d->pp : plain->layers))
		bad = snprintf(err.msg, sizeof err.msg, "more layers than "
			       "needed: %lld", (long long)c.layers) > 0;
	if (bad)
		printf("# %s tp%d pp%d ep%d: %s\n", path, d->tp, d->pp, d->ep,
		       err.msg);
	free(t);
	model_config_free(&c);
	return bad;
}

static void one_config(const char *path)
{
	struct model_config real, plain;
	struct d0_err err;
	int tried = 0, bad = 0;
	char name[300];
	if (model_config_load(path, &real, &err) < 0 ||
	    model_config_shrink(&real, "tiny", 0, &plain, &err) < 0 ||
	    roundtrip(&plain, &err) < 0) {
		CHECKN(path, 0);
		return;
	}
	for (int tp = 1; tp <= 64; tp++)
		for (int pp = 1; tp * pp <= 64; pp++)
			for (int ep = 1; tp * pp * ep <= 64; ep++) {
				struct layout_dims d = {tp, pp, ep};
				if (layout_check(&real, &d, &err) < 0)
					continue;
				tried++;
				bad += one_layout(&real, &plain, &d, path);
			}
	snprintf(name, sizeof name, "%s: %d layouts, each splits", path,
		 tried);
	CHECKN(name, tried > 0 && bad == 0);
	model_config_free(&plain);
	model_config_free(&real);
}

int main(void)
{
	glob_t g;
	struct model_config real, c;
	struct layout_dims d = {3, 1, 1}, parsed;
	struct d0_err err;

	CHECK(glob("assets/configs/*.json", 0, NULL, &g) == 0);
	CHECK(g.gl_pathc >= 8);
	for (size_t i = 0; i < g.gl_pathc; i++)
		one_config(g.gl_pathv[i]);
	globfree(&g);

	/* a layout the real model refuses is refused, naming it */
	CHECK(model_config_load("assets/configs/deepseek-v3.json", &real,
				&err) == 0);
	CHECK(model_config_shrink(&real, "tiny", 0, &c, &err) == 0);
	CHECK(model_config_fit_layout(&real, &d, &c, &err) < 0);
	CHECK(strstr(err.msg, "real model cannot take it") != NULL);
	/* the smallest: deepseek at tp 8 pp 4 ep 8 has 8 heads, 4 layers */
	d = (struct layout_dims){8, 4, 8};
	model_config_free(&c);
	CHECK(model_config_shrink(&real, "tiny", 0, &c, &err) == 0);
	CHECK(model_config_fit_layout(&real, &d, &c, &err) == 0);
	CHECK(c.heads == 8 && c.layers == 4 && c.experts == 8);
	CHECK(c.moe_ffn % 8 == 0 && c.shared_ffn == c.moe_ffn);
	model_config_free(&c);
	model_config_free(&real);

	CHECK(layout_dims_parse("8,2,4", &parsed) == 0 && parsed.tp == 8 &&
	      parsed.pp == 2 && parsed.ep == 4);
	CHECK(layout_dims_parse("8,2,4,2", &parsed) == 0);
	CHECK(layout_dims_parse("8,2", &parsed) < 0);
	CHECK(layout_dims_parse("8,2,4x", &parsed) < 0);
	CHECK(layout_dims_parse("8,0,4", &parsed) < 0);
	return unit_done();
}
