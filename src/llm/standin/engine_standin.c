/* Stand-in for the LLM engine (include/tandem/engine.h) while its implementation
 * (src/llm/engine*.c, another branch) is absent: CMake compiles this file only then. It keeps
 * the API's contract with one tdm_generator and no batching: one thread runs the requests one
 * after the other (first come, first served), each from a reset generator; the "pool" has one
 * block per max_length. Enough for the server and its tests; no paging, no prefix cache. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "tandem/engine.h"

typedef struct sreq {
    uint64_t id;
    int32_t *prompt;
    size_t n_prompt;
    tdm_llm_request_params p;
    int32_t *stops;
    tdm_llm_event_fn fn;
    void *user;
    bool cancelled;
    struct sreq *next;
} sreq;

struct tdm_llm_engine {
    tdm_generator *gen;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop;
    sreq *head, *tail, *cur;
    uint64_t next_id;
    int waiting;
    size_t vocab;
    int max_length;
    tdm_llm_engine_stats st;
    float *logits;
};

static void end_event(sreq *r, tdm_llm_finish f, const tdm_status *st, int64_t gen) {
    tdm_llm_event ev = {r->id, -1, 0, NULL, 0, f, st, (int64_t)r->n_prompt, gen, 0};
    r->fn(r->user, &ev);
}

static void free_req(sreq *r) {
    free(r->prompt);
    free(r->stops);
    free(r);
}

static bool is_stop(const sreq *r, const tdm_generator *g, int32_t t) {
    for (size_t i = 0; i < r->p.n_stop_ids; i++)
        if (r->stops[i] == t) return true;
    return !r->p.ignore_eos && tdm_generator_is_stop_token(g, t);
}

/* Runs one request to its end on the engine thread. */
static void run_one(tdm_llm_engine *e, sreq *r) {
    tdm_generator *g = e->gen;
    tdm_sampling s = r->p.sampling;
    tdm_generator_set_sampling(g, &s);
    tdm_generator_reset(g); /* restarts the random numbers from the request's seed */
    tdm_status *st = tdm_generator_append(g, r->prompt, r->n_prompt);
    int64_t made = 0;
    tdm_llm_logprob top[20];
    int ntop = r->p.top_logprobs < 0 ? 0 : r->p.top_logprobs > 20 ? 20 : r->p.top_logprobs;
    tdm_llm_finish fin = TDM_LLM_FINISH_NONE;
    while (!st) {
        pthread_mutex_lock(&e->mu);
        bool cancelled = r->cancelled;
        pthread_mutex_unlock(&e->mu);
        if (cancelled) {
            fin = TDM_LLM_FINISH_CANCELLED;
            break;
        }
        const float *lg = NULL;
        size_t v = 0;
        st = tdm_generator_logits(g, &lg, &v);
        if (st) break;
        memcpy(e->logits, lg, v * sizeof *lg);
        int32_t t = -1;
        st = tdm_generator_next(g, &t);
        if (st) break;
        if (is_stop(r, g, t)) {
            fin = TDM_LLM_FINISH_STOP;
            break;
        }
        /* log-softmax at the request's temperature */
        float temp = s.temperature > 0 ? s.temperature : 1.0f, mx = -INFINITY;
        for (size_t i = 0; i < v; i++) mx = fmaxf(mx, e->logits[i] / temp);
        double sum = 0;
        for (size_t i = 0; i < v; i++) sum += exp(e->logits[i] / temp - mx);
        float lse = mx + (float)log(sum);
        int k = 0;
        for (int j = 0; j < ntop; j++) {
            int best = -1;
            for (size_t i = 0; i < v; i++) {
                bool taken = false;
                for (int q = 0; q < k; q++) taken |= top[q].token == (int32_t)i;
                if (!taken && (best < 0 || e->logits[i] > e->logits[best])) best = (int)i;
            }
            if (best < 0) break;
            top[k++] = (tdm_llm_logprob){best, e->logits[best] / temp - lse};
        }
        made++;
        tdm_llm_event ev = {r->id, t, e->logits[t] / temp - lse, top, k, TDM_LLM_FINISH_NONE,
                            NULL, (int64_t)r->n_prompt, made, 0};
        pthread_mutex_lock(&e->mu);
        e->st.generated_tokens_total++;
        pthread_mutex_unlock(&e->mu);
        r->fn(r->user, &ev);
        if ((r->p.max_tokens > 0 && made >= r->p.max_tokens) || tdm_generator_is_done(g)) {
            fin = TDM_LLM_FINISH_LENGTH;
            break;
        }
    }
    if (st && tdm_status_code(st) == TDM_ERR_CANCELLED) {
        tdm_status_free(st);
        st = NULL;
        fin = TDM_LLM_FINISH_CANCELLED;
    } else if (st && tdm_status_code(st) == TDM_ERR_LIMIT) {
        tdm_status_free(st);
        st = NULL;
        fin = TDM_LLM_FINISH_LENGTH;
    }
    end_event(r, st ? TDM_LLM_FINISH_ERROR : fin, st, made);
    tdm_status_free(st);
}

