/*
 * tandem generator: the generation loop of a decoder-only language model, with its KV cache
 * and sampling, on token ids (text <-> ids: tokenizer.h).
 *
 * A generator is made from a model folder in one of the two forms in use:
 *  - ONNX Runtime GenAI's: genai_config.json (model.decoder.filename, the input and output
 *    names, eos_token_id, pad_token_id, search.max_length), the model (GroupQueryAttention:
 *    past_key_values.N.* may be as long as the context), tokenizer.json;
 *  - Hugging Face optimum's export: model.onnx with inputs input_ids, attention_mask,
 *    position_ids (optional), past_key_values.N.key / .value and outputs logits,
 *    present.N.key / .value, where present = past + the new positions; eos ids from
 *    generation_config.json or config.json when present.
 * The KV cache: for a GenAI folder (past_present_share_buffer) each layer's key and value
 * cache is allocated once, [1, kv_heads, max_length, head_dim], passed as the past input and
 * bound as the present output of every run (tandem.h "I/O binding"): the attention kernel
 * appends the new positions in place, nothing is copied or allocated per token for it. For an
 * optimum model the present outputs of a step become the past inputs of the next (the model's
 * own Concat is the only copy).
 *
 * Conventions are tandem.h's: statuses, NULL-safe frees, out-parameters untouched on
 * failure. Batch size 1. Threading: one thread drives a generator (append, next, logits,
 * reset); tdm_generator_cancel may be called from any thread at any time.
 *
 *     tdm_generator *g = NULL;
 *     tdm_generator_options o = {sizeof o};
 *     o.sampling.temperature = 0.7f, o.sampling.top_p = 0.9f, o.sampling.seed = 42;
 *     st = tdm_generator_create(env, "models/smollm2", &o, &g);
 *     st = tdm_generator_append(g, prompt_ids, n_prompt);     // prefill: one run
 *     while (!st && !tdm_generator_is_done(g)) {
 *         int32_t id;
 *         st = tdm_generator_next(g, &id);                   // decode one token
 *         if (!st && !tdm_generator_is_done(g)) print(id);   // (a stop token ends it)
 *     }
 *     tdm_generator_free(g);
 */
#ifndef TANDEM_GENERATOR_H
#define TANDEM_GENERATOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_generator tdm_generator;

/* How the next token is chosen from the logits of the last position. Zeroed = greedy. */
typedef struct tdm_sampling {
    float temperature;        /* 0 (or below): greedy (arg max; the lowest id on ties) */
    int top_k;                /* keep the k most likely tokens; 0 = all */
    float top_p;              /* keep the smallest set whose probability reaches p; 0 or >= 1 =
                                 all */
    float repetition_penalty; /* > 1 makes tokens already in the sequence (prompt included) less
                                 likely: a positive logit is divided by it, a negative one
                                 multiplied (as Hugging Face's); 0 or 1 = none. Applies to greedy
                                 choice too */
    uint64_t seed;            /* of the generator's own random numbers (deterministic: the same
                                 seed, options and model give the same tokens); reset restarts
                                 the sequence */
} tdm_sampling;

/* Called with each generated token (not for prompt tokens, and not for a stop token). Return
 * false to stop generating (tdm_generator_generate then returns success). */
typedef bool (*tdm_token_fn)(void *user, int32_t token);

