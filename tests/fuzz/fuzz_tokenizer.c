/* Fuzz target: the tokenizer (src/llm/tokenizer*.c). The first byte picks what the rest is:
 *   0      a tokenizer.json (loaded from a temporary file, then used on a fixed text)
 *   1..6   text for one of the test tokenizers in tests/tokenizers/: encoded (valid UTF-8
 *          must encode; gpt2, gpt2_digits and llama3 must decode back to it exactly unless
 *          it holds "<mask>", an added token that takes in the spaces around it), and the ids it
 *          gives, plus the input read as ids, decoded and streamed: the stream's pieces must
 *          join into the decode (where it has no U+FFFD), ids outside the vocabulary must
 *          fail cleanly. */
#define _GNU_SOURCE /* memmem */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "llm/tokenizer_impl.h"
#include "tandem/tokenizer.h"

static const char *const names[] = {"gpt2", "gpt2_digits", "llama3", "qwen2", "sp_legacy", "sp_meta"};
static tdm_tokenizer *toks[6];
static char tmp_path[64];

static void init(void) {
    for (int i = 0; i < 6; i++) {
        char path[1024];
        snprintf(path, sizeof path, TANDEM_SOURCE_DIR "/tests/tokenizers/%s.json", names[i]);
        tdm_status *st = tdm_tokenizer_load(path, &toks[i]);
        if (st) {
            fprintf(stderr, "fuzz_tokenizer: %s\n", tdm_status_message(st));
            abort();
        }
    }
    snprintf(tmp_path, sizeof tmp_path, "/tmp/fuzz_tokenizer_%d.json", (int)getpid());
}

static void check_status(tdm_status *st) {
    const char *m = tdm_status_message(st);
    if (!m || !m[0] || tdm_status_code(st) == TDM_OK) abort();
    tdm_status_free(st);
}

static void decode_and_stream(const tdm_tokenizer *tok, const int32_t *ids, size_t n) {
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        tdm_status *st = tdm_tokenizer_decode(tok, ids, n, skip, &text, &len);
        if (st) {
            check_status(st);
            continue;
        }
        tdm_token_stream *ts;
        if ((st = tdm_token_stream_create(tok, skip, &ts))) abort();
        tdm_tok_buf joined = {0};
        for (size_t i = 0; i < n; i++) {
            const char *piece;
            size_t piece_len = SIZE_MAX;
            if ((st = tdm_token_stream_push(ts, ids[i], &piece, &piece_len))) {
                fprintf(stderr, "stream push failed: %s\n", tdm_status_message(st));
                abort();
            }
            if (piece_len == SIZE_MAX || piece[piece_len]) abort(); /* a length, NUL-terminated */
            if (!tdm_tok_buf_put(&joined, piece, piece_len)) abort();
        }
        /* (not where the decode replaced invalid bytes, see tdm_token_stream_push) */
        if ((joined.len != len || (len && memcmp(joined.p, text, len) != 0)) &&
            !memmem(text, len, "\xEF\xBF\xBD", 3)) {
            fprintf(stderr, "stream pieces do not join into the decode (skip %d)\n  ids:", skip);
            for (size_t i = 0; i < n; i++) fprintf(stderr, " %d '%s'", ids[i], tdm_tokenizer_token(tok, ids[i]));
            fprintf(stderr, "\n  decode: '%.*s'\n  stream: '%.*s'\n", (int)len, text, (int)joined.len, joined.p);
            abort();
        }
        free(joined.p);
        tdm_token_stream_free(ts);
        tdm_string_free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!toks[0]) init();
    if (size < 1) return 0;
    unsigned mode = data[0] % 7;
    const char *text = (const char *)data + 1;
    size_t n = size - 1;
    if (mode == 0) {
        FILE *f = fopen(tmp_path, "wb");
        if (!f) return 0;
        fwrite(text, 1, n, f);
        fclose(f);
        tdm_tokenizer *tok;
        tdm_status *st = tdm_tokenizer_load(tmp_path, &tok);
        if (st) {
            check_status(st);
            return 0;
        }
        const char *sample = "Hello, world! <s> 123 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80  x";
        int32_t *ids;
        size_t k;
        if (!(st = tdm_tokenizer_encode(tok, sample, strlen(sample), true, &ids, &k))) {
            decode_and_stream(tok, ids, k);
            tdm_tokens_free(ids);
        } else {
            check_status(st);
        }
        tdm_tokenizer_free(tok);
        return 0;
    }
    const tdm_tokenizer *tok = toks[mode - 1];
    bool valid = tdm_tok_utf8_valid((const unsigned char *)text, n) == n;
    int32_t *ids;
    size_t k;
    tdm_status *st = tdm_tokenizer_encode(tok, text, n, data[0] & 0x80, &ids, &k);
    if (st) {
        if (valid) abort();
        check_status(st);
    } else {
        if (!valid) abort();
        /* byte-level without NFC or stripping added tokens: exact round trip */
        if (mode <= 3 && !(data[0] & 0x80) && !memmem(text, n, "<mask>", 6)) {
            char *back;
            size_t len;
            if ((st = tdm_tokenizer_decode(tok, ids, k, false, &back, &len))) abort();
            if (len != n || (n && memcmp(back, text, n) != 0)) {
                fprintf(stderr, "round trip differs\n");
                abort();
            }
            tdm_string_free(back);
        }
        decode_and_stream(tok, ids, k);
        tdm_tokens_free(ids);
    }
    /* the input as ids, some outside the vocabulary */
    size_t m = n / 2;
    int32_t *raw = malloc((m ? m : 1) * sizeof *raw);
    if (!raw) return 0;
    for (size_t i = 0; i < m; i++)
        raw[i] = (int32_t)(((unsigned)(unsigned char)text[2 * i] << 8 | (unsigned char)text[2 * i + 1]) %
                           (tdm_tokenizer_vocab_size(tok) + 3)) - 1;
    decode_and_stream(tok, raw, m);
    free(raw);
    return 0;
}
