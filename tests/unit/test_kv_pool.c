/*
 * test_kv_pool.c - the paged KV cache's block pool (engine/serve/kv_pool.c):
 * allocation until empty, reference counts, prefix keys found and missed,
 * the LRU eviction order of cached prefixes, collisions that are misses,
 * and the idle check that service.kv reports (a leak and a double count
 * caught).  Then a random walk of sequences against a model of the pool.
 */
#include "kv_pool.h"
#include "unit.h"

#include <stdlib.h>
#include <string.h>

static int64_t toks[4][4] = {{1, 2, 3, 4}, {5, 6, 7, 8}, {1, 2, 3, 5}, {9, 9, 9, 9}};

int main(void)
{
	struct kv_pool p;
	char why[256];
	int b[8];
	uint64_t k0, k1, k2;

	CHECK(kv_pool_init(&p, 0, 4) < 0);
	CHECK(kv_pool_init(&p, 4, 4) == 0);
	CHECK(kv_pool_available(&p) == 4);
	for (int i = 0; i < 4; i++)
		b[i] = kv_pool_alloc(&p);
	CHECK(b[0] == 0 && b[1] == 1 && b[2] == 2 && b[3] == 3);
	CHECK(kv_pool_alloc(&p) == -1);
	CHECK(kv_pool_used(&p) == 4 && kv_pool_available(&p) == 0);
	CHECK(kv_pool_check_idle(&p, why, sizeof why) < 0 && strstr(why, "leaked"));

	/* keys: the parent's key is part of a block's identity */
	k0 = kv_pool_key(0, toks[0], 4);
	k1 = kv_pool_key(k0, toks[1], 4);
	k2 = kv_pool_key(0, toks[2], 4);
	CHECK(k0 != k1 && k0 != k2 && k0 == kv_pool_key(0, toks[0], 4));
	CHECK(kv_pool_key(k2, toks[1], 4) != k1);
	kv_pool_register(&p, b[0], k0, 0, toks[0]);
	kv_pool_register(&p, b[1], k1, k0, toks[1]);
	kv_pool_register(&p, b[2], k0, 0, toks[0]); /* same content: ignored */
	CHECK(kv_pool_find(&p, k0, 0, toks[0], 0) == b[0]);
	CHECK(kv_pool_find(&p, k1, k0, toks[1], 0) == b[1]);
	CHECK(kv_pool_find(&p, k2, 0, toks[2], 0) == -1);
	/* a colliding key with other tokens is a miss, not a wrong block */
	CHECK(kv_pool_find(&p, k0, 0, toks[2], 0) == -1);

	/* a second sequence shares block 0 */
	CHECK(kv_pool_find(&p, k0, 0, toks[0], 1) == b[0] && p.ref[b[0]] == 2);
	CHECK(kv_pool_shared(&p) == 1);
	kv_pool_release(&p, b[0]);
	CHECK(p.ref[b[0]] == 1 && kv_pool_shared(&p) == 0);
	/* the first sequence ends: keyed blocks are cached, others free */
	for (int i = 0; i < 4; i++)
		kv_pool_release(&p, b[i]);
	CHECK(p.nfree == 2 && p.ncached == 2 && kv_pool_available(&p) == 4);
	CHECK(kv_pool_check_idle(&p, why, sizeof why) == 0);
	/* a cached block found again leaves the LRU list */
	CHECK(kv_pool_find(&p, k1, k0, toks[1], 1) == b[1] && p.ncached == 1);
	kv_pool_release(&p, b[1]); /* now the most recently used */
	/* allocation takes free blocks first, then evicts the oldest cached */
	b[4] = kv_pool_alloc(&p);
	b[5] = kv_pool_alloc(&p);
	CHECK(b[4] >= 2 && b[5] >= 2 && p.nfree == 0);
	b[6] = kv_pool_alloc(&p);
	CHECK(b[6] == b[0] && p.evictions == 1);
	CHECK(kv_pool_find(&p, k0, 0, toks[0], 0) == -1);
	CHECK(kv_pool_find(&p, k1, k0, toks[1], 0) == b[1]);
	b[7] = kv_pool_alloc(&p);
	CHECK(b[7] == b[1] && p.evictions == 2 && kv_pool_alloc(&p) == -1);
	CHECK(kv_pool_find(&p, k1, k0, toks[1], 0) == -1);
	for (int i = 4; i < 8; i++)
		kv_pool_release(&p, b[i]);
	CHECK(kv_pool_check_idle(&p, why, sizeof why) == 0 && p.nfree == 4);
	/* a block counted free twice is caught */
	p.free_list[p.nfree - 1] = p.free_list[0];
	p.ncached = 1;
	CHECK(kv_pool_check_idle(&p, why, sizeof why) < 0);
	kv_pool_destroy(&p);

	/* random walk: sequences take, share and drop blocks; the pool's
	 * counts always add up and it ends idle */
	{
		enum { NB = 64, NS = 12 };
		int held[NS][NB], nheld[NS] = {0}, ok = 1;
		unsigned s = 12345;
		kv_pool_init(&p, NB, 4);
		for (int it = 0; it < 20000 && ok; it++) {
			int q;
			s = s * 1103515245u + 12345u;
			q = (int)((s >> 16) % NS);
			if ((s >> 8) % 3 == 0 && nheld[q]) {
				for (int i = 0; i < nheld[q]; i++)
					kv_pool_release(&p, held[q][i]);
				nheld[q] = 0;
			} else if (nheld[q] < NB) {
				int64_t t[4] = {(int64_t)(nheld[q] % 3), 1, 2, 3};
				uint64_t k = kv_pool_key((uint64_t)nheld[q], t, 4);
				int x = kv_pool_find(&p, k, (uint64_t)nheld[q], t, 1);
				if (x < 0 && (x = kv_pool_alloc(&p)) >= 0)
					kv_pool_register(&p, x, k, (uint64_t)nheld[q], t);
				if (x >= 0)
					held[q][nheld[q]++] = x;
			}
			{
				int refs = 0, sum = 0;
				for (int i = 0; i < NB; i++)
					refs += p.ref[i];
				for (int i = 0; i < NS; i++)
					sum += nheld[i];
				ok = refs == sum && p.nfree + p.ncached + kv_pool_used(&p) == NB;
			}
		}
		CHECKN("random walk: reference counts equal the tables' entries", ok);
		for (int q = 0; q < NS; q++)
			for (int i = 0; i < nheld[q]; i++)
				kv_pool_release(&p, held[q][i]);
		CHECKN("random walk: the pool ends idle", kv_pool_check_idle(&p, why, sizeof why) == 0);
		kv_pool_destroy(&p);
	}
	return unit_done();
}
