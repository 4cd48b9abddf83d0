/*
 * step_image_check.c - `day0-engine image-check MODEL_DIR`: the image
 * channel's release-day checks, the producer of image.preprocess,
 * image.features, perf.image and (beside validate) numerics.image.
 *
 * One step for the four so that the release-day playbook holds one image
 * stage whatever the model is: for a text model (no vision_config) it
 * reports each item as skip "n/a: no vision tower in config.json" and
 * succeeds, so the same playbook is GO for a text release and runs the
 * image channel for a vision-language one.
 *
 *   image.features    before any pixel: the preprocessor against the
 *                     checkpoint (image_check.c), then every image slot of
 *                     the prompt: its placeholder tokens against the
 *                     merged patches the tower gives that image (one
 *                     placeholder is expanded, as vLLM and transformers'
 *                     processors do; any other count must be exact); the
 *                     slots take the images the processor took, in name
 *                     order, the others counted in the detail
 *   image.preprocess  the processor on a corpus (a folder, or the
 *                     built-in one): every image decoded, resized,
 *                     normalized, its rows/tokens consistent, values finite
 *                     and inside the range mean/std allow, a uniform image
 *                     equal to (v/255 - mean)/std in closed form
 *   perf.image        TTFT of an image prompt split into preprocess,
 *                     encode and prefill, p50 and p99 over the images
 *   numerics.image    the tower's features against the float64 reference
 *
 * The check events carry the figures (the split's percentiles, the
 * images) as fields beside item/status/detail, as validate's
 * text.generation carries its texts: the console's screens and the report
 * read them from the session file.
 */
#include "engine.h"
#include "image.h"
#include "image_check.h"
#include "layout_opts.h"
#include "ref_vision.h"
#include "rt_batch.h"
#include "vision.h"

#include <getopt.h>
#include <mpi.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_image_check = {
	.name = "image-check",
	.usage = "MODEL_DIR [--images DIR|builtin] [--preprocessor FILE] "
		 "[" PROMPT_USAGE "] [--runs N] [--max-rel X] [--tp T --pp P "
		 "--ep E] [--card-mem B] [--json] [--events]",
	.summary = "the image channel's checks: image.features, "
		   "image.preprocess, perf.image, numerics.image (n/a for a "
		   "text model)",
	.help = "  MODEL_DIR          the checkpoint (config.json, weights, "
		"preprocessor_config.json, tokenizer.json)\n"
		"  --images DIR       the PNG/JPEG files to run the processor "
		"on; builtin (the default): a generated corpus of 12 (PNG RGB, "
		"RGBA, gray, palette, 16-bit; JPEG baseline, progressive, "
		"gray; 1x1 to 800x600)\n"
		"  --preprocessor F   the preprocessor to check (default "
		"MODEL_DIR/preprocessor_config.json)\n"
		"  --prompt TEXT      a prompt with image placeholders (the "
		"family's: <|vision_start|><|image_pad|><|vision_end|> or "
		"<image>); the k-th run of placeholders takes the k-th image; "
		"one placeholder is expanded, any other count must equal the "
		"image's merged patches (default: one image and \"Describe "
		"this image.\")\n"
		"  --prompt-file F    the same prompt read from a file\n"
		"  --tokens 1,2,3     the same prompt as token ids\n"
		"  --runs N           images timed for perf.image (default: "
		"the whole corpus)\n"
		"  --max-rel X        numerics.image's bound on the features' "
		"max relative error against float64 (default 1e-5: f32 "
		"compute)\n"
		"  --tp/--pp/--ep     the runtime's layout for encode and "
		"prefill (under mpirun, as perf); --card-mem B its budget\n"
		"exit status: 0 every item pass (or n/a), 1 an item failed "
		"(named), 2 bad usage or an unreadable MODEL_DIR\n"
		"example: day0-engine image-check /models/qwen2.5-vl-7b "
		"--images ./release-images --events",
	.run = run,
};

struct ic_opts {
	const char *dir, *images, *prep;
	int runs, json, events;
	double max_rel;
	struct layout_opts lay;
};

static int parse(int argc, char **argv, struct ic_opts *o)
{
	static const struct option lo[] = {
		{"images", 1, 0, 'i'},	{"preprocessor", 1, 0, 'p'},
		{"runs", 1, 0, 'r'},	{"json", 0, 0, 'j'},
		{"events", 0, 0, 'e'},	{"help", 0, 0, 'h'},
		{"max-rel", 1, 0, 'x'}, PROMPT_LONG_OPTS,
		LAYOUT_LONG_OPTS,	CARD_MEM_LONG_OPT,
		{0, 0, 0, 0}};
	const struct step_entry *S = &step_image_check;
	char why[200], *end;
	long v;
	int ch, t;
	memset(o, 0, sizeof *o);
	layout_opts_init(&o->lay);
	o->images = "builtin";
	o->max_rel = 1e-5;
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'i': o->images = optarg; break;
		case 'p': o->prep = optarg; break;
		case 'j': o->json = 1; break;
		case 'e': o->events = 1; break;
		case 'r':
			if (parse_long(optarg, 1, 100000, &v) < 0)
				return step_usage_error(S, "--runs: expected 1 to "
							"100000, got '%s'",
							optarg);
			o->runs = (int)v;
			break;
		case 'x':
			o->max_rel = strtod(optarg, &end);
			if (end == optarg || *end || !(o->max_rel > 0) ||
			    !isfinite(o->max_rel))
				return step_usage_error(S, "--max-rel: expected a "
							"positive number, got "
							"'%s'",
							optarg);
			break;
		case 'h': step_help(S); return -1;
		default:
			t = layout_opts_take(&o->lay, ch, optarg, why, sizeof why);
			if (t < 0)
				return step_usage_error(S, "%s", why);
			if (t == 0)
				return step_usage_error(S, "unknown or incomplete "
							"option '%s'",
							argv[optind - 1]);
		}
	}
	if (optind != argc - 1)
		return step_usage_error(S, "expected one MODEL_DIR");
	o->dir = argv[optind];
	return 0;
}

