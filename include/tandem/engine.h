/*
 * tandem LLM engine: many generation requests served together on one model (continuous
 * batching over a paged KV cache). The generator (generator.h) runs one sequence; the engine
 * runs every active sequence in one model run per step: decode tokens of the running
 * sequences and chunks of new prompts are packed into one batch (the weight-only GEMMs read
 * the weights once per step for all of them), requests join at the next step and leave when
 * done.
 *
 * KV cache: one pool per engine of fixed-size blocks (block_size tokens, every layer's key and
 * value); a sequence owns a block table that grows as it does, and its blocks return to the
 * pool when it ends. Full blocks, of the prompt and of the tokens generated after it, are
 * shared with later requests whose prompts start with the same tokens (prefix cache, reference
 * counted; a conversation's next turn finds the previous answer's blocks); past the last full
 * block they share, a new prompt's leading tokens that another block holds computed (a cached
 * one, a running sequence's partly filled last block, or an ended sequence's, kept in the
 * cache) get their rows copied into a block of its own (or, when the pool has no other block, a
 * donor held by no one leaves the cache and becomes that block), so that the same prompt sent
 * again computes only its last token. When a running
 * sequence needs a block and the pool is empty, the newest running sequence is preempted: its
 * blocks are freed and it waits to be recomputed (its prompt and the tokens generated so far
 * prefilled again); its caller sees no difference but time.
 *
 * The model: an ONNX Runtime GenAI folder whose attention is com.microsoft GroupQueryAttention
 * (what tools/gguf_to_onnx.py writes); at creation the graph is edited so that attention reads
 * and writes the paged cache (com.microsoft PagedAttention) and the lm head computes only the
 * rows of each sequence's last position.
 *
 * Threading: the engine owns one thread that runs the steps. Submit, cancel, stats and free
 * may be called from any thread. Events are delivered on the engine thread, in order per
 * request; a callback must be quick (copy, queue, signal) and must not call back into the
 * engine except tdm_llm_engine_cancel. Conventions are tandem.h's: statuses, NULL-safe frees,
 * out-parameters untouched on failure.
 */
#ifndef TANDEM_ENGINE_H
#define TANDEM_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/generator.h"
#include "tandem/tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_llm_engine tdm_llm_engine;

/* ABI: set struct_size to sizeof(tdm_llm_engine_options); members past it take defaults. */
typedef struct tdm_llm_engine_options {
    size_t struct_size;
    int threads;             /* intra-op threads; 0 = the environment's default */
    int max_length;          /* tokens one sequence may hold (prompt + generated); 0 = as the
                                generator decides (folder's search.max_length...) */
    int max_batch;           /* sequences running at once; 0 = 16 */
    int max_step_tokens;     /* tokens in one model run (decode tokens + prefill chunks);
                                0 = 512. A longer prompt is prefilled in chunks over several
                                steps, so that running sequences keep getting tokens */
    int block_size;          /* tokens per KV block; 0 = 16 */
    int64_t kv_blocks;       /* blocks in the pool; 0 = from kv_bytes, else enough for
                                max_batch sequences of max_length */
    size_t kv_bytes;         /* pool size in bytes (when kv_blocks is 0); 0 = see kv_blocks */
    bool no_prefix_cache;    /* do not share blocks between requests */
    bool no_batching;        /* one request at a time, the others wait (llama.cpp-style
                                serving without batching: the baseline of the bench) */
    const char *kv_type;     /* the paged cache's element type (as vLLM's kv_cache_dtype;
                                the names of tdm_generator_options.kv_type): NULL, "" or "auto" =
                                the model's (float32, or float16 for a folder converted with
                                --kv-dtype float16); "f32" = float32, which must be the model's;
                                "f16" = float16 (from a float32 model too: the new keys and
                                values are rounded into the pool, attention computes in
                                float32; half the bytes a block, so twice the blocks for a
                                kv_bytes budget and half the cache bytes read per step).
                                "int8" / "int4" (from a float32 model): the generator's 8- and
                                4-bit rows (tdm_generator_options.kv_type), quantised as they
                                enter the pool, integer dot products in decode: 68 / 36 bytes a
                                row at head size 64 against 256, so 3.8x / 7.1x the blocks for a
                                kv_bytes budget; any other: TDM_ERR_INVALID_ARGUMENT */
    bool profile;            /* per-node times of every model run (step) on the engine's
                                session (tdm_session_options.profile): read them with
                                tdm_session_explain(tdm_llm_engine_session(engine),
                                TDM_EXPLAIN_PROFILE, ...) while no request runs */
} tdm_llm_engine_options;

/* What one request asks for. Zeroed = greedy, until a stop token or max_length. */
typedef struct tdm_llm_request_params {
    size_t struct_size;
    tdm_sampling sampling;   /* per request; seed makes it reproducible */
    int max_tokens;          /* generated tokens at most; 0 = until max_length */
    const int32_t *stop_ids; /* tokens that end it besides the folder's eos ids (copied) */
    size_t n_stop_ids;
    bool ignore_eos;
    int top_logprobs;        /* 0..20: with each token, the log-probabilities of the most
                                likely tokens (the model's logits at the temperature: before
                                the logit bias, the penalties, top-k and top-p) */
    bool logprobs;           /* each token event carries the token's log-probability (a
                                log-softmax over the vocabulary per token: asked for, as
                                OpenAI's logprobs; top_logprobs > 0 implies it) */
    float presence_penalty;  /* OpenAI's penalties, finite (the server takes -2..2; 0 = none):
                                before each choice (greedy too, after repetition_penalty and
                                before the temperature) the logit of every token this request
                                has generated so far (the prompt's tokens do not count) is
                                lowered by presence_penalty + frequency_penalty times how many
                                times it was generated */
    float frequency_penalty;
    const int32_t *bias_ids; /* OpenAI's logit_bias: before each choice (greedy too; before the
                                penalties) bias_values[i] is added to the logit of bias_ids[i],
                                i < n_bias (copied; ids inside the vocabulary, values finite; an
                                id twice adds both) */
    const float *bias_values;
    size_t n_bias;
} tdm_llm_request_params;

