/* The LLM engine (include/tandem/engine.h) on the tiny GenAI folder (tools/make_tiny_llama.py
 * --form genai --seed 7, tests/llm/models/tiny_genai: GroupQueryAttention, which the engine
 * turns into PagedAttention over its block pool). The reference is tdm_generator on the same
 * folder, one sequence at a time: every request's greedy tokens equal the generator's for its
 * prompt, whatever else runs with it:
 *  - concurrent requests of different prompt lengths, submitted at different times;
 *  - a tiny pool that forces preemption (the preempted ones recompute and continue);
 *  - a small max_step_tokens that forces chunked prefill;
 *  - shared prompt prefixes (cached_tokens > 0, the same tokens);
 *  - no_batching (one request at a time);
 *  - cancellation before start, from a callback mid-way, and of finished / unknown ids;
 *  - stop ids, eos, max_tokens; seeded sampling twice gives the same tokens; top_logprobs
 *    sorted and consistent with the token; bad submits are refused;
 * and after each, the stats show no running or waiting sequence and every used block held
 * only by the prefix cache (nothing leaked).
 * The float16 pool of the float32 model (kv_type "f16"): concurrent requests, preemption and
 * chunked prefill give the generator's (float32 cache) greedy tokens, the top log-probabilities
 * within F16_TOP_TOL (the keys and values rounded to float16: the one difference); the stats
 * show float16 and half the bytes a block (twice the blocks for a kv_bytes budget); bad
 * kv_type values are refused with a code. tandem's 8- and 4-bit pools (kv_type "int8" /
 * "int4"): concurrent requests and preemption (int4 also chunked prefill, shared prefix
 * blocks and cancellation with nothing leaked) give the greedy
 * tokens of the generator with the same kv_type, the top log-probabilities within Q_TOP_TOL.
 * With TANDEM_ENGINE_MODEL=DIR (tests/CMakeLists.txt: llm_engine_smollm2 on the SmolLM2 folder
 * when there is one) only the concurrent greedy check runs, on that folder. A folder whose
 * MatMulNBits have accuracy_level 4 (int8 activations, e.g. ORT's own SmolLM2 conversion) can
 * fail it at a near tie: such a node computes a run of more than TDM_NBITS_DECODE_ROWS rows
 * (a batch with a prefill chunk in it) in bf16 on AVX512_BF16 CPUs and fewer rows in int8,
 * so a row's logits depend on what else is in its run (the generator's own prefill and decode
 * differ the same way). */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tandem/engine.h"
#include "tandem/generator.h"
#include "tandem/tandem.h"
#include "test_ok.h"

#define TINY_GENAI TANDEM_SOURCE_DIR "/tests/llm/models/tiny_genai"
#define TINY_GENAI_ACC0 TANDEM_SOURCE_DIR "/tests/llm/models/tiny_genai_acc0"
#define TINY_OPTIMUM TANDEM_SOURCE_DIR "/tests/llm/models/tiny_optimum"
#define MAXTOK 512
#define NTOP 5

/* The folder of the checks: tiny_genai_acc0 (float activations: the engine's log-probabilities
 * equal the generator's within 1e-3), tiny_genai itself (int8 activations in MatMulNBits,
 * accuracy_level 4, as SmolLM2's: rounding differs between a batch of rows and one, so the
 * log-probabilities agree within a relative 1e-2 and the tokens are compared), or
 * $TANDEM_ENGINE_MODEL. */
static const char *cur_model = TINY_GENAI_ACC0;
static double top_abs_tol = 1e-3, top_rel_tol = 0;
/* the engines' kv_type (NULL = the model's); with "f16" the log-probabilities of the float16
 * pool agree with the float32 generator's within F16_TOP_TOL (measured worst: printed at the
 * end) */
static const char *cur_kv_type = NULL;
#define F16_TOP_TOL 1e-2
/* with "int8" / "int4" the reference is the generator with the same kv_type (its GQA cache of
 * the same rows): its log-probabilities agree within Q_TOP_TOL plus Q_TOP_REL of their size (a
 * prompt chunk's attention widens the rows in float where decode sums integers against the
 * query rounded to 8 bits; a prompt sent again computes its last token alone, through decode,
 * where the generator's prompt went as a chunk: test_concurrent_greedy's repeated prompts, int8
 * pool, 2.43e-3 on a log-probability of -29.98, 8e-5 of it) */
#define Q_TOP_TOL 2e-3
#define Q_TOP_REL 1e-4
static bool quant_pool(void) {
    return cur_kv_type && (!strcmp(cur_kv_type, "int8") || !strcmp(cur_kv_type, "int4"));
}

static const char *model_dir(void) {
    const char *m = getenv("TANDEM_ENGINE_MODEL");
    return m && *m ? m : cur_model;
}

static tdm_env *new_env(void) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.threads = 1;
    tdm_env *env = NULL;
    OK(tdm_env_create(&o, &env));
    return env;
}

/* ---- what a request received ---- */

typedef struct got {
    int32_t tokens[MAXTOK];
    float logprobs[MAXTOK];
    float top[MAXTOK][NTOP]; /* the top_logprobs' values */
    int n;
    bool ended;
    tdm_llm_finish finish;
    int64_t prompt_tokens, generated_tokens, cached_tokens;
    int64_t token_cached; /* cached_tokens of the last token event */
    char error[256];
    int events_after_end;
    bool top_ok;
    /* cancel from the callback after this many tokens (0 = never) */
    int cancel_after;
    tdm_llm_engine *engine;
    uint64_t id;
} got;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;