/* ------------------------------------------------------------ evidence */

struct item_result {
	const char *item;
	const char *status; /* pass | warn | fail | skip */
	char detail[1200];
	json_t *extra; /* fields beside the check's own (taken) */
	double value;
	int has_value;
};

enum { IT_PREP, IT_FEAT, IT_NUM, IT_PERF, IT_N };
static const char *const item_ids[IT_N] = {
	"image.preprocess", "image.features", "numerics.image", "perf.image"};

static void set(struct item_result *r, const char *status, const char *fmt,
		...) __attribute__((format(printf, 3, 4)));
static void set(struct item_result *r, const char *status, const char *fmt,
		...)
{
	va_list ap;
	r->status = status;
	va_start(ap, fmt);
	vsnprintf(r->detail, sizeof r->detail, fmt, ap);
	va_end(ap);
}

/* One image through the processor. */
struct image_run {
	const char *name;
	char format[8], mode[8];
	int w, h, rw, rh, grid[3];
	int64_t rows, cols, tokens;
	double decode_ms, prep_ms;
	char error[1100];
	/* error is about the values only (out of range, not the closed
	 * form): image.preprocess fails on it, but the pixels have the
	 * shape the tower takes, so image.features still checks the image's
	 * slot (the runtime items skip when the config's rescale/normalize
	 * is what differs) */
	int vals_bad;
	struct image_pixels px; /* kept for the runtime part */
};

/* An image the processor could not take: image.preprocess names it, the
 * other items leave it out. */
static int run_unusable(const struct image_run *r)
{
	return r->error[0] && !r->vals_bad;
}

