/* link_ssh.c - placeholder until the ssh transport lands. */
#include "link_impl.h"

int link_ssh_open(struct link *l, struct d0_err *err)
{
	d0_errf(err, "%s: the ssh transport is not built yet",
		l->cfg.node->name);
	return -1;
}
