/*
 * compat.c - the compatibility matrix's rules (compat.h): its rows, the
 * value compared per row, version comparison and the minimums check.
 */
#include "compat.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The engine build, Open MPI and the driver's major version must match
 * (a node that differs runs other code, or other collectives, or another
 * CUDA); the rest is shown so that a difference is seen. */
const struct compat_field compat_fields[] = {
    {"engine_build", "engine build", COMPAT_EQUAL},
    {"mpi_version", "Open MPI", COMPAT_EQUAL},
    {"gpu_driver", "GPU driver", COMPAT_MAJOR},
    {"gpu_runtime", "CUDA", COMPAT_SHOWN},
    {"engine_version", "engine", COMPAT_SHOWN},
    {"agent_build", "agent build", COMPAT_SHOWN},
    {"blas", "OpenBLAS", COMPAT_SHOWN},
    {"blas_core", "OpenBLAS kernels", COMPAT_SHOWN},
    {"glibc", "glibc", COMPAT_SHOWN},
    {"kernel", "kernel", COMPAT_SHOWN},
    {"cpu", "CPU", COMPAT_SHOWN},
    {"cpu_flags", "CPU flags", COMPAT_SHOWN},
};
const size_t compat_nfields = sizeof compat_fields / sizeof *compat_fields;

const struct compat_field *compat_field_find(const char *key)
{
	for (size_t i = 0; key && i < compat_nfields; i++)
		if (!strcmp(compat_fields[i].key, key))
			return &compat_fields[i];
	return NULL;
}

void compat_value(json_t *facts, const struct compat_field *f, int compare,
		  char *out, size_t cap)
{
	const char *s = json_string_value(json_object_get(facts, f->key));
	if (!s || !*s) {
		snprintf(out, cap, "-");
		return;
	}
	if (compare && f->match == COMPAT_MAJOR && isdigit((unsigned char)*s)) {
		snprintf(out, cap, "%.*s", (int)strcspn(s, "."), s);
		return;
	}
	snprintf(out, cap, "%s", s);
}

int compat_version_cmp(const char *s, const char *min, int *ok)
{
	const char *p = s;
	*ok = 0;
	/* a number that starts a word ("v4.1.4" too), not the 0 of "day0" */
	while (p && *p &&
	       !(isdigit((unsigned char)*p) &&
		 (p == s || !isalnum((unsigned char)p[-1]) ||
		  (p[-1] == 'v' &&
		   (p - 1 == s || !isalnum((unsigned char)p[-2]))))))
		p++;
	if (!p || !*p)
		return 0;
	*ok = 1;
	while (*p || *min) {
		char *e1, *e2;
		unsigned long a = strtoul(p, &e1, 10),
			      b = strtoul(min, &e2, 10);
		if (a != b)
			return a < b ? -1 : 1;
		/* the next part: after a '.' followed by a digit, else none */
		p = (*e1 == '.' && isdigit((unsigned char)e1[1])) ? e1 + 1 : "";
		min = (*e2 == '.' && isdigit((unsigned char)e2[1])) ? e2 + 1
								    : "";
	}
	return 0;
}

int compat_check_minimums(json_t *facts, const char *family, char *out,
			  size_t cap)
{
	int n = 0;
	size_t len = 0;
	if (cap)
		out[0] = 0;
	for (size_t i = 0; i < compat_nminimums; i++) {
		const struct compat_min *m = &compat_minimums[i];
		const char *have;
		int ok, c;
		if (strcmp(m->family, "*") &&
		    !(family && !strcmp(family, m->family)))
			continue;
		have = json_string_value(json_object_get(facts, m->field));
		if (have && !strcmp(have, "none"))
			continue;
		c = compat_version_cmp(have ? have : "", m->min, &ok);
		if (ok && c >= 0)
			continue;
		if (len < cap)
			len += (size_t)snprintf(
			    out + len, cap - len, "%s%s %s < %s (%s)",
			    n ? "; " : "", m->field,
			    have && *have ? have : "unknown", m->min, m->why);
		n++;
	}
	return n;
}
