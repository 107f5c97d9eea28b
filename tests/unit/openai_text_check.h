/* The reference of the OpenAI endpoints' completion text (src/serve/openai_text.h states the
 * definitions; this computes them the slow way) and the check of an oa_text against it, shared
 * by test_openai_text and fuzz_openai_text. */
#ifndef TDM_TEST_OPENAI_TEXT_CHECK_H
#define TDM_TEST_OPENAI_TEXT_CHECK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/openai_text.h"

typedef struct piece {
    const char *s;
    size_t n;
} piece;

/* The pieces joined up to the first whose end completes a stop string, cut at the earliest
 * start of one there; *taken: the pieces taken (their tokens), offsets[i]: piece i's start. */
static size_t ref_cut(const piece *ps, size_t n, const oa_text *stops, char *full, size_t *taken,
                      size_t *offsets, bool *stopped) {
    size_t len = 0;
    *stopped = false;
    for (size_t i = 0; i < n; i++) {
        offsets[i] = len;
        if (ps[i].n) memcpy(full + len, ps[i].s, ps[i].n);
        len += ps[i].n;
        size_t cut = SIZE_MAX;
        for (int k = 0; k < stops->n_stop; k++)
            for (size_t at = 0; at + stops->stop_len[k] <= len && at < cut; at++)
                if (!memcmp(full + at, stops->stop[k], stops->stop_len[k])) cut = at;
        if (cut != SIZE_MAX) {
            *taken = i + 1;
            *stopped = true;
            return cut;
        }
    }
    *taken = n;
    return len;
}

/* The longest end of text[0, len) that is a proper start of a stop string. */
static size_t ref_hold(const char *text, size_t len, const oa_text *stops) {
    size_t hold = 0;
    for (int k = 0; k < stops->n_stop; k++)
        for (size_t h = 1; h < stops->stop_len[k] && h <= len; h++)
            if (h > hold && !memcmp(text + len - h, stops->stop[k], h)) hold = h;
    return hold;
}

/* Runs the pieces (each with a token, ids 0..) through an oa_text as openai.c does, streaming,
 * and checks every step and the end against the reference. NULL: all held; else what failed
 * ("init": the stop strings were refused; "oom": out of memory). */
static const char *oa_text_check(const piece *ps, size_t n, int n_stop, const char *const *stop,
                                 const size_t *stop_len) {
#define CHECK(c, what) do { if (!(c)) { fail = what; goto out; } } while (0)
    const char *fail = NULL;
    oa_text t;
    if (!oa_text_init(&t, n_stop, stop, stop_len)) return "init";
    size_t total = 1;
    for (size_t i = 0; i < n; i++) total += ps[i].n;
    char *full = malloc(total), *streamed = malloc(total);
    size_t *offsets = malloc((n + 1) * sizeof *offsets);
    size_t taken, streamed_len = 0, lp_next = 0;
    bool ref_stopped, stopped = false;
    CHECK(full && streamed && offsets, "oom");
    size_t cut = ref_cut(ps, n, &t, full, &taken, offsets, &ref_stopped);
    for (size_t i = 0; i < n && !stopped; i++) {
        oa_tok tok = {.id = (int32_t)i, .lp = -(float)i, .n_top = 1};
        tok.top[0].token = (int32_t)i;
        oa_text_result r = oa_text_add(&t, ps[i].s, ps[i].n, &tok);
        CHECK(r != OA_TEXT_OOM, "oom");
        stopped = r == OA_TEXT_STOP;
        CHECK(stopped == (ref_stopped && i + 1 == taken), "stopped at another piece");
        oa_chunk c;
        bool any = oa_text_release(&t, stopped, &c);
        CHECK(any == (c.to > c.from || c.lp_to > c.lp_from), "release's result");
        CHECK(c.from == streamed_len && c.lp_from == lp_next && c.to >= c.from && c.to <= t.text.len &&
              c.lp_to >= c.lp_from && c.lp_to <= t.n_toks, "chunk bounds");
        memcpy(streamed + streamed_len, t.text.p + c.from, c.to - c.from);
        streamed_len = c.to;
        lp_next = c.lp_to;
        if (!stopped) {
            CHECK(t.text.len == offsets[i] + ps[i].n, "text length");
            /* only the longest end that may start a stop string waits */
            CHECK(streamed_len == t.text.len - ref_hold(t.text.p, t.text.len, &t), "held back");
            /* the tokens whose first byte went out, and only those */
            size_t want = 0;
            while (want <= i && offsets[want] < streamed_len) want++;
            CHECK(lp_next == want, "logprob tokens released");
        }
    }
    if (!stopped) {
        oa_chunk c;
        oa_text_release(&t, true, &c);
        CHECK(c.from == streamed_len && c.to == t.text.len, "last chunk");
        memcpy(streamed + streamed_len, t.text.p + c.from, c.to - c.from);
        streamed_len = c.to;
        lp_next = c.lp_to;
    } else {
        CHECK(oa_text_add(&t, "x", 1, NULL) == OA_TEXT_STOP, "added after a stop");
    }
    CHECK(t.text.len == cut && (!cut || !memcmp(t.text.p, full, cut)), "text");
    CHECK(t.text.p && !t.text.p[cut], "text's NUL");
    CHECK(streamed_len == cut && (!cut || !memcmp(streamed, full, cut)), "stream's text");
    /* tokens: those taken that start before the cut (all taken ones with no stop) */
    size_t want = 0;
    for (size_t i = 0; i < taken; i++)
        if (!ref_stopped || offsets[i] < cut) want++;
    CHECK(t.n_toks == want && lp_next == want, "tokens");
    for (size_t i = 0; i < t.n_toks; i++)
        CHECK(t.toks[i].id == (int32_t)i && t.toks[i].offset == offsets[i], "token offsets");
out:
    free(full);
    free(streamed);
    free(offsets);
    oa_text_free(&t);
    return fail;
#undef CHECK
}

#endif