static void on_event(void *user, const tdm_llm_event *ev) {
    got *g = user;
    pthread_mutex_lock(&mu);
    if (g->ended) g->events_after_end++;
    if (ev->finish == TDM_LLM_FINISH_NONE) {
        if (g->n < MAXTOK) {
            for (int i = 0; i < NTOP; i++) g->top[g->n][i] = i < ev->n_top ? ev->top[i].logprob : 0;
            g->logprobs[g->n] = ev->logprob;
            g->tokens[g->n++] = ev->token;
        }
        g->token_cached = ev->cached_tokens;
        if (ev->n_top > 0) {
            bool ok = ev->top != NULL && ev->logprob <= 1e-6f;
            for (int i = 0; ok && i < ev->n_top; i++) {
                if (ev->top[i].logprob > 1e-6f) ok = false;
                if (i > 0 && ev->top[i].logprob > ev->top[i - 1].logprob) ok = false;
                if (ev->top[i].token == ev->token && ev->top[i].logprob != ev->logprob) ok = false;
            }
            if (!ok) g->top_ok = false;
        }
        if (g->cancel_after > 0 && g->n == g->cancel_after)
            tdm_llm_engine_cancel(g->engine, g->id); /* allowed from a callback */
    } else {
        g->ended = true;
        g->finish = ev->finish;
        g->prompt_tokens = ev->prompt_tokens;
        g->generated_tokens = ev->generated_tokens;
        g->cached_tokens = ev->cached_tokens;
        if (ev->status) snprintf(g->error, sizeof g->error, "%s", tdm_status_message(ev->status));
        pthread_cond_broadcast(&cv);
    }
    pthread_mutex_unlock(&mu);
}

static void wait_ended(got *g, int n) {
    pthread_mutex_lock(&mu);
    for (int i = 0; i < n; i++)
        while (!g[i].ended) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
}

static void wait_tokens(got *g, int n) {
    for (;;) {
        pthread_mutex_lock(&mu);
        bool done = g->n >= n || g->ended;
        pthread_mutex_unlock(&mu);
        if (done) return;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void check_idle(tdm_llm_engine *e) {
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.running, 0);
    assert_int_equal(s.waiting, 0);
    assert_int_equal(s.kv_blocks_used, s.kv_blocks_cached); /* nothing leaked */
    assert_true(s.kv_blocks_total > 0);
}

/* ---- the reference ---- */

/* Greedy (or `smp`) tokens of the generator for `prompt`, at most max_new. */
/* The NTOP largest log-softmax values of logits / temp, largest first. */
static void top_logprobs(const float *lg, size_t vocab, float temp, float *top) {
    float inv = temp > 0 ? 1.0f / temp : 1.0f, mx = -INFINITY;
    for (size_t i = 0; i < vocab; i++) mx = lg[i] > mx ? lg[i] : mx;
    double sum = 0;
    for (size_t i = 0; i < vocab; i++) sum += exp((double)(lg[i] - mx) * inv);
    for (int k = 0; k < NTOP; k++) top[k] = -INFINITY;
    for (size_t i = 0; i < vocab; i++) {
        float v = (float)((double)(lg[i] - mx) * inv - log(sum));
        for (int k = 0; k < NTOP; k++)
            if (v > top[k]) {
                memmove(&top[k + 1], &top[k], (size_t)(NTOP - k - 1) * sizeof *top);
                top[k] = v;
                break;
            }
    }
}

/* The generator's tokens for `prompt` (greedy, or `smp`), at most max_new, and each step's
 * top log-probabilities in ref_top (when not NULL). */
static int reference_top(tdm_env *env, const int32_t *prompt, size_t n, int max_new,
                         bool ignore_eos, const tdm_sampling *smp, const int32_t *stop,
                         size_t n_stop, int32_t *out, float (*ref_top)[NTOP]) {
    tdm_generator_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.ignore_eos = ignore_eos;
    o.stop_ids = stop;
    o.n_stop_ids = n_stop;
    if (smp) o.sampling = *smp;
    o.kv_type = quant_pool() ? cur_kv_type : NULL; /* 8- / 4-bit: the generator's own such cache */
    tdm_generator *g = NULL;
    OK(tdm_generator_create(env, model_dir(), &o, &g));
    OK(tdm_generator_append(g, prompt, n));
    int k = 0;
    while (!tdm_generator_is_done(g) && (max_new == 0 || k < max_new)) {
        int32_t t;
        if (ref_top) {
            const float *lg = NULL;
            size_t vocab = 0;
            OK(tdm_generator_logits(g, &lg, &vocab));
            static float masked[1 << 17];
            assert_true(vocab <= sizeof masked / sizeof *masked);
            memcpy(masked, lg, vocab * sizeof *lg);
            size_t n_eos = 0;
            const int32_t *eos = tdm_generator_eos_ids(g, &n_eos);
            for (size_t i = 0; ignore_eos && i < n_eos; i++) masked[eos[i]] = -INFINITY;
            top_logprobs(masked, vocab, smp ? smp->temperature : 0, ref_top[k]);
        }
        OK(tdm_generator_next(g, &t));
        if (tdm_generator_is_stop_token(g, t)) break;
        out[k++] = t;
    }
    tdm_generator_free(g);
    return k;
}

static int reference(tdm_env *env, const int32_t *prompt, size_t n, int max_new, bool ignore_eos,
                     const tdm_sampling *smp, const int32_t *stop, size_t n_stop, int32_t *out) {
    return reference_top(env, prompt, n, max_new, ignore_eos, smp, stop, n_stop, out, NULL);
}

/* over every check: the engine's top log-probabilities vs the generator's, [0] on the float
 * model, [1] on the int8 one, [2] the float16 pool on the float model, [3] / [4] the 8- / 4-bit
 * pool (against the generator's 8- / 4-bit cache) */
static double worst_top_diff[5];

static int diff_slot(void) {
    if (!cur_kv_type) return top_rel_tol > 0;
    return !strcmp(cur_kv_type, "int8") ? 3 : !strcmp(cur_kv_type, "int4") ? 4 : 2;
}

/* A deterministic prompt of n ids in [3, vocab) (no special ids). */
static void make_prompt(int32_t *p, size_t n, uint32_t seed, size_t vocab) {
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        p[i] = (int32_t)(3 + (x >> 8) % (uint32_t)(vocab - 3));
    }
}

