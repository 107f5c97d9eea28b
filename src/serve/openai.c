/*
 * tandem serve: OpenAI's API on the HTTP port (see openai.h for the models).
 *
 *   POST /v1/completions        prompt (a string, or token ids), max_tokens (default 16)
 *   POST /v1/chat/completions   messages through the model's chat template (with the
 *                               generation prompt), max_tokens / max_completion_tokens
 *                               (default: up to the context)
 *   GET  /v1/models, /v1/models/NAME
 *
 * Sampling: temperature (default 1; 0 = greedy), top_p, top_k (-1 or 0 = all; an extension
 * as in vLLM), seed, presence_penalty and frequency_penalty (-2..2, over the tokens the request
 * generated), logit_bias (up to 1024 token ids, -100..100, added before the penalties),
 * repetition_penalty and ignore_eos (vLLM's extensions). stop: a string or
 * up to 16; matched on the generated text, which is cut before the match, and the request
 * stops in the engine at once. n = 1 only. logprobs: completions `logprobs: N` (0..20), chat
 * `logprobs: true` with `top_logprobs: N`. stream: server-sent events, `data: {chunk}` then
 * `data: [DONE]`; stream_options.include_usage adds the usage chunk (choices []) at the end.
 * While streaming, text that may be the start of a stop string is held back until it is
 * known not to be (openai_text.c keeps the text). Generated text may hold NUL bytes (sent as
 * \u0000); a request whose strings hold one is refused (400).
 *
 * Errors: {"error": {"message", "type", "param", "code"}} with 400 (invalid_request_error;
 * code context_length_exceeded when the prompt and max_tokens do not fit the context), 404
 * (model_not_found), 413 (body too large), 503 (the model's queue is full, or it is being
 * unloaded; Retry-After), 500. A stream that fails after its start sends an error chunk
 * ({"error": {...}}) and [DONE].
 *
 * A request: parsed and tokenized on libmicrohttpd's thread, submitted to the engine; a
 * non-streaming one suspends its connection until its end event builds the answer; a
 * streaming one answers at once with a callback response whose reader takes the chunks that
 * the engine's events queue, and suspends the connection while there is none. A client that
 * goes away (the request-completed notification) cancels its request in the engine.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve/openai.h"
#include "serve/openai_parse.h"
#include "serve/openai_text.h"
#include "serve/repo.h"
#include "serve/server_impl.h"

#define OA_JSON_DEPTH 64
#define OA_TREE_FACTOR 16 /* bytes of jansson's tree per byte of JSON text, at most */
#define OA_TEXT_OOM_MSG "out of memory for the completion's text"

typedef struct oa_req {
    sv_llm_link link; /* in llm->reqs, under llm->mu */
    pthread_mutex_t mu;
    int refs;         /* the connection's and (once submitted) the engine's */
    sv_conn *c;       /* NULL once the connection is done */
    sv_llm *llm;
    bool chat, stream, include_usage, logprobs;
    int top_logprobs;
    char id[48];
    char *model;
    int64_t created;
    tdm_token_stream *ts;
    oa_text tx;       /* the completion: its text, stop strings, logprob tokens, what was sent */
    int32_t *ids;     /* the generated tokens */
    size_t n_ids, cap_ids;
    int64_t prompt_tokens, gen_tokens;
    int64_t cached_tokens; /* of the prompt's, from the prefix cache (the engine's events) */
    bool finished;    /* the answer's end is known */
    bool oom;         /* the completion's text could not grow: the answer is an error (500) */
    bool engine_done; /* the end event came */
    const char *finish;
    uint64_t t_recv, t_last;
    /* streaming */
    sv_buf out;
    size_t out_pos;
    bool out_done, reader_waiting;
} oa_req;

/* ---- errors ----------------------------------------------------------------------------------- */

void sv_openai_error_json(sv_buf *b, int http, const char *msg, const char *param, const char *code) {
    const char *type = http >= 500 ? "server_error" : http == 401 ? "authentication_error"
                     : http == 429 ? "rate_limit_error" : "invalid_request_error";
    sv_buf_str(b, "{\"error\":{\"message\":");
    sv_buf_json_str(b, msg, strlen(msg));
    sv_buf_printf(b, ",\"type\":\"%s\",\"param\":", type);
    if (param) sv_buf_json_str(b, param, strlen(param));
    else sv_buf_str(b, "null");
    sv_buf_str(b, ",\"code\":");
    if (code) sv_buf_json_str(b, code, strlen(code));
    else sv_buf_str(b, "null");
    sv_buf_str(b, "}}");
}