static void *engine_main(void *arg) {
    tdm_llm_engine *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->head && !e->stop) pthread_cond_wait(&e->cv, &e->mu);
        if (e->stop && !e->head) break;
        sreq *r = e->head;
        e->head = r->next;
        if (!e->head) e->tail = NULL;
        e->waiting--;
        e->cur = r;
        e->st.running = 1;
        e->st.kv_blocks_used = 1;
        pthread_mutex_unlock(&e->mu);
        if (r->cancelled) end_event(r, TDM_LLM_FINISH_CANCELLED, NULL, 0);
        else run_one(e, r);
        pthread_mutex_lock(&e->mu);
        e->cur = NULL;
        e->st.running = 0;
        e->st.kv_blocks_used = 0;
        e->st.steps_total++;
        free_req(r);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

tdm_status *tdm_llm_engine_create(tdm_env *env, const char *model_dir,
                                  const tdm_llm_engine_options *options, tdm_llm_engine **out) {
    tdm_generator_options go;
    memset(&go, 0, sizeof go);
    go.struct_size = sizeof go;
    if (options) {
        go.threads = options->threads;
        go.max_length = options->max_length;
    }
    tdm_llm_engine *e = calloc(1, sizeof *e);
    if (!e) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "engine");
    tdm_status *st = tdm_generator_create(env, model_dir, &go, &e->gen);
    if (st) {
        free(e);
        return st;
    }
    e->vocab = tdm_generator_vocab_size(e->gen);
    e->max_length = tdm_generator_max_length(e->gen);
    e->logits = malloc(e->vocab * sizeof *e->logits);
    e->st.kv_blocks_total = 1;
    e->st.block_size = e->max_length;
    e->st.max_length = e->max_length;
    e->next_id = 1;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    if (!e->logits || pthread_create(&e->thread, NULL, engine_main, e)) {
        tdm_generator_free(e->gen);
        free(e->logits);
        free(e);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "engine thread");
    }
    *out = e;
    return NULL;
}

void tdm_llm_engine_cancel(tdm_llm_engine *e, uint64_t id) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    for (sreq *r = e->head; r; r = r->next)
        if (r->id == id) r->cancelled = true;
    if (e->cur && e->cur->id == id) {
        e->cur->cancelled = true;
        tdm_generator_cancel(e->gen);
    }
    pthread_mutex_unlock(&e->mu);
}

void tdm_llm_engine_free(tdm_llm_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    for (sreq *r = e->head; r; r = r->next) r->cancelled = true;
    if (e->cur) {
        e->cur->cancelled = true;
        tdm_generator_cancel(e->gen);
    }
    e->stop = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    tdm_generator_free(e->gen);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e->logits);
    free(e);
}

tdm_status *tdm_llm_engine_submit(tdm_llm_engine *e, const int32_t *prompt, size_t n_prompt,
                                  const tdm_llm_request_params *params, tdm_llm_event_fn fn,
                                  void *user, uint64_t *id) {
    if (!e || !fn || !id) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "engine submit: NULL argument");
    if (!n_prompt) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the prompt is empty");
    for (size_t i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || (size_t)prompt[i] >= e->vocab)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "token id %d is outside the vocabulary (%zu)",
                           prompt[i], e->vocab);
    if (n_prompt >= (size_t)e->max_length)
        return TDM_ERR(TDM_ERR_LIMIT, "the prompt has %zu tokens; the context holds %d", n_prompt,
                       e->max_length);
    sreq *r = calloc(1, sizeof *r);
    if (!r || !(r->prompt = malloc(n_prompt * sizeof *prompt))) {
        free(r);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "engine submit");
    }
    memcpy(r->prompt, prompt, n_prompt * sizeof *prompt);
    r->n_prompt = n_prompt;
    if (params) r->p = *params;
    if (r->p.n_stop_ids) {
        r->stops = malloc(r->p.n_stop_ids * sizeof *r->stops);
        if (!r->stops) {
            free_req(r);
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "engine submit");
        }
        memcpy(r->stops, r->p.stop_ids, r->p.n_stop_ids * sizeof *r->stops);
    }
    r->p.stop_ids = NULL;
    r->fn = fn;
    r->user = user;
    pthread_mutex_lock(&e->mu);
    r->id = e->next_id++;
    if (e->tail) e->tail->next = r;
    else e->head = r;
    e->tail = r;
    e->waiting++;
    e->st.requests_total++;
    e->st.prompt_tokens_total += (int64_t)n_prompt;
    *id = r->id;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

void tdm_llm_engine_get_stats(tdm_llm_engine *e, tdm_llm_engine_stats *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->st;
    out->waiting = e->waiting;
    pthread_mutex_unlock(&e->mu);
}

const int32_t *tdm_llm_engine_eos_ids(const tdm_llm_engine *e, size_t *n) {
    return tdm_generator_eos_ids(e->gen, n);
}

size_t tdm_llm_engine_vocab_size(const tdm_llm_engine *e) { return e->vocab; }
int tdm_llm_engine_max_length(const tdm_llm_engine *e) { return e->max_length; }
