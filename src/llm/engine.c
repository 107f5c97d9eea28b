/* The LLM engine (include/tandem/engine.h): requests, the scheduler and the engine thread.
 *
 * Every request is a sequence of tokens (its prompt, then what it generated) of which the
 * first n_computed have their keys and values in the pool. A step feeds each scheduled
 * sequence its tokens [n_computed, n_computed + chunk): 1 for a decoding sequence, a chunk of
 * the prompt for a prefilling one (and all of prompt + generated for one preempted before).
 * A sequence whose chunk reaches its last token gets that row's logits and a new token.
 *
 * A step: cancelled requests end; the running sequences (oldest first) get their tokens,
 * then waiting requests join (front first) while there is room (max_batch, max_step_tokens,
 * blocks). A running sequence that needs a block when none is left preempts the newest
 * running one (its blocks freed; it goes back to the front of the queue and later prefills
 * its whole sequence again). One session run for the whole batch (engine_edit.c), sampling
 * per sequence, then the step's events are delivered, after the stats are published (so a
 * caller that sees a request's end sees stats that count it ended).
 *
 * Threading: the engine thread owns the requests, the queue and the pool; submit and cancel
 * only post to an inbox under the mutex and signal the thread, which sleeps on the condition
 * variable while there is nothing to do. Events are delivered without the mutex held, so a
 * callback may cancel. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "api/api_impl.h"
#include "llm/engine_impl.h"
#include "llm/llm_folder.h"
#include "llm/llm_graph.h"
#include "llm/llm_internal.h"
#include "llm/sampler.h"
#include "tandem/engine.h"

#define MAX_TOP 20

typedef struct eng_req {
    uint64_t id;
    tdm_llm_event_fn fn;
    void *user;
    tdm_sampling sampling;
    float presence, frequency; /* tdm_llm_request_params' penalties */
    int32_t *bias_ids;         /* its logit_bias (owned), n_bias pairs */
    float *bias_values;
    size_t n_bias;
    tdm_sampler smp;
    bool smp_ready;
    int max_tokens, top_logprobs;
    bool logprobs; /* the token's log-probability asked (or top_logprobs > 0) */
    bool ignore_eos;
    int32_t *stop;
    size_t n_stop;
    int32_t *tokens;            /* max_length: prompt, then generated */
    size_t n_prompt, n_tokens, n_computed;
    int32_t *blocks;            /* the block table: max_blocks entries */
    int n_blocks;
    int n_hashed;               /* blocks whose chain hash is known (matched or registered) */
    uint64_t last_hash;         /* of block n_hashed - 1 (0 before the first) */
    int64_t cached_tokens;
    bool admitted;              /* once (its prompt counted, its prefix hit taken) */
    bool cancelled;
    struct eng_req *prev, *next; /* the waiting queue or the inbox */
} eng_req;

typedef struct eng_event {
    tdm_llm_event ev;
    tdm_llm_logprob top[MAX_TOP];
    eng_req *req;               /* delivered to its fn; freed after when the event ends it */
    tdm_status *status;         /* FINISH_ERROR: freed after delivery */
} eng_event;

typedef struct eng_pick { /* a sequence's sampled token (sample_range) */
    int32_t token;
    float logprob;
    tdm_llm_logprob top[MAX_TOP];
} eng_pick;

typedef struct eng_list {
    eng_req *head, *tail;
    int n;
} eng_list;

struct tdm_llm_engine {
    tdm_env *env;
    tdm_exp_row_fn exp_row; /* the CPU device's level's (sampling, log-probabilities) */
    tdm_max_row_fn max_row; /* likewise */
    tdm_near_row_fn near_row; /* likewise (top-p) */
    const tdm_allocator *a;
    tdm_llm_folder f;
    tdm_engine_edit ed;
    tdm_session *s;
    tdm_io_binding *bind;
    int max_length, max_batch, max_step_tokens, block_size, max_blocks;
    bool no_prefix_cache, no_batching;
    size_t vocab;
    int32_t eos[TDM_LLM_MAX_EOS];
    size_t n_eos;
    tdm_kv_pool pool;
    tdm_tensor **cache;         /* [layer * 2 + k/v] [n_blocks, kv_heads, block_size, cache_row] */
    /* the step's inputs, sized for max_step_tokens / max_batch at creation */
    void *ids_buf, *pos_buf;
    int32_t *cu_buf, *past_buf, *table_buf;
    int64_t *rows_buf;
    float *logits_buf;          /* max_batch * vocab */
    tdm_tensor ids_t, pos_t, cu_t, past_t, table_t, rows_t, logits_t;
    /* the step's plan */
    eng_req **sched;            /* max_batch */
    int *sched_n;               /* tokens fed */
    int *sched_row;             /* logits row, -1 = none */
    eng_pick *picks;            /* max_batch: what sampling chose */
    int n_sched;
    /* engine-thread state */
    eng_req **running;          /* max_batch, oldest first */
    int n_running;
    eng_list waiting;
    eng_event *evs;
    size_t n_evs, cap_evs;
    int64_t prompt_total, gen_total, hit_total, preempt_total, steps_total;
    /* shared with the callers (mutex) */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool thread_started, mutex_ready, stop;
    eng_list inbox;
    uint64_t *cancel_ids;
    size_t n_cancel, cap_cancel;
    uint64_t next_id;
    int64_t requests_total;
    tdm_llm_engine_stats published;
};

/* ---- lists ---- */

static void list_push_back(eng_list *l, eng_req *r) {
    r->next = NULL;
    r->prev = l->tail;
    if (l->tail) l->tail->next = r;
    else l->head = r;
    l->tail = r;
    l->n++;
}

static void list_push_front(eng_list *l, eng_req *r) {
    r->prev = NULL;
    r->next = l->head;
    if (l->head) l->head->prev = r;
    else l->tail = r;
    l->head = r;
    l->n++;
}

