/*
 * hf_cache.c - a Hugging Face hub cache snapshot as a checkpoint.
 *
 * `huggingface-cli download` (and every transformers download) leaves
 *   models--ORG--NAME/blobs/<hash>
 *   models--ORG--NAME/snapshots/<revision>/<file> -> ../../blobs/<hash>
 * where an LFS file's blob (every .safetensors shard) is named by its
 * SHA-256, and a small git file's (config.json) by its git SHA-1.  So a
 * download carries its own checksums though it has no SHA256SUMS: verify
 * hashes each shard and compares with the blob name.
 *
 * Links are resolved here before anything reads them: one that resolves
 * outside the repository folder (models--ORG--NAME) is refused with the
 * target it names, never opened.
 */
#include "engine.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char *parent(const char *p)
{
	char *d = strdup(p), *s = strrchr(d, '/');
	if (s && s != d)
		*s = 0;
	else if (s)
		s[1] = 0;
	return d;
}

static const char *base(const char *p)
{
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}

int hf_snapshot_open(const char *dir, struct hf_snapshot *s)
{
	char *real = realpath(dir, NULL), *snaps = NULL, *repo = NULL;
	char *blobs = NULL;
	int ok = 0;
	memset(s, 0, sizeof *s);
	if (!real)
		return 0;
	snaps = parent(real);
	repo = parent(snaps);
	if (!strcmp(base(snaps), "snapshots") &&
	    !strncmp(base(repo), "models--", 8)) {
		blobs = path_join(repo, "blobs");
		ok = path_is_dir(blobs);
	}
	if (ok) {
		s->repo = repo;
		s->blobs = blobs;
		snprintf(s->revision, sizeof s->revision, "%s", base(real));
		char *sep;
		snprintf(s->name, sizeof s->name, "%s", base(repo) + 8);
		if ((sep = strstr(s->name, "--"))) /* ORG--NAME -> ORG/NAME */
			memmove(sep + 1, sep + 2, strlen(sep + 2) + 1), *sep = '/';
		repo = blobs = NULL;
	}
	free(real);
	free(snaps);
	free(repo);
	free(blobs);
	return ok;
}

void hf_snapshot_close(struct hf_snapshot *s)
{
	free(s->repo);
	free(s->blobs);
	memset(s, 0, sizeof *s);
}

static int is_hex(const char *p, size_t n)
{
	if (strlen(p) != n)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)p[i]) || isupper((unsigned char)p[i]))
			return 0;
	return 1;
}

int hf_snapshot_blob(const struct hf_snapshot *s, const char *dir,
		     const char *name, char sha[65], struct d0_err *err)
{
	char *p = path_join(dir, name), *real;
	char target[PATH_MAX];
	struct stat st;
	ssize_t n;
	size_t rl;
	int rc = 0;
	sha[0] = 0;
	if (lstat(p, &st) < 0 || !S_ISLNK(st.st_mode)) {
		free(p);
		return 0; /* a plain file (or missing): nothing to learn */
	}
	n = readlink(p, target, sizeof target - 1);
	target[n > 0 ? n : 0] = 0;
	real = realpath(p, NULL);
	free(p);
	rl = strlen(s->repo);
	if (!real || strncmp(real, s->repo, rl) || real[rl] != '/') {
		rc = d0_errf(err, "%s: symlink to '%s' %s the snapshot's "
			     "repository (%s): refused, not read", name, target,
			     real ? "leaves" : "does not resolve inside",
			     s->repo);
		free(real);
		return rc;
	}
	if (!strncmp(real, s->blobs, strlen(s->blobs)) &&
	    real[strlen(s->blobs)] == '/' &&
	    is_hex(real + strlen(s->blobs) + 1, 64)) {
		memcpy(sha, real + strlen(s->blobs) + 1, 65);
		rc = 1;
	}
	free(real);
	return rc;
}
