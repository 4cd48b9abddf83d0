/*
 * checkpoint.c - a Hugging Face checkpoint directory: which shard files it
 * has (from model.safetensors.index.json, or the single model.safetensors)
 * and the SHA256SUMS file beside them.  Shard names from the index are
 * checked to be plain file names before anything is opened, so an index
 * naming "../x" or "/etc/x" never makes us read outside the directory.
 */
#include "engine.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define INDEX_NAME "model.safetensors.index.json"
#define INDEX_LIMIT (64u << 20)

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void add_shard(struct ckpt *c, const char *name)
{
	struct ckpt_shard *s;
	c->shards = realloc(c->shards, (c->nshards + 1) * sizeof *c->shards);
	if (!c->shards)
		abort();
	s = &c->shards[c->nshards++];
	memset(s, 0, sizeof *s);
	s->name = strdup(name);
	s->path = path_join(c->dir, name);
}

/* Shards named by a parsed index, sorted, each once; names checked. */
static int shards_from_index(struct ckpt *c, const char *ipath,
			     struct d0_err *err)
{
	json_t *wm = json_object_get(c->index, "weight_map"), *v;
	const char *key;
	char **names;
	size_t n = 0;

	if (!json_is_object(c->index))
		return d0_errf(err, "%s: not a JSON object", ipath);
	if (!json_is_object(wm))
		return d0_errf(err, "%s: missing object 'weight_map'", ipath);
	if (json_object_size(wm) == 0)
		return d0_errf(err, "%s: weight_map is empty", ipath);
	names = calloc(json_object_size(wm), sizeof *names);
	json_object_foreach(wm, key, v) {
		const char *shard;
		if (!json_is_string(v)) {
			free(names);
			return d0_errf(err, "%s: weight_map['%s'] is not a "
				       "string", ipath, key);
		}
		shard = json_string_value(v);
		if (!shard_name_ok(shard)) {
			free(names);
			return d0_errf(err, "%s: tensor '%s': shard '%s' is "
				       "not a plain file name in the model "
				       "directory (refused, not opened)",
				       ipath, key, shard);
		}
		names[n++] = (char *)shard;
	}
	qsort(names, n, sizeof *names, cmp_str);
	for (size_t i = 0; i < n; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]))
			add_shard(c, names[i]);
	free(names);
	return 0;
}

int ckpt_open(const char *dir, struct ckpt *c, struct d0_err *err)
{
	char *ipath, *single;
	memset(c, 0, sizeof *c);
	if (!path_is_dir(dir))
		return d0_errf(err, "%s: not a directory", dir);
	c->dir = strdup(dir);
	ipath = path_join(dir, INDEX_NAME);
	single = path_join(dir, "model.safetensors");
	if (path_exists(ipath)) {
		char *text;
		size_t len;
		json_error_t jerr;
		c->has_index = 1;
		if (file_read_all(ipath, INDEX_LIMIT, &text, &len, err) < 0)
			goto fail;
		c->index = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
		free(text);
		if (!c->index) {
			d0_errf(err, "%s: invalid JSON: %s (line %d)", ipath,
				jerr.text, jerr.line);
			goto fail;
		}
		if (shards_from_index(c, ipath, err) < 0)
			goto fail;
	} else if (path_exists(single)) {
		add_shard(c, "model.safetensors");
	} else {
		d0_errf(err, "%s: no %s and no model.safetensors", dir,
			INDEX_NAME);
		goto fail;
	}
	free(ipath);
	free(single);
	return 0;
fail:
	free(ipath);
	free(single);
	ckpt_close(c);
	return -1;
}

void ckpt_close(struct ckpt *c)
{
	for (size_t i = 0; i < c->nshards; i++) {
		free(c->shards[i].name);
		free(c->shards[i].path);
		free(c->shards[i].expected_sha);
		if (c->shards[i].parsed)
			st_free(&c->shards[i].st);
	}
	free(c->shards);
	json_decref(c->index);
	free(c->dir);
	memset(c, 0, sizeof *c);
}

int sums_load(const char *path, json_t **out, struct d0_err *err)
{
	char *text, *line, *save = NULL;
	size_t len;
	int lineno = 0;
	json_t *sums;

	if (file_read_all(path, 16u << 20, &text, &len, err) < 0)
		return -1;
	if (memchr(text, 0, len)) {
		free(text);
		return d0_errf(err, "%s: contains NUL bytes, not a sha256sum "
			       "file", path);
	}
	sums = json_object();
	for (line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		size_t n = strlen(line);
		char hex[65];
		const char *name;
		lineno++;
		if (n && line[n - 1] == '\r')
			line[--n] = 0;
		if (n == 0)
			continue;
		/* "HEX  NAME" (text mode) or "HEX *NAME" (binary mode) */
		if (n < 66 || line[64] != ' ' ||
		    (line[65] != ' ' && line[65] != '*'))
			goto bad;
		for (int i = 0; i < 64; i++) {
			if (!isxdigit((unsigned char)line[i]))
				goto bad;
			hex[i] = (char)tolower((unsigned char)line[i]);
		}
		hex[64] = 0;
		name = line + 66;
		/* name points into text: format the message before freeing */
		if (!shard_name_ok(name)) {
			d0_errf(err, "%s: line %d: '%s' is not a plain file name "
				"in the model directory", path, lineno, name);
			json_decref(sums);
			free(text);
			return -1;
		}
		if (json_object_get(sums, name)) {
			d0_errf(err, "%s: line %d: '%s' listed twice", path,
				lineno, name);
			json_decref(sums);
			free(text);
			return -1;
		}
		json_object_set_new(sums, name, json_string(hex));
		continue;
bad:
		json_decref(sums);
		free(text);
		return d0_errf(err, "%s: line %d: expected '<64 hex digits>  "
			       "<file name>'", path, lineno);
	}
	free(text);
	*out = sums;
	return 0;
}
