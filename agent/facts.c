/*
 * facts.c - the host's facts (the compatibility matrix's row for this
 * node) and the `facts` check against a playbook's requirements.
 *
 * Versions come from the libraries the agent is linked with, the same
 * ones day0-engine uses: Open MPI's MPI_Get_library_version (callable
 * before MPI_Init) and OpenBLAS's openblas_get_config.
 */
#include "agent.h"

#include <errno.h>

#include <gnu/libc-version.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

char *openblas_get_config(void);

static void cpu_model(char *out, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[512];
	snprintf(out, cap, "unknown");
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		char *colon = strchr(line, ':');
		if (colon && !strncmp(line, "model name", 10)) {
			colon++;
			while (*colon == ' ' || *colon == '\t')
				colon++;
			colon[strcspn(colon, "\n")] = 0;
			snprintf(out, cap, "%s", colon);
			break;
		}
	}
	fclose(f);
}

json_t *facts_collect(struct agent *a, const char *dir)
{
	char cpu[256], mpi[MPI_MAX_LIBRARY_VERSION_STRING] = "";
	char kernel[512];
	struct utsname u;
	struct statvfs vfs;
	int mlen = 0;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	json_t *o, *acc = json_array();
	const char *blas = openblas_get_config();
	cpu_model(cpu, sizeof cpu);
	o = json_pack("{s:s, s:i, s:I}", "cpu", cpu, "cores",
		      (int)sysconf(_SC_NPROCESSORS_ONLN), "mem_bytes",
		      (json_int_t)((uint64_t)pages * (uint64_t)psz));
	if (!dir)
		dir = ".";
	if (statvfs(dir, &vfs) == 0) {
		json_object_set_new(
		    o, "disk_free",
		    json_integer((json_int_t)(vfs.f_bavail * vfs.f_frsize)));
		json_object_set_new(o, "disk_path", json_string(dir));
	} else {
		json_object_set_new(o, "disk_path", json_string(dir));
		json_object_set_new(o, "disk_error", json_string(strerror(errno)));
	}
	if (uname(&u) == 0) {
		snprintf(kernel, sizeof kernel, "%s %s %s", u.sysname,
			 u.release, u.machine);
		json_object_set_new(o, "kernel", json_string(kernel));
	}
	json_object_set_new(o, "glibc", json_string(gnu_get_libc_version()));
	if (MPI_Get_library_version(mpi, &mlen) == MPI_SUCCESS && mlen > 0) {
		mpi[strcspn(mpi, "\n,")] = 0;
		json_object_set_new(o, "mpi_version", json_string(mpi));
	}
	if (blas && *blas)
		json_object_set_new(o, "blas", json_string(blas));
	if (a->engine_version[0])
		json_object_set_new(o, "engine_version",
				    json_string(a->engine_version));
	json_object_set_new(
	    o, "vendor",
	    json_string(a->cards.vendor ? a->cards.vendor->name : "none"));
	for (int i = 0; i < a->cards.n; i++)
		json_array_append_new(
		    acc, json_pack("{s:i, s:s, s:I}", "card", i, "name",
				   a->cards.card[i].name, "mem_bytes",
				   (json_int_t)a->cards.card[i].mem_bytes));
	json_object_set_new(o, "accelerators", acc);
	return o;
}

/* Requirement keys: integers compared as minimums. */
static const struct {
	const char *key, *fact, *what;
} minimums[] = {
    {"cores", "cores", "cores"},
    {"mem_bytes", "mem_bytes", "bytes of memory"},
    {"disk_free", "disk_free", "bytes free on disk"},
};

void facts_check(json_t *facts, json_t *require, const char **status,
		 char *detail, size_t cap, int *problems)
{
	size_t len = 0;
	json_t *acc = json_object_get(facts, "accelerators");
	*problems = 0;
	detail[0] = 0;
#define ADD(...)                                                               \
	do {                                                                   \
		if (len < cap)                                                 \
			len += (size_t)snprintf(detail + len, cap - len,       \
						__VA_ARGS__);                  \
	} while (0)
	for (size_t i = 0; require && i < sizeof minimums / sizeof *minimums;
	     i++) {
		json_t *want = json_object_get(require, minimums[i].key);
		json_t *have = json_object_get(facts, minimums[i].fact);
		if (!want)
			continue;
		/* The model directory is not there: that, not "0 bytes free",
		 * is the problem. */
		if (!have && !strcmp(minimums[i].key, "disk_free") &&
		    json_object_get(facts, "disk_error")) {
			ADD("%smodel directory %s: %s", *problems ? "; " : "",
			    json_string_value(json_object_get(facts, "disk_path")),
			    json_string_value(json_object_get(facts, "disk_error")));
			(*problems)++;
			continue;
		}
		if (!json_is_integer(have) ||
		    json_integer_value(have) < json_integer_value(want)) {
			ADD("%s%lld %s needed, %lld here",
			    *problems ? "; " : "",
			    (long long)json_integer_value(want),
			    minimums[i].what,
			    (long long)json_integer_value(have));
			(*problems)++;
		}
	}
	if (require && json_object_get(require, "cards")) {
		long long want =
		    json_integer_value(json_object_get(require, "cards"));
		if ((long long)json_array_size(acc) < want) {
			ADD("%s%lld cards needed, %zu here",
			    *problems ? "; " : "", want, json_array_size(acc));
			(*problems)++;
		}
	}
	if (require && json_object_get(require, "card_mem")) {
		long long want =
		    json_integer_value(json_object_get(require, "card_mem"));
		size_t i;
		json_t *c;
		json_array_foreach(acc, i, c)
		{
			long long m =
			    json_integer_value(json_object_get(c, "mem_bytes"));
			if (m < want) {
				ADD("%scard %zu has %lld bytes, %lld needed",
				    *problems ? "; " : "", i, m, want);
				(*problems)++;
				break;
			}
		}
	}
	if (*problems) {
		*status = "fail";
		return;
	}
	if (!json_object_get(facts, "mpi_version") ||
	    !json_object_get(facts, "blas") ||
	    !json_object_get(facts, "engine_version")) {
		*status = "warn";
		ADD("%s%s%s unknown",
		    json_object_get(facts, "mpi_version") ? "" : "Open MPI ",
		    json_object_get(facts, "blas") ? "" : "OpenBLAS ",
		    json_object_get(facts, "engine_version") ? ""
							     : "day0-engine ");
		return;
	}
	*status = "pass";
	ADD("%lld cores, %zu %s cards%s",
	    (long long)json_integer_value(json_object_get(facts, "cores")),
	    json_array_size(acc),
	    json_string_value(json_object_get(facts, "vendor")),
	    require ? ", requirements met" : "");
#undef ADD
}