static tdm_llm_engine *new_engine(tdm_env *env, int max_batch, int max_step, int block,
                                  int64_t blocks, bool no_batching) {
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.max_batch = max_batch;
    o.max_step_tokens = max_step;
    o.block_size = block;
    o.kv_blocks = blocks;
    o.no_batching = no_batching;
    o.kv_type = cur_kv_type;
    tdm_llm_engine *e = NULL;
    OK(tdm_llm_engine_create(env, model_dir(), &o, &e));
    tdm_dtype kvt = TDM_UNDEFINED;
    tdm_llm_engine_kv_cache(e, &kvt, NULL);
    tdm_dtype want = !cur_kv_type                    ? TDM_FLOAT
                     : !strcmp(cur_kv_type, "int8") ? TDM_INT8
                     : !strcmp(cur_kv_type, "int4") ? TDM_UINT8
                                                    : TDM_FLOAT16;
    assert_int_equal(kvt, want);
    return e;
}

typedef struct scenario {
    int n;               /* requests */
    const int *lens;     /* prompt lengths */
    int max_tokens;
    int stagger;         /* submit request i once request i-1 has this many tokens (0 = all
                            at once) */
    bool ignore_eos;
    uint32_t seed;
    int shared_prefix;   /* the first tokens of every prompt are request 0's */
    const int32_t *const *prompts; /* the prompts themselves (NULL: made from seed) */
} scenario;

/* Runs scenario `sc` on e and compares every request with the generator. */
static void run_scenario(tdm_env *env, tdm_llm_engine *e, const scenario *sc, got *g) {
    size_t vocab = tdm_llm_engine_vocab_size(e);
    int32_t prompts[16][300];
    assert_true(sc->n <= 16);
    for (int i = 0; i < sc->n; i++) {
        assert_true(sc->lens[i] <= 300);
        if (sc->prompts)
            memcpy(prompts[i], sc->prompts[i], (size_t)sc->lens[i] * sizeof(int32_t));
        else
            make_prompt(prompts[i], (size_t)sc->lens[i], sc->seed + (uint32_t)i, vocab);
        if (sc->shared_prefix && i > 0)
            memcpy(prompts[i], prompts[0], (size_t)sc->shared_prefix * sizeof(int32_t));
    }
    memset(g, 0, sizeof *g * (size_t)sc->n);
    for (int i = 0; i < sc->n; i++) {
        if (sc->stagger && i > 0) wait_tokens(&g[i - 1], sc->stagger);
        tdm_llm_request_params p;
        memset(&p, 0, sizeof p);
        p.struct_size = sizeof p;
        p.max_tokens = sc->max_tokens;
        p.ignore_eos = sc->ignore_eos;
        p.top_logprobs = NTOP;
        g[i].top_ok = true;
        g[i].engine = e;
        OK(tdm_llm_engine_submit(e, prompts[i], (size_t)sc->lens[i], &p, on_event, &g[i],
                                 &g[i].id));
    }
    wait_ended(g, sc->n);
    for (int i = 0; i < sc->n; i++) {
        int32_t ref[MAXTOK];
        static float ref_top[MAXTOK][NTOP];
        int k = reference_top(env, prompts[i], (size_t)sc->lens[i], sc->max_tokens,
                              sc->ignore_eos, NULL, NULL, 0, ref, ref_top);
        if (g[i].finish == TDM_LLM_FINISH_ERROR) fprintf(stderr, "request %d: %s\n", i, g[i].error);
        assert_true(g[i].finish == TDM_LLM_FINISH_STOP || g[i].finish == TDM_LLM_FINISH_LENGTH);
        if (g[i].n != k || memcmp(g[i].tokens, ref, (size_t)k * sizeof *ref) != 0) {
            fprintf(stderr, "request %d (prompt %d): engine %d tokens, generator %d\n", i,
                    sc->lens[i], g[i].n, k);
            for (int j = 0; j < g[i].n || j < k; j++)
                fprintf(stderr, "  %d: %d %d\n", j, j < g[i].n ? g[i].tokens[j] : -1,
                        j < k ? ref[j] : -1);
            fail();
        }
        assert_int_equal(g[i].prompt_tokens, sc->lens[i]);
        assert_int_equal(g[i].generated_tokens, g[i].n);
        if (g[i].n > 0) assert_int_equal(g[i].token_cached, g[i].cached_tokens); /* every event */
        assert_int_equal(g[i].events_after_end, 0);
        assert_true(g[i].top_ok);
        /* the distributions, not only their arg max (the tiny random model repeats tokens a
         * lot): the engine's top log-probabilities are the generator's */
        for (int j = 0; j < g[i].n; j++) {
            assert_true(g[i].logprobs[j] <= 1e-6f);
            for (int t = 0; t < NTOP; t++) {
                double d = fabs((double)g[i].top[j][t] - (double)ref_top[j][t]);
                if (d > worst_top_diff[diff_slot()]) worst_top_diff[diff_slot()] = d;
                if (d > top_abs_tol + top_rel_tol * fabs((double)ref_top[j][t])) {
                    fprintf(stderr, "request %d token %d top %d: engine %g generator %g\n", i, j,
                            t, (double)g[i].top[j][t], (double)ref_top[j][t]);
                    fail();
                }
            }
        }
    }
    check_idle(e);
}