static void list_remove(eng_list *l, eng_req *r) {
    if (r->prev) r->prev->next = r->next;
    else l->head = r->next;
    if (r->next) r->next->prev = r->prev;
    else l->tail = r->prev;
    r->prev = r->next = NULL;
    l->n--;
}

static void req_free(tdm_llm_engine *e, eng_req *r) {
    if (!r) return;
    if (r->smp_ready) tdm_sampler_free(&r->smp);
    tdm_free(e->a, r->tokens);
    tdm_free(e->a, r->blocks);
    tdm_free(e->a, r->stop);
    tdm_free(e->a, r->bias_ids);
    tdm_free(e->a, r->bias_values);
    tdm_free(e->a, r);
}

/* ---- blocks ---- */

/* Bytes of one block of the pool: every layer's key and value rows of block_size tokens. */
static size_t block_bytes(const tdm_engine_edit *ed) {
    return (size_t)ed->n_layers * 2 * (size_t)ed->block_size * (size_t)ed->kv_heads *
           (size_t)ed->cache_row * tdm_dtype_size(ed->cache_dtype);
}

/* r lets its blocks go; its last one, partly filled, stays in the prefix cache for a later
 * prompt that begins as r's tokens do (match_prefix copies its rows): a request sent again, or
 * a conversation whose next turn begins with this one's answer. */
static void release_blocks(tdm_llm_engine *e, eng_req *r) {
    size_t bs = (size_t)e->block_size, last = r->n_computed / bs, n = r->n_computed % bs;
    if (!e->no_prefix_cache && n > 0 && last < (size_t)r->n_blocks && (size_t)r->n_hashed == last)
        tdm_kv_register_partial(&e->pool, r->blocks[last], r->last_hash, r->tokens + last * bs,
                                (int32_t)n);
    for (int i = 0; i < r->n_blocks; i++) tdm_kv_release(&e->pool, r->blocks[i]);
    r->n_blocks = 0;
    r->n_computed = 0;
    r->n_hashed = 0;
    r->last_hash = 0;
}

/* Blocks for r's first `tokens` positions; false when the pool has none left (r keeps the
 * blocks it got). */
static bool ensure_blocks(tdm_llm_engine *e, eng_req *r, size_t tokens) {
    int need = (int)((tokens + (size_t)e->block_size - 1) / (size_t)e->block_size);
    while (r->n_blocks < need) {
        int32_t b = tdm_kv_alloc(&e->pool);
        if (b < 0) return false;
        r->blocks[r->n_blocks++] = b;
    }
    return true;
}

/* The first `rows` positions of block `from` copied into block `to`: every layer's key and
 * value rows of every kv head ([n_blocks, kv_heads, block_size, cache_row] in host memory). */
static void copy_rows(tdm_llm_engine *e, int32_t from, int32_t to, size_t rows) {
    size_t rb = (size_t)e->ed.cache_row * tdm_dtype_size(e->ed.cache_dtype);
    size_t head = (size_t)e->block_size * rb, kvh = (size_t)e->ed.kv_heads;
    for (int i = 0; i < e->ed.n_layers * 2; i++) {
        char *c = e->cache[i]->data;
        for (size_t h = 0; h < kvh; h++)
            memcpy(c + ((size_t)to * kvh + h) * head, c + ((size_t)from * kvh + h) * head, rows * rb);
    }
}

/* Tokens [base, base + lim) of r that running sequence o has computed at the same positions
 * after the same tokens [0, base): how many of them lead, and o's block holding them. */
static size_t live_match(const tdm_llm_engine *e, const eng_req *r, const eng_req *o, size_t base,
                         size_t lim, int32_t *block) {
    size_t bs = (size_t)e->block_size, m = base / bs;
    if ((size_t)o->n_blocks <= m || o->n_computed <= base ||
        memcmp(o->tokens, r->tokens, base * sizeof *r->tokens) != 0)
        return 0;
    size_t have = o->n_computed - base < lim ? o->n_computed - base : lim, n = 0;
    while (n < have && o->tokens[base + n] == r->tokens[base + n]) n++;
    *block = o->blocks[m];
    return n;
}

/* A new sequence (no blocks) takes the cached blocks of its prompt's prefix; never the block
 * of its last token, which must be computed to give logits. Then, as llama.cpp's server reuses
 * a slot's common prefix token by token, the leading tokens of its next block that some block
 * holds computed (a registered block after the same prefix, or a running sequence's block,
 * partly filled) have their rows copied into a block of its own: the rows it would compute
 * (the same values, to the batch's rounding), so that an identical prompt, or one that
 * leaves a shared system prompt inside a block, computes from where the two part, not from
 * the block's start (bench/llm/serve's concurrent requests of one prompt: 1 token each
 * instead of 15). */
static void match_prefix(tdm_llm_engine *e, eng_req *r) {
    if (e->no_prefix_cache || r->n_blocks > 0) return;
    size_t bs = (size_t)e->block_size;
    while ((size_t)(r->n_blocks + 1) * bs <= r->n_tokens - 1) {
        const int32_t *t = r->tokens + (size_t)r->n_blocks * bs;
        uint64_t h = tdm_kv_chain_hash(r->last_hash, t, e->block_size);
        int32_t b = tdm_kv_lookup(&e->pool, h, r->last_hash, t);
        if (b < 0) break;
        r->blocks[r->n_blocks++] = b;
        r->n_hashed++;
        r->last_hash = h;
        r->n_computed += bs;
    }
    size_t base = r->n_computed, left = r->n_tokens - 1 - base; /* the last token is fed */
    size_t lim = left < bs ? left : bs;
    if (lim == 0) return;
    int32_t got = 0;
    int32_t from = tdm_kv_lookup_partial(&e->pool, r->last_hash, r->tokens + base, (int32_t)lim, &got);
    size_t best = (size_t)got;
    for (int i = 0; i < e->n_running && best < lim; i++) {
        int32_t b = -1;
        size_t n = live_match(e, r, e->running[i], base, lim, &b);
        if (n > best) best = n, from = b;
    }
    if (best == 0) return;
    tdm_kv_hold(&e->pool, from); /* a cached-only block must not be the one allocated */
    int32_t to = tdm_kv_alloc(&e->pool);
    if (to >= 0) {
        copy_rows(e, from, to, best);
        tdm_kv_release(&e->pool, from);
    } else if (tdm_kv_take(&e->pool, from)) {
        to = from; /* no other block: the donor was only cached, so r takes it (and the hold), its
                      rows where they are (those past `best` are r's to overwrite) */
    } else {
        tdm_kv_release(&e->pool, from);
        return;
    }
    r->blocks[r->n_blocks++] = to;
    r->n_computed += best;
}

