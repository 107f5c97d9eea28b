/* tandem serve, OpenAI's API: a request body's fields (openai.c, the fuzz target fuzz_openai).
 * Everything but the model name: sampling parameters, stop strings, logprobs, the prompt (token
 * ids or text) or the chat messages through the tokenizer's template. A field of the wrong
 * type or out of range is refused with a message naming it; nothing is clamped silently. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai_parse.h"
#include "serve/server_impl.h"

static bool bad(oa_bad *b, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool bad(oa_bad *b, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->msg, sizeof b->msg, fmt, ap);
    va_end(ap);
    b->param = param;
    return false;
}

/* A member that is absent or null: NULL. */
static json_t *get(json_t *root, const char *key) {
    json_t *v = json_object_get(root, key);
    return v && !json_is_null(v) ? v : NULL;
}

static bool get_num(json_t *root, const char *key, double lo, double hi, double *out, oa_bad *b) {
    json_t *v = get(root, key);
    if (!v) return true;
    if (!json_is_number(v)) return bad(b, key, "'%s' must be a number", key);
    double d = json_number_value(v);
    if (!(d >= lo && d <= hi)) return bad(b, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, d);
    *out = d;
    return true;
}

static bool get_int(json_t *root, const char *key, int64_t lo, int64_t hi, int64_t *out, oa_bad *b) {
    json_t *v = get(root, key);
    if (!v) return true;
    if (!json_is_integer(v)) return bad(b, key, "'%s' must be an integer", key);
    int64_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return bad(b, key, "'%s' must be in [%lld, %lld], got %lld", key, (long long)lo, (long long)hi,
                   (long long)i);
    *out = i;
    return true;
}

static bool get_bool(json_t *root, const char *key, bool *out, oa_bad *b) {
    json_t *v = get(root, key);
    if (!v) return true;
    if (!json_is_boolean(v)) return bad(b, key, "'%s' must be true or false", key);
    *out = json_is_true(v);
    return true;
}