static const int LENS[] = {3, 10, 17, 33, 50, 70, 5, 24};

static void test_concurrent_greedy(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 8, 0, 16, 128, false);
    got g[8];
    scenario sc = {.n = 8, .lens = LENS, .max_tokens = 24, .stagger = 3, .ignore_eos = true,
                   .seed = 1};
    run_scenario(env, e, &sc, g);
    /* all at once, eos allowed. Batched means fewer model runs than generated tokens (one
     * request alone needs one run per token); the tiny model's steps take ~0.1 ms, so on a
     * loaded machine a preempted submitting thread can let the first request run alone for
     * long: up to 5 attempts, one of which must batch */
    scenario sc2 = {.n = 6, .lens = LENS, .max_tokens = 40, .ignore_eos = false, .seed = 11};
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    bool batched = false;
    int attempts = 0;
    for (; attempts < 5 && !batched; attempts++) {
        int64_t steps0 = s.steps_total, gen0 = s.generated_tokens_total;
        run_scenario(env, e, &sc2, g);
        tdm_llm_engine_get_stats(e, &s);
        batched = s.steps_total - steps0 < s.generated_tokens_total - gen0;
    }
    assert_int_equal(s.requests_total, 8 + 6 * attempts);
    assert_true(s.steps_total > 0);
    assert_true(batched);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

/* The same on the int8-activation form: the tokens equal, the log-probabilities close (int8
 * rounding of a row depends on the kernel path: one row or a batch). */
static int int8_model(void **state) {
    (void)state;
    cur_model = TINY_GENAI;
    top_abs_tol = 5e-2;
    top_rel_tol = 5e-2;
    return 0;
}

static int float_model(void **state) {
    (void)state;
    cur_model = TINY_GENAI_ACC0;
    top_abs_tol = 1e-3;
    top_rel_tol = 0;
    return 0;
}

/* Another pool type for the float32 model, and its log-probabilities' tolerance. */
static int use_pool(const char *kv_type, double tol, double rel) {
    cur_kv_type = kv_type;
    top_abs_tol = tol;
    top_rel_tol = rel;
    return 0;
}

/* the float16 pool; tandem's 8- and 4-bit pools */
static int f16_pool(void **state) { return (void)state, use_pool("f16", F16_TOP_TOL, 0); }
static int q8_pool(void **state) { return (void)state, use_pool("int8", Q_TOP_TOL, Q_TOP_REL); }
static int q4_pool(void **state) { return (void)state, use_pool("int4", Q_TOP_TOL, Q_TOP_REL); }

static int model_pool(void **state) {
    cur_kv_type = NULL;
    return float_model(state);
}

static void test_preemption(void **state) {
    (void)state;
    tdm_env *env = new_env();
    /* 12 blocks of 4 tokens: four sequences of up to 10 + 24 tokens cannot all fit */
    tdm_llm_engine *e = new_engine(env, 4, 0, 4, 12, false);
    got g[4];
    static const int lens[] = {10, 7, 9, 6};
    scenario sc = {.n = 4, .lens = lens, .max_tokens = 24, .ignore_eos = true, .seed = 21};
    /* preemption needs the four at once: on a loaded machine the submitting thread may be
     * preempted while the first runs alone (0.1 ms steps), so up to 5 attempts, one of which
     * must preempt (each attempt's tokens are checked against the generator) */
    tdm_llm_engine_stats s;
    memset(&s, 0, sizeof s);
    for (int attempt = 0; attempt < 5 && s.preemptions_total == 0; attempt++) {
        run_scenario(env, e, &sc, g);
        tdm_llm_engine_get_stats(e, &s);
    }
    assert_true(s.preemptions_total > 0);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

static void test_chunked_prefill(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 5, 8, 64, false);
    got g[4];
    static const int lens[] = {23, 3, 41, 12};
    scenario sc = {.n = 4, .lens = lens, .max_tokens = 12, .stagger = 2, .ignore_eos = true,
                   .seed = 31};
    run_scenario(env, e, &sc, g);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

static void test_prefix_cache(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 8, 64, false);
    got g[4];
    static const int lens[] = {40, 45, 44, 60};
    /* request 0 first (and to its end: stagger larger than max_tokens waits for its end) */
    scenario sc = {.n = 4, .lens = lens, .max_tokens = 10, .stagger = 10, .ignore_eos = true,
                   .seed = 41, .shared_prefix = 37};
    run_scenario(env, e, &sc, g);
    assert_int_equal(g[0].cached_tokens, 0);
    /* 4 full blocks, then the 5 shared tokens of the fifth block: request 0's block of
     * positions 32-39 (cached) holds them, and their rows are copied */
    for (int i = 1; i < 4; i++) assert_int_equal(g[i].cached_tokens, 37);
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_hit_tokens_total, 3 * 37);
    assert_true(s.kv_blocks_cached > 0);
    /* the same prompt again: every token but the last, which is computed for the logits */
    scenario again = {.n = 1, .lens = lens, .max_tokens = 10, .ignore_eos = true, .seed = 41};
    run_scenario(env, e, &again, g);
    assert_int_equal(g[0].cached_tokens, 39);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