/* After a step: r's full blocks whose tokens are computed join the prefix cache, those of
 * generated tokens too, so that a conversation's next turn (its prompt: this one's prompt and
 * answer, then more) finds the answer's blocks, as vLLM's automatic prefix caching and
 * llama.cpp's slot cache do. Decoded tokens' keys and values match what a prompt chunk
 * computes for them to the tests' tolerance, not necessarily to the bit (test_llm_engine's
 * test_prefix_cache_generated: a follow-up turn gives the generator's tokens for its whole
 * prompt, top log-probabilities within 1.3e-5 of it with float activations, as every other
 * request). */
static void register_prefix(tdm_llm_engine *e, eng_req *r) {
    if (e->no_prefix_cache) return;
    size_t bs = (size_t)e->block_size;
    while (r->n_hashed < r->n_blocks && (size_t)(r->n_hashed + 1) * bs <= r->n_computed) {
        const int32_t *t = r->tokens + (size_t)r->n_hashed * bs;
        uint64_t h = tdm_kv_chain_hash(r->last_hash, t, e->block_size);
        tdm_kv_register(&e->pool, r->blocks[r->n_hashed], h, r->last_hash, t);
        r->last_hash = h;
        r->n_hashed++;
    }
}

/* ---- events ---- */

static eng_event *new_event(tdm_llm_engine *e, eng_req *r) {
    if (tdm_grow(e->a, (void **)&e->evs, &e->cap_evs, e->n_evs + 1, sizeof *e->evs))
        return NULL;
    eng_event *v = &e->evs[e->n_evs++];
    memset(v, 0, sizeof *v);
    v->req = r;
    v->ev.request = r->id;
    return v;
}

/* Ends r: its blocks go back, it leaves the running set or the queue (`where`), and its end
 * event is queued (r is freed once it is delivered). */
enum { IN_NONE, IN_RUNNING, IN_WAITING };

static void finish(tdm_llm_engine *e, eng_req *r, int where, tdm_llm_finish why, tdm_status *st) {
    release_blocks(e, r);
    if (where == IN_RUNNING) {
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i] == r) {
                memmove(&e->running[i], &e->running[i + 1],
                        (size_t)(e->n_running - i - 1) * sizeof *e->running);
                e->n_running--;
                break;
            }
    } else if (where == IN_WAITING) {
        list_remove(&e->waiting, r);
    }
    eng_event *v = new_event(e, r);
    if (!v) { /* out of memory for the event: the caller still gets an end, right now */
        tdm_llm_event ev = {.request = r->id, .token = -1, .finish = why, .status = st,
                            .prompt_tokens = (int64_t)r->n_prompt,
                            .generated_tokens = (int64_t)(r->n_tokens - r->n_prompt),
                            .cached_tokens = r->cached_tokens};
        r->fn(r->user, &ev);
        tdm_status_free(st);
        req_free(e, r);
        return;
    }
    v->ev.token = -1;
    v->ev.finish = why;
    v->status = st;
    v->ev.prompt_tokens = (int64_t)r->n_prompt;
    v->ev.generated_tokens = (int64_t)(r->n_tokens - r->n_prompt);
    v->ev.cached_tokens = r->cached_tokens;
}

static void publish(tdm_llm_engine *e) {
    tdm_llm_engine_stats s;
    memset(&s, 0, sizeof s);
    s.running = e->n_running;
    s.waiting = e->waiting.n;
    s.kv_blocks_total = e->pool.n_blocks;
    s.kv_blocks_used = tdm_kv_used(&e->pool);
    s.kv_blocks_cached = e->pool.n_cached_only;
    s.block_size = e->block_size;
    s.max_length = e->max_length;
    s.prompt_tokens_total = e->prompt_total;
    s.generated_tokens_total = e->gen_total;
    s.prefix_hit_tokens_total = e->hit_total;
    s.preemptions_total = e->preempt_total;
    s.steps_total = e->steps_total;
    pthread_mutex_lock(&e->mu);
    e->published = s;
    pthread_mutex_unlock(&e->mu);
}

/* Delivers the queued events (no lock held) and frees the requests they end. */
static void deliver(tdm_llm_engine *e) {
    for (size_t i = 0; i < e->n_evs; i++) {
        eng_event *v = &e->evs[i];
        v->ev.top = v->ev.n_top ? v->top : NULL;
        v->ev.status = v->status;
        v->req->fn(v->req->user, &v->ev);
        if (v->ev.finish != TDM_LLM_FINISH_NONE) {
            tdm_status_free(v->status);
            req_free(e, v->req);
        }
    }
    e->n_evs = 0;
}

/* ---- scheduling ---- */

static void preempt(tdm_llm_engine *e, int index) {
    eng_req *r = e->running[index];
    release_blocks(e, r);
    memmove(&e->running[index], &e->running[index + 1],
            (size_t)(e->n_running - index - 1) * sizeof *e->running);
    e->n_running--;
    list_push_front(&e->waiting, r);
    e->preempt_total++;
}

static void schedule(tdm_llm_engine *e, eng_req *r, int n) {
    e->sched[e->n_sched] = r;
    e->sched_n[e->n_sched] = n;
    e->n_sched++;
}

