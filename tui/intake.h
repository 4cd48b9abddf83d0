/*
 * intake.h - the console's door for agent lines, and the store's commits.
 *
 * A node speaks only for itself.  Every line an agent sends is bound to
 * the link it arrived on: a line that claims another node, or a name only
 * the console may use (`console`), is refused, counted for the *sending*
 * link's node and never stored.  So are over-long lines, invalid UTF-8,
 * lines that are no event, unknown protocol versions and a (node, seq)
 * already stored with another body.  Every refusal is counted per (node,
 * reason) with its first example; the runner records them as `alert`
 * events of the console (docs/protocol.md), which the node's row, the
 * alerts line and the report show.
 *
 * A node that floods is rate-limited (a token bucket per node): over the
 * limit its lines are not stored now, so its agent keeps them in its spool;
 * once the bucket refills the console asks for them again (a rewind:
 * `hello` with `acked`).  Memory stays bounded and the others' lines flow.
 *
 * A lost write is never GO.  When a commit fails (a full disk) the batch
 * is rolled back; intake then holds the console's own events in memory
 * (they have no spool), stores no agent line (the agents keep them: no
 * acks go out), and retries with backoff.  When a commit succeeds again,
 * every node is rewound and its resent events stored; those the runner had
 * folded before the rollback are stored without being folded twice.  The
 * runner starts no stage while stalled and ends the run incomplete after
 * --store-wait.
 */
#ifndef DAY0_INTAKE_H
#define DAY0_INTAKE_H

#include <stddef.h>
#include <stdint.h>

#include "store.h"

enum intake_reason {
	IN_TOOLONG,   /* a line over PROTO_MAX_LINE */
	IN_UTF8,      /* invalid UTF-8 */
	IN_NOT_EVENT, /* not JSON, or no protocol envelope */
	IN_VERSION,   /* an unknown protocol version */
	IN_FORGED,    /* claims another node */
	IN_RESERVED,  /* claims a name only the console uses */
	IN_BACKWARDS, /* a seq already acked, with another body */
	IN_CONFLICT,  /* a stored (node, seq) with another body */
	IN_RATE,      /* over the node's rate: deferred, resent later */
	IN_REASONS
};

/* "forged node", "over-long line", ... (for messages and alerts) */
extern const char *const intake_reason_names[IN_REASONS];

enum intake_result {
	INTAKE_STORED,	  /* new: fold it */
	INTAKE_REDONE,	  /* stored again after a rollback: folded already */
	INTAKE_DUPLICATE, /* a resend of what is stored */
	INTAKE_REFUSED,	  /* counted, never stored */
	INTAKE_DEFERRED,  /* not stored now; the agent resends it later */
};

struct intake_opts {
	double rate;	 /* events/s per node (0: 20000) */
	double burst;	 /* bucket size (0: 2 x rate) */
};

struct intake;

/* names: the inventory's node names, index = the runner's node index. */
struct intake *intake_new(struct store *s, const char *const *names,
			  size_t n, const struct intake_opts *o);
void intake_free(struct intake *in);

/* One line from node i's link (without '\n'). */
enum intake_result intake_line(struct intake *in, int node, const char *line,
			       size_t len, int64_t now);
/* Node i's link dropped an over-long line of len bytes. */
void intake_toolong(struct intake *in, int node, size_t len, int64_t now);
/* A new link for node i: nothing to wait for. */
void intake_connected(struct intake *in, int node);

/* The console's own event line: stored, or held while the store is
 * stalled (stored when it is back).  -1 only for a line the store
 * refuses (a bug; err says why). */
int intake_console(struct intake *in, const char *line, size_t len,
		   struct d0_err *err);

/* The console's lines the store does not hold (a run that ends while the
 * store is stalled): written to the first of paths[0..n-1] that takes
 * them (a temporary file, fsync, rename), its name in where.  Returns the
 * number of lines written (0: nothing held, no file), -1 when no path
 * took them (err says why). */
int intake_save_held(struct intake *in, const char *const *paths, size_t n,
		     char *where, size_t wmax, struct d0_err *err);
/* --resume: the lines a stalled run saved (intake_save_held) stored and
 * committed, then their files removed.  Returns the number of lines
 * stored (duplicates of stored events count too), -1 on a store error. */
int intake_load_held(struct intake *in, const char *const *paths, size_t n,
		     struct d0_err *err);

/* Commit the open batch.  0: committed (or nothing to do); -1: the store
 * is stalled (intake_stall says why). */
int intake_commit(struct intake *in, int64_t now);
/* While stalled, retry when the backoff allows.  1: committed again now. */
int intake_retry(struct intake *in, int64_t now);
/* NULL when the store is fine; else what is wrong ("disk full at PATH")
 * and since when. */
const char *intake_stall(const struct intake *in, int64_t *since);

/* Should node i's agent resend now?  Then *acked is what to send in the
 * `hello` (the store's committed seq) and the request counts as sent. */
int intake_rewind_due(struct intake *in, int node, int64_t now,
		      int64_t *acked);

/* A refusal count to record: per (node, reason), the first when it
 * happens, then at most every 2 s while the count grows (all that grew
 * when force).  Returns 0 when none is due. */
struct intake_alert {
	int node;
	enum intake_reason reason;
	uint64_t count;
	char detail[160];  /* the first one: what was wrong */
	char example[200]; /* the first one: its line, excerpted */
};
int intake_next_alert(struct intake *in, int64_t now, int force,
		      struct intake_alert *a);

/* Lines refused (all reasons but rate) from node i so far. */
uint64_t intake_refused(const struct intake *in, int node);

#endif
