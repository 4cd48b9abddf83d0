/*
 * test_compat.c - the compatibility matrix's rules and grouping: version
 * comparison (words, "v", "day0" not a version), the driver's major
 * version, the majority and its tie, the odd node sets folded in the
 * detail, shown fields warn, minimums per family (none exempts, missing
 * fails), and an empty fleet.
 */
#include "compat.h"
#include "compat_matrix.h"
#include "unit.h"

#include <string.h>

static json_t *facts(const char *mpi, const char *build, const char *drv,
		     const char *kernel)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s}", "mpi_version", mpi,
			 "engine_build", build, "gpu_driver", drv, "kernel",
			 kernel, "engine_version",
			 "day0-engine 0.1.0 (protocol 1)", "gpu_runtime",
			 !strcmp(drv, "none") ? "none" : "12.4");
}

static const char *s(json_t *m, const char *k)
{
	return json_string_value(json_object_get(m, k));
}

static void versions(void)
{
	int ok;
	CHECK(compat_version_cmp("Open MPI v4.1.4", "1.8", &ok) > 0 && ok);
	CHECK(compat_version_cmp("Open MPI v1.7.9", "1.8", &ok) < 0 && ok);
	CHECK(compat_version_cmp("day0-engine 0.1.0 (protocol 1)", "0.1.0",
				 &ok) == 0 &&
	      ok);
	CHECK(compat_version_cmp("550.54.15", "520.61.05", &ok) > 0 && ok);
	CHECK(compat_version_cmp("520.61", "520.61.05", &ok) < 0 && ok);
	CHECK(compat_version_cmp("12.0", "12", &ok) == 0 && ok);
	compat_version_cmp("unknown", "1.0", &ok);
	CHECK(!ok);
	compat_version_cmp("day0", "1.0", &ok);
	CHECK(!ok);
}

static void major(void)
{
	json_t *f = facts("Open MPI v4.1.4", "abc", "550.54.15", "k");
	char out[64];
	const struct compat_field *d = compat_field_find("gpu_driver");
	CHECK(d && d->match == COMPAT_MAJOR);
	compat_value(f, d, 1, out, sizeof out);
	CHECK(!strcmp(out, "550"));
	compat_value(f, d, 0, out, sizeof out);
	CHECK(!strcmp(out, "550.54.15"));
	compat_value(f, compat_field_find("blas_core"), 0, out, sizeof out);
	CHECK(!strcmp(out, "-")); /* an older agent's facts */
	CHECK(compat_field_find("cores") == NULL);
	json_decref(f);
}