static tdm_status *pool_limit(const tdm_llm_engine *e, const eng_req *r) {
    return TDM_ERR(TDM_ERR_LIMIT, "the KV pool (%d blocks of %d tokens) cannot hold the "
                   "sequence's %zu tokens", e->pool.n_blocks, e->block_size, r->n_tokens);
}

/* Plans one step: e->sched. */
static void plan(tdm_llm_engine *e) {
    int budget = e->max_step_tokens;
    bool preempted = false;
    e->n_sched = 0;
    /* the running sequences first, oldest first */
    for (int i = 0; i < e->n_running && budget > 0; i++) {
        eng_req *r = e->running[i];
        size_t need = r->n_tokens - r->n_computed;
        int n = need < (size_t)budget ? (int)need : budget;
        if (n <= 0) continue;
        bool ok = ensure_blocks(e, r, r->n_computed + (size_t)n);
        while (!ok && e->n_running - 1 > i) {
            preempt(e, e->n_running - 1); /* the newest */
            preempted = true;
            ok = ensure_blocks(e, r, r->n_computed + (size_t)n);
        }
        if (!ok) {
            if (i == 0) /* alone with the pool: it can never fit */
                finish(e, r, IN_RUNNING, TDM_LLM_FINISH_ERROR, pool_limit(e, r));
            else
                preempt(e, i);
            return; /* the ones after it were preempted: no room for new ones either */
        }
        schedule(e, r, n);
        budget -= n;
    }
    /* then waiting requests join (not in a step that had to preempt) */
    if (preempted) return;
    int cap = e->no_batching ? 1 : e->max_batch;
    while (e->waiting.head && budget > 0 && e->n_running < cap && e->n_sched < e->max_batch) {
        eng_req *r = e->waiting.head;
        match_prefix(e, r);
        size_t need = r->n_tokens - r->n_computed;
        int n = need < (size_t)budget ? (int)need : budget;
        if (!ensure_blocks(e, r, r->n_computed + (size_t)n)) {
            release_blocks(e, r);
            if (e->n_running == 0 && e->n_sched == 0)
                finish(e, r, IN_WAITING, TDM_LLM_FINISH_ERROR, pool_limit(e, r));
            break; /* it waits for blocks (the front keeps its place) */
        }
        if (!r->smp_ready) {
            tdm_status *st = tdm_sampler_init(&r->smp, e->a, e->vocab, &r->sampling);
            if (!st) st = tdm_sampler_set_penalties(&r->smp, r->presence, r->frequency);
            if (!st) tdm_sampler_set_bias(&r->smp, r->bias_ids, r->bias_values, r->n_bias);
            if (!st) {
                tdm_sampler_set_exp_row(&r->smp, e->exp_row);
                tdm_sampler_set_max_row(&r->smp, e->max_row);
                tdm_sampler_set_near_row(&r->smp, e->near_row);
            }
            if (st) {
                finish(e, r, IN_WAITING, TDM_LLM_FINISH_ERROR, st);
                continue;
            }
            r->smp_ready = true;
        }
        list_remove(&e->waiting, r);
        e->running[e->n_running++] = r;
        if (!r->admitted) {
            r->admitted = true;
            r->cached_tokens = (int64_t)r->n_computed;
            e->prompt_total += (int64_t)r->n_prompt;
            e->hit_total += (int64_t)r->n_computed;
        }
        schedule(e, r, n);
        budget -= n;
    }
}

/* ---- a step ---- */

/* Log-softmax of logits / temperature at `token`, and the k (<= MAX_TOP) most likely entries
 * (tdm_sampler_top_values); mx the logits' largest when the pick found it
 * (tdm_sampler_last_max), else NaN: found here. */
static float log_probs(const tdm_llm_engine *e, const float *lg, float mx, float temp,
                       int32_t token, int k, tdm_llm_logprob *top) {
    size_t vocab = e->vocab;
    tdm_exp_row_fn exp_row = e->exp_row;
    float inv = temp > 0 ? 1.0f / temp : 1.0f;
    if (isnan(mx)) mx = e->max_row(lg, vocab, NULL);
    float lse = mx * inv + (float)log(exp_row(lg, vocab, mx, inv, NULL));
    int32_t ids[MAX_TOP];
    float vals[MAX_TOP];
    int n = tdm_sampler_top_values(lg, vocab, k < MAX_TOP ? k : MAX_TOP, ids, vals);
    for (int j = 0; j < n; j++) top[j] = (tdm_llm_logprob){ids[j], vals[j] * inv - lse};
    return lg[token] * inv - lse;
}

static bool is_stop(const eng_req *r, int32_t t) {
    for (size_t i = 0; i < r->n_stop; i++)
        if (r->stop[i] == t) return true;
    return false;
}

/* Sequences j0..j1 of the step that got a logits row: their next token and its
 * log-probabilities into e->picks[j] (each request's own sampler: run on the session's pool,
 * one sequence per task). */
static void sample_range(void *arg, int64_t j0, int64_t j1) {
    tdm_llm_engine *e = arg;
    for (int64_t j = j0; j < j1; j++) {
        eng_req *r = e->sched[j];
        eng_pick *pk = &e->picks[j];
        int row = e->sched_row[j];
        if (row < 0) continue;
        float *lg = e->logits_buf + (size_t)row * e->vocab;
        if (r->ignore_eos)
            for (size_t i = 0; i < e->n_eos; i++)
                if (e->eos[i] >= 0 && (size_t)e->eos[i] < e->vocab) lg[e->eos[i]] = -INFINITY;
        pk->token = tdm_sampler_pick(&r->smp, lg, r->tokens, r->n_tokens, r->tokens + r->n_prompt,
                                     r->n_tokens - r->n_prompt);
        pk->logprob = NAN; /* not asked: no log-softmax over the vocabulary */
        if (r->logprobs && !is_stop(r, pk->token))
            pk->logprob = log_probs(e, lg, tdm_sampler_last_max(&r->smp), r->sampling.temperature,
                                    pk->token, r->top_logprobs, pk->top);
    }
}

/* The scheduled sequence j had its tokens fed; row >= 0: its logits row, sampled into
 * e->picks[j]. */