/* The fields both endpoints share. */
static bool parse_common(json_t *root, bool chat, oa_params *o, oa_bad *b) {
    memset(o, 0, sizeof *o);
    o->p.struct_size = sizeof o->p;
    o->max_tokens = -1;
    double temp = 1, top_p = 1, rep = 1;
    int64_t top_k = 0, seed = 0, n = 1;
    if (!get_num(root, "temperature", 0, 2, &temp, b) || !get_num(root, "top_p", 0, 1, &top_p, b) ||
        !get_int(root, "top_k", -1, 1 << 20, &top_k, b) ||
        !get_int(root, "seed", INT64_MIN, INT64_MAX, &seed, b) ||
        !get_num(root, "repetition_penalty", 0.01, 100, &rep, b) ||
        !get_int(root, "n", 1, 1 << 20, &n, b) || !get_bool(root, "stream", &o->stream, b) ||
        !get_bool(root, "ignore_eos", &o->p.ignore_eos, b) ||
        !get_int(root, "max_tokens", 1, INT32_MAX, &o->max_tokens, b) ||
        !get_int(root, "max_completion_tokens", 1, INT32_MAX, &o->max_tokens, b))
        return false;
    if (n != 1) return bad(b, "n", "only n = 1 is supported (one choice per request)");
    int64_t best_of = 1;
    if (!get_int(root, "best_of", 1, 1 << 20, &best_of, b)) return false;
    if (best_of != 1) return bad(b, "best_of", "only best_of = 1 is supported");
    double presence = 0, frequency = 0;
    if (!get_num(root, "presence_penalty", -2, 2, &presence, b) ||
        !get_num(root, "frequency_penalty", -2, 2, &frequency, b))
        return false;
    json_t *bias = get(root, "logit_bias");
    if (bias && !json_is_null(bias)) {
        if (!json_is_object(bias))
            return bad(b, "logit_bias", "'logit_bias' must be an object of token ids and biases");
        if (json_object_size(bias) > OA_MAX_BIAS)
            return bad(b, "logit_bias", "'logit_bias' has more than %d entries", OA_MAX_BIAS);
        const char *key;
        json_t *val;
        json_object_foreach(bias, key, val) {
            size_t len = strlen(key);
            bool digits = len > 0 && len <= 10;
            for (size_t i = 0; digits && i < len; i++) digits = key[i] >= '0' && key[i] <= '9';
            long long id = digits ? strtoll(key, NULL, 10) : -1;
            if (id < 0 || id > INT32_MAX)
                return bad(b, "logit_bias", "'logit_bias' keys must be token ids (\"%.32s\" is not)", key);
            if (!json_is_number(val) || !(json_number_value(val) >= -100 && json_number_value(val) <= 100))
                return bad(b, "logit_bias", "'logit_bias' values must be numbers in -100..100");
            o->bias_ids[o->p.n_bias] = (int32_t)id;
            o->bias_values[o->p.n_bias++] = (float)json_number_value(val);
        }
        o->p.bias_ids = o->bias_ids;
        o->p.bias_values = o->bias_values;
    }
    json_t *so = get(root, "stream_options");
    if (so) {
        if (!json_is_object(so)) return bad(b, "stream_options", "'stream_options' must be an object");
        if (!o->stream) return bad(b, "stream_options", "'stream_options' is only allowed with stream: true");
        if (!get_bool(so, "include_usage", &o->include_usage, b)) return false;
    }
    json_t *stop = get(root, "stop");
    if (stop) {
        if (json_is_string(stop)) {
            o->stop[0] = json_string_value(stop);
            o->stop_len[0] = json_string_length(stop);
            o->n_stop = 1;
        } else if (json_is_array(stop)) {
            if (json_array_size(stop) > OA_MAX_STOP)
                return bad(b, "stop", "'stop' has more than %d strings", OA_MAX_STOP);
            for (size_t i = 0; i < json_array_size(stop); i++) {
                json_t *s = json_array_get(stop, i);
                if (!json_is_string(s)) return bad(b, "stop", "'stop' must be a string or an array of strings");
                o->stop[o->n_stop] = json_string_value(s);
                o->stop_len[o->n_stop++] = json_string_length(s);
            }
        } else {
            return bad(b, "stop", "'stop' must be a string or an array of strings");
        }
        for (int i = 0; i < o->n_stop; i++)
            if (!o->stop_len[i] || o->stop_len[i] > OA_MAX_STOP_LEN)
                return bad(b, "stop", "a stop string must have 1 to %d bytes", OA_MAX_STOP_LEN);
    }
    if (chat) {
        int64_t tl = 0;
        if (!get_bool(root, "logprobs", &o->logprobs, b) ||
            !get_int(root, "top_logprobs", 0, OA_MAX_TOP, &tl, b))
            return false;
        if (get(root, "top_logprobs") && !o->logprobs)
            return bad(b, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        o->top_logprobs = (int)tl;
    } else {
        int64_t lp = -1;
        if (!get_int(root, "logprobs", 0, OA_MAX_TOP, &lp, b)) return false;
        o->logprobs = lp >= 0;
        o->top_logprobs = lp > 0 ? (int)lp : 0;
        bool echo = false;
        if (!get_bool(root, "echo", &echo, b)) return false;
        if (echo) return bad(b, "echo", "'echo' is not supported");
        json_t *suffix = get(root, "suffix");
        if (suffix && (!json_is_string(suffix) || json_string_length(suffix)))
            return bad(b, "suffix", "'suffix' is not supported");
    }
    o->p.sampling.temperature = (float)temp;
    o->p.sampling.top_p = top_p >= 1 ? 0 : (float)top_p;
    o->p.sampling.top_k = top_k > 0 ? (int)top_k : 0;
    o->p.sampling.repetition_penalty = (float)rep;
    o->p.presence_penalty = (float)presence;
    o->p.frequency_penalty = (float)frequency;
    o->p.sampling.seed = (uint64_t)seed;
    o->p.top_logprobs = o->top_logprobs;
    o->p.logprobs = o->logprobs;
    if (o->p.sampling.top_p == 0 && top_p < 1) o->p.sampling.top_p = 1e-6f; /* top_p 0: the top token */
    return true;
}

/* The completions prompt: a string, one string in an array, token ids, or one array of them. */
static bool prompt_ids(const tdm_tokenizer *tok, json_t *root, int32_t **ids, size_t *n, bool *owned_by_tok, oa_bad *b) {
    json_t *p = get(root, "prompt");
    if (!p) return bad(b, "prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) {
        tdm_status *st = tdm_tokenizer_encode(tok, json_string_value(p), json_string_length(p), true,
                                              ids, n);
        if (st) {
            bad(b, "prompt", "the prompt cannot be tokenized: %s", tdm_status_message(st));
            tdm_status_free(st);
            return false;
        }
        *owned_by_tok = true;
        return true;
    }
    if (!json_is_array(p)) return bad(b, "prompt", "'prompt' must be a string or an array of token ids");
    size_t k = json_array_size(p);
    if (!k) return bad(b, "prompt", "the prompt is empty");
    int32_t *v = malloc(k * sizeof *v);
    if (!v) return bad(b, "prompt", "out of memory");
    for (size_t i = 0; i < k; i++) {
        json_t *t = json_array_get(p, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) > INT32_MAX) {
            free(v);
            return bad(b, "prompt", "'prompt' must be a string or an array of token ids (several "
                       "prompts in one request are not supported)");
        }
        v[i] = (int32_t)json_integer_value(t);
    }
    *ids = v;
    *n = k;
    *owned_by_tok = false;
    return true;
}