/* ABI: set struct_size to sizeof(tdm_generator_options); members past it take defaults. */
typedef struct tdm_generator_options {
    size_t struct_size;
    int max_length;        /* tokens the context holds (prompt + generated); 0 = the folder's
                              search.max_length (genai_config.json), else the model's
                              max_position_embeddings (config.json), else 2048; a larger value
                              than the folder's is capped at it. The shared KV cache is
                              allocated for it at creation */
    int threads;           /* intra-op threads; 0 = the environment's default */
    const char *device;    /* NULL or "cpu", or another device of the environment (e.g.
                              "test:0", "opencl:0", "cuda:0"): the decoder's nodes are placed on
                              it (any it lacks on the CPU), and device_memory budgets the
                              device (weights, activations and the KV caches kept there:
                              "DEV=SIZE" or "DEV=P%" of the weights, the caches on top; what
                              does not fit resident is streamed or left on the CPU, as the
                              session decides). Each layer's KV cache (shared-buffer form) stays
                              on the device of its attention, bound in place (no copies per
                              token), when the budget holds it: all layers, the first ones
                              (split by layer), or none; the others live in host memory and
                              are uploaded / downloaded each step (tandem plan --json and the
                              session's explanation: "kv_cache") */
    tdm_sampling sampling;
    const int32_t *stop_ids; /* tokens that end generation besides the folder's eos ids */
    size_t n_stop_ids;
    bool ignore_eos;       /* the folder's eos ids neither end generation nor are sampled
                              (their logits are set to -inf before sampling, as llama.cpp's
                              --ignore-eos and ORT GenAI's min_length do): fixed-length runs
                              for benchmarks and reference comparisons */
    bool dynamic_mask;     /* shared KV cache only: attention_mask as [1, tokens so far]
                              instead of the default [1, max_length] with ones for the tokens
                              so far and zeros after (GroupQueryAttention reads the lengths
                              from the mask's sums; the fixed shape lets every decode step
                              reuse one memory plan: no allocation per token) */
    bool all_logits;       /* run the model as it is, computing the logits of every position
                              of a run. By default (false) the graph is edited at creation so
                              that the lm head (the MatMul / MatMulNBits that makes the logits)
                              gets only the last position's row: a prefill of n tokens skips
                              n - 1 rows of the head and writes [1, 1, vocab]. The API gives
                              the last position's logits either way (tdm_generator_logits) */
    const char *device_memory; /* memory budget "cpu=SIZE" (tdm_session_options.device_memory):
                              the KV cache (max_length long) counts against it with the
                              weights and activations; over it, creation fails with
                              TDM_ERR_LIMIT saying which part is too big. NULL = none */
    const char *residency; /* tdm_session_options.residency, e.g. "mapped" */
    const char *kv_type;   /* the KV cache's element type (as llama.cpp's --cache-type-k/v):
                              NULL, "" or "auto" = the model's (float32, or float16 for a folder
                              converted with --kv-dtype float16); "f32" / "f16" = that one, which
                              must be the model's; "int8" = 8-bit codes with one bfloat16 scale
                              per 32 (68 bytes a row of 64 values: about a quarter of float32's
                              bytes), "int4" = 4-bit codes as GGUF's Q4_0 (36 bytes a row of 64;
                              less exact, less to read per decode step); both for shared-buffer
                              GroupQueryAttention models with a float32 cache, CPU only. Any
                              other: TDM_ERR_INVALID_ARGUMENT; a type the model cannot take:
                              TDM_ERR_UNSUPPORTED */
    bool profile;          /* record per-node times of every run (tdm_session_options.profile):
                              tdm_session_explain(tdm_generator_session(gen),
                              TDM_EXPLAIN_PROFILE, ...) shows them per op type and per node,
                              tdm_session_reset_measurements starts again (tandem bench --llm
                              --profile: the decode steps of each tg test) */
    float presence_penalty;  /* OpenAI's penalties, finite (0 = none), as the engine's
                                (include/tandem/engine.h): before each choice, greedy too, the
                                logit of every token the generator has generated since it was
                                made or reset (not the appended ones) is lowered by
                                presence_penalty + frequency_penalty times its count */
    float frequency_penalty;
} tdm_generator_options;

/* Loads the model folder (see above) and prepares the session. `options` may be NULL. */
TDM_API tdm_status *tdm_generator_create(tdm_env *env, const char *model_dir,
                                         const tdm_generator_options *options,
                                         tdm_generator **out);
TDM_API void tdm_generator_free(tdm_generator *gen);

/* Feeds tokens (the prompt, or more of it later): one run of the model for all of them
 * (prefill; the kernels see a batch of n rows). Past max_length: TDM_ERR_LIMIT. */
TDM_API tdm_status *tdm_generator_append(tdm_generator *gen, const int32_t *ids, size_t n);
/* Chooses the next token from the logits of the last position (tdm_sampling), appends it to
 * the sequence and returns it. A stop token (eos or stop_ids) or reaching max_length makes
 * the generator done (the stop token is returned but not fed to the model). The token is fed
 * to the model lazily, by the next call that needs logits. Before any append, and when done:
 * TDM_ERR_INVALID_ARGUMENT. After tdm_generator_cancel: TDM_ERR_CANCELLED. */
