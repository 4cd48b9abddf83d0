/* readpath.c's rule: how the probe's two times choose the way verify and
 * convert read the page cache. */
#include "engine.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

int main(void)
{
	/* the quick pass: map unless it took more than 1.3x pread's time */
	CHECK(read_path_rule(1.0, 1.0, 0) == READ_MAP);
	CHECK(read_path_rule(0.5, 1.0, 0) == READ_MAP);
	/* Emerald Rapids: mapped 7.5 against pread 9.6 GB/s, within 1.3x */
	CHECK(read_path_rule(1 / 7.5, 1 / 9.6, 0) == READ_MAP);
	CHECK(read_path_rule(1.3, 1.0, 0) == READ_MAP);
	/* between 1.3x and 2x: the full probe decides, and takes pread */
	CHECK(read_path_rule(1.31, 1.0, 0) == -1);
	CHECK(read_path_rule(2.0, 1.0, 0) == -1);
	CHECK(read_path_rule(1.5, 1.0, 1) == READ_PREAD);
	CHECK(read_path_rule(1.2, 1.0, 1) == READ_MAP);
	/* the Zen 5 PVM guest: mapped 1.0 against pread 4.7 GB/s */
	CHECK(read_path_rule(1 / 1.0, 1 / 4.7, 0) == READ_PREAD);
	/* DAY0_READ forces either way, past the rule */
	setenv("DAY0_READ", "read", 1);
	CHECK(read_path() == READ_PREAD);
	CHECK(strncmp(read_path_name(), "pread (DAY0_READ)", 17) == 0);
	return unit_done();
}
