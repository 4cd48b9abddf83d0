/*
 * step_image_prep.c - `day0-engine image-prep`: images through a release's
 * preprocessor_config.json by hand.  Decodes each PNG/JPEG, runs the
 * processor (engine/image/image_prep.c) and says what the vision tower
 * would be fed: the resized size, the patch grid, the pixel-value shape and
 * the number of image placeholder tokens; --out writes the pixel values and
 * the resized bytes as .npy files, which tests/tools/image_ref.py holds to
 * PIL + numpy doing what transformers does.  --config checks the
 * preprocessor's patch geometry against the checkpoint's vision_config.
 */
#include "engine.h"
#include "image.h"

#include <getopt.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>

static int run(int argc, char **argv);

const struct step_entry step_image_prep = {
	.name = "image-prep",
	.usage = "IMAGE... --preprocessor FILE [--config FILE] "
		 "[--max-pixels N] [--out DIR] [--force] [--json]\n"
		 "  IMAGE             PNG or JPEG files (decoded as PIL's "
		 "convert(\"RGB\") does)\n"
		 "  --preprocessor F  the release's preprocessor_config.json "
		 "(Qwen2VLImageProcessor, Qwen2_5_VLImageProcessor, "
		 "CLIPImageProcessor, SiglipImageProcessor, "
		 "KimiVLImageProcessor; the first four's *Fast variants as the "
		 "slow ones)\n"
		 "  --config F        the checkpoint's config.json: its "
		 "vision_config must agree with the preprocessor (patch, "
		 "merge, temporal, image size), else exit 1\n"
		 "  --max-pixels N    refuse images declaring more pixels "
		 "(default 178956970, PIL's bomb limit)\n"
		 "  --out DIR         write NAME.pixel_values.npy (float32) and "
		 "NAME.resized.npy (uint8 HxWx3) per image, all or nothing; "
		 "NAME is the file name without folder and extension, two "
		 "images of one NAME are refused\n"
		 "  --force           replace a non-empty --out DIR\n"
		 "  --json            one JSON document on stdout\n"
		 "example: day0-engine image-prep cat.jpg --preprocessor "
		 "/models/qwen2.5-vl-7b/preprocessor_config.json --json",
	.summary = "preprocess images as the model's transformers image "
		   "processor does (decode, resize, normalize, patchify)",
	.run = run,
};

struct prep_opts {
	const char *prep, *config, *out;
	uint64_t max_pixels;
	int json, force;
};

static int parse(int argc, char **argv, struct prep_opts *o)
{
	static const struct option lo[] = {
		{"preprocessor", 1, 0, 'p'}, {"config", 1, 0, 'c'},
		{"max-pixels", 1, 0, 'm'},   {"out", 1, 0, 'o'},
		{"force", 0, 0, 'f'},	     {"json", 0, 0, 'j'},
		{"help", 0, 0, 'h'},	     {0, 0, 0, 0}};
	const struct step_entry *S = &step_image_prep;
	int ch;
	long v;
	memset(o, 0, sizeof *o);
	optind = 1;
	opterr = 0;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'p': o->prep = optarg; break;
		case 'c': o->config = optarg; break;
		case 'o': o->out = optarg; break;
		case 'f': o->force = 1; break;
		case 'j': o->json = 1; break;
		case 'm':
			if (parse_long(optarg, 1, (long)1 << 40, &v) < 0)
				return step_usage_error(S, "--max-pixels: "
							"expected a positive "
							"integer, got '%s'",
							optarg);
			o->max_pixels = (uint64_t)v;
			break;
		case 'h': step_help(S); return -1;
		default:
			return step_usage_error(S, "unknown or incomplete option "
						"'%s'", argv[optind - 1]);
		}
	}
	if (optind >= argc)
		return step_usage_error(S, "expected at least one IMAGE");
	if (!o->prep)
		return step_usage_error(S, "--preprocessor FILE is required "
					"(the model's preprocessor_config.json)");
	return 0;
}

/* The checkpoint's vision_config against the preprocessor: the geometry
 * both must share.  Returns 0, or 1 with err naming the disagreement, or
 * -1 when config.json cannot be read. */
