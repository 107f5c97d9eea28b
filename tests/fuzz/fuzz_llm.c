/* libFuzzer target: a language-model folder through the generator and the paged engine (what
 * `tandem generate`, `tandem bench --llm` and `tandem serve --llm` load).
 *
 * Input: a mode byte, then the bytes of one file of the folder; the other files are those of
 * tests/llm/models/tiny_genai (a 2-layer random-weight Llama: GroupQueryAttention with a shared
 * buffer, MatMulNBits, GatherBlockQuantized, SkipSimplifiedLayerNormalization).
 *   mode & 8:  the bytes are genai_config.json (the model is the tiny one);
 *              else they are model.onnx (the config is the tiny one's);
 *   mode & 3:  the KV cache type: the model's, "int8", "int4", "f16";
 *   mode & 4:  the paged engine (tdm_llm_engine: the graph edited for PagedAttention, blocks
 *              of 4) runs one request to its end; else the generator appends a prompt,
 *              generates two tokens, reads the logits, resets and goes again.
 * The prompt (1..6 ids, one of them now and then outside the vocabulary) and the sampling
 * (greedy, or temperature, top-k, top-p and repetition penalty at and past their ranges; for
 * the engine also presence / frequency penalties, logprobs, top_logprobs -1..21, stop ids and
 * logit biases, some outside the vocabulary or not finite) are drawn from the input's hash.
 * Statuses must be well formed, and nothing may leak through the allocator hook
 * (fuzz_common.h). Half of the mutations of a model are protobuf-aware (onnx_mutator.h).
 * The folder is a temporary directory made once per process and rewritten for each input. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "onnx_mutator.h"
#include "tandem/engine.h"
#include "tandem/generator.h"
#include "tandem/tandem.h"

#ifndef TANDEM_SOURCE_DIR
#define TANDEM_SOURCE_DIR "."
#endif

static fz_alloc g_alloc;
static tdm_env *g_env;
static long g_env_blocks;
static char g_dir[64];
static char *g_model, *g_config; /* the tiny folder's files */
static size_t g_model_size, g_config_size;

#define DIR_NAME "/fuzz_llm.XXXXXX"

/* the path of `name` inside the folder */
static void in_dir(const char *name, char *path, size_t cap) {
    snprintf(path, cap, "%s/%s", g_dir, name);
}

static void write_file(const char *name, const void *data, size_t size) {
    char path[128];
    in_dir(name, path, sizeof path);
    fz_write_file(path, data, size);
}

static void remove_dir(void) {
    char path[128];
    static const char *const files[2] = {"model.onnx", "genai_config.json"};
    for (int i = 0; i < 2; i++) in_dir(files[i], path, sizeof path), unlink(path);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *src = getenv("TANDEM_SOURCE_DIR");
    if (!src) src = TANDEM_SOURCE_DIR;
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/llm/models/tiny_genai/model.onnx", src);
    g_model = fz_read_file(path, &g_model_size);
    snprintf(path, sizeof path, "%s/tests/llm/models/tiny_genai/genai_config.json", src);
    g_config = fz_read_file(path, &g_config_size);
    const char *tmp = getenv("TMPDIR");
    if (!tmp || strlen(tmp) + sizeof DIR_NAME > sizeof g_dir) tmp = "/tmp"; /* a long TMPDIR */
    snprintf(g_dir, sizeof g_dir, "%s" DIR_NAME, tmp);
    if (!mkdtemp(g_dir)) abort();
    atexit(remove_dir);
    g_env = fz_env(&g_alloc);
    g_env_blocks = atomic_load(&g_alloc.live_blocks);
    return 0;
}

typedef struct ended {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool done;
} ended;