/* A follow-up turn: a prompt that is an earlier request's prompt and generated tokens, then
 * more. The earlier request's full blocks, generated tokens included, are in the prefix cache
 * (as vLLM's and llama.cpp's servers keep a conversation), and the follow-up's tokens are still
 * the generator's for its whole prompt. */
static void test_prefix_cache_generated(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 8, 64, false);
    size_t vocab = tdm_llm_engine_vocab_size(e);
    got g[1];
    /* turn 1: 37 prompt tokens, 20 generated; the last one is never fed, so 56 positions are
     * computed: 7 full blocks of 8, the last 3 of them holding generated tokens */
    static const int len1[] = {37};
    scenario a = {.n = 1, .lens = len1, .max_tokens = 20, .ignore_eos = true, .seed = 43};
    run_scenario(env, e, &a, g);
    assert_int_equal(g[0].n, 20);
    assert_int_equal(g[0].cached_tokens, 0);
    /* turn 2: turn 1's prompt and its 20 tokens, then 6 new ones */
    static int32_t p2[63];
    make_prompt(p2, 37, 43, vocab); /* run_scenario's prompt 0 of seed 43 */
    memcpy(p2 + 37, g[0].tokens, 20 * sizeof *p2);
    make_prompt(p2 + 57, 6, 97, vocab);
    static const int len2[] = {63};
    const int32_t *const prompts2[] = {p2};
    scenario b = {.n = 1, .lens = len2, .max_tokens = 12, .ignore_eos = true, .prompts = prompts2};
    run_scenario(env, e, &b, g);
    assert_int_equal(g[0].cached_tokens, 56);
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.prefix_hit_tokens_total, 56);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

/* The rows a running sequence has computed in a block it is still filling serve a new request
 * with the same leading tokens: copied, not shared, since the running one writes on. Blocks of
 * 128 tokens and 40 + 80 positions: request 0's only block is never full, so not in the
 * prefix cache while it runs, for 78 more steps after request 1 is sent. */
static void test_prefix_partial_live(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 128, 8, false);
    got g[2];
    static const int lens[] = {40, 45};
    scenario sc = {.n = 2, .lens = lens, .max_tokens = 80, .stagger = 2, .ignore_eos = true,
                   .seed = 53, .shared_prefix = 38};
    run_scenario(env, e, &sc, g);
    assert_int_equal(g[0].cached_tokens, 0);
    assert_int_equal(g[1].cached_tokens, 38);
    /* at their ends both partly filled blocks joined the cache (their tokens differ) */
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_cached, 2);
    /* request 0's prompt again: its ended block gives every token but the last */
    scenario again = {.n = 1, .lens = lens, .max_tokens = 6, .ignore_eos = true, .seed = 53};
    run_scenario(env, e, &again, g);
    assert_int_equal(g[0].cached_tokens, 39);
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_cached, 2); /* the same tokens again: not entered twice */
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

/* A pool with no free block: the cached block whose rows a new prompt would copy is also the
 * only one a new block could come from. The donor is held while a block is allocated, so it is
 * never its own destination (ASan's memcpy overlap check); then, only cached, it leaves the
 * cache and becomes the request's block, its rows where they are: the request's next tokens
 * overwrite the ones past the shared part, and its tokens are still the generator's. */
static void test_prefix_partial_full_pool(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 1, 0, 8, 3, false);
    got g[1];
    /* request 0: 23 prompt tokens and its first generated token fill the 3 blocks, which stay
     * in the cache when it ends */
    static const int len0[] = {23};
    scenario a = {.n = 1, .lens = len0, .max_tokens = 2, .ignore_eos = true, .seed = 61};
    run_scenario(env, e, &a, g);
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_cached, 3);
    /* request 1: request 0's first 20 tokens, then 2 of its own: blocks 0 and 1 are shared,
     * block 2 is taken with its first 4 rows (no other block to copy them into) */
    size_t vocab = tdm_llm_engine_vocab_size(e);
    static int32_t p1[22];
    make_prompt(p1, 20, 61, vocab); /* run_scenario's prompt 0 of seed 61 */
    make_prompt(p1 + 20, 2, 67, vocab);
    static const int len1[] = {22};
    const int32_t *const prompts1[] = {p1};
    scenario b = {.n = 1, .lens = len1, .max_tokens = 2, .ignore_eos = true, .prompts = prompts1};
    run_scenario(env, e, &b, g);
    assert_int_equal(g[0].cached_tokens, 20);
    /* request 0's prompt again: block 2 now holds request 1's tokens, so 16 (and the rows of
     * request 1's block 2 that match: 4 of them, copied or taken) */
    scenario c = {.n = 1, .lens = len0, .max_tokens = 2, .ignore_eos = true, .seed = 61};
    run_scenario(env, e, &c, g);
    assert_int_equal(g[0].cached_tokens, 20);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

