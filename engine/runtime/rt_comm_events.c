/*
 * rt_comm_events.c - the runtime's own collectives as `comm` events: what
 * `run` reports after prefill and decode (one row per group and op, over
 * "calls"), and what `soak` reports every --interval (the same rows over
 * the interval only, with "interval_s"), so the console's Overview can
 * show the bus bandwidth of a stage that moves data without a comm sweep
 * (docs/protocol.md "comm", docs/screens.md).
 */
#include "engine.h"

#include <string.h>

/* nccl-tests' bus bandwidth factors (docs/comm.md), by rt op. */
static double busfactor(int op, int n)
{
	if (n < 2)
		return 1.0;
	if (op == RT_OP_ALLREDUCE)
		return 2.0 * (n - 1) / n;
	if (op == RT_OP_SENDRECV)
		return 1.0;
	return (double)(n - 1) / n; /* allgather, alltoall */
}

void rt_emit_comm(struct rt *r, const struct layout_dims *d, const char *step,
		  struct rt_stats *since, double interval_s)
{
	/* Ranks taking part in one call of each group's collectives. */
	const int granks[RT_GROUPS] = {d->tp, 2, d->ep};
	static const char *gname[RT_GROUPS] = {"tp", "pp", "ep"};
	static const char *oname[RT_OPS] = {"allreduce", "allgather", "alltoall",
					    "sendrecv"};
	const struct rt_stats *s = rt_stats(r);
	for (int g = 0; g < RT_GROUPS; g++)
		for (int o = 0; o < RT_OPS; o++) {
			uint64_t bytes = s->bytes[g][o], calls = s->calls[g][o];
			double us = s->time_s[g][o] * 1e6;
			json_t *ev;
			if (since) {
				bytes -= since->bytes[g][o];
				calls -= since->calls[g][o];
				us -= since->time_s[g][o] * 1e6;
			}
			if (!calls)
				continue;
			ev = json_pack(
			    "{s:s, s:I, s:i, s:I, s:f, s:f, s:f, s:i, s:s, s:s, "
			    "s:i}",
			    "op", oname[o], "bytes", (json_int_t)bytes, "ranks",
			    granks[g], "calls", (json_int_t)calls, "time_us", us,
			    "algbw", us > 0 ? (double)bytes / (us * 1e3) : 0.0,
			    "busbw",
			    us > 0 ? (double)bytes / (us * 1e3) *
					 busfactor(o, granks[g])
				   : 0.0,
			    "wrong", 0, "group", gname[g], "step", step, "rank",
			    rt_rank(r));
			if (since)
				json_object_set_new(ev, "interval_s",
						    json_real(interval_s));
			events_emit("comm", ev);
		}
	if (since)
		*since = *s;
}