static void set_error(sv_conn *c, int http, const char *msg, const char *param, const char *code) {
    sv_buf b = {0};
    sv_openai_error_json(&b, http, msg, param, code);
    size_t len = 0;
    char *p = sv_buf_take(&b, &len);
    sv_http_answer(c, p ? http : 500, p, len, "application/json");
}

static enum MHD_Result fail(sv_conn *c, int http, const char *param, const char *code, const char *fmt,
                            ...) __attribute__((format(printf, 5, 6)));
static enum MHD_Result fail(sv_conn *c, int http, const char *param, const char *code, const char *fmt,
                            ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    set_error(c, http, msg, param, code);
    return sv_http_send_answer(c);
}

static enum MHD_Result fail_error(sv_conn *c, sv_error *e, const char *code) {
    set_error(c, e->http, e->msg, NULL, code);
    sv_error_free(e);
    return sv_http_send_answer(c);
}

/* ---- requests --------------------------------------------------------------------------------- */

static void req_unref(oa_req *r) {
    pthread_mutex_lock(&r->mu);
    bool last = --r->refs == 0;
    pthread_mutex_unlock(&r->mu);
    if (!last) return;
    tdm_token_stream_free(r->ts);
    oa_text_free(&r->tx);
    sv_buf_free(&r->out);
    free(r->ids);
    free(r->model);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void json_float(sv_buf *b, float v) {
    if (!isfinite(v)) v = -9999.0f; /* OpenAI's value for an impossible token */
    sv_buf_printf(b, "%.6g", (double)v);
}

/* The text of one token (as the completion would show it alone). */
static void token_text(const oa_req *r, int32_t id, sv_buf *b, bool as_bytes) {
    char *s = NULL;
    size_t n = 0;
    tdm_status *st = tdm_tokenizer_decode(r->llm->tok, &id, 1, false, &s, &n);
    if (st) {
        tdm_status_free(st);
        s = NULL, n = 0;
    }
    if (as_bytes) {
        sv_buf_str(b, "[");
        for (size_t i = 0; i < n; i++) sv_buf_printf(b, "%s%u", i ? "," : "", (unsigned char)s[i]);
        sv_buf_str(b, "]");
    } else {
        sv_buf_json_str(b, s ? s : "", n);
    }
    tdm_string_free(s);
}

/* The logprobs object of tokens [from, to). */
static void logprobs_json(const oa_req *r, size_t from, size_t to, sv_buf *b) {
    if (r->chat) {
        sv_buf_str(b, "{\"content\":[");
        for (size_t i = from; i < to; i++) {
            const oa_tok *t = &r->tx.toks[i];
            sv_buf_str(b, i > from ? ",{\"token\":" : "{\"token\":");
            token_text(r, t->id, b, false);
            sv_buf_str(b, ",\"logprob\":");
            json_float(b, t->lp);
            sv_buf_str(b, ",\"bytes\":");
            token_text(r, t->id, b, true);
            sv_buf_str(b, ",\"top_logprobs\":[");
            for (int k = 0; k < t->n_top && k < r->top_logprobs; k++) {
                sv_buf_str(b, k ? ",{\"token\":" : "{\"token\":");
                token_text(r, t->top[k].token, b, false);
                sv_buf_str(b, ",\"logprob\":");
                json_float(b, t->top[k].logprob);
                sv_buf_str(b, ",\"bytes\":");
                token_text(r, t->top[k].token, b, true);
                sv_buf_str(b, "}");
            }
            sv_buf_str(b, "]}");
        }
        sv_buf_str(b, "],\"refusal\":null}");
        return;
    }
    sv_buf_str(b, "{\"tokens\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) sv_buf_str(b, ",");
        token_text(r, r->tx.toks[i].id, b, false);
    }
    sv_buf_str(b, "],\"token_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        if (i > from) sv_buf_str(b, ",");
        json_float(b, r->tx.toks[i].lp);
    }
    sv_buf_str(b, "],\"top_logprobs\":[");
    for (size_t i = from; i < to; i++) {
        sv_buf_str(b, i > from ? ",{" : "{");
        for (int k = 0; k < r->tx.toks[i].n_top && k < r->top_logprobs; k++) {
            if (k) sv_buf_str(b, ",");
            token_text(r, r->tx.toks[i].top[k].token, b, false);
            sv_buf_str(b, ":");
            json_float(b, r->tx.toks[i].top[k].logprob);
        }
        sv_buf_str(b, "}");
    }
    sv_buf_str(b, "],\"text_offset\":[");
    for (size_t i = from; i < to; i++) sv_buf_printf(b, "%s%zu", i > from ? "," : "", r->tx.toks[i].offset);
    sv_buf_str(b, "]}");
}

/* OpenAI's usage object; prompt_tokens_details.cached_tokens: the prompt tokens whose keys and
 * values came from the prefix cache (as OpenAI and vLLM report them). */
static void usage_json(const oa_req *r, sv_buf *b) {
    sv_buf_printf(b, "{\"prompt_tokens\":%lld,\"completion_tokens\":%lld,\"total_tokens\":%lld,"
                  "\"prompt_tokens_details\":{\"cached_tokens\":%lld}}",
                  (long long)r->prompt_tokens, (long long)r->gen_tokens,
                  (long long)(r->prompt_tokens + r->gen_tokens), (long long)r->cached_tokens);
}

/* The start of a response object or chunk: id, object, created, model. */
static void head_json(const oa_req *r, sv_buf *b, bool chunk) {
    sv_buf_printf(b, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r->id,
                  r->chat ? (chunk ? "chat.completion.chunk" : "chat.completion") : "text_completion",
                  (long long)r->created);
    sv_buf_json_str(b, r->model, strlen(r->model));
    sv_buf_str(b, ",\"system_fingerprint\":null");
}

/* Queues one SSE chunk: `text` (may be empty), the logprobs of tokens [lp_from, lp_to), the
 * finish reason (NULL = none yet). */
static void stream_chunk(oa_req *r, const char *text, size_t len, size_t lp_from, size_t lp_to,
                         const char *finish, bool role) {
    sv_buf *b = &r->out;
    sv_buf_str(b, "data: ");
    head_json(r, b, true);
    sv_buf_str(b, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        sv_buf_str(b, "\"delta\":{");
        if (role) sv_buf_str(b, "\"role\":\"assistant\",\"content\":\"\"");
        else if (len || !finish) {
            sv_buf_str(b, "\"content\":");
            sv_buf_json_str(b, text, len);
        }
        sv_buf_str(b, "}");
    } else {
        sv_buf_str(b, "\"text\":");
        sv_buf_json_str(b, text, len);
    }
    sv_buf_str(b, ",\"logprobs\":");
    if (r->logprobs && lp_to > lp_from) logprobs_json(r, lp_from, lp_to, b);
    else sv_buf_str(b, "null");
    sv_buf_str(b, ",\"finish_reason\":");
    if (finish) sv_buf_printf(b, "\"%s\"", finish);
    else sv_buf_str(b, "null");
    sv_buf_str(b, "}]");
    if (r->include_usage) sv_buf_str(b, ",\"usage\":null");
    sv_buf_str(b, "}\n\n");
}

/* The end of a stream: the rest of the text (and logprobs) with the finish reason, the usage,
 * [DONE]. */
static void stream_end(oa_req *r) {
    oa_chunk k;
    oa_text_release(&r->tx, true, &k);
    stream_chunk(r, r->tx.text.p + k.from, k.to - k.from, k.lp_from, k.lp_to, r->finish, false);
    if (r->include_usage) {
        sv_buf_str(&r->out, "data: ");
        head_json(r, &r->out, true);
        sv_buf_str(&r->out, ",\"choices\":[],\"usage\":");
        usage_json(r, &r->out);
        sv_buf_str(&r->out, "}\n\n");
    }
    sv_buf_str(&r->out, "data: [DONE]\n\n");
    r->out_done = true;
}

static void stream_error(oa_req *r, int http, const char *msg) {
    sv_buf_str(&r->out, "data: ");
    sv_openai_error_json(&r->out, http, msg, NULL, NULL);
    sv_buf_str(&r->out, "\n\ndata: [DONE]\n\n");
    r->out_done = true;
}

/* The whole answer of a request that is not streamed. */
static void final_answer(oa_req *r) {
    sv_buf b = {0};
    head_json(r, &b, false);
    sv_buf_str(&b, ",\"choices\":[{\"index\":0,");
    if (r->chat) {
        sv_buf_str(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
        sv_buf_json_str(&b, r->tx.text.p, r->tx.text.len);
        sv_buf_str(&b, ",\"refusal\":null}");
    } else {
        sv_buf_str(&b, "\"text\":");
        sv_buf_json_str(&b, r->tx.text.p, r->tx.text.len);
    }
    sv_buf_str(&b, ",\"logprobs\":");
    if (r->logprobs) logprobs_json(r, 0, r->tx.n_toks, &b);
    else sv_buf_str(&b, "null");
    sv_buf_printf(&b, ",\"finish_reason\":\"%s\"}],\"usage\":", r->finish);
    usage_json(r, &b);
    sv_buf_str(&b, "}");
    size_t len = 0;
    char *p = sv_buf_take(&b, &len);
    if (p) sv_http_answer(r->c, 200, p, len, "application/json");
    else set_error(r->c, 500, "out of memory", NULL, NULL);
}

/* Resumes a streaming connection whose reader waits for data (r->mu held). */
static void wake(oa_req *r) {
    if (r->reader_waiting && r->c) {
        r->reader_waiting = false;
        sv_http_resume(r->c);
    }
}

/* A request ends early (a stop string, out of memory) while the engine runs it: counted as
 * `finish` before the answer goes out (a client that has it sees it counted); the caller
 * cancels it in the engine. */
static void end_early(oa_req *r, tdm_llm_finish finish) {
    r->finished = true;
    r->finish = finish == TDM_LLM_FINISH_STOP ? "stop" : NULL;
    pthread_mutex_lock(&r->llm->mu);
    r->llm->finished[finish]++;
    pthread_mutex_unlock(&r->llm->mu);
}

static void on_token(oa_req *r, const tdm_llm_event *ev) {
    sv_llm *m = r->llm;
    bool cancel = false;
    pthread_mutex_lock(&r->mu);
    uint64_t now = sv_now_ns();
    pthread_mutex_lock(&m->mu);
    if (r->t_last) sv_hist_add(&m->itl, (double)(now - r->t_last) * 1e-9);
    else sv_hist_add(&m->ttft, (double)(now - r->t_recv) * 1e-9);
    pthread_mutex_unlock(&m->mu);
    r->t_last = now;
    r->cached_tokens = ev->cached_tokens;
    if (r->finished || (r->stream && !r->c)) { /* stopped at a stop string, or nobody reads the
                                                 stream any more: the cancel is on its way */
        pthread_mutex_unlock(&r->mu);
        return;
    }
    r->gen_tokens++;
    if (r->n_ids == r->cap_ids) {
        size_t nc = r->cap_ids ? 2 * r->cap_ids : 64;
        int32_t *t = realloc(r->ids, nc * sizeof *t);
        if (t) r->ids = t, r->cap_ids = nc;
    }
    if (r->n_ids < r->cap_ids) r->ids[r->n_ids++] = ev->token;
    const char *piece = "";
    size_t len = 0;
    tdm_status *st = tdm_token_stream_push(r->ts, ev->token, &piece, &len);
    if (st) {
        tdm_status_free(st);
        piece = "", len = 0;
    }
    oa_tok tok;
    if (r->logprobs) {
        tok.id = ev->token;
        tok.lp = ev->logprob;
        tok.n_top = ev->n_top < OA_MAX_TOP ? ev->n_top : OA_MAX_TOP;
        if (tok.n_top > 0) memcpy(tok.top, ev->top, (size_t)tok.n_top * sizeof *tok.top);
    }
    oa_text_result res = oa_text_add(&r->tx, piece, len, r->logprobs ? &tok : NULL);
    if (res == OA_TEXT_STOP) {
        end_early(r, TDM_LLM_FINISH_STOP);
        cancel = true;
    } else if (res == OA_TEXT_OOM) {
        end_early(r, TDM_LLM_FINISH_ERROR);
        r->oom = true; /* the answer is an error (500) */
        cancel = true;
    }
    if (r->stream) {
        if (res == OA_TEXT_OOM) {
            stream_error(r, 500, OA_TEXT_OOM_MSG);
        } else if (r->finished) {
            stream_end(r);
        } else {
            oa_chunk k;
            if (oa_text_release(&r->tx, false, &k))
                stream_chunk(r, r->tx.text.p + k.from, k.to - k.from, k.lp_from, k.lp_to, NULL, false);
        }
        wake(r);
    }
    uint64_t id = ev->request;
    pthread_mutex_unlock(&r->mu);
    if (cancel) tdm_llm_engine_cancel(m->engine, id);
}

/* At the natural end: the incremental decoder holds back the bytes of an unfinished UTF-8
 * character; the completion ends as tdm_tokenizer_decode of all its tokens does (with
 * U+FFFD for them). */
static oa_text_result flush_text(oa_req *r) {
    if (!r->n_ids || r->n_ids != (size_t)r->gen_tokens) return OA_TEXT_MORE;
    char *s = NULL;
    size_t n = 0;
    tdm_status *st = tdm_tokenizer_decode(r->llm->tok, r->ids, r->n_ids, true, &s, &n);
    if (st) {
        tdm_status_free(st);
        return OA_TEXT_MORE;
    }
    const sv_buf *t = &r->tx.text;
    oa_text_result res = OA_TEXT_MORE;
    if (n > t->len && !memcmp(s, t->p, t->len)) /* (a stop string may end in it) */
        res = oa_text_add(&r->tx, s + t->len, n - t->len, NULL);
    tdm_string_free(s);
    return res;
}

static void on_end(oa_req *r, const tdm_llm_event *ev) {
    sv_llm *m = r->llm;
    pthread_mutex_lock(&r->mu);
    r->engine_done = true;
    r->cached_tokens = ev->cached_tokens;
    int counted = -1, http = 0;
    char msg[600] = "";
    if (!r->finished) {
        r->finished = true;
        counted = ev->finish >= 1 && ev->finish <= 4 ? (int)ev->finish : 4;
        switch (ev->finish) {
        case TDM_LLM_FINISH_STOP: r->finish = "stop"; break;
        case TDM_LLM_FINISH_LENGTH: r->finish = "length"; break;
        case TDM_LLM_FINISH_CANCELLED:
            http = 503;
            snprintf(msg, sizeof msg, "the request was cancelled: model '%s' is being unloaded or the "
                     "server is stopping", r->model);
            break;
        default:
            http = 500;
            snprintf(msg, sizeof msg, "generation failed: %s",
                     ev->status ? tdm_status_message(ev->status) : "unknown error");
            break;
        }
        oa_text_result res = http ? OA_TEXT_MORE : flush_text(r);
        if (res == OA_TEXT_STOP) {
            r->finish = "stop";
            counted = TDM_LLM_FINISH_STOP;
        } else if (res == OA_TEXT_OOM) {
            r->oom = true;
            counted = TDM_LLM_FINISH_ERROR;
        }
    }
    if (r->oom && !http) {
        http = 500;
        snprintf(msg, sizeof msg, "%s", OA_TEXT_OOM_MSG);
    }
    if (counted > 0) { /* before the answer goes out: a client that has it sees it counted */
        pthread_mutex_lock(&m->mu);
        m->finished[counted]++;
        pthread_mutex_unlock(&m->mu);
    }
    if (r->stream) {
        if (!r->out_done && http) stream_error(r, http, msg);
        else if (!r->out_done) stream_end(r);
        wake(r);
    } else if (r->c) {
        if (http) set_error(r->c, http, msg, NULL, NULL);
        else final_answer(r);
        sv_http_resume(r->c); /* the answer is ready */
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_lock(&m->mu);
    r->link.prev->next = r->link.next;
    r->link.next->prev = r->link.prev;
    r->link.prev = r->link.next = &r->link;
    m->active--;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    req_unref(r); /* the engine's reference */
}

static void on_event(void *user, const tdm_llm_event *ev) {
    if (ev->finish == TDM_LLM_FINISH_NONE) on_token(user, ev);
    else on_end(user, ev);
}

/* libmicrohttpd's reader of a streaming answer. */
static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    oa_req *r = cls;
    pthread_mutex_lock(&r->mu);
    ssize_t n = 0;
    if (r->out_pos < r->out.len) {
        size_t k = r->out.len - r->out_pos;
        if (k > max) k = max;
        memcpy(buf, r->out.p + r->out_pos, k);
        r->out_pos += k;
        if (r->out_pos == r->out.len) r->out.len = r->out_pos = 0;
        n = (ssize_t)k;
    } else if (r->out_done) {
        n = MHD_CONTENT_READER_END_OF_STREAM;
    } else if (r->c) {
        /* nothing yet: the connection waits until an event wakes it */
        r->reader_waiting = true;
        sv_http_suspend(r->c);
    } else {
        n = MHD_CONTENT_READER_END_WITH_ERROR;
    }
    pthread_mutex_unlock(&r->mu);
    return n;
}

void sv_openai_completed(sv_conn *c, enum MHD_RequestTerminationCode toe) {
    (void)toe;
    oa_req *r = c->oa;
    c->oa = NULL;
    pthread_mutex_lock(&r->mu);
    r->c = NULL;
    bool running = !r->engine_done;
    pthread_mutex_unlock(&r->mu);
    /* the socket closes after this: the sweeper must not look at it any more */
    pthread_mutex_lock(&r->llm->mu);
    bool live = r->link.live;
    uint64_t id = r->link.id;
    r->link.fd = -1;
    pthread_mutex_unlock(&r->llm->mu);
    /* the client went away: the engine stops the request at its next step */
    if (running && live) tdm_llm_engine_cancel(r->llm->engine, id);
    req_unref(r);
}

/* ---- endpoints -------------------------------------------------------------------------------- */

static void model_json(sv_buf *b, const sv_llm *m) {
    sv_buf_str(b, "{\"id\":");
    sv_buf_json_str(b, m->name, strlen(m->name));
    sv_buf_printf(b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"tandem\","
                  "\"max_model_len\":%d}", (long long)m->created, m->max_length);
}

static enum MHD_Result models(sv_conn *c, bool one) {
    sv_version **v = NULL;
    int n = sv_repo_versions(c->srv->repo, &v);
    sv_buf b = {0};
    if (!one) sv_buf_str(&b, "{\"object\":\"list\",\"data\":[");
    bool any = false;
    for (int i = 0; i < n; i++) {
        sv_llm *m = v[i]->llm;
        /* the latest version of each model (versions come in ascending order) */
        bool latest = m && (i + 1 == n || strcmp(v[i + 1]->model_name, v[i]->model_name));
        if (latest && (!one || !strcmp(m->name, c->model))) {
            if (any) sv_buf_str(&b, ",");
            model_json(&b, m);
            any = true;
        }
    }
    for (int i = 0; i < n; i++) sv_version_unref(c->srv->repo, v[i]);
    free(v);
    if (!one) sv_buf_str(&b, "]}");
    if (one && !any) {
        sv_buf_free(&b);
        return fail(c, 404, "model", "model_not_found", "The model '%s' does not exist", c->model);
    }
    size_t len = 0;
    char *p = sv_buf_take(&b, &len);
    if (!p) return fail(c, 500, NULL, NULL, "out of memory");
    sv_http_answer(c, 200, p, len, "application/json");
    return sv_http_send_answer(c);
}

static void new_id(oa_req *r) {
    static _Atomic uint64_t counter;
    uint64_t k = atomic_fetch_add(&counter, 1) + 1;
    uint64_t t = sv_now_ns();
    snprintf(r->id, sizeof r->id, "%s-%012llx%08llx", r->chat ? "chatcmpl" : "cmpl",
             (unsigned long long)(t & 0xffffffffffffull), (unsigned long long)(k & 0xffffffffull));
}

/* Parses, tokenizes and submits a completion; answers at once (stream) or later. */
static enum MHD_Result completion(sv_conn *c, bool chat) {
    sv_server *s = c->srv;
    char *body = NULL;
    size_t len = 0;
    sv_error *e = sv_http_take_body(c, &body, &len);
    if (e) return fail_error(c, e, NULL);
    if (len > s->opt.max_json_bytes) {
        free(body);
        return fail(c, 413, NULL, NULL, "the request body has %zu bytes, more than the %zu-byte limit "
                    "for JSON (--max-json-mb)", len, s->opt.max_json_bytes);
    }
    if (sv_json_depth(body, len, OA_JSON_DEPTH) > OA_JSON_DEPTH) {
        free(body);
        return fail(c, 400, NULL, NULL, "the JSON nests deeper than %d levels", OA_JSON_DEPTH);
    }
    size_t tree = len * OA_TREE_FACTOR;
    if (!sv_budget_take(&s->mem, tree)) {
        free(body);
        return fail(c, 503, NULL, NULL, "the server's memory for request bodies is taken by other "
                    "requests; retry later");
    }
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    free(body);
    enum MHD_Result ret;
    sv_version *v = NULL;
    int32_t *ids = NULL;
    size_t n_ids = 0;
    bool ids_tok = false;
    oa_params o;
    oa_bad b = {"", NULL};
    oa_req *r = NULL;
    if (!root) {
        ret = fail(c, 400, NULL, NULL, "malformed JSON at line %d, column %d: %s", jerr.line, jerr.column,
                   jerr.text);
        goto out;
    }
    if (!json_is_object(root)) {
        ret = fail(c, 400, NULL, NULL, "the request body must be a JSON object");
        goto out;
    }
    json_t *model = json_object_get(root, "model");
    if (!model || !json_is_string(model)) {
        ret = fail(c, 400, "model", NULL, "'model' must be a string naming the model");
        goto out;
    }
    e = sv_repo_get(s->repo, json_string_value(model), NULL, &v);
    if (e) {
        ret = fail_error(c, e, e->http == 404 ? "model_not_found" : NULL);
        goto out;
    }
    if (!v->llm) {
        ret = fail(c, 404, "model", "model_not_found", "The model '%s' is not a language model (backend "
                   "tandem_llm); it is served by the KServe v2 API", v->model_name);
        goto out;
    }
    sv_llm *m = v->llm;
    if (!oa_parse_request(root, chat, m->tok, m->name, &o, &ids, &n_ids, &ids_tok, &b)) {
        ret = fail(c, 400, b.param, NULL, "%s", b.msg);
        goto out;
    }
    if (!n_ids) {
        ret = fail(c, 400, chat ? "messages" : "prompt", NULL, "the prompt is empty");
        goto out;
    }
    for (size_t i = 0; i < o.p.n_bias; i++)
        if ((size_t)o.bias_ids[i] >= tdm_llm_engine_vocab_size(m->engine)) {
            ret = fail(c, 400, "logit_bias", NULL, "'logit_bias' token %d is outside the vocabulary (%zu)",
                       o.bias_ids[i], tdm_llm_engine_vocab_size(m->engine));
            goto out;
        }
    int64_t max_tokens = o.max_tokens >= 0 ? o.max_tokens : chat ? 0 : 16;
    if ((int64_t)n_ids + (max_tokens ? max_tokens : 1) > m->max_length) {
        ret = fail(c, 400, chat ? "messages" : "prompt", "context_length_exceeded",
                   "This model's maximum context length is %d tokens. However, you requested %lld "
                   "tokens (%zu in the %s, %lld for the completion). Please reduce the length of the "
                   "%s or the completion.", m->max_length, (long long)(n_ids + (size_t)max_tokens), n_ids,
                   chat ? "messages" : "prompt", (long long)max_tokens, chat ? "messages" : "prompt");
        goto out;
    }
    tdm_llm_engine_stats es;
    tdm_llm_engine_get_stats(m->engine, &es);
    if (es.waiting >= m->max_waiting) {
        ret = fail(c, 503, NULL, "overloaded", "model '%s' is overloaded: %d requests are waiting; retry later",
                   m->name, es.waiting);
        goto out;
    }
    /* the request */
    r = calloc(1, sizeof *r);
    if (!r || !(r->model = sv_strdup(m->name))) {
        free(r);
        r = NULL;
        ret = fail(c, 500, NULL, NULL, "out of memory");
        goto out;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->refs = 1;
    r->llm = m;
    r->chat = chat;
    r->stream = o.stream;
    r->include_usage = o.include_usage;
    r->logprobs = o.logprobs;
    r->top_logprobs = o.top_logprobs;
    r->created = (int64_t)(sv_wall_ms() / 1000);
    r->prompt_tokens = (int64_t)n_ids;
    r->t_recv = c->t_recv;
    r->link.prev = r->link.next = &r->link;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    r->link.fd = ci ? (int)ci->connect_fd : -1;
    new_id(r);
    bool text_ok = oa_text_init(&r->tx, o.n_stop, o.stop, o.stop_len);
    tdm_status *st = tdm_token_stream_create(m->tok, true, &r->ts);
    if (st || !text_ok) {
        tdm_status_free(st);
        ret = fail(c, 500, NULL, NULL, "out of memory");
        goto out;
    }
    o.p.max_tokens = (int)max_tokens;
    int32_t eos = m->eos;
    if (eos >= 0 && !o.p.ignore_eos) {
        o.p.stop_ids = &eos;
        o.p.n_stop_ids = 1;
    }
    pthread_mutex_lock(&m->mu);
    bool closed = m->closed;
    if (!closed) {
        r->link.next = m->reqs.next;
        r->link.prev = &m->reqs;
        m->reqs.next->prev = &r->link;
        m->reqs.next = &r->link;
        m->active++;
    }
    pthread_mutex_unlock(&m->mu);
    if (closed) {
        ret = fail(c, 503, NULL, NULL, "model '%s' is being unloaded", m->name);
        goto out;
    }
    r->c = c;
    r->refs = 3; /* the connection's, the engine's, and this function's until it returns */
    c->oa = r;
    c->ver = v;
    v = NULL;
    if (chat && r->stream) stream_chunk(r, "", 0, 0, 0, NULL, true);
    if (!r->stream) sv_http_suspend(c);
    uint64_t id = 0;
    st = tdm_llm_engine_submit(m->engine, ids, n_ids, &o.p, on_event, r, &id);
    if (st) {
        int code = tdm_status_code(st);
        pthread_mutex_lock(&m->mu);
        r->link.prev->next = r->link.next;
        r->link.next->prev = r->link.prev;
        r->link.prev = r->link.next = &r->link;
        m->active--;
        pthread_cond_broadcast(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_mutex_lock(&r->mu);
        r->refs -= 2; /* the engine never got it; this function lets go */
        r->engine_done = true;
        pthread_mutex_unlock(&r->mu);
        bool limit = code == TDM_ERR_LIMIT;
        set_error(c, limit ? 400 : code == TDM_ERR_INVALID_ARGUMENT ? 400 : 500, tdm_status_message(st),
                  limit ? (chat ? "messages" : "prompt") : NULL, limit ? "context_length_exceeded" : NULL);
        tdm_status_free(st);
        r = NULL;
        if (!c->suspended) {
            ret = sv_http_send_answer(c);
            goto out;
        }
        sv_http_resume(c); /* the handler is called again and sends the answer */
        ret = MHD_YES;
        goto out;
    }
    pthread_mutex_lock(&m->mu);
    if (r->link.next != &r->link) { /* still in the list (its end event has not come) */
        r->link.id = id;
        r->link.live = true;
    }
    pthread_mutex_unlock(&m->mu);
    bool stream = r->stream;
    struct MHD_Response *resp =
        stream ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, NULL) : NULL;
    req_unref(r); /* the connection and the engine hold it */
    r = NULL;
    if (!stream) {
        ret = MHD_YES; /* the end event answers and resumes */
        goto out;
    }
    if (!resp) {
        ret = MHD_NO; /* the completed notification cancels it */
        goto out;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    if (c->srv->opt.no_keep_alive)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
    ret = MHD_queue_response(c->conn, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
out:
    if (r && !c->oa) req_unref(r); /* never linked to the connection */
    if (ids_tok) tdm_tokens_free(ids);
    else free(ids);
    json_decref(root);
    sv_budget_give(&s->mem, tree);
    if (v) sv_version_unref(s->repo, v);
    return ret;
}

enum MHD_Result sv_openai_handle(sv_conn *c) {
    switch (c->route) {
    case R_OA_MODELS: return models(c, false);
    case R_OA_MODEL: return models(c, true);
    case R_OA_CHAT: return completion(c, true);
    default: return completion(c, false);
    }
}
