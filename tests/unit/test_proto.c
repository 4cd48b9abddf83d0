/*
 * test_proto.c - the wire protocol library: framing (whole lines, the
 * 64 KiB limit, lines split across reads), UTF-8, command validation with
 * its messages, event validation, event formatting.
 */
#include "proto.h"
#include "json_scan.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static int cmd_err(const char *line, const char *want)
{
	struct proto_cmd c;
	struct d0_err err = {""};
	int rc = proto_cmd_parse(line, strlen(line), &c, &err);
	if (rc == 0) {
		proto_cmd_free(&c);
		printf("# accepted: %s\n", line);
		return 0;
	}
	if (!strstr(err.msg, want)) {
		printf("# '%s' -> '%s', wanted '%s'\n", line, err.msg, want);
		return 0;
	}
	return 1;
}

static int cmd_ok(const char *line, enum proto_cmd_kind kind)
{
	struct proto_cmd c;
	struct d0_err err = {""};
	int ok;
	if (proto_cmd_parse(line, strlen(line), &c, &err) < 0) {
		printf("# refused: %s: %s\n", line, err.msg);
		return 0;
	}
	ok = c.kind == kind && c.obj != NULL;
	proto_cmd_free(&c);
	return ok;
}

static int ev_err(const char *line, const char *want)
{
	struct proto_event ev;
	struct d0_err err = {""};
	if (proto_event_parse(line, strlen(line), &ev, &err) == 0) {
		proto_event_free(&ev);
		printf("# accepted: %s\n", line);
		return 0;
	}
	if (!strstr(err.msg, want)) {
		printf("# '%s' -> '%s', wanted '%s'\n", line, err.msg, want);
		return 0;
	}
	return 1;
}

static void test_framing(void)
{
	struct proto_lines pl;
	const char *line;
	size_t len;
	char *big;
	proto_lines_init(&pl);
	proto_lines_push(&pl, "ab", 2);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_NONE);
	proto_lines_push(&pl, "c\nde\n\nf", 7);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_LINE && len == 3 &&
	      !memcmp(line, "abc", 3));
	CHECK(proto_lines_next(&pl, &line, &len) == PL_LINE && len == 2 &&
	      !memcmp(line, "de", 2));
	CHECK(proto_lines_next(&pl, &line, &len) == PL_LINE && len == 0);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_NONE);
	CHECK(proto_lines_pending(&pl) == 1);
	CHECK(proto_lines_finish(&pl, &line, &len) == PL_LINE && len == 1 &&
	      line[0] == 'f');
	CHECK(proto_lines_finish(&pl, &line, &len) == PL_NONE);

	/* A line of exactly the limit passes; one byte more does not, and
	 * the lines around it are unharmed, whatever the read sizes. */
	big = malloc(PROTO_MAX_LINE + 2);
	memset(big, 'x', PROTO_MAX_LINE + 1);
	proto_lines_push(&pl, big, PROTO_MAX_LINE);
	proto_lines_push(&pl, "\n", 1);
	CHECKN("a line of exactly 64 KiB is a line",
	       proto_lines_next(&pl, &line, &len) == PL_LINE &&
		   len == PROTO_MAX_LINE);
	proto_lines_push(&pl, "ok1\n", 4);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_LINE && len == 3);
	for (size_t off = 0; off < PROTO_MAX_LINE + 1; off += 1000) {
		size_t n = PROTO_MAX_LINE + 1 - off < 1000
			       ? PROTO_MAX_LINE + 1 - off
			       : 1000;
		proto_lines_push(&pl, big + off, n);
		while (proto_lines_next(&pl, &line, &len) != PL_NONE)
			CHECKN("no line comes out of an overlong one", 0);
	}
	CHECKN("memory stays bounded inside an overlong line",
	       proto_lines_pending(&pl) <= PROTO_MAX_LINE + 1000);
	proto_lines_push(&pl, "xx\nok2\n", 7);
	CHECKN("the overlong line is reported with its size",
	       proto_lines_next(&pl, &line, &len) == PL_TOOLONG &&
		   len == PROTO_MAX_LINE + 3);
	CHECKN("and the next line is whole",
	       proto_lines_next(&pl, &line, &len) == PL_LINE && len == 3 &&
		   !memcmp(line, "ok2", 3));
	/* An overlong line in one push, complete. */
	big[PROTO_MAX_LINE + 1] = '\n';
	proto_lines_push(&pl, big, PROTO_MAX_LINE + 2);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_TOOLONG &&
	      len == PROTO_MAX_LINE + 1);
	/* An overlong unterminated line at the end of the stream. */
	proto_lines_push(&pl, big, PROTO_MAX_LINE + 1);
	CHECK(proto_lines_next(&pl, &line, &len) == PL_NONE);
	CHECK(proto_lines_finish(&pl, &line, &len) == PL_TOOLONG);
	free(big);
	proto_lines_free(&pl);
}