static double pct(double *v, int n, double q)
{
	int k;
	if (n <= 0)
		return 0;
	for (int i = 1; i < n; i++) /* insertion sort: n is small */
		for (int j = i; j > 0 && v[j - 1] > v[j]; j--) {
			double t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
	k = (int)ceil(q * n) - 1; /* nearest rank */
	return v[k < 0 ? 0 : k >= n ? n - 1 : k];
}

/* ------------------------------------------------------ image.preprocess */

/* The processor's own consistency on one image: rows and tokens from the
 * grid, every value finite and inside [(0 - mean)/std, (1 - mean)/std]
 * per channel, a uniform image equal to the closed form (v/255 - mean)/std.
 * The expected values come from that definition (multimodal.md), not from
 * the config's do_rescale, rescale_factor or do_normalize: a config that
 * changes them changes the values and fails here (prep_fields names the
 * field).  mean/std are the config's (image.features holds those to the
 * tower's training normalization).  "" when all hold. */
static int prep_consistency(const struct image_prep_config *p,
			    const struct image_file *f,
			    const struct image_run *r, char *why, size_t n)
{
	const struct image_pixels *px = &r->px;
	double lo[3], hi[3], want[3];
	int64_t per_ch;
	why[0] = 0;
	for (int ch = 0; ch < 3; ch++) {
		double m = p->mean[ch], s = p->std[ch];
		lo[ch] = (0 - m) / s;
		hi[ch] = (1 - m) / s;
		want[ch] = (image_corpus_uniform_rgb[ch] / 255.0 - m) / s;
		if (lo[ch] > hi[ch]) { /* a negative std */
			double t = lo[ch];
			lo[ch] = hi[ch];
			hi[ch] = t;
		}
	}
	if (px->kind == IMAGE_PROC_QWEN2VL) {
		if (px->rows != (int64_t)px->grid_t * px->grid_h * px->grid_w ||
		    px->cols != 3LL * p->temporal_patch_size * p->patch_size *
				    p->patch_size) {
			snprintf(why, n, "%lld x %lld values for grid %dx%dx%d",
				 (long long)px->rows, (long long)px->cols,
				 px->grid_t, px->grid_h, px->grid_w);
			return 1;
		}
		per_ch = (int64_t)p->temporal_patch_size * p->patch_size *
			 p->patch_size;
	} else if (px->kind == IMAGE_PROC_KIMI) {
		per_ch = (int64_t)p->patch_size * p->patch_size;
	} else {
		per_ch = px->cols;
	}
	for (int64_t i = 0; i < px->rows; i++)
		for (int64_t j = 0; j < px->cols; j++) {
			float v = px->values[i * px->cols + j];
			int ch = px->kind != IMAGE_PROC_CLIP ? (int)(j / per_ch)
							     : (int)i;
			double tol = 1e-5 * (1 + fabs(lo[ch]) + fabs(hi[ch]));
			if (!isfinite(v) || v < lo[ch] - tol || v > hi[ch] + tol) {
				snprintf(why, n, "value %g at [%lld, %lld] outside "
					 "[(0 - mean)/std, (1 - mean)/std] = "
					 "[%.4g, %.4g] (channel %d)",
					 (double)v, (long long)i, (long long)j,
					 lo[ch], hi[ch], ch);
				return 2;
			}
			/* Kimi-VL pads with zeros, and so does CLIP's center
			 * crop past the image (image.features names a crop
			 * larger than the resize): those read (0 - mean)/std */
			if (f->uniform && fabs(v - want[ch]) > 1e-6 &&
			    !((px->kind == IMAGE_PROC_KIMI ||
			       (px->kind == IMAGE_PROC_CLIP &&
				p->do_center_crop)) &&
			      fabs(v - (0 - p->mean[ch]) / p->std[ch]) <=
				  1e-6)) {
				snprintf(why, n, "a uniform (%d,%d,%d) image gives "
					 "%.9g at [%lld, %lld], not (v/255 - "
					 "mean)/std = %.9g",
					 image_corpus_uniform_rgb[0],
					 image_corpus_uniform_rgb[1],
					 image_corpus_uniform_rgb[2], (double)v,
					 (long long)i, (long long)j, want[ch]);
				return 2;
			}
		}
	return 0;
}

/* The config's rescale and normalize against the definition the tower is
 * fed by: (v/255 - mean)/std.  "" when the config says the same. */
static void prep_fields(const char *prep_path, const struct image_prep_config *p,
			char *why, size_t n)
{
	why[0] = 0;
	if (!p->do_rescale)
		snprintf(why, n, "%s: do_rescale false, but the tower is fed "
			 "(v/255 - mean)/std: expected do_rescale true with "
			 "rescale_factor 1/255 = 0.00392156862745098",
			 prep_path);
	else if (!(fabs(p->rescale_factor * 255 - 1) <= 1e-6))
		snprintf(why, n, "%s: rescale_factor %.9g (1/%.6g), but the "
			 "tower is fed (v/255 - mean)/std: expected 1/255 = "
			 "0.00392156862745098",
			 prep_path, p->rescale_factor, 1 / p->rescale_factor);
	else if (!p->do_normalize)
		snprintf(why, n, "%s: do_normalize false, but the tower is fed "
			 "(v/255 - mean)/std: expected do_normalize true",
			 prep_path);
}

static void preprocess_all(const char *prep_path,
			   const struct image_prep_config *p,
			   const struct model_config *c,
			   const struct image_file *files, int nf,
			   struct image_run *runs, struct item_result *res)
{
	int bad = 0, first_bad = -1, png = 0, jpeg = 0;
	char modes[200] = "", why[600], field[500];
	json_t *imgs = json_array();
	prep_fields(prep_path, p, field, sizeof field);
	for (int i = 0; i < nf; i++) {
		struct image_run *r = &runs[i];
		struct image_rgb im;
		struct d0_err err;
		double t0 = now_s(), t1;
		r->name = files[i].name;
		if (image_decode(files[i].bytes, files[i].len, files[i].name, 0,
				 &im, &err) < 0) {
			snprintf(r->error, sizeof r->error, "%s", err.msg);
			goto next;
		}
		t1 = now_s();
		r->decode_ms = (t1 - t0) * 1e3;
		snprintf(r->format, sizeof r->format, "%s", im.format);
		snprintf(r->mode, sizeof r->mode, "%s", im.mode);
		r->w = im.w;
		r->h = im.h;
		if (image_preprocess(p, &im, files[i].name, &r->px, &err) < 0) {
			snprintf(r->error, sizeof r->error, "%s", err.msg);
			image_free(&im);
			goto next;
		}
		r->prep_ms = (now_s() - t1) * 1e3;
		image_free(&im);
		r->rw = r->px.width;
		r->rh = r->px.height;
		r->grid[0] = r->px.grid_t;
		r->grid[1] = r->px.grid_h;
		r->grid[2] = r->px.grid_w;
		r->rows = r->px.rows;
		r->cols = r->px.cols;
		r->tokens = image_tower_tokens(c, &r->px);
		r->vals_bad = prep_consistency(p, &files[i], r, why,
					       sizeof why) == 2;
		if (why[0])
			snprintf(r->error, sizeof r->error, "%s: %s",
				 files[i].name, why);
		if (!strcmp(r->format, "PNG"))
			png++;
		else
			jpeg++;
		if (!strstr(modes, r->mode) &&
		    strlen(modes) + strlen(r->mode) + 2 < sizeof modes)
			snprintf(modes + strlen(modes),
				 sizeof modes - strlen(modes), "%s%s",
				 modes[0] ? "," : "", r->mode);
	next:
		if (r->error[0] && !bad++)
			first_bad = i;
		json_array_append_new(
		    imgs,
		    json_pack("{s:s, s:s, s:s, s:i, s:i, s:i, s:i, s:[i,i,i], "
			      "s:I, s:I, s:f, s:f, s:s}",
			      "file", r->name, "format", r->format, "mode",
			      r->mode, "width", r->w, "height", r->h,
			      "resized_width", r->rw, "resized_height", r->rh,
			      "grid_thw", r->grid[0], r->grid[1], r->grid[2],
			      "tokens", (json_int_t)r->tokens, "rows",
			      (json_int_t)r->rows, "decode_ms", r->decode_ms,
			      "preprocess_ms", r->prep_ms, "error", r->error));
	}
	res->extra = json_pack("{s:o}", "images", imgs);
	res->value = nf - bad;
	res->has_value = 1;
	if (field[0] && bad)
		set(res, "fail", "%s (%d of %d image%s failed; first: %.400s)",
		    field, bad, nf, nf == 1 ? "" : "s", runs[first_bad].error);
	else if (field[0])
		set(res, "fail", "%s", field);
	else if (bad)
		set(res, "fail", "%d of %d image%s failed; first: %s", bad, nf,
		    nf == 1 ? "" : "s", runs[first_bad].error);
	else
		set(res, "pass",
		    "%d image%s (%d PNG, %d JPEG; modes %s) decoded, resized "
		    "and normalized by %s: values finite and in range, tokens "
		    "= merged patches, a uniform image equal to (v/255 - "
		    "mean)/std",
		    nf, nf == 1 ? "" : "s", png, jpeg, modes, p->type_name);
}

/* ------------------------------------------------------ image.features */

/* The prompt's image slots: runs of the placeholder id.  start[k], len[k]. */
static int placeholder_runs(const int64_t *ids, int n, int64_t id, int *start,
			    int *len, int max)
{
	int k = 0;
	for (int i = 0; i < n; i++) {
		if (ids[i] != id)
			continue;
		if (k < max) {
			start[k] = i;
			len[k] = 0;
		}
		while (i < n && ids[i] == id) {
			if (k < max)
				len[k]++;
			i++;
		}
		k++;
	}
	return k;
}

/* The family's one-image prompt. */
static const char *default_prompt(const struct model_config *c)
{
	if (c->vision.kind == VISION_KIMI) /* Kimi-VL's chat template */
		return "<|im_user|>user<|im_middle|><|media_start|>image"
		       "<|media_content|><|media_pad|><|media_end|>Describe "
		       "this image.<|im_end|><|im_assistant|>assistant"
		       "<|im_middle|>";
	return c->vision.kind == VISION_CLIP
		       ? "USER: <image>\nDescribe this image. ASSISTANT:"
		       : "<|vision_start|><|image_pad|><|vision_end|>Describe "
			 "this image.";
}

#define MAX_FIND 16
#define MAX_SLOTS 64

static int features(struct ic_opts *o, const struct model_config *c,
		    const char *prep_path, const struct image_prep_config *p,
		    const struct image_run *runs, int nf,
		    struct item_result *res, struct d0_err *err)
{
	struct image_finding f[MAX_FIND];
	int start[MAX_SLOTS], len[MAX_SLOTS], nslot, n, expanded = 0;
	int usable = 0, unusable = 0, first_bad = -1, checked = 0, j = 0;
	int cfg_n, size_named = 0;
	int64_t id = c->vision.image_token_id, total = 0;
	char bad_note[500] = "";
	json_t *slots = json_array();
	/* The images the processor could not take (image.preprocess fails
	 * naming them): the prompt's slots take the usable ones, in name
	 * order, as perf.image and numerics.image do */
	for (int i = 0; i < nf; i++)
		if (run_unusable(&runs[i])) {
			if (!unusable++)
				first_bad = i;
		} else {
			usable++;
		}
	if (unusable)
		snprintf(bad_note, sizeof bad_note,
			 "%d of %d image%s not usable, left to image.preprocess "
			 "(first: %.300s)",
			 unusable, nf, nf == 1 ? "" : "s", runs[first_bad].error);
	n = image_features_check(o->dir, c, prep_path, p, f, MAX_FIND, err);
	cfg_n = n;
	if (n < 0) {
		json_decref(slots);
		return -1;
	}
	if (!layout_opts_has_prompt(&o->lay))
		o->lay.prompt = default_prompt(c);
	if (layout_opts_prompt(&o->lay, o->dir, err) < 0) {
		json_decref(slots);
		return -1;
	}
	nslot = id < 0 ? 0
		       : placeholder_runs(o->lay.tokens, o->lay.ntok, id, start,
					  len, MAX_SLOTS);
	if (id < 0)
		snprintf(f[n < MAX_FIND ? n : MAX_FIND - 1].what,
			 sizeof f[0].what,
			 "%s/config.json names no image placeholder token "
			 "(image_token_id)",
			 o->dir),
		    n++;
	else if (!nslot)
		snprintf(f[n < MAX_FIND ? n : MAX_FIND - 1].what,
			 sizeof f[0].what,
			 "the prompt has no image placeholder (token %lld: %s)",
			 (long long)id,
			 o->lay.tok ? tokenizer_id_token(o->lay.tok, id) : "?"),
		    n++;
	else if (!usable)
		snprintf(f[n < MAX_FIND ? n : MAX_FIND - 1].what,
			 sizeof f[0].what,
			 "no image slot checked: none of the corpus's %d "
			 "image%s went through the processor (first: %.250s)",
			 nf, nf == 1 ? "" : "s", runs[first_bad].error),
		    n++;
	else if (nslot > usable)
		snprintf(f[n < MAX_FIND ? n : MAX_FIND - 1].what,
			 sizeof f[0].what,
			 "the prompt has %d image slots but the corpus %d "
			 "usable image%s%s%.250s",
			 nslot, usable, usable == 1 ? "" : "s",
			 unusable ? "; " : "", bad_note),
		    n++;
	for (int k = 0; k < nslot && k < MAX_SLOTS; k++) {
		const struct image_run *r;
		while (j < nf && run_unusable(&runs[j]))
			j++; /* image.preprocess names it */
		if (j >= nf)
			break;
		r = &runs[j++];
		checked++;
		json_array_append_new(
		    slots, json_pack("{s:s, s:i, s:I, s:[i,i,i]}", "image",
				     r->name, "placeholders", len[k], "tokens",
				     (json_int_t)r->tokens, "grid_thw",
				     r->grid[0], r->grid[1], r->grid[2]));
		total += r->tokens;
		/* CLIP's tower takes image_size x image_size: the config
		 * findings name a crop that gives another size; an image the
		 * processor still gives another size is named here */
		if (c->vision.kind == VISION_CLIP && !cfg_n && !size_named &&
		    (r->rw != c->vision.image_size ||
		     r->rh != c->vision.image_size)) {
			size_named = 1;
			if (n < MAX_FIND)
				snprintf(f[n].what, sizeof f[n].what,
					 "image %d (%s): the processor gives "
					 "pixel_values of 3 x %d x %d but the "
					 "tower takes %lldx%lld "
					 "(vision_config.image_size)",
					 k + 1, r->name, r->rh, r->rw,
					 (long long)c->vision.image_size,
					 (long long)c->vision.image_size);
			n++;
		}
		if (len[k] == r->tokens)
			continue;
		if (len[k] == 1) {
			expanded++;
			continue;
		}
		if (n < MAX_FIND) {
			if (c->vision.kind == VISION_CLIP)
				snprintf(f[n].what, sizeof f[n].what,
					 "image %d (%s, %dx%d): %d placeholder "
					 "tokens %s in the prompt but the tower "
					 "gives %lld ((%d/%lld)^2 patches)",
					 k + 1, r->name, r->rw, r->rh, len[k],
					 tokenizer_id_token(o->lay.tok, id),
					 (long long)r->tokens, r->rh,
					 (long long)c->vision.patch);
			else
				snprintf(f[n].what, sizeof f[n].what,
					 "image %d (%s, grid %dx%dx%d): %d "
					 "placeholder tokens %s in the prompt "
					 "but the tower gives %lld merged "
					 "patches (%lld patches / %lld^2)",
					 k + 1, r->name, r->grid[0], r->grid[1],
					 r->grid[2], len[k],
					 tokenizer_id_token(o->lay.tok, id),
					 (long long)r->tokens,
					 (long long)r->rows,
					 (long long)c->vision.merge);
		}
		n++;
	}
	if (!n && !checked) /* never a pass over no slot */
		snprintf(f[n++].what, sizeof f[0].what,
			 "no image slot of the prompt was checked");
	res->extra = json_pack("{s:o, s:i, s:i}", "slots", slots, "findings",
			       n, "unusable_images", unusable);
	res->value = n;
	res->has_value = 1;
	if (n) {
		char more[64] = "";
		if (n > 1)
			snprintf(more, sizeof more, " (and %d more)", n - 1);
		set(res, "fail", "%s%s", f[0].what, more);
		json_t *all = json_array();
		for (int i = 0; i < n && i < MAX_FIND; i++)
			json_array_append_new(all, json_string(f[i].what));
		json_object_set_new(res->extra, "problems", all);
	} else {
		set(res, "pass",
		    "%s agrees with the checkpoint (patch %d, merge %d, "
		    "mean/std of the tower's training); %d image slot%s in "
		    "the prompt, %lld placeholder tokens = merged patches%s%s%s",
		    prep_path, p->patch_size ? p->patch_size
					     : (int)c->vision.patch,
		    p->merge_size ? p->merge_size : 1, checked,
		    checked == 1 ? "" : "s", (long long)total,
		    expanded ? " (one placeholder expanded per image)" : "",
		    unusable ? "; " : "", bad_note);
	}
	return 0;
}

/* ------------------------------------- perf.image and numerics.image */

/* The split of one image prompt's TTFT, per image. */
struct split {
	double pre, enc, fill;
};

/* Max |a - b| / max |b| over n values (the relative error validate uses
 * for logits: against the reference's largest magnitude). */
static double rel_err(const float *a, const double *b, int64_t n)
{
	double d = 0, m = 0;
	for (int64_t i = 0; i < n; i++) {
		double e = fabs((double)a[i] - b[i]);
		if (!(e <= d))
			d = e; /* NaN wins */
		if (fabs(b[i]) > m)
			m = fabs(b[i]);
	}
	return m > 0 ? d / m : d;
}

/* The tower's features of image r against the float64 reference's
 * (refv_encode on the same pixel values).  -1 with err. */
static int ref_features(const struct refv_model *ref,
			const struct model_config *c, const struct image_run *r,
			const float *feats, double *err_out, struct d0_err *err)
{
	const struct image_pixels *px = &r->px;
	int64_t n = px->rows * px->cols, rows = 0,
		grid[3] = {px->grid_t, px->grid_h, px->grid_w};
	double *x = malloc((size_t)n * sizeof *x), *out = NULL;
	if (!x)
		return d0_errf(err, "%s: out of memory", r->name);
	for (int64_t i = 0; i < n; i++)
		x[i] = px->values[i];
	if (refv_encode(ref, x, px->rows, px->cols, grid, 1, NULL, NULL, &out,
			&rows, err) < 0) {
		free(x);
		return -1;
	}
	free(x);
	if (rows != r->tokens) {
		free(out);
		return d0_errf(err, "%s: the reference gives %lld features, the "
			       "runtime %lld", r->name, (long long)rows,
			       (long long)r->tokens);
	}
	*err_out = rel_err(feats, out, rows * c->hidden);
	free(out);
	return 0;
}

/* The float64 tower's cost grows with the square of an image's patches
 * (full attention): numerics.image compares images in corpus order while
 * their patches add up to at most this many, and names the ones left out. */
#define NUM_MAX_PATCHES 4096

/*
 * Each image as a one-image prompt: encode (vis_encode) and prefill (the
 * LM over the prompt with the features spliced in, M-RoPE positions) on
 * the runtime; the first images (up to NUM_MAX_PATCHES patches in all)
 * also against the float64 tower, the others named in *left.  Collective over the ranks: every rank walks the same
 * images (the preprocessing is deterministic) and calls the same forward.
 */
static int runtime_split(struct ic_opts *o, const struct model_config *c,
			 struct image_run *runs, int nf, int rank,
			 struct split *sp, int *nsp, double *num_err,
			 int *num_n, char *num_why, size_t num_why_n,
			 char *left, size_t left_n, struct d0_err *err)
{
	int nleft = 0;
	size_t lo = 0;
	struct rt *r = NULL;
	struct vis *v = NULL;
	struct refv_model *ref = NULL;
	int n = o->runs && o->runs < nf ? o->runs : nf, rc = 0;
	int64_t max_ctx = 16, num_patches = 0;
	float *logits = NULL;
	*nsp = 0;
	*num_err = 0;
	*num_n = 0;
	num_why[0] = 0;
	left[0] = 0;
	int64_t *tmpl = malloc((size_t)(o->lay.ntok + 1) * sizeof *tmpl), nt = 0;
	int slots = 0;
	/* The prompt with each placeholder run collapsed to one token, which
	 * vis_prompt_ids expands for whichever image is fed: one prompt
	 * times each image in turn (image.features held the prompt's own
	 * counts to its own images). */
	for (int i = 0; tmpl && i < o->lay.ntok; i++) {
		int64_t t = o->lay.tokens[i];
		if (t == c->vision.image_token_id && nt &&
		    tmpl[nt - 1] == t)
			continue;
		slots += t == c->vision.image_token_id;
		tmpl[nt++] = t;
	}
	if (!tmpl || slots != 1) {
		free(tmpl);
		return d0_errf(err, "the prompt holds %d image%s: perf.image "
			       "times one-image prompts", slots,
			       slots == 1 ? "" : "s");
	}
	for (int i = 0; i < n; i++)
		if (!run_unusable(&runs[i]) && runs[i].tokens + nt + 8 > max_ctx)
			max_ctx = runs[i].tokens + nt + 8;
	if (rt_open(&r, o->dir, &o->lay.d, o->lay.card_mem, max_ctx, err) < 0)
		rc = -1;
	MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!rc && rt_over_budget(r))
		rc = d0_errf(err, "%s", rt_over_budget(r));
	if (!rc && vis_open(&v, r, err) < 0)
		rc = -1;
	MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (rc < 0) {
		if (!err->msg[0])
			d0_errf(err, "the runtime failed to open on another rank");
		goto out;
	}
	if (!rank) {
		struct d0_err e2;
		if (refv_open(o->dir, &ref, &e2) < 0)
			snprintf(num_why, num_why_n, "%s", e2.msg);
	}
	logits = malloc((size_t)c->vocab * sizeof *logits);
	for (int i = 0; i < n && !rc; i++) {
		struct image_run *im = &runs[i];
		int64_t *ids = NULL, nids = 0, *pos = NULL, delta = 0, g[3];
		int last, bad = 0;
		float *feats;
		double t0, t1, t2;
		if (run_unusable(im))
			continue;
		g[0] = im->grid[0];
		g[1] = im->grid[1];
		g[2] = im->grid[2];
		if (vis_prompt_ids(c, tmpl, nt, &im->tokens, 1, &ids, &nids,
				   err) < 0) {
			rc = -1;
			break;
		}
		feats = calloc((size_t)(im->tokens * c->hidden), sizeof *feats);
		if (c->vision.mrope) {
			pos = malloc((size_t)(3 * nids) * sizeof *pos);
			if (vis_rope_index(c, ids, nids, g, 1, pos, &delta, err) <
			    0)
				bad = 1;
		}
		MPI_Barrier(MPI_COMM_WORLD);
		t0 = now_s();
		if (!bad && vis_loaded(v) && vis_encode(v, &im->px, feats, err) < 0)
			bad = 1;
		t1 = now_s();
		MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX,
			      MPI_COMM_WORLD);
		if (!bad) {
			struct rt_seg seg = {.slot = 0, .pos0 = 0,
					     .len = (int)nids, .embeds = feats,
					     .rope_pos = pos, .rope_delta = delta};
			last = (int)nids - 1;
			rt_reset(r);
			if (rt_forward_rows(r, ids, &seg, 1, &last, 1, logits,
					    err) < 0)
				bad = 1;
		}
		t2 = now_s();
		if (!bad) {
			sp[*nsp].pre = im->decode_ms + im->prep_ms;
			sp[*nsp].enc = (t1 - t0) * 1e3;
			sp[*nsp].fill = (t2 - t1) * 1e3;
			(*nsp)++;
		}
		if (!bad && ref && num_patches + im->rows > NUM_MAX_PATCHES) {
			/* named: the first few, then a count */
			if (nleft < 3 && lo < left_n)
				lo += (size_t)snprintf(
				    left + lo, left_n - lo, "%s%.200s (%lld patches)",
				    nleft ? ", " : "", im->name,
				    (long long)im->rows);
			else if (nleft == 3 && lo < left_n)
				lo += (size_t)snprintf(left + lo, left_n - lo,
						       " and more");
			nleft++;
		}
		if (!bad && ref && num_patches + im->rows <= NUM_MAX_PATCHES) {
			double e = 0;
			num_patches += im->rows;
			if (ref_features(ref, c, im, feats, &e, err) < 0) {
				snprintf(num_why, num_why_n, "%s", err->msg);
				err->msg[0] = 0;
			} else {
				if (!(e <= *num_err))
					*num_err = e;
				(*num_n)++;
			}
		}
		free(pos);
		free(feats);
		free(ids);
		if (bad)
			rc = -1;
	}
	if (nleft) {
		char names[700];
		snprintf(names, sizeof names, "%.699s", left);
		snprintf(left, left_n, "%d image%s left out (the float64 "
			 "tower is run on at most %d patches in all; %lld "
			 "compared): "
			 "%.600s", nleft, nleft == 1 ? "" : "s", NUM_MAX_PATCHES,
			 (long long)num_patches, names);
	}
	if (rc < 0 && !err->msg[0])
		d0_errf(err, "the forward failed on another rank");
