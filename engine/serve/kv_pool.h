/*
 * kv_pool.h - who owns which block of the paged KV cache (kv_pool.c).
 *
 * The runtime reads and writes KV through block tables (rt_batch.h); this
 * pool decides them on serve's rank 0 and the tables travel with each
 * batch.  A block is in exactly one of three states:
 *   free     reference count 0, no content anyone may reuse (the free list)
 *   in use   reference count >= 1: in the tables of that many sequences
 *   cached   reference count 0 but its content is a full block of a known
 *            prefix, kept in an LRU list and in the prefix table: a new
 *            request with the same prefix takes it back (count 1), an
 *            allocation that finds the free list empty evicts the oldest
 * Prefix keys are vLLM's: a full block is keyed by the hash of its parent
 * block's key and its own tokens, so equal keys mean equal prefixes (the
 * tokens and the parent key are kept and compared, so a hash collision
 * is a miss, never a wrong answer).
 */
#ifndef DAY0_KV_POOL_H
#define DAY0_KV_POOL_H

#include <stddef.h>
#include <stdint.h>

struct kv_pool {
	int nblocks, block_tokens;
	int *ref;             /* [nblocks] sequences holding the block */
	unsigned char *keyed; /* [nblocks] registered in the prefix table */
	uint64_t *key, *parent; /* [nblocks] its key and its parent's */
	int64_t *tokens;      /* [nblocks][block_tokens] a keyed block's tokens */
	int *free_list, nfree; /* a stack of free block ids */
	int *lru_prev, *lru_next, lru_head, lru_tail, ncached; /* head: oldest */
	int *bucket, *chain;  /* the prefix table: bucket heads, next in chain */
	int nbucket;
	uint64_t evictions;
};

int kv_pool_init(struct kv_pool *p, int nblocks, int block_tokens);
void kv_pool_destroy(struct kv_pool *p);
/* Blocks an allocation can still get: free + cached. */
int kv_pool_available(const struct kv_pool *p);
/* A block for a sequence (count 1): a free one, else the least recently
 * used cached one (forgotten from the prefix table); -1 when none. */
int kv_pool_alloc(struct kv_pool *p);
/* A sequence lets go of block b: at count 0 it is cached when keyed
 * (most recently used), free otherwise. */
void kv_pool_release(struct kv_pool *p, int b);
/* The key of a full block with these tokens after a block keyed parent
 * (0 for the first block). */
uint64_t kv_pool_key(uint64_t parent, const int64_t *tokens, int n);
/* The block holding this full block's content, or -1.  take: count it as
 * used by one more sequence (out of the LRU list when it was cached). */
int kv_pool_find(struct kv_pool *p, uint64_t key, uint64_t parent,
		 const int64_t *tokens, int take);
/* Block b (in use, full) now holds these tokens after parent: keyed so
 * later requests find it, unless another block already holds them. */
void kv_pool_register(struct kv_pool *p, int b, uint64_t key, uint64_t parent,
		      const int64_t *tokens);
/* Blocks in use by more than one sequence, and in use at all. */
int kv_pool_shared(const struct kv_pool *p);
int kv_pool_used(const struct kv_pool *p);
/* The pool at rest (no sequence holds a block): every count 0, free and
 * cached blocks adding up to all of them, the lists consistent.  Returns
 * 0, or -1 with what is wrong in why. */
int kv_pool_check_idle(const struct kv_pool *p, char *why, size_t n);

#endif