static void test_utf8(void)
{
	size_t bad = 99;
	CHECK(proto_utf8_valid("plain", 5, NULL));
	CHECK(proto_utf8_valid(
	    "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 14, NULL));
	CHECK(!proto_utf8_valid("ab\xff", 3, &bad) && bad == 2);
	CHECKN("overlong encoding refused",
	       !proto_utf8_valid("\xc0\xaf", 2, NULL));
	CHECKN("overlong 3-byte refused",
	       !proto_utf8_valid("\xe0\x80\xaf", 3, NULL));
	CHECKN("surrogate refused", !proto_utf8_valid("\xed\xa0\x80", 3, NULL));
	CHECKN("above U+10FFFF refused",
	       !proto_utf8_valid("\xf4\x90\x80\x80", 4, NULL));
	CHECKN("truncated sequence refused",
	       !proto_utf8_valid("a\xe2\x82", 3, &bad) && bad == 1);
	CHECKN("NUL refused", !proto_utf8_valid("a\0b", 3, &bad) && bad == 1);
	char ex[32];
	proto_excerpt("a\x01\xff", 3, ex, sizeof ex);
	CHECK(!strcmp(ex, "a\\x01\\xff"));
	proto_excerpt("abcdefghij", 10, ex, 5);
	CHECK(!strcmp(ex, "abcd"));
}

static void test_commands(void)
{
	struct proto_cmd c;
	struct d0_err err;
	CHECK(cmd_ok("{\"cmd\":\"hello\"}", CMD_HELLO));
	CHECK(cmd_ok(" {\"cmd\":\"hello\",\"acked\":3} ", CMD_HELLO));
	CHECK(cmd_ok("{\"cmd\":\"facts\",\"dir\":\"/m\",\"require\":{}}",
		     CMD_FACTS));
	CHECK(cmd_ok("{\"cmd\":\"run\",\"stage_id\":\"a\",\"step\":\"verify\","
		     "\"args\":[\"/m\"],\"np\":2,\"timeout\":1.5}",
		     CMD_RUN));
	CHECK(cmd_ok("{\"cmd\":\"cancel\",\"stage_id\":\"a\"}", CMD_CANCEL));
	CHECK(cmd_ok("{\"cmd\":\"ack\",\"seq\":12}", CMD_ACK));
	CHECK(cmd_ok("{\"cmd\":\"bye\"}", CMD_BYE));
	CHECK(cmd_err("", "invalid JSON"));
	CHECK(cmd_err("nope", "invalid JSON"));
	CHECK(cmd_err("\"str\"", "invalid JSON"));
	CHECK(cmd_err("[]", "expected a JSON object"));
	CHECK(cmd_err("{}", "missing field 'cmd'"));
	CHECK(cmd_err("{\"cmd\":null}", "field 'cmd': expected a string"));
	CHECK(cmd_err("{\"cmd\":\"zap\"}", "unknown command 'zap'"));
	CHECK(cmd_err("{\"cmd\":\"ack\"}", "ack: missing field 'seq'"));
	CHECK(cmd_err("{\"cmd\":\"ack\",\"seq\":1.5}",
		      "ack: field 'seq': expected an integer"));
	CHECK(cmd_err("{\"cmd\":\"run\",\"stage_id\":\"a\",\"step\":\"x\","
		      "\"args\":[1]}",
		      "field 'args': expected an array of strings"));
	CHECK(cmd_err("{\"cmd\":\"run\",\"stage_id\":\"a\",\"step\":\"x\","
		      "\"timeout\":\"5\"}",
		      "field 'timeout': expected a number"));
	CHECK(cmd_err("{\"cmd\":\"bye\",\"now\":true}",
		      "bye: unknown field 'now'"));
	CHECK(cmd_err("{\"cmd\":\"bye\",\"cmd\":\"bye\"}", "duplicate"));
	CHECK(cmd_err("{\"cmd\":\"bye\"} {}", "end of file expected"));
	CHECK(cmd_err("{\"cmd\":\"b\\u0000ye\"}", "invalid JSON"));
	CHECK(cmd_err("{\"cmd\":\"\xe9\"}", "invalid UTF-8 at byte 8"));
	CHECK(cmd_err("{\"cmd\":\"ack\",\"seq\":99999999999999999999}",
		      "invalid JSON"));
	/* The error message of an unknown command is printable. */
	{
		const char *l = "{\"cmd\":\"\\u0001x\"}";
		CHECK(proto_cmd_parse(l, strlen(l), &c, &err) < 0 &&
		      strstr(err.msg, "'\\x01x'"));
	}
	/* The kind table and the command table agree. */
	for (int k = CMD_HELLO; k <= CMD_BYE; k++)
		CHECKN("command table in enum order",
		       proto_cmd_types[k].name != NULL);
	CHECK(proto_cmd_types[CMD_BYE + 1].name == NULL);
	CHECK(proto_blank(" \t\r", 3) && !proto_blank(" x", 2));
}

static void test_events(void)
{
	struct proto_event ev;
	struct d0_err err;
	const char *good = "{\"v\":1,\"seq\":7,\"ts\":1795938944470000000,"
			   "\"node\":\"n01\",\"type\":\"sample\",\"card\":-1,"
			   "\"metric\":\"host.mem.used\",\"value\":1.5e9}";
	CHECK(proto_event_parse(good, strlen(good), &ev, &err) == 0 &&
	      ev.seq == 7 && ev.ts == 1795938944470000000LL &&
	      !strcmp(ev.node, "n01") && !strcmp(ev.type, "sample") &&
	      ev.known);
	proto_event_free(&ev);
	{
		const char *l = "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\","
				"\"type\":\"future\",\"x\":1}";
		CHECKN("unknown types pass (newer agents)",
		       proto_event_parse(l, strlen(l), &ev, &err) == 0 &&
			   !ev.known);
	}
	proto_event_free(&ev);
	CHECK(ev_err("{\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
		     "field 'v'"));
	CHECK(ev_err(
	    "{\"v\":2,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "protocol version 2"));
	CHECK(ev_err(
	    "{\"v\":1,\"seq\":0,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "field 'seq'"));
	CHECK(ev_err(
	    "{\"v\":1,\"seq\":1,\"ts\":-1,\"node\":\"n\",\"type\":\"log\"}",
	    "field 'ts'"));
	CHECK(ev_err(
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"\",\"type\":\"log\"}",
	    "field 'node'"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":5}",
		     "field 'type'"));
	CHECK(ev_err(
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\","
	    "\"level\":\"info\"}",
	    "log: missing field 'msg'"));
	CHECK(ev_err(
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"check\","
	    "\"item\":\"x\",\"status\":\"great\"}",
	    "'great' is not one of pending|running|pass|warn|fail|skip"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"sample\",\"card\":\"0\",\"metric\":\"m\",\"value\":1}",
		     "sample: field 'card': expected an integer"));
	/* The `values` form: cards card, card+1, ...; exactly one form. */
	{
		struct proto_event e2;
		struct d0_err e2err;
		const char *l = "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\","
				"\"type\":\"sample\",\"card\":8,\"metric\":"
				"\"mem.used\",\"values\":[1,2.5,3e9]}";
		CHECK(proto_event_parse(l, strlen(l), &e2, &e2err) == 0);
		proto_event_free(&e2);
	}
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"sample\",\"card\":0,\"metric\":\"m\",\"value\":1,"
		     "\"values\":[1]}",
		     "exactly one of 'value'"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"sample\",\"card\":0,\"metric\":\"m\"}",
		     "exactly one of 'value'"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"sample\",\"card\":0,\"metric\":\"m\",\"values\":[]}",
		     "'values' must hold 1.."));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"sample\",\"card\":0,\"metric\":\"m\",\"values\":[1,"
		     "\"x\"]}",
		     "values[1]: expected a number"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"stage\",\"stage\":\"s\",\"state\":\"paused\"}",
		     "'paused' is not one of start|progress|end"));
	/* perf's kernels are strings (the report shows them as text) */
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"perf\",\"tpot_ms\":1,\"kernel\":512}",
		     "kernel"));
	/* train: the step is required, figures are numbers, skipped 0/1 */
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"train\",\"loss\":2.5}",
		     "train: missing field 'step'"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"train\",\"step\":1,\"loss\":\"nan\"}",
		     "train: field 'loss': expected a number"));
	CHECK(ev_err("{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		     "\"train\",\"step\":1,\"skipped\":true}",
		     "train: field 'skipped': expected an integer"));
	{
		struct proto_event te;
		struct d0_err terr;
		static const char l[] =
		    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":"
		    "\"train\",\"step\":1,\"skipped\":1,\"loss_scale\":"
		    "32768,\"layout\":\"tp1pp1ep1dp1\"}";
		CHECKN("a skipped train step without loss is an event",
		       proto_event_parse(l, sizeof l - 1, &te, &terr) == 0 &&
			   te.kind == EV_TRAIN && te.known);
		proto_event_free(&te);
	}
	/* Every type in the table has fields and a summary. */
	for (const struct proto_type *t = proto_event_types; t->name; t++)
		CHECKN(t->name, t->fields && t->summary);
}