static void matrix(void)
{
	json_t *f[5], *m;
	struct compat_node n[5];
	const char *names[5] = {"n01", "n02", "n03", "n04", "n05"};
	f[0] = facts("Open MPI v4.1.4", "abc", "550.54.15", "k1");
	f[1] = facts("Open MPI v4.1.4", "abc", "550.90.07", "k1");
	f[2] = facts("Open MPI v4.1.4", "abc", "550.54.15", "k2");
	f[3] = facts("Open MPI v5.0.3", "abc", "550.54.15", "k1");
	f[4] = facts("Open MPI v4.1.4", "xyz", "535.1.1", "k1");
	for (int i = 0; i < 5; i++)
		n[i] = (struct compat_node){names[4 - i], f[4 - i]};
	m = compat_matrix(n, 5, NULL);
	CHECK(!strcmp(s(m, "status"), "fail"));
	CHECK(json_integer_value(json_object_get(m, "odd")) == 2);
	CHECK(strstr(s(m, "detail"), "n05: engine_build xyz, not the "
				     "majority's abc (n[01-04])") != NULL);
	CHECK(strstr(s(m, "detail"), "n04: mpi_version Open MPI v5.0.3") !=
	      NULL);
	CHECK(strstr(s(m, "detail"), "n05: gpu_driver 535.1.1 (major)") !=
	      NULL);
	/* 550.90.07 is the same major: n02 differs on no must-match field */
	CHECK(strstr(s(m, "detail"), "n02") == NULL);
	CHECK(json_array_size(json_object_get(m, "columns")) == 5);
	json_decref(m);
	/* Only a shown field differs: warn, the odd node not counted. */
	n[0] = (struct compat_node){"a1", f[0]};
	n[1] = (struct compat_node){"a2", f[2]};
	n[2] = (struct compat_node){"a3", f[0]};
	m = compat_matrix(n, 3, NULL);
	CHECK(!strcmp(s(m, "status"), "warn"));
	CHECK(json_integer_value(json_object_get(m, "odd")) == 0);
	{
		json_t *cols = json_object_get(m, "columns");
		CHECK(!strcmp(s(json_array_get(cols, 0), "nodes"), "a[1,3]"));
		CHECK(!strcmp(s(json_array_get(cols, 1), "nodes"), "a2"));
	}
	json_decref(m);
	/* A tie: the value of the node named first is the majority. */
	n[0] = (struct compat_node){"b2", f[3]};
	n[1] = (struct compat_node){"b1", f[0]};
	m = compat_matrix(n, 2, NULL);
	CHECK(strstr(s(m, "detail"), "b2: mpi_version Open MPI v5.0.3, not "
				     "the majority's Open MPI v4.1.4 (b1)") !=
	      NULL);
	json_decref(m);
	/* One odd value in two columns (they differ on the kernel): one
	 * phrase naming both nodes folded. */
	{
		json_t *g = facts("Open MPI v5.0.3", "abc", "550.54.15", "k2");
		struct compat_node o[4] = {{"c1", f[0]},
					   {"c2", f[0]},
					   {"c3", f[3]},
					   {"c4", g}};
		m = compat_matrix(o, 4, NULL);
		CHECK(strstr(s(m, "detail"),
			     "c[3-4]: mpi_version Open MPI v5.0.3, not the "
			     "majority's Open MPI v4.1.4 (c[1-2])") != NULL);
		CHECK(strstr(s(m, "detail"), "; ") == NULL);
		CHECK(json_integer_value(json_object_get(m, "odd")) == 2);
		json_decref(m);
		json_decref(g);
	}
	m = compat_matrix(n, 0, NULL);
	CHECK(!strcmp(s(m, "status"), "pass"));
	CHECK(json_array_size(json_object_get(m, "columns")) == 0);
	json_decref(m);
	for (int i = 0; i < 5; i++)
		json_decref(f[i]);
}

static void minimums(void)
{
	char out[512];
	json_t *cpu = facts("Open MPI v4.1.4", "abc", "none", "k");
	json_t *old = facts("Open MPI v4.1.4", "abc", "520.61.05", "k");
	json_t *bare = json_object();
	struct compat_node n[2] = {{"g1", old}, {"g2", old}};
	json_t *m;
	CHECK(compat_check_minimums(cpu, "deepseek_v3", out, sizeof out) == 0);
	/* 520.61.05 with CUDA 12.4: enough for bf16, not DeepSeek's FP8 */
	CHECK(compat_check_minimums(old, "llama", out, sizeof out) == 0);
	CHECK(compat_check_minimums(old, "deepseek_v3", out, sizeof out) == 1);
	CHECK(strstr(out, "gpu_driver 520.61.05 < 525.60.13") != NULL);
	CHECK(compat_check_minimums(bare, NULL, out, sizeof out) == 4);
	CHECK(strstr(out, "mpi_version unknown < 1.8") != NULL);
	m = compat_matrix(n, 2, "deepseek_v3");
	CHECK(!strcmp(s(m, "status"), "fail"));
	CHECK(strstr(s(m, "detail"), "g[1-2]: gpu_driver 520.61.05 < ") !=
	      NULL);
	CHECK(json_integer_value(json_object_get(m, "odd")) == 2);
	json_decref(m);
	json_decref(cpu);
	json_decref(old);
	json_decref(bare);
}

int main(void)
{
	versions();
	major();
	matrix();
	minimums();
	return unit_done();
}
