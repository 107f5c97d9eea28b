/*
 * tandem serve: language models served with OpenAI's API (issue 22).
 *
 * A model of the repository whose config has `backend: "tandem_llm"` is a language model: its
 * version folder (REPO/NAME/1/) is a model folder as `tandem generate` takes it (genai_config.json,
 * model.onnx, tokenizer.json, tokenizer_config.json). Loading it creates one tdm_llm_engine
 * (continuous batching over a paged KV cache; engine.h) and its tokenizer; the engine's
 * options come from the config's parameters (all optional):
 *
 *     max_batch, max_step_tokens, block_size, kv_blocks, kv_memory_mb, max_length,
 *     threads (or intra_op_thread_count), no_batching, no_prefix_cache   engine options
 *     max_waiting        requests waiting for the engine before new ones get 503 (default 1024)
 *
 * Its requests come through POST /v1/completions and /v1/chat/completions (openai.c); the
 * KServe endpoints list it in the repository index and load/unload it like any model (an
 * unload cancels its requests).
 *
 * Threading: the engine delivers a request's events on its own thread; they are turned into
 * the answer (or SSE chunks) there, under the request's lock, and the connection is resumed.
 * libmicrohttpd's threads never wait for the engine.
 */
#ifndef TDM_SERVE_OPENAI_H
#define TDM_SERVE_OPENAI_H

#include <pthread.h>

#include "serve/config.h"
#include "tandem/engine.h"
#include "tandem/tokenizer.h"

typedef struct sv_version sv_version;

#define SV_LLM_BUCKETS 16

/* A histogram in seconds (Prometheus' cumulative buckets are made when rendering). */
typedef struct sv_hist {
    uint64_t count[SV_LLM_BUCKETS + 1]; /* per bucket, the last one is +Inf */
    double sum;
    uint64_t n;
} sv_hist;

/* A request's place in its model's list of requests in progress. */
typedef struct sv_llm_link {
    struct sv_llm_link *prev, *next;
    uint64_t id; /* the engine's, once `live` */
    bool live;
    int fd;      /* the client's socket while its connection is open (watched), else -1 */
} sv_llm_link;

typedef struct sv_llm {
    char *name;
    tdm_llm_engine *engine;
    tdm_tokenizer *tok;
    int max_length;
    int max_waiting;
    int64_t created; /* load time (seconds since the epoch) */
    int32_t eos; /* the tokenizer's eos id (a stop token too, as tandem generate does), or -1 */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool closed;   /* unloading: new requests are refused */
    int active;    /* requests submitted whose end event has not come */
    sv_llm_link reqs;    /* those requests (a ring; cancelled by an unload) */
    /* metrics (under mu) */
    sv_hist ttft, itl;
    uint64_t finished[5];
    uint64_t gone;        /* requests cancelled because their client went away */
    pthread_t sweeper;    /* watches the clients of requests in progress (SV_SWEEP_MS) */
    bool sweeper_started, sweeper_stop; /* per tdm_llm_finish as answered: none(unused), stop, length,
                             cancelled, error */
} sv_llm;

/* Creates the engine and the tokenizer of the folder `dir`, and the sweeper thread: a client
 * whose connection waits suspended (libmicrohttpd does not watch it then: a request waiting
 * for its first token, or an answer that is not streamed) and goes away (FIN, RST) has its
 * request cancelled within SV_SWEEP_MS. */
sv_error *sv_llm_create(tdm_env *env, const sv_model_config *cfg, const char *name, const char *dir,
                        int threads, sv_llm **out);
/* Refuses new requests, cancels the ones in progress and waits for their end. */
void sv_llm_drain(sv_llm *m);
/* Cancels every request in progress (shutdown after the grace period). */
void sv_llm_cancel_all(sv_llm *m);
/* Frees the engine (after sv_llm_drain, or with requests still open: they are cancelled).
 * NULL-safe. */
void sv_llm_free(sv_llm *m);
void sv_hist_add(sv_hist *h, double seconds);
/* Prometheus text of the language models' metrics (the versions with an llm). */
void sv_llm_metrics(sv_version **v, int n, sv_buf *b);

#endif