TDM_API tdm_status *tdm_generator_next(tdm_generator *gen, int32_t *token);
/* Generates up to max_new_tokens tokens (0 = until done), calling on_token (may be NULL) for
 * each; stops early when on_token returns false, at a stop token, at max_length, or on
 * cancellation (TDM_ERR_CANCELLED). */
TDM_API tdm_status *tdm_generator_generate(tdm_generator *gen, size_t max_new_tokens,
                                           tdm_token_fn on_token, void *user);
/* The logits of the last position (feeding a token chosen by next first): *vocab floats,
 * owned by the generator, valid until its next call. */
TDM_API tdm_status *tdm_generator_logits(tdm_generator *gen, const float **logits,
                                         size_t *vocab);
/* Stop token seen, max_length reached, or cancelled. */
TDM_API bool tdm_generator_is_done(const tdm_generator *gen);
/* Forgets the sequence and the cache (keeps the session and the allocations), clears a
 * cancellation and restarts the random numbers from the seed. */
TDM_API void tdm_generator_reset(tdm_generator *gen);
/* Asks the generator to stop: the call in progress (or the next) returns TDM_ERR_CANCELLED
 * after its current model run. Any thread (one atomic store). */
TDM_API void tdm_generator_cancel(tdm_generator *gen);
/* Changes the sampling for the next tokens (the random numbers continue). */
TDM_API void tdm_generator_set_sampling(tdm_generator *gen, const tdm_sampling *sampling);

/* The sequence so far (prompt and generated, a stop token included); owned by the generator. */
TDM_API const int32_t *tdm_generator_tokens(const tdm_generator *gen, size_t *n);
TDM_API size_t tdm_generator_vocab_size(const tdm_generator *gen);
TDM_API int tdm_generator_max_length(const tdm_generator *gen);
/* Whether `token` ends generation (an eos id unless ignore_eos, or a stop id). */
TDM_API bool tdm_generator_is_stop_token(const tdm_generator *gen, int32_t token);
/* The folder's eos ids (genai_config.json / generation_config.json / config.json). */
TDM_API const int32_t *tdm_generator_eos_ids(const tdm_generator *gen, size_t *n);
/* "genai" (shared KV buffers, I/O binding) or "optimum" (present fed back as past). */
TDM_API const char *tdm_generator_form(const tdm_generator *gen);
/* The KV cache's element type: "f32", "f16", "int8" or "int4" (options.kv_type). */
TDM_API const char *tdm_generator_kv_type(const tdm_generator *gen);

/* Times since create or reset. */
typedef struct tdm_generator_stats {
    int64_t prompt_tokens;  /* tokens given to append */
    double prefill_ms;      /* in the runs of append */
    int64_t decode_tokens;  /* tokens fed by next (one run each) */
    double decode_ms;       /* in those runs and in sampling */
    double ttft_ms;         /* from the first append to the first generated token */
} tdm_generator_stats;
TDM_API void tdm_generator_get_stats(const tdm_generator *gen, tdm_generator_stats *out);
/* The generator's session (owned by it): for tdm_session_monitor (a device's peak, bytes
 * uploaded per token) and, with options.profile, tdm_session_explain's measured times. */
TDM_API tdm_session *tdm_generator_session(tdm_generator *gen);
/* Bytes of weights one decode step reads, as the session holds them (packed forms included):
 * every constant tensor a node of the planned graph reads, whole, except the tables a step
 * reads one row of (the token embedding, the rotary cos / sin caches). The numerator of a
 * decode's memory bandwidth (tandem bench --llm). 0 without a session, -1 out of memory. */
TDM_API int64_t tdm_generator_weight_bytes_per_token(const tdm_generator *gen);
/* Bytes of the KV cache one decode step reads per cached position, as the cache holds them:
 * every layer's key and value rows (kv_heads rows of head_dim elements, or of the 8- / 4-bit
 * row format). A step at position P reads P times this besides the weights (tandem bench --llm
 * --depth). 0 without a generator. */
TDM_API int64_t tdm_generator_kv_bytes_per_position(const tdm_generator *gen);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_GENERATOR_H */