static int geometry_check(const char *path, const struct image_prep_config *c,
			  int *vision_patch, struct d0_err *err)
{
	json_t *doc = image_json_load(path, err), *vc;
	int rc = 0;
	*vision_patch = 0;
	if (!doc)
		return -1;
	vc = json_object_get(doc, "vision_config");
	if (!json_is_object(vc)) {
		json_decref(doc);
		return d0_errf(err, "%s: no vision_config object: not a "
			       "vision-language checkpoint", path);
	}
#define FIELD(key) json_integer_value(json_object_get(vc, key))
	*vision_patch = (int)FIELD("patch_size");
	if (c->kind == IMAGE_PROC_QWEN2VL) {
		struct {
			const char *key, *prep;
			int want;
		} f[] = {
			{"patch_size", "patch_size", c->patch_size},
			{"spatial_merge_size", "merge_size", c->merge_size},
			{"temporal_patch_size", "temporal_patch_size",
			 c->temporal_patch_size},
		};
		for (size_t i = 0; i < sizeof f / sizeof f[0] && !rc; i++) {
			json_t *v = json_object_get(vc, f[i].key);
			if (json_is_integer(v) && json_integer_value(v) != f[i].want)
				rc = 1, d0_errf(err, "image.features: the "
						"preprocessor's %s is %d but "
						"%s vision_config.%s is %lld",
						f[i].prep, f[i].want, path,
						f[i].key,
						(long long)json_integer_value(v));
		}
	} else {
		int size = (int)FIELD("image_size");
		if (size && c->do_center_crop &&
		    (c->crop_h != size || c->crop_w != size))
			rc = 1, d0_errf(err, "image.features: the preprocessor "
					"crops %dx%d but %s vision_config."
					"image_size is %d", c->crop_w, c->crop_h,
					path, size);
		else if (*vision_patch && c->do_center_crop &&
			 (c->crop_h % *vision_patch || c->crop_w % *vision_patch))
			rc = 1, d0_errf(err, "image.features: crop %dx%d is not "
					"a multiple of %s vision_config."
					"patch_size %d", c->crop_w, c->crop_h,
					path, *vision_patch);
		else if (size && !c->do_center_crop && c->do_resize &&
			 c->shortest_edge)
			rc = 1, d0_errf(err, "image.features: do_center_crop "
					"false: size.shortest_edge %d keeps each "
					"image's aspect, but %s vision_config."
					"image_size is %d (expected "
					"do_center_crop true with crop_size %d)",
					c->shortest_edge, path, size, size);
		else if (size && !c->do_center_crop && c->do_resize &&
			 (c->size_h != size || c->size_w != size))
			rc = 1, d0_errf(err, "image.features: the preprocessor "
					"resizes to %dx%d but %s vision_config."
					"image_size is %d", c->size_w, c->size_h,
					path, size);
		else if (c->do_center_crop && c->do_resize && c->shortest_edge &&
			 (c->shortest_edge < c->crop_h ||
			  c->shortest_edge < c->crop_w))
			rc = 1, d0_errf(err, "image.features: size.shortest_edge "
					"%d is smaller than crop_size %dx%d: the "
					"crop pads every image with zeros",
					c->shortest_edge, c->crop_w, c->crop_h);
	}
#undef FIELD
	json_decref(doc);
	return rc;
}

/* "dir/cat.final.jpg" -> "cat.final" */
static void stem_of(const char *path, char *out, size_t n)
{
	const char *b = strrchr(path, '/'), *dot;
	b = b ? b + 1 : path;
	dot = strrchr(b, '.');
	snprintf(out, n, "%.*s", (int)(dot && dot != b ? dot - b : (long)strlen(b)),
		 b);
}

static int write_outputs(const char *dir, const char *img,
			 const struct image_pixels *p, struct d0_err *err)
{
	char stem[256], *path, name[300];
	int64_t shape[3];
	int rc;
	stem_of(img, stem, sizeof stem);
	if (p->kind != IMAGE_PROC_CLIP) { /* Qwen2-VL, Kimi-VL: patches */
		shape[0] = p->rows;
		shape[1] = p->cols;
	} else {
		shape[0] = 3;
		shape[1] = p->height;
		shape[2] = p->width;
	}
	snprintf(name, sizeof name, "%s.pixel_values.npy", stem);
	path = path_join(dir, name);
	rc = image_write_npy(path, p->values, 1, shape,
			     p->kind != IMAGE_PROC_CLIP ? 2 : 3, err);
	free(path);
	if (rc < 0)
		return -1;
	shape[0] = p->height;
	shape[1] = p->width;
	shape[2] = 3;
	snprintf(name, sizeof name, "%s.resized.npy", stem);
	path = path_join(dir, name);
	rc = image_write_npy(path, p->resized.px, 0, shape, 3, err);
	free(path);
	return rc;
}

