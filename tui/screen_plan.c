/*
 * screen_plan.c - the memory plan: the memory.plan check (status, detail:
 * the chosen layout) and, when the check carries the plan object (its
 * "plan" field or an object value: tp, pp, ep, dp, weights_bytes,
 * kv_bytes, activation_bytes, comm_buffer_bytes, total_bytes,
 * usable_bytes; plan --train's "train" object: gradients, optimizer,
 * backward), the per-card budget breakdown as a stacked bar; then
 * every card's budget against its peak (the margin actually left).
 */
#include "tui.h"

#include <math.h>
#include <string.h>

static double pnum(json_t *o, const char *k)
{
	json_t *j = json_object_get(o, k);
	return json_is_number(j) ? json_number_value(j) : NAN;
}

static void draw(struct tui *ui, const struct view *v, WINDOW *w)
{
	int rows, cols, y = 0;
	char a[16], b[16], c[16];
	getmaxyx(w, rows, cols);
	if (!*v->plan_status) {
		tui_put(w, y++, 0, cols, tui_attr(ui, ROLE_DIM),
			"no memory.plan result yet (day0-engine plan)");
	} else {
		tui_printf(w, y++, 0, cols,
			   tui_attr(ui, tui_status_role(v->plan_status)),
			   "memory.plan %s: %s", v->plan_status, v->plan_detail);
	}
	if (v->plan && y < rows) {
		/* inference: weights, KV, activations, comm; plan --train:
		 * the training step's parts ("train"), which with the comm
		 * buffers add up to the planned total */
		static const char *const parts[] = {
		    "weights_bytes", "kv_bytes", "activation_bytes",
		    "comm_buffer_bytes"};
		static const char *const labels[] = {"weights", "kv cache",
						     "activations", "comm"};
		static const enum tui_role roles[] = {ROLE_BAR, ROLE_OK, ROLE_WARN,
						      ROLE_MARK};
		static const char *const tparts[] = {
		    "weights_bytes", "grads_bytes", "optimizer_bytes",
		    "activation_bytes", "backward_bytes", "comm_buffer_bytes"};
		static const char *const tlabels[] = {
		    "weights", "gradients", "optimizer", "activations",
		    "backward", "comm"};
		static const enum tui_role troles[] = {
		    ROLE_BAR, ROLE_HEAD, ROLE_OK, ROLE_WARN, ROLE_FAIL, ROLE_MARK};
		json_t *train = json_object_get(v->plan, "train");
		int tr = json_is_object(train), np = tr ? 6 : 4;
		double usable = pnum(v->plan, "usable_bytes");
		double total = pnum(v->plan, "total_bytes");
		tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
			   "layout tp%g pp%g ep%g dp%g%s", pnum(v->plan, "tp"),
			   pnum(v->plan, "pp"), pnum(v->plan, "ep"),
			   pnum(v->plan, "dp"), tr ? " (training step)" : "");
		double top = usable > 0 ? usable : total;
		int bw = cols - 2;
		if (bw > 80)
			bw = 80;
		int x = 0;
		for (int i = 0; i < np && y < rows; i++) {
			const char *k = tr ? tparts[i] : parts[i];
			enum tui_role role = tr ? troles[i] : roles[i];
			const char *label = tr ? tlabels[i] : labels[i];
			double p = pnum(tr && i < np - 1 ? train : v->plan, k);
			if (tr && i == 4) { /* views and buffers with it */
				double more =
				    fmax(0, pnum(train, "views_bytes")) +
				    fmax(0, pnum(train, "pp_buffer_bytes")) +
				    fmax(0, pnum(train, "buffer_bytes"));
				if (more > 0)
					label = "backward+buf";
				p += more;
			}
			if (isnan(p))
				continue;
			tui_bytes(p, a, sizeof a);
			tui_printf(w, y + 1 + i, 0, cols, tui_attr(ui, role),
				   "  %-12s %8s", label, a);
			int n = top > 0 ? (int)(p / top * bw + 0.5) : 0;
			for (int k2 = 0; k2 < n && x < bw; k2++, x++)
				tui_put(w, y, x, 1, tui_attr(ui, role),
					ui->g->full);
		}
		for (; x < bw; x++)
			tui_put(w, y, x, 1, tui_attr(ui, ROLE_DIM), ui->g->empty);
		y += np + 1;
		tui_bytes(total, a, sizeof a);
		tui_bytes(usable, b, sizeof b);
		if (y < rows)
			tui_printf(w, y++, 0, cols, A_NORMAL,
				   "  planned %s of %s usable per card", a, b);
	}
	y++;
	if (y >= rows)
		return;
	tui_printf(w, y++, 0, cols, tui_attr(ui, ROLE_HEAD),
		   "%-16s %5s %8s %8s %8s %7s", "node", "card", "budget", "peak",
		   "used", "margin");
	int skip = ui->scroll;
	for (size_t i = 0; i < v->nnodes && y < rows; i++) {
		const struct view_node *n = &v->nodes[i];
		const struct view_node *bn =
		    ui->base ? view_node(ui->base, n->name) : NULL;
		for (int k = 0; k < n->ncards && y < rows; k++) {
			const struct view_card *d = &n->cards[k];
			if (!d->present || skip-- > 0)
				continue;
			tui_bytes(d->budget, a, sizeof a);
			tui_bytes(d->peak, b, sizeof b);
			tui_bytes(d->used, c, sizeof c);
			double margin = d->budget > 0 && !isnan(d->peak)
					    ? (1 - d->peak / d->budget) * 100
					    : NAN;
			int x = tui_printf(w, y, 0, cols, A_NORMAL,
					   "%-16.16s %5d %8s %8s %8s ", n->name,
					   k, a, b, c);
			if (isnan(margin))
				x += tui_put(w, y, x, cols - x, A_NORMAL, "      -");
			else
				x += tui_printf(w, y, x, cols - x,
						tui_attr(ui, tui_mem_role(d->peak, d->budget)),
						"%6.1f%%", margin);
			if (bn && k < bn->ncards && bn->cards[k].present)
				tui_delta(ui, w, y, x, cols - x, d->peak,
					  bn->cards[k].peak, 0);
			y++;
		}
	}
}

static int on_key(struct tui *ui, const struct view *v, int key)
{
	switch (key) {
	case KEY_UP: if (ui->scroll > 0) ui->scroll--; return 1;
	case KEY_DOWN: ui->scroll++; return 1;
	case KEY_PPAGE: ui->scroll = ui->scroll > 10 ? ui->scroll - 10 : 0; return 1;
	case KEY_NPAGE: ui->scroll += 10; return 1;
	}
	return 0;
}

const struct tui_screen screen_plan = {"Plan", draw, on_key};
