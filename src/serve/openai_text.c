/*
 * tandem serve, OpenAI's API: a completion's text as its tokens arrive (see openai_text.h).
 */
#define _GNU_SOURCE /* memmem */
#include <stdlib.h>
#include <string.h>

#include "serve/openai_text.h"

bool oa_text_init(oa_text *t, int n_stop, const char *const *stop, const size_t *stop_len) {
    memset(t, 0, sizeof *t);
    if (n_stop < 0 || n_stop > OA_MAX_STOP) return false;
    for (int i = 0; i < n_stop; i++) {
        if (!stop_len[i] || stop_len[i] > OA_MAX_STOP_LEN ||
            !(t->stop[i] = sv_strndup(stop[i], stop_len[i]))) {
            oa_text_free(t);
            return false;
        }
        t->stop_len[i] = stop_len[i];
        if (stop_len[i] > t->max_stop) t->max_stop = stop_len[i];
        t->n_stop = i + 1;
    }
    if (!sv_buf_reserve(&t->text, 0)) { /* the text is never a null pointer */
        oa_text_free(t);
        return false;
    }
    t->text.p[0] = 0;
    return true;
}

void oa_text_free(oa_text *t) {
    for (int i = 0; i < t->n_stop; i++) free(t->stop[i]);
    sv_buf_free(&t->text);
    free(t->toks);
    memset(t, 0, sizeof *t);
}

oa_text_result oa_text_add(oa_text *t, const char *piece, size_t len, const oa_tok *tok) {
    if (t->stopped) return OA_TEXT_STOP;
    if (tok && t->n_toks == t->cap_toks) {
        size_t nc = t->cap_toks ? 2 * t->cap_toks : 64;
        oa_tok *p = realloc(t->toks, nc * sizeof *p);
        if (!p) return OA_TEXT_OOM;
        t->toks = p;
        t->cap_toks = nc;
    }
    if (!sv_buf_reserve(&t->text, len)) {
        t->text.oom = false; /* the content is intact: the caller ends the request */
        return OA_TEXT_OOM;
    }
    size_t before = t->text.len;
    if (len) memcpy(t->text.p + before, piece, len);
    t->text.len += len;
    t->text.p[t->text.len] = 0;
    if (tok) {
        oa_tok *k = &t->toks[t->n_toks++];
        *k = *tok;
        k->offset = before;
        if (k->n_top < 0) k->n_top = 0;
        if (k->n_top > OA_MAX_TOP) k->n_top = OA_MAX_TOP;
    }
    if (!t->n_stop || !len) return OA_TEXT_MORE;
    /* the earliest match that ends in the new bytes (the text before them has none) */
    size_t from = before > t->max_stop ? before - t->max_stop + 1 : 0;
    size_t cut = SIZE_MAX;
    for (int i = 0; i < t->n_stop; i++) {
        const char *p = memmem(t->text.p + from, t->text.len - from, t->stop[i], t->stop_len[i]);
        if (p && (size_t)(p - t->text.p) < cut) cut = (size_t)(p - t->text.p);
    }
    if (cut == SIZE_MAX) return OA_TEXT_MORE;
    t->text.len = cut;
    t->text.p[cut] = 0;
    /* tokens that start at or after the cut are not part of the completion (none was released:
       released text holds no start of a stop string) */
    while (t->n_toks > t->lp_emitted && t->toks[t->n_toks - 1].offset >= cut) t->n_toks--;
    t->stopped = true;
    return OA_TEXT_STOP;
}

/* Bytes at the end of the text that could be the start of a stop string. */
static size_t held_back(const oa_text *t) {
    size_t hold = 0, n = t->text.len;
    for (int i = 0; i < t->n_stop; i++)
        for (size_t k = t->stop_len[i] - 1; k > hold; k--)
            if (k <= n && !memcmp(t->text.p + n - k, t->stop[i], k)) {
                hold = k;
                break;
            }
    return hold;
}

bool oa_text_release(oa_text *t, bool all, oa_chunk *c) {
    bool end = all || t->stopped;
    size_t release = end ? t->text.len : t->text.len - held_back(t);
    if (release < t->emitted) release = t->emitted;
    size_t lp_to = end ? t->n_toks : t->lp_emitted;
    while (lp_to < t->n_toks && t->toks[lp_to].offset < release) lp_to++;
    c->from = t->emitted;
    c->to = release;
    c->lp_from = t->lp_emitted;
    c->lp_to = lp_to;
    t->emitted = release;
    t->lp_emitted = lp_to;
    return c->to > c->from || c->lp_to > c->lp_from;
}