static void on_event(void *user, const tdm_llm_event *ev) {
    ended *e = user;
    if (ev->finish == TDM_LLM_FINISH_NONE) return;
    if (ev->finish == TDM_LLM_FINISH_ERROR) {
        tdm_code c = ev->status ? tdm_status_code(ev->status) : TDM_OK;
        const char *m = ev->status ? tdm_status_message(ev->status) : NULL;
        if (c <= TDM_OK || c > TDM_ERR_INTERNAL || !m || !m[0]) {
            fprintf(stderr, "fuzz_llm: an error event without a well-formed status\n");
            abort();
        }
    }
    pthread_mutex_lock(&e->mu);
    e->done = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

/* Sampling drawn from r: greedy half of the time, else temperatures, top-k / top-p and
 * penalties at and past their ranges (NaN and infinities included: the API clamps or refuses
 * them, it must not misbehave) */
static float pick_f(fz_rng *r, const float *v, size_t n) { return v[fz_below(r, n)]; }

static tdm_sampling draw_sampling(fz_rng *r) {
    static const float temps[] = {0.5f, 1.0f, 100.0f, 1e-30f, -1.0f, NAN, INFINITY};
    static const float ps[] = {0.0f, 0.5f, 0.999f, 1.0f, 1.5f, -1.0f, NAN};
    static const float pens[] = {0.0f, 1.0f, 1.3f, 1e30f, -2.0f, NAN, INFINITY};
    static const int ks[] = {0, 1, 5, 383, 384, 1 << 30, -1};
    tdm_sampling s;
    memset(&s, 0, sizeof s);
    if (fz_below(r, 2)) return s;
    s.temperature = pick_f(r, temps, sizeof temps / sizeof *temps);
    s.top_k = ks[fz_below(r, sizeof ks / sizeof *ks)];
    s.top_p = pick_f(r, ps, sizeof ps / sizeof *ps);
    s.repetition_penalty = pick_f(r, pens, sizeof pens / sizeof *pens);
    s.seed = fz_next(r);
    return s;
}

static void run_engine(const char *kv, const int32_t *prompt, size_t n, fz_rng *r) {
    tdm_llm_engine_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.threads = 1;
    o.max_length = 24;
    o.block_size = 4;
    o.kv_blocks = 16;
    o.kv_type = kv;
    tdm_llm_engine *e = NULL;
    fz_dirty_stack();
    tdm_status *st = tdm_llm_engine_create(g_env, g_dir, &o, &e);
    if (st) {
        fz_check_status(st);
        return;
    }
    ended end = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false};
    tdm_llm_request_params p;
    memset(&p, 0, sizeof p);
    p.struct_size = sizeof p;
    p.max_tokens = 3;
    p.sampling = draw_sampling(r);
    /* the first three of each list are in range; a quarter of the requests draw from all */
    static const float pens[] = {0.0f, 2.0f, -2.0f, 1e30f, NAN, INFINITY};
    static const int32_t ids[] = {0, 2, 383, 384, -1};
    static const float bias[] = {1.0f, -100.0f, 1e30f, NAN, -INFINITY};
    size_t w = fz_below(r, 4) ? 3 : 5;
    p.presence_penalty = pick_f(r, pens, w + 1);
    p.frequency_penalty = pick_f(r, pens, w + 1);
    p.logprobs = fz_below(r, 2);
    p.top_logprobs = w == 3 ? (int)fz_below(r, 21) : (int)fz_below(r, 23) - 1; /* API: 0..20 */
    int32_t stop[2], bias_ids[3];
    float bias_values[3];
    p.n_stop_ids = fz_below(r, 3);
    for (size_t i = 0; i < p.n_stop_ids; i++) stop[i] = ids[fz_below(r, w)];
    p.stop_ids = stop;
    p.n_bias = fz_below(r, 4);
    for (size_t i = 0; i < p.n_bias; i++)
        bias_ids[i] = ids[fz_below(r, w)], bias_values[i] = pick_f(r, bias, w);
    p.bias_ids = bias_ids;
    p.bias_values = bias_values;
    p.ignore_eos = fz_below(r, 2);
    uint64_t id = 0;
    st = tdm_llm_engine_submit(e, prompt, n, &p, on_event, &end, &id);
    if (st) {
        fz_check_status(st);
    } else {
        pthread_mutex_lock(&end.mu);
        while (!end.done) pthread_cond_wait(&end.cv, &end.mu);
        pthread_mutex_unlock(&end.mu);
    }
    tdm_llm_engine_free(e);
}

static void run_generator(const char *kv, const int32_t *prompt, size_t n, fz_rng *r) {
    tdm_generator_options o;
    memset(&o, 0, sizeof o);
    o.struct_size = sizeof o;
    o.max_length = 24;
    o.threads = 1;
    o.kv_type = kv;
    o.ignore_eos = true;
    o.sampling = draw_sampling(r);
    tdm_generator *g = NULL;
    fz_dirty_stack();
    tdm_status *st = tdm_generator_create(g_env, g_dir, &o, &g);
    if (st) {
        fz_check_status(st);
        return;
    }
    for (int round = 0; round < 2 && !st; round++) {
        st = tdm_generator_append(g, prompt, n);
        for (int k = 0; k < 2 && !st; k++) {
            int32_t tok = -1;
            st = tdm_generator_next(g, &tok);
            if (!st && (tok < 0 || (size_t)tok >= tdm_generator_vocab_size(g))) {
                fprintf(stderr, "fuzz_llm: token %d outside the vocabulary\n", (int)tok);
                abort();
            }
        }
        if (!st) {
            const float *logits = NULL;
            size_t nl = 0;
            st = tdm_generator_logits(g, &logits, &nl);
            volatile float sink = 0.0f;
            for (size_t i = 0; !st && i < nl; i++) sink += logits[i];
            (void)sink;
        }
        tdm_generator_reset(g);
    }
    fz_check_status(st);
    tdm_generator_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    unsigned mode = data[0];
    const uint8_t *body = data + 1;
    size_t n_body = size - 1;
    if (mode & 8) {
        write_file("model.onnx", g_model, g_model_size);
        write_file("genai_config.json", body, n_body);
    } else {
        write_file("model.onnx", body, n_body);
        write_file("genai_config.json", g_config, g_config_size);
    }
    fz_rng r = {fz_hash(data, size)};
    int32_t prompt[6];
    size_t n = 1 + fz_below(&r, 6);
    for (size_t i = 0; i < n; i++) prompt[i] = (int32_t)fz_below(&r, 384);
    if (fz_below(&r, 8) == 0) prompt[fz_below(&r, n)] = fz_below(&r, 2) ? -1 : 1 << 20;
    static const char *const kv[4] = {NULL, "int8", "int4", "f16"};
    if (mode & 4) run_engine(kv[mode & 3], prompt, n, &r);
    else run_generator(kv[mode & 3], prompt, n, &r);
    fz_check_leaks(&g_alloc, g_env_blocks);
    return 0;
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

/* a model: half of the time a protobuf-aware mutation of the bytes after the mode byte;
 * the mode byte itself now and then */
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    fz_rng r = {seed ^ fz_hash(data, size < 64 ? size : 64)};
    if (size >= 1 && fz_below(&r, 16) == 0) {
        data[0] = (uint8_t)fz_below(&r, 16);
        return size;
    }
    if (size > 1 && !(data[0] & 8) && fz_below(&r, 2) == 0) {
        size_t n = onnx_mutate_model(data + 1, size - 1, max_size - 1, &r);
        if (n) return n + 1;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}
