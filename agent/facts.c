/*
 * facts.c - the host's facts (the compatibility matrix's row for this
 * node) and the `facts` check against a playbook's requirements.
 *
 * Versions come from the libraries the agent is linked with, the same
 * ones day0-engine uses: Open MPI's MPI_Get_library_version (callable
 * before MPI_Init), OpenBLAS's openblas_get_config and _get_corename
 * (the kernel set it chose for this CPU), glibc's gnu_get_libc_version;
 * the engine's version and build id from `day0-engine --version`; the
 * GPU driver and its CUDA version from NVML when it loads ("none"
 * otherwise); the CPU flags the engine's kernels choose by.  The console
 * compares these across nodes (facts.compat, docs/compat.md).
 *
 * DAY0_FACTS_OVERRIDE="field=value;..." replaces string fields of the
 * matrix for tests only (tests/sh/test_compat.sh gives one node a
 * different Open MPI through its sshd's SetEnv); the event then lists
 * them in `overridden`, so no session hides that it was used.
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
char *openblas_get_corename(void);

/* The CPU flags the kernels choose by (ops_bf16.c, ops_fp8.c, oneDNN's
 * AMX), in this order, as /proc/cpuinfo names them: what the kernel
 * enables, which is what a process may use (AMX needs the kernel's
 * permission, not only the CPU). */
static const char *const kernel_flags[] = {
    "avx2",	 "fma",		"f16c",	    "avx512f",	"avx512bw",
    "avx512vbmi", "avx512_bf16", "amx_tile", "amx_bf16", NULL};

static void cpu_flags(char *out, size_t cap)
{
	FILE *f = fopen("/proc/cpuinfo", "r");
	char *line = NULL;
	size_t n = 0, len = 0;
	out[0] = 0;
	if (!f)
		return;
	while (getline(&line, &n, f) > 0) {
		if (strncmp(line, "flags", 5))
			continue;
		line[strcspn(line, "\n")] = 0;
		for (int i = 0; kernel_flags[i]; i++) {
			const char *p = strchr(line, ':');
			size_t k = strlen(kernel_flags[i]);
			int have = 0;
			/* whole words only: "avx512f" is not "avx512fp16" */
			while (p && (p = strstr(p, kernel_flags[i]))) {
				if (p[-1] == ' ' && (p[k] == ' ' || !p[k])) {
					have = 1;
					break;
				}
				p += k;
			}
			if (have && len < cap)
				len += (size_t)snprintf(out + len, cap - len,
							"%s%s", len ? " " : "",
							kernel_flags[i]);
		}
		break;
	}
	free(line);
	fclose(f);
}

/* The fields DAY0_FACTS_OVERRIDE may replace: the matrix's strings. */
static const char *const overridable[] = {
    "kernel",	    "glibc",	    "mpi_version", "blas",	 "blas_core",
    "engine_version", "engine_build", "agent_build", "gpu_driver", "gpu_runtime",
    "cpu",	    "cpu_flags",    NULL};

/* Tests only (see the top): "field=value;field=value". */
static void apply_override(json_t *o)
{
	const char *env = getenv("DAY0_FACTS_OVERRIDE");
	char *copy, *save = NULL, *tok;
	json_t *done = json_array();
	if (!env || !*env) {
		json_decref(done);
		return;
	}
	copy = strdup(env);
	if (!copy)
		abort();
	for (tok = strtok_r(copy, ";", &save); tok;
	     tok = strtok_r(NULL, ";", &save)) {
		char *eq = strchr(tok, '=');
		if (!eq)
			continue;
		*eq = 0;
		for (int i = 0; overridable[i]; i++)
			if (!strcmp(tok, overridable[i]) &&
			    proto_utf8_valid(eq + 1, strlen(eq + 1), NULL)) {
				json_object_set_new(o, tok, json_string(eq + 1));
				json_array_append_new(done, json_string(tok));
			}
	}
	free(copy);
	if (json_array_size(done))
		json_object_set_new(o, "overridden", done);
	else
		json_decref(done);
}

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
	{
		const char *core = openblas_get_corename();
		json_object_set_new(o, "blas_core",
				    json_string(core && *core ? core : "unknown"));
	}
	if (a->engine_version[0])
		json_object_set_new(o, "engine_version",
				    json_string(a->engine_version));
	json_object_set_new(
	    o, "engine_build",
	    json_string(a->engine_build[0] ? a->engine_build : "unknown"));
	json_object_set_new(o, "agent_build", json_string(d0_build_id()));
	{
		char drv[96], cuda[32], flags[160];
		nvml_versions(drv, sizeof drv, cuda, sizeof cuda);
		json_object_set_new(o, "gpu_driver", json_string(drv));
		json_object_set_new(o, "gpu_runtime", json_string(cuda));
		cpu_flags(flags, sizeof flags);
		json_object_set_new(o, "cpu_flags", json_string(flags));
	}
	json_object_set_new(
	    o, "vendor",
	    json_string(a->cards.vendor ? a->cards.vendor->name : "none"));
	for (int i = 0; i < a->cards.n; i++)
		json_array_append_new(
		    acc, json_pack("{s:i, s:s, s:I}", "card", i, "name",
				   a->cards.card[i].name, "mem_bytes",
				   (json_int_t)a->cards.card[i].mem_bytes));
	json_object_set_new(o, "accelerators", acc);
	apply_override(o);
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
