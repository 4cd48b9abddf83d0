/*
 * shrink_layout.h - the smallest model of a real model's structure that a
 * given tp x pp x ep layout can split (gen-model --like --for-layout).
 */
#ifndef DAY0_SHRINK_LAYOUT_H
#define DAY0_SHRINK_LAYOUT_H

#include "runtime.h"

/*
 * Grow the shrunk config c (model_config_shrink of real) just enough for
 * layout d: heads and kv heads (GQA ratio kept, MHA kept MHA, MLA heads),
 * vocab and every FFN width to multiples of tp, experts to a multiple of
 * ep (and of the routing groups), layers to at least pp.  Every operator
 * feature of c stays.  Fails (naming the dimension) when the real model
 * itself cannot take the layout, so a rehearsal never passes a layout the
 * real run will refuse.
 */
int model_config_fit_layout(const struct model_config *real,
			    const struct layout_dims *d,
			    struct model_config *c, struct d0_err *err);

/* Parse "TP,PP,EP" (",DP" accepted and ignored).  -1 when malformed. */
int layout_dims_parse(const char *s, struct layout_dims *d);

#endif
