/* Compares tandem's tokenizer with Hugging Face tokenizers' outputs over a corpus.
 *
 *   tok_check TOKENIZER(.json or folder) EXPECT.jsonl.gz [--bench N]
 *
 * EXPECT (tools/make_test_tokenizers.py) holds per case: "text", HF's "ids", for some
 * "ids_special" (add_special_tokens=True), and HF's decode ("decode" when it differs from
 * the text, "decode_skip" when skipping special tokens changes it). Checked per case: the
 * ids, decode with and without skip_special, and that the token stream's pieces join into
 * the decode. Prints the encode speed (MB/s over the corpus); exits 1 on any mismatch. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "tandem/tokenizer.h"

static int failures;

static void fail(size_t line, const char *what, const char *text) {
    if (failures++ < 12) fprintf(stderr, "case %zu: %s\n  text: %.200s\n", line, what, text);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char *read_gz(const char *path, size_t *n) {
    gzFile f = gzopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 65536 > cap) buf = realloc(buf, cap *= 2);
        int r = gzread(f, buf + len, 65536);
        if (r <= 0) break;
        len += (size_t)r;
    }
    gzclose(f);
    buf[len] = 0;
    *n = len;
    return buf;
}

static bool ids_equal(const int32_t *got, size_t n, const json_t *want) {
    if (json_array_size(want) != n) return false;
    for (size_t i = 0; i < n; i++)
        if (json_integer_value(json_array_get(want, i)) != got[i]) return false;
    return true;
}

static void print_ids(const char *label, const int32_t *ids, size_t n, const json_t *want) {
    if (failures > 12) return;
    fprintf(stderr, "  %s got:", label);
    for (size_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n  %s want:", label);
    for (size_t i = 0; i < json_array_size(want) && i < 40; i++)
        fprintf(stderr, " %d", (int)json_integer_value(json_array_get(want, i)));
    fprintf(stderr, "\n");
}

static void check_decode(const tdm_tokenizer *tok, size_t line, const char *text, const int32_t *ids,
                         size_t n, bool skip, const char *want) {
    char *got = NULL;
    size_t len;
    tdm_status *st = tdm_tokenizer_decode(tok, ids, n, skip, &got, &len);
    if (st) {
        fail(line, tdm_status_message(st), text);
        tdm_status_free(st);
        return;
    }
    if (strlen(want) != len || memcmp(got, want, len) != 0) {
        fail(line, skip ? "decode (skip_special) differs" : "decode differs", text);
        if (failures <= 12) fprintf(stderr, "  got:  %.200s\n  want: %.200s\n", got, want);
    }
    /* the stream's pieces join into the same text */
    tdm_token_stream *ts;
    st = tdm_token_stream_create(tok, skip, &ts);
    size_t cap = len + 64, joined_len = 0;
    char *joined = malloc(cap);
    for (size_t i = 0; !st && i < n; i++) {
        const char *piece;
        size_t pl = 0;
        st = tdm_token_stream_push(ts, ids[i], &piece, &pl);
        if (st) break;
        if (joined_len + pl + 1 > cap) joined = realloc(joined, cap = (joined_len + pl + 1) * 2);
        memcpy(joined + joined_len, piece, pl);
        joined_len += pl;
    }
    tdm_token_stream_free(ts);
    if (st) {
        fail(line, tdm_status_message(st), text);
        tdm_status_free(st);
    } else if (joined_len != len || memcmp(joined, got, len) != 0) {
        fail(line, "token stream pieces do not join into the decode", text);
        if (failures <= 12) fprintf(stderr, "  stream: %.*s\n  decode: %.200s\n", (int)joined_len, joined, got);
    }
    free(joined);
    tdm_string_free(got);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: tok_check TOKENIZER EXPECT.jsonl.gz [--bench N]\n");
        return 2;
    }
    int bench = argc >= 5 && !strcmp(argv[3], "--bench") ? atoi(argv[4]) : 0;
    tdm_tokenizer *tok;
    double t0 = now();
    tdm_status *st = tdm_tokenizer_load(argv[1], &tok);
    if (st) {
        fprintf(stderr, "load: %s\n", tdm_status_message(st));
        return 1;
    }
    double t_load = now() - t0;
    size_t size;
    char *data = read_gz(argv[2], &size);
    if (!data) {
        fprintf(stderr, "cannot read %s\n", argv[2]);
        return 1;
    }
    size_t n_cases = 0, bytes = 0;
    double t_enc = 0;
    const char **texts = NULL;
    size_t *lens = NULL;
    json_t **recs = NULL;
    for (char *p = data, *nl; *p; p = nl + 1) {
        nl = strchr(p, '\n');
        if (!nl) break;
        *nl = 0;
        json_error_t err;
        json_t *rec = json_loads(p, 0, &err);
        if (!rec) {
            fprintf(stderr, "%s: case %zu: %s\n", argv[2], n_cases, err.text);
            return 1;
        }
        recs = realloc(recs, (n_cases + 1) * sizeof *recs);
        texts = realloc(texts, (n_cases + 1) * sizeof *texts);
        lens = realloc(lens, (n_cases + 1) * sizeof *lens);
        recs[n_cases] = rec;
        texts[n_cases] = json_string_value(json_object_get(rec, "text"));
        lens[n_cases] = json_string_length(json_object_get(rec, "text"));
        n_cases++;
    }
    for (size_t c = 0; c < n_cases; c++) {
        const json_t *rec = recs[c];
        const char *text = texts[c];
        size_t tl = lens[c];
        int32_t *ids;
        size_t n;
        double t1 = now();
        st = tdm_tokenizer_encode(tok, text, tl, false, &ids, &n);
        t_enc += now() - t1;
        bytes += tl;
        if (st) {
            fail(c, tdm_status_message(st), text);
            tdm_status_free(st);
            continue;
        }
        if (!ids_equal(ids, n, json_object_get(rec, "ids"))) {
            fail(c, "ids differ", text);
            print_ids("ids", ids, n, json_object_get(rec, "ids"));
        }
        const json_t *ws = json_object_get(rec, "ids_special");
        if (ws) {
            int32_t *ids2;
            size_t n2;
            st = tdm_tokenizer_encode(tok, text, tl, true, &ids2, &n2);
            if (st) {
                fail(c, tdm_status_message(st), text);
                tdm_status_free(st);
            } else {
                if (!ids_equal(ids2, n2, ws)) {
                    fail(c, "ids with add_special differ", text);
                    print_ids("ids_special", ids2, n2, ws);
                }
                tdm_tokens_free(ids2);
            }
        }
        const char *dec = json_string_value(json_object_get(rec, "decode"));
        if (!dec) dec = text;
        const char *dec_skip = json_string_value(json_object_get(rec, "decode_skip"));
        if (!dec_skip) dec_skip = dec;
        check_decode(tok, c, text, ids, n, false, dec);
        check_decode(tok, c, text, ids, n, true, dec_skip);
        tdm_tokens_free(ids);
    }
    printf("%s: %zu cases, %d failures; load %.1f ms; encode %.2f MB/s (%zu bytes)\n", argv[1], n_cases,
           failures, t_load * 1e3, bytes / t_enc / 1e6, bytes);
    for (int r = 0; r < bench; r++) {
        double t1 = now();
        for (size_t c = 0; c < n_cases; c++) {
            int32_t *ids;
            size_t n;
            st = tdm_tokenizer_encode(tok, texts[c], lens[c], false, &ids, &n);
            if (!st) tdm_tokens_free(ids);
            tdm_status_free(st);
        }
        printf("bench %d: encode %.2f MB/s\n", r, bytes / (now() - t1) / 1e6);
    }
    for (size_t c = 0; c < n_cases; c++) json_decref(recs[c]);
    free(recs);
    free(texts);
    free(lens);
    free(data);
    tdm_tokenizer_free(tok);
    return failures ? 1 : 0;
}