static void advance(tdm_llm_engine *e, int j) {
    eng_req *r = e->sched[j];
    r->n_computed += (size_t)e->sched_n[j];
    register_prefix(e, r);
    if (e->sched_row[j] < 0) return;
    const eng_pick *pk = &e->picks[j];
    int32_t t = pk->token;
    if (is_stop(r, t)) {
        finish(e, r, IN_RUNNING, TDM_LLM_FINISH_STOP, NULL);
        return;
    }
    eng_event *v = new_event(e, r);
    if (!v) {
        finish(e, r, IN_RUNNING, TDM_LLM_FINISH_ERROR,
               TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for an event"));
        return;
    }
    v->ev.token = t;
    v->ev.cached_tokens = r->cached_tokens;
    v->ev.n_top = r->top_logprobs;
    v->ev.logprob = pk->logprob;
    memcpy(v->top, pk->top, (size_t)r->top_logprobs * sizeof *v->top);
    r->tokens[r->n_tokens++] = t;
    e->gen_total++;
    size_t gen = r->n_tokens - r->n_prompt;
    if ((r->max_tokens > 0 && gen >= (size_t)r->max_tokens) ||
        r->n_tokens >= (size_t)e->max_length)
        finish(e, r, IN_RUNNING, TDM_LLM_FINISH_LENGTH, NULL);
}

/* Packs the planned batch into the step's inputs. */
static void pack(tdm_llm_engine *e, int *n_tokens, int *n_rows) {
    int T = 0, R = 0, W = e->max_blocks;
    for (int j = 0; j < e->n_sched; j++) {
        eng_req *r = e->sched[j];
        int n = e->sched_n[j];
        e->cu_buf[j] = T;
        e->past_buf[j] = (int32_t)r->n_computed;
        for (int t = 0; t < n; t++) {
            tdm_llm_put_index(e->ids_buf, e->ed.ids_dtype, (size_t)(T + t),
                              r->tokens[r->n_computed + (size_t)t]);
            if (e->ed.has_pos)
                tdm_llm_put_index(e->pos_buf, e->ed.pos_dtype, (size_t)(T + t),
                                  (int64_t)r->n_computed + t);
        }
        int32_t *row = e->table_buf + (size_t)j * (size_t)W;
        memcpy(row, r->blocks, (size_t)r->n_blocks * sizeof *row);
        memset(row + r->n_blocks, 0, (size_t)(W - r->n_blocks) * sizeof *row);
        T += n;
        if (r->n_computed + (size_t)n == r->n_tokens) {
            e->sched_row[j] = R;
            e->rows_buf[R++] = T - 1;
        } else {
            e->sched_row[j] = -1;
        }
    }
    e->cu_buf[e->n_sched] = T;
    if (R == 0) e->rows_buf[R++] = 0; /* a row nobody reads: the head never runs on none */
    *n_tokens = T;
    *n_rows = R;
}

static void step(tdm_llm_engine *e) {
    /* cancelled requests end first */
    for (int i = 0; i < e->n_running;) {
        eng_req *r = e->running[i];
        if (r->cancelled) finish(e, r, IN_RUNNING, TDM_LLM_FINISH_CANCELLED, NULL);
        else i++;
    }
    for (eng_req *r = e->waiting.head, *nx; r; r = nx) {
        nx = r->next;
        if (r->cancelled) finish(e, r, IN_WAITING, TDM_LLM_FINISH_CANCELLED, NULL);
    }
    plan(e);
    if (e->n_sched > 0) {
        int T = 0, R = 0;
        pack(e, &T, &R);
        int64_t d1[1], d2[2], d3[3];
        tdm_llm_set_view(&e->ids_t, e->ed.ids_dtype, e->ids_buf, 0, (size_t)T);
        tdm_llm_set_view(&e->pos_t, e->ed.pos_dtype, e->pos_buf, 0, (size_t)T);
        d1[0] = e->n_sched + 1;
        tdm_llm_set_view_dims(&e->cu_t, TDM_INT32, e->cu_buf, 1, d1);
        d1[0] = e->n_sched;
        tdm_llm_set_view_dims(&e->past_t, TDM_INT32, e->past_buf, 1, d1);
        d2[0] = e->n_sched;
        d2[1] = e->max_blocks;
        tdm_llm_set_view_dims(&e->table_t, TDM_INT32, e->table_buf, 2, d2);
        d1[0] = R;
        tdm_llm_set_view_dims(&e->rows_t, TDM_INT64, e->rows_buf, 1, d1);
        d3[0] = 1;
        d3[1] = R;
        d3[2] = (int64_t)e->vocab;
        tdm_llm_set_view_dims(&e->logits_t, TDM_FLOAT, e->logits_buf, 3, d3);
        tdm_status *st = tdm_session_run_bound(e->s, e->bind, NULL);
        e->steps_total++;
        if (st) {
            for (int j = 0; j < e->n_sched; j++)
                finish(e, e->sched[j], IN_RUNNING, TDM_LLM_FINISH_ERROR,
                       TDM_ERR(tdm_status_code(st), "%s", tdm_status_message(st)));
            tdm_status_free(st);
        } else {
            tdm_parallel_for(e->s->pool, e->n_sched, 1, sample_range, e);
            for (int j = 0; j < e->n_sched; j++) advance(e, j);
        }
        e->n_sched = 0;
    }
    publish(e);
    deliver(e);
}

/* Moves the inbox to the queue and marks cancellations (mutex held). */
static void take_inbox(tdm_llm_engine *e) {
    while (e->inbox.head) {
        eng_req *r = e->inbox.head;
        list_remove(&e->inbox, r);
        list_push_back(&e->waiting, r);
    }
    for (size_t c = 0; c < e->n_cancel; c++) {
        uint64_t id = e->cancel_ids[c];
        for (int i = 0; i < e->n_running; i++)
            if (e->running[i]->id == id) e->running[i]->cancelled = true;
        for (eng_req *r = e->waiting.head; r; r = r->next)
            if (r->id == id) r->cancelled = true;
    }
    e->n_cancel = 0;
}

static void *engine_main(void *arg) {
    tdm_llm_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        take_inbox(e);
        if (e->stop) break;
        if (e->n_running == 0 && e->waiting.n == 0) {
            pthread_cond_wait(&e->cv, &e->mu);
            continue;
        }
        pthread_mutex_unlock(&e->mu);
        step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    /* freed: every request ends cancelled */
    while (e->n_running > 0) finish(e, e->running[0], IN_RUNNING, TDM_LLM_FINISH_CANCELLED, NULL);
    while (e->waiting.head) finish(e, e->waiting.head, IN_WAITING, TDM_LLM_FINISH_CANCELLED, NULL);
    publish(e);
    deliver(e);
    return NULL;
}

/* ---- creation ---- */

static tdm_status *alloc_state(tdm_llm_engine *e) {
    const tdm_allocator *a = e->a;
    size_t T = (size_t)e->max_step_tokens, B = (size_t)e->max_batch;
    e->ids_buf = tdm_calloc(a, T, sizeof(int64_t));
    e->pos_buf = tdm_calloc(a, T, sizeof(int64_t));
    e->cu_buf = tdm_calloc(a, B + 1, sizeof *e->cu_buf);
    e->past_buf = tdm_calloc(a, B, sizeof *e->past_buf);
    e->table_buf = tdm_calloc(a, B * (size_t)e->max_blocks, sizeof *e->table_buf);
    e->rows_buf = tdm_calloc(a, B, sizeof *e->rows_buf);
    e->logits_buf = tdm_calloc(a, B * e->vocab, sizeof *e->logits_buf);
    e->sched = tdm_calloc(a, B, sizeof *e->sched);
    e->sched_n = tdm_calloc(a, B, sizeof *e->sched_n);
    e->sched_row = tdm_calloc(a, B, sizeof *e->sched_row);
    e->picks = tdm_calloc(a, B, sizeof *e->picks);
    e->running = tdm_calloc(a, B, sizeof *e->running);
    e->cap_evs = 2 * B + 16;
    e->evs = tdm_calloc(a, e->cap_evs, sizeof *e->evs);
    e->cache = tdm_calloc(a, (size_t)e->ed.n_layers * 2, sizeof *e->cache);
    if (!e->ids_buf || !e->pos_buf || !e->cu_buf || !e->past_buf || !e->table_buf ||
        !e->rows_buf || !e->logits_buf || !e->sched || !e->sched_n || !e->sched_row || !e->picks ||
        !e->running || !e->evs || !e->cache)
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
    TDM_TRY(tdm_kv_pool_init(&e->pool, a, (int32_t)e->ed.n_blocks, e->block_size));
    int64_t cd[4] = {e->ed.n_blocks, e->ed.kv_heads, e->block_size, e->ed.cache_row};
    TDM_TRY(tdm_io_binding_create(e->s, &e->bind));
    char name[TDM_LLM_NAME];
    for (int l = 0; l < e->ed.n_layers; l++)
        for (int k = 0; k < 2; k++) {
            tdm_tensor **c = &e->cache[l * 2 + k];
            TDM_TRY(tdm_tensor_create(e->env, e->ed.cache_dtype, 4, cd, c));
            tdm_engine_cache_name(name, l, k, false);
            TDM_TRY(tdm_io_binding_bind_input(e->bind, name, *c));
            tdm_engine_cache_name(name, l, k, true);
            TDM_TRY(tdm_io_binding_bind_output(e->bind, name, *c));
        }
    tdm_llm_set_view(&e->ids_t, e->ed.ids_dtype, e->ids_buf, 0, 0);
    tdm_llm_set_view(&e->pos_t, e->ed.pos_dtype, e->pos_buf, 0, 0);
    TDM_TRY(tdm_io_binding_bind_input(e->bind, e->f.input_ids, &e->ids_t));
    if (e->ed.has_pos) TDM_TRY(tdm_io_binding_bind_input(e->bind, e->f.position_ids, &e->pos_t));
    TDM_TRY(tdm_io_binding_bind_input(e->bind, TDM_ENGINE_CU_SEQLENS, &e->cu_t));
    TDM_TRY(tdm_io_binding_bind_input(e->bind, TDM_ENGINE_PAST_SEQLENS, &e->past_t));
    TDM_TRY(tdm_io_binding_bind_input(e->bind, TDM_ENGINE_BLOCK_TABLE, &e->table_t));
    TDM_TRY(tdm_io_binding_bind_input(e->bind, TDM_ENGINE_LOGITS_ROWS, &e->rows_t));
    TDM_TRY(tdm_io_binding_bind_output(e->bind, e->f.logits, &e->logits_t));
    return NULL;
}

static tdm_status *create(tdm_llm_engine *e, const char *dir, const tdm_llm_engine_options *o) {
    TDM_TRY(tdm_llm_parse_kv_type(o->kv_type, &e->ed.want_dtype));
    TDM_TRY(tdm_llm_folder_read(dir, &e->f));
    if (!e->f.genai)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "not an ONNX Runtime GenAI folder (no "
                       "genai_config.json): the engine pages GroupQueryAttention models only");
    e->max_length = o->max_length > 0   ? o->max_length
                    : e->f.max_length > 0 ? e->f.max_length
                                          : 2048;
    if (e->f.max_length > 0 && e->max_length > e->f.max_length) e->max_length = e->f.max_length;
    e->max_batch = o->max_batch > 0 ? o->max_batch : 16;
    e->max_step_tokens = o->max_step_tokens > 0 ? o->max_step_tokens : 512;
    e->block_size = o->block_size > 0 ? o->block_size : 16;
    e->max_blocks = (e->max_length + e->block_size - 1) / e->block_size;
    e->no_prefix_cache = o->no_prefix_cache;
    e->no_batching = o->no_batching;
    e->n_eos = (size_t)e->f.n_eos;
    memcpy(e->eos, e->f.eos, e->n_eos * sizeof *e->eos);
    /* the pool's size needs the layers' shapes: kv_bytes is turned into blocks after a first
     * look at the graph (the edit fails on purpose when n_blocks is 0, having described it) */
    e->ed.f = &e->f;
    e->ed.block_size = e->block_size;
    e->ed.n_blocks = o->kv_blocks > 0 ? o->kv_blocks
                                      : (int64_t)e->max_batch * (int64_t)e->max_blocks;
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu",
                              .threads = o->threads, .opt_level = 1, .mode = TDM_MODE_LATENCY,
                              .profile = o->profile};
    if (o->kv_blocks <= 0 && o->kv_bytes > 0) {
        /* the block's bytes from the folder's shapes: a first edit on a throwaway session */
        tdm_engine_edit probe = e->ed;
        tdm_session *s = NULL;
        tdm_status *st = tdm_session_create_edited(e->env, e->f.model_path, &so,
                                                   tdm_engine_edit_graph, &probe, &s);
        tdm_session_free(s);
        if (st) return st;
        size_t per = block_bytes(&probe);
        e->ed.n_blocks = per ? (int64_t)(o->kv_bytes / per) : 0;
    }
    if (e->ed.n_blocks < 1 || e->ed.n_blocks > INT32_MAX / 2)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the KV pool would have %lld blocks",
                       (long long)e->ed.n_blocks);
    TDM_TRY(tdm_session_create_edited(e->env, e->f.model_path, &so, tdm_engine_edit_graph, &e->ed,
                                      &e->s));
    if (e->ed.vocab <= 0)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "output '%s' has no fixed vocabulary size",
                       e->f.logits);
    e->vocab = (size_t)e->ed.vocab;
    return alloc_state(e);
}