out:
	free(tmpl);
	free(logits);
	refv_close(ref);
	vis_close(v);
	if (r)
		rt_close(r);
	return rc;
}

static void perf_item(const struct split *sp, int n, struct item_result *res)
{
	double *a = malloc((size_t)(n ? n : 1) * 4 * sizeof *a);
	double q[4][2];
	const char *names[4] = {"preprocess_ms", "encode_ms", "prefill_ms",
				"ttft_ms"};
	if (!a || !n) {
		set(res, "fail", "no image prompt went through the runtime");
		free(a);
		return;
	}
	for (int k = 0; k < 4; k++) {
		for (int i = 0; i < n; i++)
			a[i] = k == 0	? sp[i].pre
			       : k == 1 ? sp[i].enc
			       : k == 2 ? sp[i].fill
					: sp[i].pre + sp[i].enc + sp[i].fill;
		q[k][0] = pct(a, n, 0.5);
		q[k][1] = pct(a, n, 0.99);
	}
	free(a);
	res->extra = json_pack("{s:i}", "n", n);
	for (int k = 0; k < 4; k++)
		json_object_set_new(res->extra, names[k],
				    json_pack("{s:f, s:f}", "p50", q[k][0],
					      "p99", q[k][1]));
	res->value = q[3][0];
	res->has_value = 1;
	set(res, "pass",
	    "TTFT p50 %.2f ms (preprocess %.2f, encode %.2f, prefill %.2f), "
	    "p99 %.2f ms (%.2f, %.2f, %.2f) over %d image%s",
	    q[3][0], q[0][0], q[1][0], q[2][0], q[3][1], q[0][1], q[1][1],
	    q[2][1], n, n == 1 ? "" : "s");
}

