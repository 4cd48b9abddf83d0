/*
 * cluster.h - how a cluster stage's one mpirun reaches the other nodes.
 *
 * The console checked every node's host key and logged in with the
 * inventory's port, user and identity; mpirun's own ssh (Open MPI's
 * plm_rsh_agent) must do the same, or a cluster stage fails where
 * `day0 hosts` passed.  So each cluster stage carries an ssh config made
 * from the inventory (Host/HostName/Port/User/IdentityFile, strict host
 * key checking against the known_hosts lines of those hosts) and the rank
 * map: world rank r is on the node whose slots, in the --host order,
 * cover r.  The launching agent writes the files and passes `-F` through
 * plm_rsh_args (agent/stage.c; the rank map: agent/ranks.c).
 */
#ifndef DAY0_CLUSTER_H
#define DAY0_CLUSTER_H

#include <stddef.h>

#include "inventory.h"

/* "n1:2,n2:2": node names and card counts in rank order (malloc'd). */
char *cluster_rank_map(const struct inv_node *const *nodes, size_t n);
/* The ssh config for the non-local nodes (malloc'd); the literal
 * %KNOWN_HOSTS% stands for the known_hosts file the agent writes. */
char *cluster_ssh_config(const struct inv_node *const *nodes, size_t n);
/* The lines of known_hosts (NULL: ~/.ssh/known_hosts) that name these
 * nodes as OpenSSH writes them (host, or [host]:port off port 22), and
 * hashed lines; malloc'd, "" when the file is absent. */
char *cluster_known_hosts(const struct inv_node *const *nodes, size_t n,
			  const char *path);

#endif