static void engine_free_state(tdm_llm_engine *e) {
    tdm_io_binding_free(e->bind);
    for (int i = 0; e->cache && i < e->ed.n_layers * 2; i++) tdm_tensor_free(e->cache[i]);
    tdm_session_free(e->s);
    tdm_kv_pool_free(&e->pool);
    const tdm_allocator *a = e->a;
    tdm_free(a, e->cache);
    tdm_free(a, e->ids_buf);
    tdm_free(a, e->pos_buf);
    tdm_free(a, e->cu_buf);
    tdm_free(a, e->past_buf);
    tdm_free(a, e->table_buf);
    tdm_free(a, e->rows_buf);
    tdm_free(a, e->logits_buf);
    tdm_free(a, e->sched);
    tdm_free(a, e->sched_n);
    tdm_free(a, e->sched_row);
    tdm_free(a, e->picks);
    tdm_free(a, e->running);
    tdm_free(a, e->evs);
    tdm_free(a, e->cancel_ids);
    if (e->mutex_ready) {
        pthread_mutex_destroy(&e->mu);
        pthread_cond_destroy(&e->cv);
    }
    tdm_free(a, e);
}

tdm_status *tdm_llm_engine_create(tdm_env *env, const char *dir,
                                  const tdm_llm_engine_options *options, tdm_llm_engine **out) {
    if (!env || !dir || !out)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_engine_create: NULL argument");
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    if (options) {
        if (options->struct_size < sizeof options->struct_size)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_engine_options.struct_size is %zu; "
                           "set it to sizeof(tdm_llm_engine_options)", options->struct_size);
        memcpy(&o, options, options->struct_size < sizeof o ? options->struct_size : sizeof o);
    }
    if (o.max_length < 0 || o.max_batch < 0 || o.max_step_tokens < 0 || o.block_size < 0 ||
        o.kv_blocks < 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_engine_options: negative sizes");
    const tdm_allocator *a = tdm_env_allocator(env);
    tdm_llm_engine *e = tdm_calloc(a, 1, sizeof *e);
    if (!e) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the engine");
    e->env = env;
    e->exp_row = tdm_sampler_exp_row_for(tdm_env_device_isa(env, 0));
    e->max_row = tdm_sampler_max_row_for(tdm_env_device_isa(env, 0));
    e->near_row = tdm_sampler_near_row_for(tdm_env_device_isa(env, 0));
    e->a = a;
    e->next_id = 1;
    tdm_status *st = NULL;
    if (pthread_mutex_init(&e->mu, NULL) != 0) {
        tdm_free(a, e);
        return TDM_ERR(TDM_ERR_RUNTIME, "pthread_mutex_init failed");
    }
    if (pthread_cond_init(&e->cv, NULL) != 0) {
        pthread_mutex_destroy(&e->mu);
        tdm_free(a, e);
        return TDM_ERR(TDM_ERR_RUNTIME, "pthread_cond_init failed");
    }
    e->mutex_ready = true;
    st = create(e, dir, &o);
    if (!st) {
        publish(e);
        if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
            st = TDM_ERR(TDM_ERR_RUNTIME, "could not start the engine thread");
        else e->thread_started = true;
    }
    if (st) {
        engine_free_state(e);
        return tdm_status_wrap(st, "model folder '%s': ", dir);
    }
    *out = e;
    return NULL;
}