static void test_no_batching(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 16, 64, true);
    got g[3];
    scenario sc = {.n = 3, .lens = LENS, .max_tokens = 8, .ignore_eos = true, .seed = 51};
    run_scenario(env, e, &sc, g);
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    /* one request at a time: a run per token (the prefill gives the first) */
    assert_int_equal(s.steps_total, s.generated_tokens_total);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

static void test_cancel(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 8, 64, false);
    size_t vocab = tdm_llm_engine_vocab_size(e);
    int32_t prompt[20];
    make_prompt(prompt, 20, 61, vocab);
    got g[5];
    memset(g, 0, sizeof g);
    tdm_llm_request_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.ignore_eos = true; /* until max_length unless cancelled */
    for (int i = 0; i < 5; i++) {
        g[i].engine = e;
        g[i].cancel_after = i < 2 ? 5 + i : 0;
        OK(tdm_llm_engine_submit(e, prompt, 20, &p, on_event, &g[i], &g[i].id));
    }
    tdm_llm_engine_cancel(e, g[2].id);  /* probably before its first token */
    tdm_llm_engine_cancel(e, 987654);   /* unknown: ignored */
    wait_tokens(&g[3], 3);
    tdm_llm_engine_cancel(e, g[3].id);
    wait_ended(g, 4);
    /* the tiny model's steps take ~0.1 ms: on a loaded machine, request 3 (cancelled from this
     * thread after its 3rd token) may reach max_length first; then it ends by length, whole */
    const int full = tdm_llm_engine_max_length(e) - 20;
    for (int i = 0; i < 4; i++)
        if (!(i == 3 && g[i].finish == TDM_LLM_FINISH_LENGTH && g[i].n == full))
            assert_int_equal(g[i].finish, TDM_LLM_FINISH_CANCELLED);
    assert_int_equal(g[0].n, 5); /* cancelled from its callback: no token after */
    assert_int_equal(g[1].n, 6);
    wait_ended(&g[4], 1);
    assert_int_equal(g[4].finish, TDM_LLM_FINISH_LENGTH);
    assert_int_equal(g[4].n, tdm_llm_engine_max_length(e) - 20);
    tdm_llm_engine_cancel(e, g[4].id); /* finished: ignored */
    for (int i = 0; i < 5; i++) assert_int_equal(g[i].events_after_end, 0);
    /* the survivor's tokens are the generator's */
    int32_t ref[MAXTOK];
    int k = reference(env, prompt, 20, 0, true, NULL, NULL, 0, ref);
    assert_int_equal(k, g[4].n);
    assert_memory_equal(ref, g[4].tokens, (size_t)k * sizeof *ref);
    for (int i = 0; i < 4; i++) assert_memory_equal(ref, g[i].tokens, (size_t)g[i].n * sizeof *ref);
    struct timespec ts = {0, 20000000};
    nanosleep(&ts, NULL);
    check_idle(e);
    /* freeing with requests in flight ends them cancelled */
    memset(g, 0, sizeof g);
    for (int i = 0; i < 3; i++)
        OK(tdm_llm_engine_submit(e, prompt, 20, &p, on_event, &g[i], &g[i].id));
    wait_tokens(&g[0], 2);
    tdm_llm_engine_free(e);
    for (int i = 0; i < 3; i++) { /* (one may have ended by length first, whole: see above) */
        assert_true(g[i].ended);
        if (!(g[i].finish == TDM_LLM_FINISH_LENGTH && g[i].n == full))
            assert_int_equal(g[i].finish, TDM_LLM_FINISH_CANCELLED);
    }
    tdm_env_free(env);
}