typedef enum tdm_llm_finish {
    TDM_LLM_FINISH_NONE = 0, /* not finished (a token event) */
    TDM_LLM_FINISH_STOP,     /* a stop token (eos or stop_ids; not delivered as a token) */
    TDM_LLM_FINISH_LENGTH,   /* max_tokens or max_length reached */
    TDM_LLM_FINISH_CANCELLED,/* tdm_llm_engine_cancel or engine freed */
    TDM_LLM_FINISH_ERROR     /* see status */
} tdm_llm_finish;

typedef struct tdm_llm_logprob {
    int32_t token;
    float logprob;
} tdm_llm_logprob;

/* One event of a request: a generated token (finish NONE), or its end (finish != NONE;
 * token -1), exactly one end event per accepted request, always last. */
typedef struct tdm_llm_event {
    uint64_t request;             /* the id submit gave */
    int32_t token;                /* -1 in the end event */
    float logprob;                /* of token (NAN unless the request asked: logprobs) */
    const tdm_llm_logprob *top;   /* top_logprobs entries, most likely first (valid during
                                     the callback) */
    int n_top;
    tdm_llm_finish finish;
    const tdm_status *status;     /* FINISH_ERROR: why (owned by the engine) */
    int64_t prompt_tokens;        /* in the end event: usage counts */
    int64_t generated_tokens;
    int64_t cached_tokens;        /* prompt tokens whose rows came from the prefix cache (in
                                     every event: known from the request's first step) */
} tdm_llm_event;

typedef void (*tdm_llm_event_fn)(void *user, const tdm_llm_event *event);

/* Loads the model folder (as tdm_generator_create takes it), edits the graph for the paged
 * cache and starts the engine thread. A model the engine cannot page (no GroupQueryAttention,
 * e.g. an optimum export) fails with TDM_ERR_UNSUPPORTED naming why. */
TDM_API tdm_status *tdm_llm_engine_create(tdm_env *env, const char *model_dir,
                                          const tdm_llm_engine_options *options,
                                          tdm_llm_engine **out);
/* Cancels every request (their end events are delivered, FINISH_CANCELLED), stops the
 * thread and frees everything. */
TDM_API void tdm_llm_engine_free(tdm_llm_engine *engine);

/* Queues a request (prompt ids are copied). Errors, at once and without any event: empty
 * prompt, a token id outside the vocabulary (TDM_ERR_INVALID_ARGUMENT), a prompt that leaves
 * no room to generate within max_length or that the whole pool could not hold (TDM_ERR_LIMIT).
 * On success *id names the request in events and cancel; fn gets its events. */
TDM_API tdm_status *tdm_llm_engine_submit(tdm_llm_engine *engine, const int32_t *prompt,
                                          size_t n_prompt, const tdm_llm_request_params *params,
                                          tdm_llm_event_fn fn, void *user, uint64_t *id);
/* Stops a request at the next step and frees its blocks; its end event (FINISH_CANCELLED)
 * follows unless it already ended. Unknown or finished ids are ignored. Any thread, also
 * from inside an event callback. */
TDM_API void tdm_llm_engine_cancel(tdm_llm_engine *engine, uint64_t id);

typedef struct tdm_llm_engine_stats {
    int running;                  /* sequences in the batch */
    int waiting;                  /* queued or preempted */
    int64_t kv_blocks_total;
    int64_t kv_blocks_used;       /* held by sequences or the prefix cache */
    int64_t kv_blocks_cached;     /* of those, held only by the prefix cache (reusable) */
    int block_size;
    int max_length;
    int64_t prompt_tokens_total;  /* prompt tokens of finished and running requests */
    int64_t generated_tokens_total;
    int64_t prefix_hit_tokens_total;
    int64_t preemptions_total;
    int64_t steps_total;          /* model runs */
    int64_t requests_total;       /* accepted */
} tdm_llm_engine_stats;
TDM_API void tdm_llm_engine_get_stats(tdm_llm_engine *engine, tdm_llm_engine_stats *out);
/* The paged KV cache's element type (options.kv_type resolved: TDM_FLOAT, TDM_FLOAT16, TDM_INT8
 * for "int8" or TDM_UINT8 for "int4") and
 * the bytes of one block (every layer's key and value rows); either pointer may be NULL.
 * Fixed when the engine is created. (Not members of tdm_llm_engine_stats: that struct has
 * no struct_size, so it cannot grow without overrunning a caller built against an older
 * header.) */
TDM_API void tdm_llm_engine_kv_cache(const tdm_llm_engine *engine, tdm_dtype *dtype,
                                     int64_t *block_bytes);
/* The folder's eos ids and vocabulary size (for the server's validation). */
TDM_API const int32_t *tdm_llm_engine_eos_ids(const tdm_llm_engine *engine, size_t *n);
TDM_API size_t tdm_llm_engine_vocab_size(const tdm_llm_engine *engine);
/* The session the engine runs its steps on (owned by the engine): for its profile
 * (tdm_llm_engine_options.profile; tdm_session_explain, tdm_session_reset_measurements) while
 * no request runs. Running it or freeing it is the engine's alone. NULL for NULL. */
TDM_API tdm_session *tdm_llm_engine_session(tdm_llm_engine *engine);
TDM_API int tdm_llm_engine_max_length(const tdm_llm_engine *engine);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_ENGINE_H */
