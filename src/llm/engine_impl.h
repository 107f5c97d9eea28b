/* The LLM engine's internals (include/tandem/engine.h): the paged KV pool with its prefix
 * cache (engine_kv.c), the graph edit for paged attention (engine_edit.c), and the requests
 * and scheduler (engine.c). Internal to src/llm. */
#ifndef TDM_LLM_ENGINE_IMPL_H
#define TDM_LLM_ENGINE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "llm/llm_folder.h"
#include "tandem/tandem.h"

/* ---- KV block pool (engine_kv.c) ----
 *
 * Blocks are numbers 0 .. n_blocks-1 (the memory is the engine's per-layer tensors
 * [n_blocks, kv_heads, block_size, head_dim]). A block is free (on the free list), held
 * (ref > 0: by that many sequences' block tables) or cached only (ref 0 but registered in the
 * prefix cache: on the LRU list, reused by a later request with the same prompt prefix, or
 * evicted, oldest first, when the free list is empty).
 *
 * Prefix cache: a full block of a prompt is registered under the hash of the chain of the
 * prompt's blocks up to it (the previous block's hash and this block's tokens); a lookup
 * compares the tokens and the previous hash too, so a hash collision never shares a wrong
 * block. Registered blocks are also chained by their previous block's hash and their first
 * token, so that a prompt whose next tokens are only the first part of some cached block's can
 * find it (its rows are copied, not shared: tdm_kv_lookup_partial); a sequence's last block,
 * partly filled, joins that chain only (tdm_kv_register_partial) when the sequence lets it go. */
typedef struct tdm_kv_pool {
    const tdm_allocator *a;
    int32_t n_blocks, block_size;
    int32_t *ref;          /* n_blocks: sequences holding the block */
    int32_t *free_list;    /* stack of free blocks */
    int32_t n_free;
    /* prefix cache */
    bool *cached;          /* n_blocks: registered */
    uint64_t *hash;        /* n_blocks: the chain hash it is registered under */
    uint64_t *parent;      /* n_blocks: the previous block's chain hash (0 for the first) */
    int32_t *tokens;       /* n_blocks * block_size: its tokens */
    int32_t *valid;        /* n_blocks: how many of them (block_size, or fewer: partial) */
    int32_t *bucket;       /* n_buckets: first block of the chain of that bucket, -1 = none */
    int32_t *next_in_bucket;
    int32_t *pbucket;      /* n_buckets: the same, chained by the previous block's hash and
                              the block's first token */
    int32_t *next_in_pbucket;
    uint32_t n_buckets;    /* a power of two */
    int32_t *lru_prev, *lru_next; /* cached-only blocks, oldest at lru_head */
    int32_t lru_head, lru_tail;
    int32_t n_cached_only;
} tdm_kv_pool;

tdm_status *tdm_kv_pool_init(tdm_kv_pool *p, const tdm_allocator *a, int32_t n_blocks,
                             int32_t block_size);
void tdm_kv_pool_free(tdm_kv_pool *p);
/* A block for a sequence (ref 1): a free one, else the least recently used cached-only one
 * (dropped from the cache); -1 when every block is held. */
int32_t tdm_kv_alloc(tdm_kv_pool *p);
/* A sequence lets go of block b. */
void tdm_kv_release(tdm_kv_pool *p, int32_t b);
/* The chain hash of a block of `tokens` (block_size of them) after `parent`. */
uint64_t tdm_kv_chain_hash(uint64_t parent, const int32_t *tokens, int32_t n);
/* The cached block registered under `hash` with `parent` and `tokens`, taken by a sequence
 * (ref + 1), or -1. */
int32_t tdm_kv_lookup(tdm_kv_pool *p, uint64_t hash, uint64_t parent, const int32_t *tokens);
/* Another hold on block b (held, or cached only: it leaves the LRU list until released). */
void tdm_kv_hold(tdm_kv_pool *p, int32_t b);
/* Block b, registered and held once (by the caller alone), leaves the cache and stays the
 * caller's to write; false (nothing done) when anyone else holds it or it is not registered. */
bool tdm_kv_take(tdm_kv_pool *p, int32_t b);
/* The registered block after `parent` whose first tokens match the most of tokens[0, n)
 * (*matched of them, at least one; -1 and 0 when none), not taken: hold it before allocating,
 * which may evict it. */
int32_t tdm_kv_lookup_partial(const tdm_kv_pool *p, uint64_t parent, const int32_t *tokens,
                              int32_t n, int32_t *matched);
/* Registers held block b (full, its tokens computed) under `hash`, unless some block is
 * registered under it already or b is. */
void tdm_kv_register(tdm_kv_pool *p, int32_t b, uint64_t hash, uint64_t parent,
                     const int32_t *tokens);
/* Registers held block b, partly filled (its first n < block_size tokens computed), in the
 * chain of `parent` only (no lookup by hash finds it), unless a registered block after `parent`
 * already holds those n tokens. */
void tdm_kv_register_partial(tdm_kv_pool *p, int32_t b, uint64_t parent, const int32_t *tokens,
                             int32_t n);
static inline int32_t tdm_kv_used(const tdm_kv_pool *p) { return p->n_blocks - p->n_free; }
/* Blocks a new sequence could get now (free and cached only). */
static inline int32_t tdm_kv_available(const tdm_kv_pool *p) {
    return p->n_free + p->n_cached_only;
}

/* ---- the graph edit (engine_edit.c) ---- */

/* Names of the inputs the edit adds (the caches' with one %d for the layer). */
#define TDM_ENGINE_CU_SEQLENS "cumulative_sequence_length"
#define TDM_ENGINE_PAST_SEQLENS "past_seqlens"
#define TDM_ENGINE_BLOCK_TABLE "block_table"
#define TDM_ENGINE_LOGITS_ROWS "logits_rows"
#define TDM_ENGINE_KEY_CACHE "kv_cache.%d.key"
#define TDM_ENGINE_VALUE_CACHE "kv_cache.%d.value"
#define TDM_ENGINE_KEY_CACHE_OUT "kv_cache_out.%d.key"
#define TDM_ENGINE_VALUE_CACHE_OUT "kv_cache_out.%d.value"

typedef struct tdm_engine_edit {
    const tdm_llm_folder *f; /* in */
    int64_t n_blocks;        /* in: the caches' first dim */
    int block_size;          /* in */
    tdm_dtype want_dtype;    /* in: the caches' element type, TDM_UNDEFINED = the model's */
    /* out: what the model is */
    int n_layers, num_heads, kv_heads, head_dim;
    tdm_dtype kv_dtype, ids_dtype, pos_dtype; /* kv_dtype: the model's past_key_values' */
    tdm_dtype cache_dtype;   /* the caches' (want_dtype, or kv_dtype) */
    int64_t cache_row;       /* the caches' last dim: head_dim values, or the bytes of tandem's
                                8-bit (int8) / 4-bit (uint8) rows (ops/kv_int8.h) */
    bool has_pos;            /* a position_ids input (packed [1, tokens]) */
    int64_t vocab;           /* from the logits' last dim; <= 0 if not known */
} tdm_engine_edit;

/* The edit (tdm_graph_edit_fn, user = tdm_engine_edit): every GroupQueryAttention becomes a
 * PagedAttention on the paged caches, the attention mask and its subgraph go, the lm head
 * gets only the logits_rows rows. */
tdm_status *tdm_engine_edit_graph(tdm_graph *g, void *user);
/* Layer names for the caches (the edit's). */
void tdm_engine_cache_name(char *dst, int layer, int value, bool out);

#endif