static int run(int argc, char **argv)
{
	struct prep_opts o;
	struct image_prep_config cfg;
	struct outdir od = {0};
	struct d0_err err;
	json_t *images = json_array();
	int rc = parse(argc, argv, &o), vision_patch = 0, status = EXIT_OK;
	/* The text lines, printed once every image went through: a bad
	 * image later on leaves only its error (no partial output) */
	char *text = NULL;
	size_t text_n = 0;
	FILE *tf = NULL;

	if (rc)
		goto out_usage;
	if (image_prep_config_load(o.prep, &cfg, &err) < 0) {
		fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out_usage;
	}
	if (o.config) {
		int g = geometry_check(o.config, &cfg, &vision_patch, &err);
		if (g) {
			fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
			rc = g < 0 ? EXIT_USAGE : EXIT_CHECK_FAILED;
			goto out_usage;
		}
	}
	/* --out names each image's files by its stem: two images of one
	 * stem (d1/cat.png d2/cat.png, cat.png cat.jpg) would write the same
	 * files, the second over the first */
	for (int i = optind; o.out && i < argc; i++) {
		char si[256], sj[256];
		stem_of(argv[i], si, sizeof si);
		for (int j = optind; j < i; j++) {
			stem_of(argv[j], sj, sizeof sj);
			if (strcmp(si, sj))
				continue;
			fprintf(stderr, "day0-engine image-prep: --out: %s and %s "
				"would both write %s.pixel_values.npy: expected "
				"images of distinct names (without the extension)"
				"; nothing written\n", argv[j], argv[i], si);
			rc = EXIT_USAGE;
			goto out_usage;
		}
	}
	if (o.out && outdir_begin(&od, o.out, o.force, &err) < 0) {
		fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
		rc = EXIT_USAGE;
		goto out_usage;
	}
	tf = open_memstream(&text, &text_n);
	if (!tf) {
		fprintf(stderr, "day0-engine image-prep: out of memory\n");
		if (o.out)
			outdir_abort(&od);
		rc = EXIT_USAGE;
		goto out_usage;
	}
	for (int i = optind; i < argc; i++) {
		struct image_rgb im;
		struct image_pixels px;
		double t0 = now_s(), t1, t2;
		json_t *e;
		if (image_load(argv[i], o.max_pixels, &im, &err) < 0) {
			fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
			status = EXIT_USAGE;
			break;
		}
		t1 = now_s();
		if (image_preprocess(&cfg, &im, argv[i], &px, &err) < 0) {
			fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
			image_free(&im);
			status = EXIT_USAGE;
			break;
		}
		t2 = now_s();
		/* CLIP-style towers: one token a patch of the crop (the
		 * "default" strategy drops the class token). */
		if (cfg.kind == IMAGE_PROC_CLIP && vision_patch > 0)
			px.tokens = (int64_t)(px.height / vision_patch) *
				    (px.width / vision_patch);
		e = json_pack("{s:s, s:s, s:s, s:i, s:b, s:i, s:i, s:i, s:i, "
			      "s:[I,I], s:I, s:f, s:f}",
			      "file", argv[i], "format", im.format, "mode",
			      im.mode, "bits", im.bits, "progressive",
			      im.progressive, "width", im.w, "height", im.h,
			      "resized_width", px.width, "resized_height",
			      px.height, "shape", (json_int_t)px.rows,
			      (json_int_t)px.cols, "tokens",
			      (json_int_t)px.tokens, "decode_s", t1 - t0,
			      "preprocess_s", t2 - t1);
		/* the shape of the .npy: [3, H, W] for CLIP */
		if (cfg.kind == IMAGE_PROC_CLIP)
			json_object_set_new(e, "shape",
					    json_pack("[i,i,i]", 3, px.height,
						      px.width));
		if (cfg.kind == IMAGE_PROC_KIMI) /* before the padding */
			json_object_set_new(e, "content",
					    json_pack("[i,i]", px.content_w,
						      px.content_h));
		if (cfg.kind != IMAGE_PROC_CLIP)
			json_object_set_new(e, "grid_thw",
					    json_pack("[i,i,i]", px.grid_t,
						      px.grid_h, px.grid_w));
		json_array_append_new(images, e);
		if (!o.json) {
			fprintf(tf, "%s: %s %s %d-bit%s %dx%d -> %dx%d (%s)",
				argv[i], im.format, im.mode, im.bits,
				im.progressive ? " progressive" : "", im.w,
				im.h, px.width, px.height,
				cfg.do_resize ? image_filter_name(cfg.resample)
					      : "no resize");
			if (cfg.kind == IMAGE_PROC_KIMI)
				fprintf(tf, ", the image %dx%d padded",
					px.content_w, px.content_h);
			if (cfg.kind != IMAGE_PROC_CLIP)
				fprintf(tf, ", grid %dx%dx%d, %lld patches x %lld",
					px.grid_t, px.grid_h, px.grid_w,
					(long long)px.rows, (long long)px.cols);
			else
				fprintf(tf, ", pixel_values 3x%dx%d", px.height,
					px.width);
			if (px.tokens)
				fprintf(tf, ", %lld image tokens",
					(long long)px.tokens);
			fprintf(tf, "\n");
		}
		if (o.out && write_outputs(od.partial, argv[i], &px, &err) < 0) {
			fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
			status = EXIT_USAGE;
		}
		image_pixels_free(&px);
		image_free(&im);
		if (status)
			break;
	}
	if (o.out) {
		if (status)
			outdir_abort(&od);
		else if (outdir_commit(&od, &err) < 0) {
			fprintf(stderr, "day0-engine image-prep: %s\n", err.msg);
			status = EXIT_USAGE;
		}
		if (status)
			fprintf(stderr, "day0-engine image-prep: nothing written "
				"to %s (--out is all or nothing)\n", o.out);
	}
	fclose(tf);
	if (!o.json && !status)
		fputs(text, stdout);
	free(text);
	if (o.json && !status) {
		json_t *doc = json_pack("{s:s, s:s, s:O}", "preprocessor", o.prep,
					"image_processor_type", cfg.type_name,
					"images", images);
		char *s = json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(6));
		printf("%s\n", s);
		free(s);
		json_decref(doc);
	}
	json_decref(images);
	return status;
out_usage:
	json_decref(images);
	return rc < 0 ? EXIT_OK : rc;
}
