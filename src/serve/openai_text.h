/*
 * tandem serve, OpenAI's API: a completion's text as its tokens arrive (openai_text.c). The
 * bookkeeping of openai.c's requests without their locks and connections, so that a unit test
 * (test_openai_text) and a fuzz target (fuzz_openai_text) check it against the plain
 * definitions:
 *
 * - the text is the pieces joined, cut before the earliest occurrence of any stop string (the
 *   first piece that completes one ends the completion: nothing is added after it);
 * - the tokens (with logprobs) are those that start before the cut: a token that straddles it
 *   stays, as its text does in part;
 * - streamed, the chunks join into the text; after each piece only the text's longest end that
 *   is the start of a stop string is held back; a token's logprobs go out with the chunk that
 *   holds its first byte (one starting in held-back text may still be cut).
 *
 * Pieces are bytes (NUL bytes included). Out of memory is reported, never a shorter text.
 */
#ifndef TDM_SERVE_OPENAI_TEXT_H
#define TDM_SERVE_OPENAI_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "serve/openai_parse.h"
#include "serve/sv.h"

/* One generated token with its log-probabilities. */
typedef struct oa_tok {
    int32_t id;
    float lp;
    int n_top;
    size_t offset; /* bytes of the completion's text before it (set by oa_text_add) */
    tdm_llm_logprob top[OA_MAX_TOP];
} oa_tok;

typedef struct oa_text {
    int n_stop;
    char *stop[OA_MAX_STOP]; /* owned */
    size_t stop_len[OA_MAX_STOP], max_stop;
    sv_buf text;       /* NUL-terminated (text.p is never NULL between init and free) */
    oa_tok *toks;      /* the tokens added with a record */
    size_t n_toks, cap_toks;
    size_t emitted;    /* stream: bytes of text released */
    size_t lp_emitted; /* stream: tokens released */
    bool stopped;      /* a stop string cut the text */
} oa_text;

typedef enum oa_text_result {
    OA_TEXT_MORE, /* added; no stop string */
    OA_TEXT_STOP, /* a stop string cut the text (now, or by an earlier piece: nothing added) */
    OA_TEXT_OOM,  /* out of memory: the text and tokens are as before the call */
} oa_text_result;

/* Copies the stop strings (1 to OA_MAX_STOP_LEN bytes each, at most OA_MAX_STOP). False: out of
 * memory or bad stop strings (`t` is then empty, for oa_text_free all the same). */
bool oa_text_init(oa_text *t, int n_stop, const char *const *stop, const size_t *stop_len);
/* Adds one token's piece, `len` bytes; `tok` (NULL: bytes with no token of their own, as the
 * decoder's flush at the end) is copied with its offset set. */
oa_text_result oa_text_add(oa_text *t, const char *piece, size_t len, const oa_tok *tok);

/* What a stream sends now: text [from, to), the logprobs of tokens [lp_from, lp_to). */
typedef struct oa_chunk {
    size_t from, to, lp_from, lp_to;
} oa_chunk;

/* The text and tokens that can go out now (with `all`, everything left: the answer ends),
 * marked as sent. False when there is nothing new. */
bool oa_text_release(oa_text *t, bool all, oa_chunk *c);
void oa_text_free(oa_text *t);

#endif