static void test_stops_and_sampling(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 16, 64, false);
    size_t vocab = tdm_llm_engine_vocab_size(e);
    int32_t prompt[12];
    make_prompt(prompt, 12, 71, vocab);
    /* a stop id: the greedy sequence's 4th token */
    int32_t ref[MAXTOK];
    int k = reference(env, prompt, 12, 10, true, NULL, NULL, 0, ref);
    assert_true(k == 10);
    int32_t stop = ref[3];
    int first = 0;
    while (ref[first] != stop) first++;
    got g[5];
    memset(g, 0, sizeof g);
    tdm_llm_request_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.ignore_eos = true;
    p.max_tokens = 10;
    p.stop_ids = &stop;
    p.n_stop_ids = 1;
    OK(tdm_llm_engine_submit(e, prompt, 12, &p, on_event, &g[0], &g[0].id));
    wait_ended(g, 1);
    assert_int_equal(g[0].finish, TDM_LLM_FINISH_STOP);
    assert_int_equal(g[0].n, first);
    assert_memory_equal(g[0].tokens, ref, (size_t)first * sizeof *ref);
    /* log-probabilities only when asked: NAN without, the same tokens with (a log-softmax
     * value, <= 0) */
    for (int j = 0; j < g[0].n; j++) assert_true(isnan(g[0].logprobs[j]));
    p.logprobs = true;
    OK(tdm_llm_engine_submit(e, prompt, 12, &p, on_event, &g[4], &g[4].id));
    wait_ended(&g[4], 1);
    assert_int_equal(g[4].n, first);
    assert_memory_equal(g[4].tokens, ref, (size_t)first * sizeof *ref);
    for (int j = 0; j < g[4].n; j++)
        assert_true(isfinite(g[4].logprobs[j]) && g[4].logprobs[j] <= 1e-6f);
    /* seeded sampling: twice at once, the same tokens, and the generator's */
    tdm_llm_request_params q;
    memset(&q, 0, sizeof q);
    q.struct_size = sizeof q;
    q.ignore_eos = true;
    q.max_tokens = 30;
    q.sampling.temperature = 4.0f; /* the tiny model's distributions are sharp */
    q.sampling.top_k = 100;
    q.sampling.top_p = 0.99f;
    q.sampling.seed = 1234;
    q.top_logprobs = 3;
    for (int i = 1; i < 3; i++) {
        g[i].top_ok = true;
        OK(tdm_llm_engine_submit(e, prompt, 12, &q, on_event, &g[i], &g[i].id));
    }
    q.sampling.seed = 99;
    OK(tdm_llm_engine_submit(e, prompt, 12, &q, on_event, &g[3], &g[3].id));
    wait_ended(g, 4);
    assert_int_equal(g[1].n, 30);
    assert_int_equal(g[2].n, 30);
    assert_memory_equal(g[1].tokens, g[2].tokens, 30 * sizeof(int32_t));
    assert_true(memcmp(g[1].tokens, g[3].tokens, 30 * sizeof(int32_t)) != 0);
    assert_true(g[1].top_ok && g[2].top_ok);
    q.sampling.seed = 1234;
    k = reference(env, prompt, 12, 30, true, &q.sampling, NULL, 0, ref);
    assert_int_equal(k, 30);
    assert_memory_equal(g[1].tokens, ref, 30 * sizeof(int32_t));
    check_idle(e);
    tdm_llm_engine_free(e);
    tdm_env_free(env);
}

