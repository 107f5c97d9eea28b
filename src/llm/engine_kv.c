/* The engine's KV block pool and prefix cache (engine_impl.h). */
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "llm/engine_impl.h"

tdm_status *tdm_kv_pool_init(tdm_kv_pool *p, const tdm_allocator *a, int32_t n_blocks,
                             int32_t block_size) {
    memset(p, 0, sizeof *p);
    p->a = a;
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    uint32_t nb = 16;
    while (nb < (uint32_t)n_blocks * 2u && nb < (1u << 30)) nb <<= 1;
    p->n_buckets = nb;
    size_t n = (size_t)n_blocks;
    p->ref = tdm_calloc(a, n, sizeof *p->ref);
    p->free_list = tdm_calloc(a, n, sizeof *p->free_list);
    p->cached = tdm_calloc(a, n, sizeof *p->cached);
    p->hash = tdm_calloc(a, n, sizeof *p->hash);
    p->parent = tdm_calloc(a, n, sizeof *p->parent);
    p->tokens = tdm_calloc(a, n * (size_t)block_size, sizeof *p->tokens);
    p->valid = tdm_calloc(a, n, sizeof *p->valid);
    p->bucket = tdm_calloc(a, nb, sizeof *p->bucket);
    p->next_in_bucket = tdm_calloc(a, n, sizeof *p->next_in_bucket);
    p->pbucket = tdm_calloc(a, nb, sizeof *p->pbucket);
    p->next_in_pbucket = tdm_calloc(a, n, sizeof *p->next_in_pbucket);
    p->lru_prev = tdm_calloc(a, n, sizeof *p->lru_prev);
    p->lru_next = tdm_calloc(a, n, sizeof *p->lru_next);
    if (!p->ref || !p->free_list || !p->cached || !p->hash || !p->parent || !p->tokens || !p->valid ||
        !p->bucket || !p->next_in_bucket || !p->pbucket || !p->next_in_pbucket || !p->lru_prev ||
        !p->lru_next) {
        tdm_kv_pool_free(p);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the KV block table");
    }
    for (uint32_t i = 0; i < nb; i++) p->bucket[i] = p->pbucket[i] = -1;
    /* block 0 is taken first */
    for (int32_t i = 0; i < n_blocks; i++) p->free_list[i] = n_blocks - 1 - i;
    p->n_free = n_blocks;
    p->lru_head = p->lru_tail = -1;
    return NULL;
}

void tdm_kv_pool_free(tdm_kv_pool *p) {
    if (!p) return;
    const tdm_allocator *a = p->a;
    tdm_free(a, p->ref);
    tdm_free(a, p->free_list);
    tdm_free(a, p->cached);
    tdm_free(a, p->hash);
    tdm_free(a, p->parent);
    tdm_free(a, p->tokens);
    tdm_free(a, p->valid);
    tdm_free(a, p->bucket);
    tdm_free(a, p->next_in_bucket);
    tdm_free(a, p->pbucket);
    tdm_free(a, p->next_in_pbucket);
    tdm_free(a, p->lru_prev);
    tdm_free(a, p->lru_next);
    memset(p, 0, sizeof *p);
}

static void lru_unlink(tdm_kv_pool *p, int32_t b) {
    int32_t pr = p->lru_prev[b], nx = p->lru_next[b];
    if (pr >= 0) p->lru_next[pr] = nx;
    else p->lru_head = nx;
    if (nx >= 0) p->lru_prev[nx] = pr;
    else p->lru_tail = pr;
    p->lru_prev[b] = p->lru_next[b] = -1;
    p->n_cached_only--;
}

static void lru_push(tdm_kv_pool *p, int32_t b) { /* most recent at the tail */
    p->lru_prev[b] = p->lru_tail;
    p->lru_next[b] = -1;
    if (p->lru_tail >= 0) p->lru_next[p->lru_tail] = b;
    else p->lru_head = b;
    p->lru_tail = b;
    p->n_cached_only++;
}

/* The bucket of the parent chains: the previous block's hash and the block's first token, so
 * that a lookup scans only the blocks that could match at least one token (a system prompt's
 * many continuations, or every first block of every prompt, share a parent). */
static uint32_t pkey(const tdm_kv_pool *p, uint64_t parent, int32_t first) {
    uint64_t h = (parent ^ (uint64_t)(uint32_t)first) * 0x9e3779b97f4a7c15ull;
    return (uint32_t)(h >> 32) & (p->n_buckets - 1);
}

/* Unlinks b from the chain that starts at *link (next: the chain's links). */
static void unlink_from(int32_t *link, int32_t *next, int32_t b) {
    while (*link >= 0 && *link != b) link = &next[*link];
    if (*link == b) *link = next[b];
}

static void unregister(tdm_kv_pool *p, int32_t b) {
    unlink_from(&p->bucket[(uint32_t)p->hash[b] & (p->n_buckets - 1)], p->next_in_bucket, b);
    unlink_from(&p->pbucket[pkey(p, p->parent[b], p->tokens[(size_t)b * (size_t)p->block_size])],
                p->next_in_pbucket, b);
    p->cached[b] = false;
}

