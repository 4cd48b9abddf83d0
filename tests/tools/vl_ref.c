/*
 * vl_ref - the image channel's float64 reference (engine/ref/ref_vision.c)
 * from the command line, for tests/sh/test_vl_model.sh:
 *
 *   vl_ref encode DIR PIXELS.f64 ROWS COLS OUT.f64 [T H W]...
 *       the tower and projector of checkpoint DIR on ROWS x COLS float64
 *       values (the processor's patches; LLaVA: pixel_values as
 *       [images*C][S*S]) with each image's patch grid (Qwen); writes the
 *       features as raw float64 to OUT and prints "ROWS COLS" of them.
 *   vl_ref rope DIR ID,ID,... [T H W]...
 *       get_rope_index of the prompt: three lines of positions (t, h, w)
 *       and a line with the rope delta.
 *
 * Errors go to stderr as "vl_ref: message", exit 2 (input) or 1.
 */
#include "engine.h"
#include "ref_vision.h"

#include <stdlib.h>
#include <string.h>

static int die(const char *msg)
{
	fprintf(stderr, "vl_ref: %s\n", msg);
	return 2;
}

static int grids(int argc, char **argv, int first, int64_t **g, int *n)
{
	int k = argc - first;
	if (k % 3)
		return -1;
	*n = k / 3;
	*g = calloc((size_t)k + 1, sizeof **g);
	for (int i = 0; i < k; i++)
		(*g)[i] = strtoll(argv[first + i], NULL, 10);
	return 0;
}

static int encode(int argc, char **argv)
{
	struct refv_model *m;
	struct d0_err err;
	int64_t rows, cols, orows, *g = NULL;
	int n_img = 1;
	double *pix, *out;
	FILE *f;
	if (argc < 7 || grids(argc, argv, 7, &g, &n_img) < 0)
		return die("usage: encode DIR PIXELS.f64 ROWS COLS OUT.f64 [T H W]...");
	rows = strtoll(argv[4], NULL, 10);
	cols = strtoll(argv[5], NULL, 10);
	if (rows < 1 || cols < 1)
		return die("ROWS and COLS must be positive");
	if (refv_open(argv[2], &m, &err) < 0) {
		free(g);
		return die(err.msg);
	}
	if (refv_config(m)->vision.kind == VISION_CLIP) /* images by rows */
		n_img = (int)(rows / refv_config(m)->vision.in_chans);
	pix = malloc((size_t)(rows * cols) * sizeof *pix);
	f = fopen(argv[3], "rb");
	if (!f || fread(pix, sizeof *pix, (size_t)(rows * cols), f) !=
			  (size_t)(rows * cols)) {
		if (f)
			fclose(f);
		free(pix), free(g), refv_close(m);
		return die("cannot read ROWS x COLS float64 values from PIXELS");
	}
	fclose(f);
	if (refv_encode(m, pix, rows, cols, g, n_img, NULL, NULL, &out, &orows,
			&err) < 0) {
		free(pix), free(g), refv_close(m);
		return die(err.msg);
	}
	f = fopen(argv[6], "wb");
	cols = refv_config(m)->hidden;
	if (!f || fwrite(out, sizeof *out, (size_t)(orows * cols), f) !=
			  (size_t)(orows * cols)) {
		if (f)
			fclose(f);
		free(out), free(pix), free(g), refv_close(m);
		return die("cannot write OUT");
	}
	fclose(f);
	printf("%lld %lld\n", (long long)orows, (long long)cols);
	free(out), free(pix), free(g);
	refv_close(m);
	return 0;
}

static int rope(int argc, char **argv)
{
	struct model_config c;
	struct d0_err err;
	int64_t *ids, *pos, *g = NULL, n = 0, delta;
	int n_img;
	char *cp, *s, *save = NULL, *tok;
	if (argc < 4 || grids(argc, argv, 4, &g, &n_img) < 0)
		return die("usage: rope DIR ID,ID,... [T H W]...");
	cp = path_join(argv[2], "config.json");
	if (model_config_load(cp, &c, &err) < 0) {
		free(cp), free(g);
		return die(err.msg);
	}
	free(cp);
	ids = calloc(strlen(argv[3]) + 1, sizeof *ids);
	s = strdup(argv[3]);
	for (tok = strtok_r(s, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
		ids[n++] = strtoll(tok, NULL, 10);
	free(s);
	pos = calloc((size_t)(3 * n + 1), sizeof *pos);
	if (refv_rope_index(&c, ids, n, g, n_img, pos, &delta, &err) < 0) {
		free(ids), free(pos), free(g), model_config_free(&c);
		fprintf(stderr, "vl_ref: %s\n", err.msg);
		return 1;
	}
	for (int a = 0; a < 3; a++)
		for (int64_t i = 0; i < n; i++)
			printf("%lld%c", (long long)pos[a * n + i],
			       i + 1 < n ? ' ' : '\n');
	printf("%lld\n", (long long)delta);
	free(ids), free(pos), free(g);
	model_config_free(&c);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc >= 2 && !strcmp(argv[1], "encode"))
		return encode(argc, argv);
	if (argc >= 2 && !strcmp(argv[1], "rope"))
		return rope(argc, argv);
	return die("usage: vl_ref encode|rope ...");
}