static void test_bad_submits(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine *e = new_engine(env, 4, 0, 16, 8, false); /* a pool of 128 tokens */
    size_t vocab = tdm_llm_engine_vocab_size(e);
    int max_length = tdm_llm_engine_max_length(e);
    assert_int_equal(vocab, 384);
    assert_int_equal(max_length, 256);
    size_t n_eos = 0;
    const int32_t *eos = tdm_llm_engine_eos_ids(e, &n_eos);
    assert_int_equal(n_eos, 1);
    assert_int_equal(eos[0], 2);
    got g;
    memset(&g, 0, sizeof g);
    uint64_t id = 77;
    int32_t prompt[300];
    make_prompt(prompt, 300, 81, vocab);
    tdm_status *st = tdm_llm_engine_submit(e, prompt, 0, NULL, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    int32_t bad[3] = {5, (int32_t)vocab, 6};
    st = tdm_llm_engine_submit(e, bad, 3, NULL, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    bad[1] = -1;
    st = tdm_llm_engine_submit(e, bad, 3, NULL, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    st = tdm_llm_engine_submit(e, prompt, (size_t)max_length, NULL, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    tdm_status_free(st);
    st = tdm_llm_engine_submit(e, prompt, 200, NULL, on_event, &g, &id); /* > the pool */
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    tdm_status_free(st);
    tdm_llm_request_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.top_logprobs = 21;
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    p.top_logprobs = 0;
    p.frequency_penalty = INFINITY; /* penalties must be finite */
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    p.frequency_penalty = 0, p.presence_penalty = NAN;
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    p.presence_penalty = 0;
    int32_t bid[2] = {3, (int32_t)vocab};
    float bval[2] = {1.0f, 2.0f};
    p.bias_ids = bid, p.bias_values = bval, p.n_bias = 2; /* an id outside the vocabulary */
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    bid[1] = 4, bval[1] = NAN;
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    p.bias_values = NULL;
    st = tdm_llm_engine_submit(e, prompt, 4, &p, on_event, &g, &id);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    p.bias_ids = NULL, p.n_bias = 0;
    assert_int_equal(id, 77); /* untouched */
    assert_false(g.ended);
    /* a sequence that outgrows the whole pool ends with an error, and the engine goes on */
    p.top_logprobs = 0;
    p.ignore_eos = true;
    OK(tdm_llm_engine_submit(e, prompt, 100, &p, on_event, &g, &id));
    wait_ended(&g, 1);
    assert_int_equal(g.finish, TDM_LLM_FINISH_ERROR);
    assert_int_equal(g.n, 128 - 100 + 1);
    check_idle(e);
    tdm_llm_engine_stats s;
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.requests_total, 1);
    tdm_llm_engine_free(e);
    /* the pool sized in bytes: 2 layers x key and value x 16 tokens x 2 heads x 16 floats =
     * 8192 bytes a block */
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.kv_bytes = 100000;
    OK(tdm_llm_engine_create(env, model_dir(), &o, &e));
    tdm_llm_engine_get_stats(e, &s);
    assert_int_equal(s.kv_blocks_total, 12);
    assert_int_equal(s.block_size, 16);
    assert_int_equal(s.max_length, 256);
    tdm_llm_engine_free(e);
    /* a folder the engine cannot page */
    tdm_llm_engine *e2 = NULL;
    st = tdm_llm_engine_create(env, TINY_OPTIMUM, NULL, &e2);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    assert_null(e2);
    tdm_status_free(st);
    tdm_env_free(env);
}

/* kv_type: the pool's type and bytes follow it; bad values are refused. */
static void test_kv_type(void **state) {
    (void)state;
    tdm_env *env = new_env();
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.kv_bytes = 100000;
    /* 2 layers x key and value x 16 tokens x 2 heads x 16 values: 8192 bytes a block in
     * float32, 4096 in float16; rows of 18 bytes in int8 (16 codes, a scale) and int4 (one
     * group: 16 bytes of nibbles, a scale): 2304 */
    static const struct {
        const char *kv_type;
        tdm_dtype dtype;
        int64_t block_bytes, blocks;
    } ok[] = {{NULL, TDM_FLOAT, 8192, 12},    {"auto", TDM_FLOAT, 8192, 12},
              {"f32", TDM_FLOAT, 8192, 12},   {"f16", TDM_FLOAT16, 4096, 24},
              {"float16", TDM_FLOAT16, 4096, 24}, {"int8", TDM_INT8, 2304, 43},
              {"q4", TDM_UINT8, 2304, 43}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        o.kv_type = ok[i].kv_type;
        tdm_llm_engine *e = NULL;
        OK(tdm_llm_engine_create(env, TINY_GENAI_ACC0, &o, &e));
        tdm_llm_engine_stats s;
        tdm_llm_engine_get_stats(e, &s);
        tdm_dtype kvt = TDM_UNDEFINED;
        int64_t bb = 0;
        tdm_llm_engine_kv_cache(e, &kvt, &bb);
        assert_int_equal(kvt, ok[i].dtype);
        assert_int_equal(bb, ok[i].block_bytes);
        assert_int_equal(s.kv_blocks_total, ok[i].blocks);
        tdm_llm_engine_free(e);
    }
    static const struct {
        const char *dir, *kv_type;
        tdm_code code;
    } bad[] = {{TINY_GENAI_ACC0, "fp8", TDM_ERR_INVALID_ARGUMENT},
               {TINY_GENAI_ACC0, "F16", TDM_ERR_INVALID_ARGUMENT},
               /* a float16 model's cache does not widen to float32, nor quantise */
               {TANDEM_SOURCE_DIR "/tests/llm/models/tiny_genai_f16", "f32", TDM_ERR_UNSUPPORTED},
               {TANDEM_SOURCE_DIR "/tests/llm/models/tiny_genai_f16", "int4", TDM_ERR_UNSUPPORTED}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        o.kv_type = bad[i].kv_type;
        tdm_llm_engine *e = NULL;
        tdm_status *st = tdm_llm_engine_create(env, bad[i].dir, &o, &e);
        assert_non_null(st);
        assert_int_equal(tdm_status_code(st), bad[i].code);
        assert_non_null(strstr(tdm_status_message(st), "kv_type"));
        assert_null(e);
        tdm_status_free(st);
    }
    tdm_env_free(env);
}

int main(void) {
    if (getenv("TANDEM_ENGINE_MODEL") && *getenv("TANDEM_ENGINE_MODEL")) {
        int8_model(NULL);
        const struct CMUnitTest real[] = {
            cmocka_unit_test(test_concurrent_greedy),
        };
        int rc = cmocka_run_group_tests(real, NULL, NULL);
        fprintf(stderr, "largest top log-probability difference from the generator: %g\n",
                worst_top_diff[1]);
        return rc;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_concurrent_greedy),
        cmocka_unit_test_setup_teardown(test_concurrent_greedy, int8_model, float_model),
        cmocka_unit_test_setup_teardown(test_preemption, int8_model, float_model),
        cmocka_unit_test(test_preemption),
        cmocka_unit_test(test_chunked_prefill),
        cmocka_unit_test(test_prefix_cache),
        cmocka_unit_test(test_prefix_cache_generated),
        cmocka_unit_test(test_prefix_partial_live),
        cmocka_unit_test(test_prefix_partial_full_pool),
        cmocka_unit_test(test_no_batching),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_stops_and_sampling),
        cmocka_unit_test(test_bad_submits),
        cmocka_unit_test_setup_teardown(test_concurrent_greedy, f16_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_preemption, f16_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_chunked_prefill, f16_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_concurrent_greedy, q8_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_preemption, q8_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_concurrent_greedy, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_preemption, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_chunked_prefill, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_prefix_cache, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_prefix_cache_generated, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_prefix_partial_live, q4_pool, model_pool),
        cmocka_unit_test_setup_teardown(test_prefix_cache_generated, int8_model, float_model),
        cmocka_unit_test_setup_teardown(test_cancel, q4_pool, model_pool),
        cmocka_unit_test(test_kv_type),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    fprintf(stderr, "largest top log-probability difference from the generator: float "
            "activations %g, int8 activations %g, float16 pool %g, int8 pool %g, int4 pool %g\n",
            worst_top_diff[0], worst_top_diff[1], worst_top_diff[2], worst_top_diff[3],
            worst_top_diff[4]);
    return rc;
}