int32_t tdm_kv_alloc(tdm_kv_pool *p) {
    int32_t b = -1;
    if (p->n_free > 0) {
        b = p->free_list[--p->n_free];
    } else if (p->lru_head >= 0) {
        b = p->lru_head;
        lru_unlink(p, b);
        unregister(p, b);
    } else {
        return -1;
    }
    p->ref[b] = 1;
    return b;
}

void tdm_kv_release(tdm_kv_pool *p, int32_t b) {
    if (b < 0 || b >= p->n_blocks || p->ref[b] <= 0) return;
    if (--p->ref[b] > 0) return;
    if (p->cached[b]) lru_push(p, b);
    else p->free_list[p->n_free++] = b;
}

uint64_t tdm_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = 0xcbf29ce484222325ull ^ (parent * 0x9e3779b97f4a7c15ull); /* FNV-1a over ids */
    for (int32_t i = 0; i < n; i++) {
        uint32_t t = (uint32_t)tokens[i];
        for (int k = 0; k < 4; k++) {
            h ^= (t >> (8 * k)) & 0xffu;
            h *= 0x100000001b3ull;
        }
    }
    return h ? h : 1;
}

int32_t tdm_kv_lookup(tdm_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens) {
    uint32_t k = (uint32_t)hash & (p->n_buckets - 1);
    for (int32_t b = p->bucket[k]; b >= 0; b = p->next_in_bucket[b]) {
        if (p->hash[b] != hash || p->parent[b] != parent ||
            memcmp(p->tokens + (size_t)b * (size_t)p->block_size, tokens,
                   (size_t)p->block_size * sizeof *tokens) != 0)
            continue;
        tdm_kv_hold(p, b);
        return b;
    }
    return -1;
}

void tdm_kv_hold(tdm_kv_pool *p, int32_t b) {
    if (p->ref[b] == 0 && p->cached[b]) lru_unlink(p, b);
    p->ref[b]++;
}

bool tdm_kv_take(tdm_kv_pool *p, int32_t b) {
    if (b < 0 || b >= p->n_blocks || p->ref[b] != 1 || !p->cached[b]) return false;
    unregister(p, b);
    return true;
}

int32_t tdm_kv_lookup_partial(const tdm_kv_pool *p, uint64_t parent, const int32_t *tokens,
                              int32_t n, int32_t *matched) {
    int32_t best = -1;
    *matched = 0;
    if (n <= 0) return -1;
    for (int32_t b = p->pbucket[pkey(p, parent, tokens[0])]; b >= 0; b = p->next_in_pbucket[b]) {
        if (p->parent[b] != parent) continue;
        const int32_t *t = p->tokens + (size_t)b * (size_t)p->block_size;
        int32_t m = 0;
        while (m < n && m < p->valid[b] && t[m] == tokens[m]) m++;
        if (m > *matched) {
            *matched = m;
            best = b;
        }
    }
    return best;
}

/* b joins the cache: its tokens (n valid), its hashes, and the chain of its parent (the
 * caller links full blocks into the chain of their own hash). */
static void enter(tdm_kv_pool *p, int32_t b, uint64_t hash, uint64_t parent, const int32_t *tokens,
                  int32_t n) {
    p->cached[b] = true;
    p->hash[b] = hash;
    p->parent[b] = parent;
    p->valid[b] = n;
    memcpy(p->tokens + (size_t)b * (size_t)p->block_size, tokens, (size_t)n * sizeof *tokens);
    uint32_t pk = pkey(p, parent, tokens[0]);
    p->next_in_pbucket[b] = p->pbucket[pk];
    p->pbucket[pk] = b;
}

void tdm_kv_register(tdm_kv_pool *p, int32_t b, uint64_t hash, uint64_t parent,
                     const int32_t *tokens) {
    if (b < 0 || b >= p->n_blocks || p->cached[b] || p->ref[b] <= 0) return;
    uint32_t k = (uint32_t)hash & (p->n_buckets - 1);
    for (int32_t o = p->bucket[k]; o >= 0; o = p->next_in_bucket[o])
        if (p->hash[o] == hash) return; /* the first one stays */
    p->next_in_bucket[b] = p->bucket[k];
    p->bucket[k] = b;
    enter(p, b, hash, parent, tokens, p->block_size);
}

void tdm_kv_register_partial(tdm_kv_pool *p, int32_t b, uint64_t parent, const int32_t *tokens,
                             int32_t n) {
    if (b < 0 || b >= p->n_blocks || p->cached[b] || p->ref[b] <= 0 || n <= 0 ||
        n >= p->block_size)
        return;
    int32_t held = 0;
    if (tdm_kv_lookup_partial(p, parent, tokens, n, &held) >= 0 && held == n) return;
    enter(p, b, 0, parent, tokens, n);
}
