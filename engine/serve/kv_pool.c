/*
 * kv_pool.c - the paged KV cache's blocks: free list, reference counts,
 * the prefix table and its LRU (kv_pool.h).  Single-threaded: serve's
 * scheduler calls it under its lock.
 */
#include "kv_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int kv_pool_init(struct kv_pool *p, int nblocks, int block_tokens)
{
	memset(p, 0, sizeof *p);
	if (nblocks < 1 || block_tokens < 1)
		return -1;
	p->nblocks = nblocks;
	p->block_tokens = block_tokens;
	p->nbucket = 1;
	while (p->nbucket < nblocks)
		p->nbucket <<= 1;
	p->ref = calloc((size_t)nblocks, sizeof *p->ref);
	p->keyed = calloc((size_t)nblocks, 1);
	p->key = calloc((size_t)nblocks, sizeof *p->key);
	p->parent = calloc((size_t)nblocks, sizeof *p->parent);
	p->tokens = calloc((size_t)nblocks * (size_t)block_tokens, sizeof *p->tokens);
	p->free_list = malloc((size_t)nblocks * sizeof *p->free_list);
	p->lru_prev = malloc((size_t)nblocks * sizeof *p->lru_prev);
	p->lru_next = malloc((size_t)nblocks * sizeof *p->lru_next);
	p->chain = malloc((size_t)nblocks * sizeof *p->chain);
	p->bucket = malloc((size_t)p->nbucket * sizeof *p->bucket);
	if (!p->ref || !p->keyed || !p->key || !p->parent || !p->tokens ||
	    !p->free_list || !p->lru_prev || !p->lru_next || !p->chain || !p->bucket) {
		kv_pool_destroy(p);
		return -1;
	}
	/* block 0 on top: allocations go up from 0 */
	for (int i = 0; i < nblocks; i++)
		p->free_list[i] = nblocks - 1 - i;
	p->nfree = nblocks;
	p->lru_head = p->lru_tail = -1;
	for (int i = 0; i < p->nbucket; i++)
		p->bucket[i] = -1;
	return 0;
}

void kv_pool_destroy(struct kv_pool *p)
{
	free(p->ref);
	free(p->keyed);
	free(p->key);
	free(p->parent);
	free(p->tokens);
	free(p->free_list);
	free(p->lru_prev);
	free(p->lru_next);
	free(p->chain);
	free(p->bucket);
	memset(p, 0, sizeof *p);
}

int kv_pool_available(const struct kv_pool *p) { return p->nfree + p->ncached; }

static void lru_unlink(struct kv_pool *p, int b)
{
	int a = p->lru_prev[b], c = p->lru_next[b];
	if (a >= 0)
		p->lru_next[a] = c;
	else
		p->lru_head = c;
	if (c >= 0)
		p->lru_prev[c] = a;
	else
		p->lru_tail = a;
	p->ncached--;
}

static void lru_push(struct kv_pool *p, int b)
{
	p->lru_prev[b] = p->lru_tail;
	p->lru_next[b] = -1;
	if (p->lru_tail >= 0)
		p->lru_next[p->lru_tail] = b;
	else
		p->lru_head = b;
	p->lru_tail = b;
	p->ncached++;
}

static void unkey(struct kv_pool *p, int b)
{
	int *at = &p->bucket[p->key[b] & (uint64_t)(p->nbucket - 1)];
	while (*at != b)
		at = &p->chain[*at];
	*at = p->chain[b];
	p->keyed[b] = 0;
}

int kv_pool_alloc(struct kv_pool *p)
{
	int b;
	if (p->nfree) {
		b = p->free_list[--p->nfree];
	} else if (p->lru_head >= 0) {
		b = p->lru_head; /* the least recently used cached prefix */
		lru_unlink(p, b);
		unkey(p, b);
		p->evictions++;
	} else {
		return -1;
	}
	p->ref[b] = 1;
	return b;
}

void kv_pool_release(struct kv_pool *p, int b)
{
	if (b < 0 || b >= p->nblocks || p->ref[b] <= 0)
		abort(); /* a block released twice: the scheduler's bug */
	if (--p->ref[b])
		return;
	if (p->keyed[b])
		lru_push(p, b);
	else
		p->free_list[p->nfree++] = b;
}

/* splitmix64's finaliser over the parent key and each token */
static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	h ^= h >> 30;
	h *= 0xbf58476d1ce4e5b9ULL;
	h ^= h >> 27;
	h *= 0x94d049bb133111ebULL;
	return h ^ (h >> 31);
}

uint64_t kv_pool_key(uint64_t parent, const int64_t *tokens, int n)
{
	uint64_t h = mix(0x6461793020206b76ULL, parent);
	for (int i = 0; i < n; i++)
		h = mix(h, (uint64_t)tokens[i]);
	return h ? h : 1;
}

int kv_pool_find(struct kv_pool *p, uint64_t key, uint64_t parent,
		 const int64_t *tokens, int take)
{
	int bt = p->block_tokens;
	for (int b = p->bucket[key & (uint64_t)(p->nbucket - 1)]; b >= 0; b = p->chain[b]) {
		if (p->key[b] != key || p->parent[b] != parent ||
		    memcmp(p->tokens + (size_t)b * bt, tokens, (size_t)bt * sizeof *tokens))
			continue;
		if (take) {
			if (p->ref[b] == 0)
				lru_unlink(p, b);
			p->ref[b]++;
		}
		return b;
	}
	return -1;
}

void kv_pool_register(struct kv_pool *p, int b, uint64_t key, uint64_t parent,
		      const int64_t *tokens)
{
	int *head;
	if (p->keyed[b] || kv_pool_find(p, key, parent, tokens, 0) >= 0)
		return;
	head = &p->bucket[key & (uint64_t)(p->nbucket - 1)];
	p->key[b] = key;
	p->parent[b] = parent;
	memcpy(p->tokens + (size_t)b * p->block_tokens, tokens,
	       (size_t)p->block_tokens * sizeof *tokens);
	p->chain[b] = *head;
	*head = b;
	p->keyed[b] = 1;
}

int kv_pool_shared(const struct kv_pool *p)
{
	int n = 0;
	for (int b = 0; b < p->nblocks; b++)
		n += p->ref[b] > 1;
	return n;
}

int kv_pool_used(const struct kv_pool *p)
{
	return p->nblocks - p->nfree - p->ncached;
}

int kv_pool_check_idle(const struct kv_pool *p, char *why, size_t n)
{
	int held = 0, cached = 0, keyed = 0;
	for (int b = 0; b < p->nblocks; b++) {
		held += p->ref[b] != 0;
		keyed += p->keyed[b];
	}
	for (int b = p->lru_head; b >= 0 && cached <= p->nblocks; b = p->lru_next[b])
		cached++;
	if (held) {
		snprintf(why, n, "%d of %d blocks still referenced with no "
			 "sequence running (leaked)", held, p->nblocks);
		return -1;
	}
	if (cached != p->ncached || keyed != cached) {
		snprintf(why, n, "the cached-prefix list holds %d blocks, counted "
			 "%d, keyed %d", cached, p->ncached, keyed);
		return -1;
	}
	if (p->nfree + p->ncached != p->nblocks) {
		snprintf(why, n, "%d free + %d cached blocks of %d: %d lost",
			 p->nfree, p->ncached, p->nblocks,
			 p->nblocks - p->nfree - p->ncached);
		return -1;
	}
	snprintf(why, n, "all %d blocks back: %d free, %d cached prefix blocks, "
		 "every reference count 0", p->nblocks, p->nfree, p->ncached);
	return 0;
}
