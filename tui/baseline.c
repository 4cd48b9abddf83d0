/*
 * baseline.c - `--baseline auto` (run, replay, diff): the last GO session
 * of the same playbook and model family in the session directory.
 *
 * A session's playbook is its manifest's "name"; its model family the
 * manifest's "model_family" (the checkpoint's config.json model_type,
 * written by the runner), else, for sessions recorded before that key,
 * the model_type read from the recorded model directory when it is
 * still there.  "Last" is the latest "started".
 */
#include "console.h"
#include "store.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int model_family_of(const char *model_dir, char *out, size_t max)
{
	char path[PATH_MAX];
	json_t *cfg, *mt;
	out[0] = 0;
	if (!model_dir || !*model_dir)
		return -1;
	snprintf(path, sizeof path, "%s/config.json", model_dir);
	if (!(cfg = json_load_file(path, 0, NULL)))
		return -1;
	mt = json_object_get(cfg, "model_type");
	if (json_is_string(mt))
		snprintf(out, max, "%s", json_string_value(mt));
	json_decref(cfg);
	return out[0] ? 0 : -1;
}

/* The session's playbook, family, start and whether it ended GO. */
struct ident {
	char playbook[256], family[128];
	int64_t started;
	int go;
};

static int ident_of(const char *path, struct ident *id, struct d0_err *err)
{
	struct store *st;
	json_t *v;
	memset(id, 0, sizeof *id);
	if (store_open(path, STORE_READONLY, &st, err) < 0)
		return -1;
	if ((v = store_session_get(st, "name", err)) && json_is_string(v))
		snprintf(id->playbook, sizeof id->playbook, "%s",
			 json_string_value(v));
	json_decref(v);
	if ((v = store_session_get(st, "model_family", err)) &&
	    json_is_string(v))
		snprintf(id->family, sizeof id->family, "%s",
			 json_string_value(v));
	json_decref(v);
	if (!id->family[0] && (v = store_session_get(st, "model", err))) {
		model_family_of(json_string_value(v), id->family,
				sizeof id->family);
		json_decref(v);
	}
	if ((v = store_session_get(st, "started", err)) && json_is_integer(v))
		id->started = json_integer_value(v);
	json_decref(v);
	if ((v = store_session_get(st, "verdict", err)))
		id->go = json_is_true(json_object_get(v, "go"));
	json_decref(v);
	store_close(st, NULL);
	return 0;
}

int session_baseline_find(const char *playbook, const char *family,
			  const char *exclude, char *out, size_t max,
			  struct d0_err *err)
{
	char dir[PATH_MAX], ex[PATH_MAX] = "", path[PATH_MAX], rp[PATH_MAX];
	DIR *d;
	struct dirent *e;
	int64_t best = INT64_MIN;
	if (session_dir(dir, sizeof dir, 0, err) < 0)
		return -1;
	if (exclude && !realpath(exclude, ex))
		ex[0] = 0;
	if (!(d = opendir(dir)))
		return d0_errf(err, "no GO session of playbook '%s' and model "
			       "family '%s': session directory %s: %s",
			       playbook, family[0] ? family : "unknown", dir,
			       strerror(errno));
	out[0] = 0;
	while ((e = readdir(d))) {
		struct ident id;
		struct d0_err ign;
		size_t l = strlen(e->d_name);
		if (l <= 3 || strcmp(e->d_name + l - 3, ".db") ||
		    e->d_name[0] == '.')
			continue;
		if ((size_t)snprintf(path, sizeof path, "%s/%s", dir,
				     e->d_name) >= sizeof path)
			continue;
		if (ex[0] && realpath(path, rp) && !strcmp(rp, ex))
			continue;
		if (ident_of(path, &id, &ign) < 0 || !id.go ||
		    strcmp(id.playbook, playbook) || strcmp(id.family, family))
			continue;
		if (id.started > best) {
			best = id.started;
			snprintf(out, max, "%s", path);
		}
	}
	closedir(d);
	if (!out[0])
		return d0_errf(err, "no GO session of playbook '%s' and model "
			       "family '%s' in %s",
			       playbook, family[0] ? family : "unknown", dir);
	return 0;
}

int session_baseline_auto(const char *session, char *out, size_t max,
			  struct d0_err *err)
{
	struct ident id;
	if (ident_of(session, &id, err) < 0)
		return -1;
	if (!id.playbook[0])
		return d0_errf(err, "%s: no playbook name in its manifest",
			       session);
	return session_baseline_find(id.playbook, id.family, session, out,
				     max, err);
}
