/*
 * fuzz_proto.c - libFuzzer target for the line protocol's parsers.
 *
 * The input is a byte stream as a console or an agent would receive it:
 * it is cut into lines by proto_lines (in chunks whose size the first byte
 * picks, so lines straddle reads), and every line goes through both
 * proto_cmd_parse and proto_event_parse, which must accept or refuse with
 * a message, never crash.  The whole input also goes through the store's
 * JSON scanner (engine/json_scan.c), which must agree with jansson about
 * what is a JSON object and about every top-level value it reports.
 *
 *   make fuzz FUZZ_SECONDS=60    (seeded with tests/fuzz/proto-corpus)
 */
#include "json_scan.h"
#include "proto.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void one_line(const char *line, size_t len)
{
	struct proto_cmd cmd;
	struct proto_event ev;
	struct d0_err err;
	err.msg[0] = 0;
	if (proto_cmd_parse(line, len, &cmd, &err) == 0) {
		if (!cmd.obj || cmd.kind > CMD_BYE ||
		    strcmp(cmd.name, proto_cmd_types[cmd.kind].name))
			__builtin_trap();
		proto_cmd_free(&cmd);
	} else if (!err.msg[0]) {
		__builtin_trap(); /* every refusal says why */
	}
	err.msg[0] = 0;
	if (proto_event_parse(line, len, &ev, &err) == 0) {
		if (!ev.obj || ev.seq < 1 || ev.ts < 0 || !ev.node[0])
			__builtin_trap();
		proto_event_free(&ev);
	} else if (!err.msg[0]) {
		__builtin_trap();
	}
}

static void same_value(const struct jmember *m, json_t *v)
{
	char buf[4096];
	switch (m->kind) {
	case J_STR:
		if (m->vlen >= sizeof buf)
			return;
		if (!json_is_string(v) ||
		    jscan_str(m, buf) != json_string_length(v) ||
		    memcmp(buf, json_string_value(v), json_string_length(v)))
			__builtin_trap();
		break;
	case J_INT:
		if (!json_is_integer(v) ||
		    json_integer_value(v) != jscan_int(m))
			__builtin_trap();
		break;
	case J_REAL:
		if (!json_is_real(v) || json_real_value(v) != jscan_real(m))
			__builtin_trap();
		break;
	case J_TRUE:
		if (!json_is_true(v))
			__builtin_trap();
		break;
	case J_FALSE:
		if (!json_is_false(v))
			__builtin_trap();
		break;
	case J_NULL:
		if (!json_is_null(v))
			__builtin_trap();
		break;
	case J_OBJ:
		if (!json_is_object(v))
			__builtin_trap();
		break;
	case J_ARR: {
		/* jscan_numbers (sample `values`): the numbers jansson sees,
		 * or -1 when anything else is in the array. */
		double nums[64];
		int k, all = 1;
		size_t i;
		json_t *x;
		if (!json_is_array(v))
			__builtin_trap();
		k = jscan_numbers(m, nums, 64);
		json_array_foreach(v, i, x) all &= json_is_number(x);
		if (k >= 0) {
			if (!all || (size_t)k != json_array_size(v))
				__builtin_trap();
			json_array_foreach(v, i, x) if (json_number_value(x) !=
							 nums[i])
			    __builtin_trap();
		} else if (all && json_array_size(v) > 0 &&
			   json_array_size(v) <= 64) {
			__builtin_trap();
		}
		break;
	}
	}
}

/* The scanner against jansson on the same bytes. */
static void differential(const char *s, size_t n)
{
	struct jscan j;
	json_error_t je;
	int ours = json_scan_object(s, n, &j) == 0;
	json_t *loose = json_loadb(s, n, 0, &je);
	if (ours) {
		if (!json_is_object(loose) ||
		    (int)json_object_size(loose) != j.total)
			__builtin_trap();
		for (int k = 0; k < j.n; k++) {
			char key[4096];
			struct jmember km = {.val = j.m[k].key,
					     .vlen = j.m[k].klen,
					     .vesc = j.m[k].kesc};
			if (km.vlen >= sizeof key)
				continue;
			jscan_str(&km, key);
			same_value(&j.m[k], json_object_get(loose, key));
		}
	} else {
		json_t *strict = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
		/* jansson takes what we refused: a bug, except where the
		 * input holds a NUL byte, which jansson's buffer reader takes
		 * for the end of input (a NUL is never valid JSON text, and
		 * proto_utf8_valid refuses it before jansson sees a line). */
		if (json_is_object(strict) && !memchr(s, 0, n))
			__builtin_trap();
		json_decref(strict);
		if (!j.err[0])
			__builtin_trap();
	}
	json_decref(loose);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proto_lines pl;
	const char *line;
	size_t len, chunk = size ? 1 + data[0] % 97 : 1;
	enum proto_line_result r;
	proto_lines_init(&pl);
	for (size_t off = 0; off < size; off += chunk) {
		size_t n = size - off < chunk ? size - off : chunk;
		proto_lines_push(&pl, (const char *)data + off, n);
		while ((r = proto_lines_next(&pl, &line, &len)) != PL_NONE)
			if (r == PL_LINE)
				one_line(line, len);
	}
	while ((r = proto_lines_finish(&pl, &line, &len)) != PL_NONE)
		if (r == PL_LINE)
			one_line(line, len);
	proto_lines_free(&pl);
	differential((const char *)data, size);
	return 0;
}