void tdm_llm_engine_free(tdm_llm_engine *e) {
    if (!e) return;
    if (e->thread_started) {
        pthread_mutex_lock(&e->mu);
        e->stop = true;
        pthread_cond_signal(&e->cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->thread, NULL);
    }
    /* requests submitted but never taken (none once the thread has run its exit path) */
    while (e->inbox.head) {
        eng_req *r = e->inbox.head;
        list_remove(&e->inbox, r);
        req_free(e, r);
    }
    engine_free_state(e);
}

/* ---- requests ---- */

tdm_status *tdm_llm_engine_submit(tdm_llm_engine *e, const int32_t *prompt, size_t n_prompt,
                                  const tdm_llm_request_params *params, tdm_llm_event_fn fn,
                                  void *user, uint64_t *id) {
    if (!e || !fn || !id || (n_prompt && !prompt))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_engine_submit: NULL argument");
    tdm_llm_request_params p;
    memset(&p, 0, sizeof p);
    if (params) {
        if (params->struct_size < sizeof params->struct_size)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_request_params.struct_size is %zu; "
                           "set it to sizeof(tdm_llm_request_params)", params->struct_size);
        memcpy(&p, params, params->struct_size < sizeof p ? params->struct_size : sizeof p);
    }
    if (n_prompt == 0) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the prompt is empty");
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (size_t)prompt[i] >= e->vocab)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "prompt token %zu is %d, outside the "
                           "vocabulary (%zu)", i, prompt[i], e->vocab);
    if (n_prompt >= (size_t)e->max_length)
        return TDM_ERR(TDM_ERR_LIMIT, "the prompt's %zu tokens leave no room to generate within "
                       "max_length %d", n_prompt, e->max_length);
    if ((n_prompt + (size_t)e->block_size) / (size_t)e->block_size > (size_t)e->pool.n_blocks)
        return TDM_ERR(TDM_ERR_LIMIT, "the prompt's %zu tokens do not fit in the KV pool (%d "
                       "blocks of %d tokens)", n_prompt, e->pool.n_blocks, e->block_size);
    if (p.max_tokens < 0 || p.top_logprobs < 0 || p.top_logprobs > MAX_TOP ||
        (p.n_stop_ids && !p.stop_ids) || !isfinite(p.presence_penalty) ||
        !isfinite(p.frequency_penalty))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_request_params: max_tokens < 0, "
                       "top_logprobs outside 0..%d, n_stop_ids without stop_ids or a penalty "
                       "not finite", MAX_TOP);
    if (p.n_bias && (!p.bias_ids || !p.bias_values))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_llm_request_params: n_bias without "
                       "bias_ids / bias_values");
    for (size_t i = 0; i < p.n_bias; i++)
        if (p.bias_ids[i] < 0 || (size_t)p.bias_ids[i] >= e->vocab || !isfinite(p.bias_values[i]))
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "logit bias %zu: token %d (the vocabulary has "
                           "%zu) or its value is not finite", i, p.bias_ids[i], e->vocab);
    const tdm_allocator *a = e->a;
    eng_req *r = tdm_calloc(a, 1, sizeof *r);
    if (!r) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for a request");
    r->tokens = tdm_calloc(a, (size_t)e->max_length, sizeof *r->tokens);
    r->blocks = tdm_calloc(a, (size_t)e->max_blocks, sizeof *r->blocks);
    r->stop = tdm_calloc(a, e->n_eos + p.n_stop_ids + 1, sizeof *r->stop);
    if (p.n_bias) {
        r->bias_ids = tdm_calloc(a, p.n_bias, sizeof *r->bias_ids);
        r->bias_values = tdm_calloc(a, p.n_bias, sizeof *r->bias_values);
    }
    if (!r->tokens || !r->blocks || !r->stop || (p.n_bias && (!r->bias_ids || !r->bias_values))) {
        req_free(e, r);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for a request");
    }
    memcpy(r->tokens, prompt, n_prompt * sizeof *prompt);
    r->n_prompt = r->n_tokens = n_prompt;
    r->fn = fn;
    r->user = user;
    r->sampling = p.sampling;
    r->presence = p.presence_penalty;
    r->frequency = p.frequency_penalty;
    if (p.n_bias) {
        memcpy(r->bias_ids, p.bias_ids, p.n_bias * sizeof *r->bias_ids);
        memcpy(r->bias_values, p.bias_values, p.n_bias * sizeof *r->bias_values);
        r->n_bias = p.n_bias;
    }
    r->max_tokens = p.max_tokens;
    r->top_logprobs = p.top_logprobs;
    r->logprobs = p.logprobs || p.top_logprobs > 0;
    r->ignore_eos = p.ignore_eos;
    if (!p.ignore_eos)
        for (size_t i = 0; i < e->n_eos; i++) r->stop[r->n_stop++] = e->eos[i];
    for (size_t i = 0; i < p.n_stop_ids; i++) r->stop[r->n_stop++] = p.stop_ids[i];
    pthread_mutex_lock(&e->mu);
    r->id = e->next_id++;
    e->requests_total++;
    list_push_back(&e->inbox, r);
    *id = r->id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void tdm_llm_engine_cancel(tdm_llm_engine *e, uint64_t id) {
    if (!e || id == 0) return;
    pthread_mutex_lock(&e->mu);
    if (!tdm_grow(e->a, (void **)&e->cancel_ids, &e->cap_cancel, e->n_cancel + 1,
                  sizeof *e->cancel_ids))
        e->cancel_ids[e->n_cancel++] = id;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

void tdm_llm_engine_get_stats(tdm_llm_engine *e, tdm_llm_engine_stats *out) {
    if (!out) return;
    if (!e) {
        memset(out, 0, sizeof *out);
        return;
    }
    pthread_mutex_lock(&e->mu);
    *out = e->published;
    out->waiting += e->inbox.n;
    out->requests_total = e->requests_total;
    pthread_mutex_unlock(&e->mu);
}

const int32_t *tdm_llm_engine_eos_ids(const tdm_llm_engine *e, size_t *n) {
    if (n) *n = e ? e->n_eos : 0;
    return e ? e->eos : NULL;
}

size_t tdm_llm_engine_vocab_size(const tdm_llm_engine *e) { return e ? e->vocab : 0; }

tdm_session *tdm_llm_engine_session(tdm_llm_engine *e) { return e ? e->s : NULL; }

int tdm_llm_engine_max_length(const tdm_llm_engine *e) { return e ? e->max_length : 0; }

void tdm_llm_engine_kv_cache(const tdm_llm_engine *e, tdm_dtype *dtype, int64_t *bytes) {
    if (dtype) *dtype = e ? e->ed.cache_dtype : TDM_UNDEFINED;
    if (bytes) *bytes = e ? (int64_t)block_bytes(&e->ed) : 0;
}
