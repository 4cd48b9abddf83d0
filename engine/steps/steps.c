/*
 * steps.c - the registry of day0-engine steps.  Each step lives in its own
 * step_*.c and exports one `const struct step_entry`; adding a step means
 * adding a file and a line here, never a switch.
 */
#include "engine.h"

#include <stdarg.h>
#include <string.h>

extern const struct step_entry step_gen_model;
extern const struct step_entry step_inspect;
extern const struct step_entry step_plan;
extern const struct step_entry step_run;
extern const struct step_entry step_validate;
extern const struct step_entry step_perf;
extern const struct step_entry step_hostfile;
extern const struct step_entry step_verify;
extern const struct step_entry step_convert;
extern const struct step_entry step_merge;
extern const struct step_entry step_comm;
extern const struct step_entry step_soak;
extern const struct step_entry step_tokenize;
extern const struct step_entry step_serve;
extern const struct step_entry step_load;
extern const struct step_entry step_probe;
extern const struct step_entry step_simulate;
extern const struct step_entry step_image_prep;
extern const struct step_entry step_train;
extern const struct step_entry step_image_check;

const struct step_entry *const step_table[] = {
	&step_gen_model,
	&step_inspect,
	&step_plan,
	&step_run,
	&step_validate,
	&step_perf,
	&step_hostfile,
	&step_verify,
	&step_convert,
	&step_merge,
	&step_comm,
	&step_soak,
	&step_tokenize,
	&step_serve,
	&step_load,
	&step_probe,
	&step_simulate,
	&step_image_prep,
	&step_image_check,
	&step_train,
	NULL,
};

const struct step_entry *step_find(const char *name)
{
	for (int i = 0; step_table[i]; i++)
		if (!strcmp(step_table[i]->name, name))
			return step_table[i];
	return NULL;
}

void step_usage(const struct step_entry *s, FILE *f)
{
	fprintf(f, "usage: day0-engine %s %s\n", s->name, s->usage);
}

/* --json and --events mean the same in every step: said once here for
 * a step whose own text does not describe them. */
static void common_flag(const struct step_entry *s, const char *flag,
			const char *what)
{
	const char *body = strchr(s->usage, '\n');
	size_t n = strlen(flag);
	for (const char *t = body; t && (t = strstr(t, flag)); t += n)
		if (!(t[n] == '-' || (t[n] >= 'a' && t[n] <= 'z')))
			return;
	for (const char *t = s->help; t && (t = strstr(t, flag)); t += n)
		if (!(t[n] == '-' || (t[n] >= 'a' && t[n] <= 'z')))
			return;
	for (const char *t = s->usage; (t = strstr(t, flag)); t += n)
		if (!(t[n] == '-' || (t[n] >= 'a' && t[n] <= 'z'))) {
			printf("  %-18s %s\n", flag, what);
			return;
		}
}

void step_help(const struct step_entry *s)
{
	step_usage(s, stdout);
	if (s->help)
		printf("\n%s\n\n%s\n", s->summary, s->help);
	common_flag(s, "--json", "one JSON document on stdout");
	common_flag(s, "--events",
		    "day0 protocol events on stdout (docs/events.md), as the "
		    "agent reads them");
}

int step_usage_error(const struct step_entry *s, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "day0-engine %s: ", s->name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	step_usage(s, stderr);
	return EXIT_USAGE;
}
