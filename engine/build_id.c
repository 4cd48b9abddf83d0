/*
 * build_id.c - the build id: a hash of the engine's and the agent's
 * sources, given by the Makefile (-DDAY0_BUILD_ID, docs/compat.md).  It
 * lives alone in this file so that a change of the id recompiles one
 * object, and `facts` can tell two nodes running different builds of the
 * same version apart.
 */
#include "util.h"

#ifndef DAY0_BUILD_ID
#define DAY0_BUILD_ID "unknown"
#endif

const char *d0_build_id(void)
{
	return DAY0_BUILD_ID[0] ? DAY0_BUILD_ID : "unknown";
}