/* ------------------------------------------------------------- output */

static void report(struct item_result *res, int n, const struct ic_opts *o,
		   json_t *doc)
{
	json_t *items = json_object();
	for (int i = 0; i < n; i++) {
		struct item_result *r = &res[i];
		json_t *ev = json_pack("{s:s, s:s, s:s}", "item", r->item,
				       "status", r->status, "detail", r->detail);
		if (r->has_value)
			json_object_set_new(ev, "value", json_real(r->value));
		if (r->extra)
			json_object_update(ev, r->extra);
		if (events_enabled())
			events_emit("check", json_deep_copy(ev));
		/* --events: stdout is one JSON event a line, nothing else */
		if (!o->json && !o->events)
			printf("%-17s %-5s %s\n", r->item, r->status, r->detail);
		json_object_set_new(items, r->item, ev);
		json_decref(r->extra);
		r->extra = NULL;
	}
	if (o->json) {
		char *s;
		json_object_set_new(doc, "items", items);
		s = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(9));
		printf("%s\n", s);
		free(s);
	} else {
		json_decref(items);
	}
}

static int worst_rc(const struct item_result *res, int n)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(res[i].status, "fail"))
			return EXIT_CHECK_FAILED;
	return EXIT_OK;
}

static int run(int argc, char **argv)
{
	struct ic_opts o;
	struct model_config cfg;
	struct image_prep_config prep;
	struct item_result res[IT_N];
	struct image_file *files = NULL;
	struct image_run *runs = NULL;
	struct split *sp = NULL;
	struct d0_err err;
	char *cfg_path = NULL, *prep_path = NULL, why[1100], left[800];
	json_t *doc = NULL;
	int rc, nf = 0, rank, nsp = 0, num_n = 0, have_cfg = 0;
	double num_err = 0;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	rc = parse(argc, argv, &o);
	if (rc) {
		layout_opts_free(&o.lay);
		MPI_Finalize();
		return rc < 0 ? EXIT_OK : rc;
	}
	/* The layout against the ranks mpirun started: a usage error (exit
	 * 2, as perf), not two failed items */
	{
		int world = 1;
		MPI_Comm_size(MPI_COMM_WORLD, &world);
		if (o.lay.d.tp * o.lay.d.pp * o.lay.d.ep != world) {
			if (!rank)
				step_usage_error(
				    &step_image_check,
				    "--tp %d x --pp %d x --ep %d = %d ranks, but "
				    "mpirun started %d (run it as mpirun -np %d "
				    "day0-engine image-check ...)",
				    o.lay.d.tp, o.lay.d.pp, o.lay.d.ep,
				    o.lay.d.tp * o.lay.d.pp * o.lay.d.ep, world,
				    o.lay.d.tp * o.lay.d.pp * o.lay.d.ep);
			layout_opts_free(&o.lay);
			MPI_Finalize();
			return EXIT_USAGE;
		}
	}
	events_init(stdout, o.events && !o.json && !rank);
	err.msg[0] = 0;
	memset(res, 0, sizeof res);
	for (int i = 0; i < IT_N; i++)
		res[i].item = item_ids[i];
	cfg_path = path_join(o.dir, "config.json");
	if (model_config_load(cfg_path, &cfg, &err) < 0) {
		if (!rank)
			fprintf(stderr, "day0-engine image-check: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out;
	}
	have_cfg = 1;
	doc = json_pack("{s:s, s:s}", "model", o.dir, "vision",
			vision_kind_name(cfg.vision.kind));
	if (cfg.vision.kind == VISION_NONE) {
		for (int i = 0; i < IT_N; i++)
			set(&res[i], "skip",
			    "n/a: no vision tower in config.json (%s is a text "
			    "model)",
			    cfg.model_type);
		goto out;
	}
	if (cfg.vision.kind == VISION_UNSUPPORTED) {
		set(&res[IT_FEAT], "fail",
		    "%s: the %s tower is not implemented (%s): its features "
		    "cannot be checked",
		    cfg_path, cfg.vision.tower_type, cfg.vision.missing);
		for (int i = 0; i < IT_N; i++)
			if (i != IT_FEAT)
				set(&res[i], "fail", "the %s tower is not "
						     "implemented",
				    cfg.vision.tower_type);
		goto out;
	}
	prep_path = o.prep ? strdup(o.prep)
			   : path_join(o.dir, "preprocessor_config.json");
	if (image_prep_config_load(prep_path, &prep, &err) < 0) {
		/* --preprocessor names the operator's file: one that cannot
		 * be read or parsed is bad input, not a finding about the
		 * release; the checkpoint's own file is the release's */
		if (o.prep) {
			if (!rank)
				fprintf(stderr, "day0-engine image-check: "
					"--preprocessor: %s\n", err.msg);
			rc = EXIT_USAGE;
			goto out;
		}
		for (int i = 0; i < IT_N; i++)
			set(&res[i], "fail", "%s", err.msg);
		goto out;
	}
	if ((!strcmp(o.images, "builtin")
		 ? image_corpus_builtin(&files, &nf, &err)
		 : image_corpus_dir(o.images, &files, &nf, &err)) < 0) {
		/* a folder that is not there is the operator's input */
		if (!rank)
			fprintf(stderr, "day0-engine image-check: --images: %s\n",
				err.msg);
		rc = EXIT_USAGE;
		goto out;
	}
	runs = calloc((size_t)nf, sizeof *runs);
	sp = calloc((size_t)nf, sizeof *sp);
	if (!runs || !sp) {
		fprintf(stderr, "day0-engine image-check: out of memory\n");
		rc = EXIT_USAGE;
		goto out;
	}
	preprocess_all(prep_path, &prep, &cfg, files, nf, runs, &res[IT_PREP]);
	if (features(&o, &cfg, prep_path, &prep, runs, nf, &res[IT_FEAT],
		     &err) < 0) {
		/* an unreadable checkpoint or a bad --prompt: the input */
		if (!rank)
			fprintf(stderr, "day0-engine image-check: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out;
	}
	/* Features that do not fit the tower are never fed to it. */
	if (strcmp(res[IT_FEAT].status, "pass")) {
		set(&res[IT_PERF], "skip", "not measured: image.features failed");
		set(&res[IT_NUM], "skip", "not measured: image.features failed");
		goto out;
	}
	/* nor values rescaled or normalized otherwise than the tower takes */
	prep_fields(prep_path, &prep, why, sizeof why);
	if (why[0]) {
		set(&res[IT_PERF], "skip", "not measured: image.preprocess "
					   "failed (the config's rescale/"
					   "normalize)");
		set(&res[IT_NUM], "skip", "not measured: image.preprocess "
					  "failed (the config's rescale/"
					  "normalize)");
		goto out;
	}
	if (runtime_split(&o, &cfg, runs, nf, rank, sp, &nsp, &num_err,
			  &num_n, why, sizeof why, left, sizeof left, &err) < 0) {
		set(&res[IT_PERF], "fail", "%s", err.msg);
		set(&res[IT_NUM], "fail", "%s", err.msg);
		goto out;
	}
	perf_item(sp, nsp, &res[IT_PERF]);
	if (!num_n) {
		set(&res[IT_NUM], "fail", "no image compared with the float64 "
					  "tower: %s",
		    why[0] ? why : left[0] ? left
				 : "none went through the runtime");
	} else {
		res[IT_NUM].value = num_err;
		res[IT_NUM].has_value = 1;
		res[IT_NUM].extra = json_pack("{s:f, s:i, s:s}", "threshold",
					      o.max_rel, "images", num_n,
					      "left_out", left);
		set(&res[IT_NUM], num_err <= o.max_rel ? "pass" : "fail",
		    "the tower's features of %d image%s against float64: max "
		    "rel %.3g (bound %.3g)%s%.400s%s%.600s",
		    num_n, num_n == 1 ? "" : "s", num_err, o.max_rel,
		    why[0] ? "; " : "", why, left[0] ? "; " : "", left);
	}
out:
	if (!rc) {
		if (!rank)
			report(res, IT_N, &o, doc);
		rc = worst_rc(res, IT_N);
		/* rank 0's verdict (it alone holds the reference's) */
		MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
	}
	for (int i = 0; i < IT_N; i++)
		json_decref(res[i].extra);
	json_decref(doc);
	for (int i = 0; runs && i < nf; i++)
		image_pixels_free(&runs[i].px);
	free(runs);
	free(sp);
	image_files_free(files, nf);
	free(prep_path);
	free(cfg_path);
	if (have_cfg)
		model_config_free(&cfg);
	layout_opts_free(&o.lay);
	MPI_Finalize();
	return rc;
}