/*
 * One envelope rule, two readers: jansson's tree (proto_event_parse) and the
 * scanner the store and the view use (proto_envelope_scan) must agree on
 * every line, and on the event's kind.
 */
static void test_envelope_one_rule(void)
{
	static const char *const lines[] = {
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\",\"level\":\"info\",\"msg\":\"x\"}",
	    "{\"v\":1,\"seq\":3,\"ts\":5,\"node\":\"console\",\"type\":\"verdict\"}",
	    "{\"v\":1,\"seq\":3,\"ts\":5,\"node\":\"n\",\"type\":\"future\"}",
	    "{\"v\":2,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":0,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":-1,\"node\":\"n\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"\"}",
	    "{\"v\":1,\"seq\":1.5,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "{\"v\":\"1\",\"seq\":1,\"ts\":0,\"node\":\"n\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":7,\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"0123456789012345678901234567890123456789012345678901234567890123\",\"type\":\"log\"}",
	    "{\"v\":1,\"seq\":1,\"ts\":0,\"node\":\"012345678901234567890123456789012345678901234567890123456789012\",\"type\":\"heartbeat2\"}",
	    "{\"v\":1,\"seq\":2,\"ts\":1,\"node\":\"n\",\"type\":\"sample\",\"card\":0,\"metric\":\"mem.used\",\"value\":1}",
	};
	for (size_t i = 0; i < sizeof lines / sizeof *lines; i++) {
		struct proto_event ev;
		struct proto_envelope env;
		struct jscan j;
		struct d0_err e1, e2;
		char name[96];
		int tree = proto_event_parse(lines[i], strlen(lines[i]), &ev, &e1);
		int scan = json_scan_object(lines[i], strlen(lines[i]), &j) == 0
			       ? proto_envelope_scan(&j, &env, &e2)
			       : -1;
		snprintf(name, sizeof name, "envelope line %zu: tree %d == scanner %d",
			 i, tree, scan);
		CHECKN(name, tree == scan);
		if (tree == 0 && scan == 0) {
			snprintf(name, sizeof name, "envelope line %zu: kind %s",
				 i, proto_event_kind_name(ev.kind));
			CHECKN(name, ev.kind == env.kind);
		}
		proto_event_free(&ev);
	}
	CHECK(proto_event_kind_of("verdict", 7) == EV_VERDICT);
	CHECK(proto_event_kind_of("verdic", 6) == EV_UNKNOWN);
	CHECK(!strcmp(proto_event_kind_name(EV_SAMPLE), "sample"));
}

static void test_format(void)
{
	struct d0_err err;
	size_t len;
	json_t *f = json_pack("{s:s, s:s, s:i, s:s}", "level", "info", "msg",
			      "h\xc3\xa9", "seq", 99, "extra", "x");
	char *s = proto_event_format("n\"1", 5, 42, "log", f, &len, &err);
	CHECK(s != NULL);
	CHECK(s &&
	      !strcmp(s, "{\"v\":1,\"seq\":5,\"ts\":42,\"node\":\"n\\\"1\","
			 "\"type\":\"log\",\"level\":\"info\","
			 "\"msg\":\"h\\u00E9\",\"extra\":\"x\"}\n"));
	CHECK(s && len == strlen(s));
	if (s) {
		struct proto_event ev;
		CHECKN("formatted events parse back",
		       proto_event_parse(s, len - 1, &ev, &err) == 0 &&
			   ev.seq == 5);
		proto_event_free(&ev);
	}
	free(s);
	json_decref(f);
	{
		char *big = malloc(PROTO_MAX_LINE + 1);
		memset(big, 'a', PROTO_MAX_LINE);
		big[PROTO_MAX_LINE] = 0;
		f = json_pack("{s:s, s:s}", "level", "info", "msg", big);
		s = proto_event_format("n", 1, 1, "log", f, &len, &err);
		CHECKN("an event over 64 KiB is refused with a reason",
		       s == NULL && strstr(err.msg, "over the 65536-byte"));
		free(s);
		json_decref(f);
		free(big);
	}
	CHECK(proto_now_ns() > 1600000000000000000LL);
}

int main(void)
{
	test_framing();
	test_utf8();
	test_commands();
	test_events();
	test_format();
	test_envelope_one_rule();
	return unit_done();
}