/* The chat messages through the template. */
static bool chat_ids(const tdm_tokenizer *tok, const char *name, json_t *root, int32_t **ids, size_t *n, oa_bad *b) {
    json_t *msgs = get(root, "messages");
    if (!msgs || !json_is_array(msgs) || !json_array_size(msgs))
        return bad(b, "messages", "'messages' must be a non-empty array");
    const char *tmpl = tdm_tokenizer_chat_template(tok);
    if (!tmpl) return bad(b, "messages", "model '%s' has no chat template (use /v1/completions)", name);
    size_t k = json_array_size(msgs);
    tdm_chat_message *cm = calloc(k, sizeof *cm);
    char **owned = calloc(k, sizeof *owned);
    bool ok = cm && owned;
    if (!ok) bad(b, "messages", "out of memory");
    for (size_t i = 0; ok && i < k; i++) {
        json_t *msg = json_array_get(msgs, i);
        json_t *role = json_is_object(msg) ? get(msg, "role") : NULL;
        if (!role || !json_is_string(role)) {
            ok = bad(b, "messages", "messages[%zu] must be an object with a string 'role'", i);
            break;
        }
        cm[i].role = json_string_value(role);
        json_t *content = get(msg, "content");
        if (!content) {
            cm[i].content = "";
        } else if (json_is_string(content)) {
            if (strlen(json_string_value(content)) != json_string_length(content)) {
                ok = bad(b, "messages", "messages[%zu].content holds a NUL character", i);
                break;
            }
            cm[i].content = json_string_value(content);
        } else if (json_is_array(content)) { /* text parts, joined */
            sv_buf t = {0};
            for (size_t j = 0; ok && j < json_array_size(content); j++) {
                json_t *part = json_array_get(content, j);
                json_t *type = json_is_object(part) ? get(part, "type") : NULL;
                json_t *text = json_is_object(part) ? get(part, "text") : NULL;
                if (!type || !json_is_string(type) || strcmp(json_string_value(type), "text") || !text ||
                    !json_is_string(text))
                    ok = bad(b, "messages", "messages[%zu].content: only text parts ({\"type\": \"text\", "
                             "\"text\": ...}) are supported", i);
                else
                    sv_buf_str(&t, json_string_value(text));
            }
            if (!ok) {
                sv_buf_free(&t);
                break;
            }
            owned[i] = sv_buf_take(&t, NULL);
            if (!owned[i]) owned[i] = sv_strdup("");
            cm[i].content = owned[i] ? owned[i] : "";
        } else {
            ok = bad(b, "messages", "messages[%zu].content must be a string or an array of text parts", i);
        }
    }
    char *text = NULL;
    if (ok) {
        tdm_status *st = tdm_chat_render(tmpl, cm, k, true, tdm_tokenizer_special_text(tok, "bos"),
                                         tdm_tokenizer_special_text(tok, "eos"), &text);
        if (st) {
            ok = bad(b, "messages", "the chat template failed: %s", tdm_status_message(st));
            tdm_status_free(st);
        }
    }
    if (ok) { /* the template writes the special tokens itself */
        tdm_status *st = tdm_tokenizer_encode(tok, text, strlen(text), false, ids, n);
        if (st) {
            ok = bad(b, "messages", "the messages cannot be tokenized: %s", tdm_status_message(st));
            tdm_status_free(st);
        }
    }
    tdm_string_free(text);
    for (size_t i = 0; owned && i < k; i++) free(owned[i]);
    free(owned);
    free(cm);
    return ok;
}

bool oa_parse_request(json_t *root, bool chat, const tdm_tokenizer *tok, const char *name, oa_params *o,
                      int32_t **ids, size_t *n_ids, bool *ids_tok, oa_bad *b) {
    *ids = NULL;
    *n_ids = 0;
    *ids_tok = false;
    return parse_common(root, chat, o, b) &&
           (chat ? chat_ids(tok, name, root, ids, n_ids, b) : prompt_ids(tok, root, ids, n_ids, ids_tok, b));
}
