/* Decoding: ids to token strings, the decoder steps of tokenizer.json (as Hugging Face's
 * tokenizers applies them: a list of strings in, a list out, joined at the end), and the
 * token stream for incremental decoding. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "llm/tokenizer_impl.h"

#define OOM TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory")

static const char *piece(const tdm_tok_pieces *l, size_t i) { return tdm_tok_piece(l, i); }

/* ByteLevel: each token's characters back to bytes (a token with a character outside the
 * map stays as it is), all joined, then read as UTF-8 with U+FFFD for invalid bytes. */
static bool dec_bytelevel(const tdm_tok_pieces *in, tdm_tok_pieces *out, tdm_tok_buf *tmp,
                          bool *incomplete) {
    tmp->len = 0;
    for (size_t i = 0; i < in->n; i++) {
        const unsigned char *s = (const unsigned char *)piece(in, i);
        size_t n = in->sp[i].len, mark = tmp->len;
        bool all = true;
        for (size_t k = 0; k < n && all;) {
            uint32_t cp;
            k += tdm_tok_utf8_dec(s + k, n - k, &cp);
            int b = tdm_tok_char_byte(cp);
            unsigned char byte = (unsigned char)b;
            if (b < 0) all = false;
            else if (!tdm_tok_buf_put(tmp, &byte, 1)) return false;
        }
        if (!all) {
            tmp->len = mark;
            if (!tdm_tok_buf_put(tmp, s, n)) return false;
        }
    }
    size_t off = out->text.len;
    if (!tdm_tok_lossy(&out->text, (const unsigned char *)tmp->p, tmp->len, incomplete)) return false;
    return tdm_tok_pieces_end(out, off);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f') return (c | 0x20) - 'a' + 10;
    return -1;
}

static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int h = hexval(s[3]), l = hexval(s[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

/* ByteFallback: a run of <0xXX> tokens becomes its UTF-8 text, or one U+FFFD per token
 * when the bytes are not valid UTF-8. */
static bool dec_bytefallback(const tdm_tok_pieces *in, tdm_tok_pieces *out, tdm_tok_buf *tmp,
                             bool *incomplete) {
    for (size_t i = 0; i < in->n;) {
        if (byte_token(piece(in, i), in->sp[i].len) < 0) {
            if (!tdm_tok_pieces_add(out, piece(in, i), in->sp[i].len, NULL, 0)) return false;
            i++;
            continue;
        }
        tmp->len = 0;
        size_t j = i;
        for (; j < in->n; j++) {
            int b = byte_token(piece(in, j), in->sp[j].len);
            if (b < 0) break;
            unsigned char c = (unsigned char)b;
            if (!tdm_tok_buf_put(tmp, &c, 1)) return false;
        }
        size_t valid = tdm_tok_utf8_valid((const unsigned char *)tmp->p, tmp->len);
        if (valid == tmp->len) {
            if (!tdm_tok_pieces_add(out, tmp->p, tmp->len, NULL, 0)) return false;
        } else {
            if (j == in->n) {
                bool inc = false;
                tdm_tok_buf scratch = {0};
                bool ok = tdm_tok_lossy(&scratch, (const unsigned char *)tmp->p, tmp->len, &inc);
                free(scratch.p);
                if (!ok) return false;
                if (inc) *incomplete = true;
            }
            for (size_t k = i; k < j; k++)
                if (!tdm_tok_pieces_add(out, "\xEF\xBF\xBD", 3, NULL, 0)) return false;
        }
        i = j;
    }
    return true;
}

static bool dec_strip(const tdm_tok_dec *d, const char *s, size_t n, tdm_tok_pieces *out) {
    size_t a = 0, b = n;
    for (int k = 0; k < d->start && a + d->na <= b && memcmp(s + a, d->a, d->na) == 0; k++) a += d->na;
    for (int k = 0; k < d->stop && b >= a + d->na && memcmp(s + b - d->na, d->a, d->na) == 0; k++) b -= d->na;
    return tdm_tok_pieces_add(out, s + a, b - a, NULL, 0);
}

static bool dec_metaspace(const tdm_tok_dec *d, const char *s, size_t n, bool first,
                          tdm_tok_pieces *out) {
    size_t off = out->text.len;
    bool drop = first && d->prepend != TDM_TOK_PREPEND_NEVER;
    if (!tdm_tok_replace_all(&out->text, s, n, d->a, d->na, drop ? "" : " ", drop ? 0 : 1)) return false;
    return tdm_tok_pieces_end(out, off);
}

tdm_status *tdm_tok_decode_ids(const tdm_tokenizer *t, const int32_t *ids, size_t n,
                               bool skip_special, tdm_tok_buf *out, bool *incomplete) {
    tdm_tok_pieces a = {0}, b = {0};
    tdm_tok_buf tmp = {0};
    tdm_status *st = NULL;
    *incomplete = false;
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || (size_t)id >= t->n_ids || !t->tok[id]) {
            st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tokenizer decode: id %d is not in the vocabulary", (int)id);
            goto done;
        }
        if (skip_special && (t->tok_flags[id] & TDM_TOK_F_SPECIAL)) continue;
        if (!tdm_tok_pieces_add(&a, t->tok[id], t->tok_len[id], NULL, 0)) goto oom;
    }
    if (!t->has_decoder) { /* HF joins the tokens with spaces */
        for (size_t i = 0; i < a.n; i++)
            if ((i && !tdm_tok_buf_put(out, " ", 1)) || !tdm_tok_buf_put(out, piece(&a, i), a.sp[i].len)) goto oom;
        goto done;
    }
    for (size_t k = 0; k < t->n_dec; k++) {
        const tdm_tok_dec *d = &t->dec[k];
        bool ok = true;
        tdm_tok_pieces_clear(&b);
        switch (d->kind) {
        case TDM_TOK_DEC_BYTELEVEL: ok = dec_bytelevel(&a, &b, &tmp, incomplete); break;
        case TDM_TOK_DEC_BYTEFALLBACK: ok = dec_bytefallback(&a, &b, &tmp, incomplete); break;
        case TDM_TOK_DEC_FUSE:
            tmp.len = 0;
            for (size_t i = 0; i < a.n && ok; i++) ok = tdm_tok_buf_put(&tmp, piece(&a, i), a.sp[i].len);
            ok = ok && (a.n == 0 || tdm_tok_pieces_add(&b, tmp.p, tmp.len, NULL, 0));
            break;
        case TDM_TOK_DEC_REPLACE:
            for (size_t i = 0; i < a.n && ok; i++) {
                size_t off = b.text.len;
                ok = tdm_tok_replace_all(&b.text, piece(&a, i), a.sp[i].len, d->a, d->na, d->b, d->nb);
                ok = ok && tdm_tok_pieces_end(&b, off);
            }
            break;
        case TDM_TOK_DEC_STRIP:
            for (size_t i = 0; i < a.n && ok; i++) ok = dec_strip(d, piece(&a, i), a.sp[i].len, &b);
            break;
        case TDM_TOK_DEC_METASPACE:
            for (size_t i = 0; i < a.n && ok; i++) ok = dec_metaspace(d, piece(&a, i), a.sp[i].len, i == 0, &b);
            break;
        }
        if (!ok) goto oom;
        tdm_tok_pieces swap = a;
        a = b;
        b = swap;
    }
    for (size_t i = 0; i < a.n; i++)
        if (!tdm_tok_buf_put(out, piece(&a, i), a.sp[i].len)) goto oom;
    goto done;
oom:
    st = OOM;
done:
    tdm_tok_pieces_free(&a);
    tdm_tok_pieces_free(&b);
    free(tmp.p);
    return st;
}

tdm_status *tdm_tokenizer_decode(const tdm_tokenizer *t, const int32_t *ids, size_t n_ids,
                                 bool skip_special, char **text, size_t *len) {
    if (!t || (!ids && n_ids) || !text) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tokenizer_decode: NULL argument");
    tdm_tok_buf out = {0};
    bool inc;
    tdm_status *st = tdm_tok_decode_ids(t, ids, n_ids, skip_special, &out, &inc);
    if (!st && !out.p && !tdm_tok_buf_put(&out, "", 0)) st = OOM;
    if (st) {
        free(out.p);
        return st;
    }
    *text = out.p;
    if (len) *len = out.len;
    return NULL;
}

/* ---- streaming ---- */
/* The stream keeps a few ids as context (`ids`, of which the first `prefix_n` decode to
 * `prefix`, text already given out) and the ids pushed since: decoding them all and dropping
 * `prefix` gives the new text. The context keeps decoders that look at neighbours (a
 * leading-space strip, a first token's marks, byte runs) as they are in the whole decode. */
struct tdm_token_stream {
    const tdm_tokenizer *tok;
    bool skip;
    int32_t *ids;
    size_t n, cap, prefix_n;
    tdm_tok_buf prefix, cur, piece;
};

tdm_status *tdm_token_stream_create(const tdm_tokenizer *tok, bool skip_special,
                                    tdm_token_stream **out) {
    if (!tok || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_token_stream_create: NULL argument");
    tdm_token_stream *s = calloc(1, sizeof *s);
    if (!s) return OOM;
    s->tok = tok;
    s->skip = skip_special;
    *out = s;
    return NULL;
}

tdm_status *tdm_token_stream_push(tdm_token_stream *s, int32_t id, const char **piece_out,
                                  size_t *len) {
    if (!s || !piece_out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_token_stream_push: NULL argument");
    if (id < 0 || (size_t)id >= s->tok->n_ids || !s->tok->tok[id])
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_token_stream_push: id %d is not in the vocabulary", (int)id);
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 16;
        int32_t *p = realloc(s->ids, cap * sizeof *p);
        if (!p) return OOM;
        s->ids = p;
        s->cap = cap;
    }
    s->ids[s->n++] = id;
    s->cur.len = 0;
    bool inc;
    tdm_status *st = tdm_tok_decode_ids(s->tok, s->ids, s->n, s->skip, &s->cur, &inc);
    if (st) {
        s->n--;
        return st;
    }
    s->piece.len = 0;
    if (!tdm_tok_buf_put(&s->piece, "", 0)) return OOM;
    if (inc || s->cur.len <= s->prefix.len) {
        *piece_out = s->piece.p;
        if (len) *len = 0;
        return NULL;
    }
    if (s->prefix.len && memcmp(s->cur.p, s->prefix.p, s->prefix.len) != 0) {
        /* The decoder changed text already given out: only a byte-fallback run that a new
         * byte makes invalid UTF-8 does (HF then writes U+FFFD for every byte of it). The
         * stream cannot take text back: it starts again at this id, alone. */
        s->ids[0] = id;
        s->n = 1;
        s->prefix_n = 0;
        s->prefix.len = 0;
        s->cur.len = 0;
        st = tdm_tok_decode_ids(s->tok, s->ids, s->n, s->skip, &s->cur, &inc);
        if (st) return st;
        if (inc || !s->cur.len) {
            *piece_out = s->piece.p;
            if (len) *len = 0;
            return NULL;
        }
    }
    if (!tdm_tok_buf_put(&s->piece, s->cur.p + s->prefix.len, s->cur.len - s->prefix.len)) return OOM;
    /* The new context: the shortest tail of the ids whose own decode is not empty and ends
     * the text given out (cur is such a tail's decode: the window's). Decoding the context
     * with the next ids then only adds text after it, also where the decoder strips leading
     * spaces or drops a first token's marks, or special tokens are skipped. */
    size_t keep = s->n;
    for (size_t k = 1; k < s->n && k <= 16; k++) {
        s->prefix.len = 0;
        st = tdm_tok_decode_ids(s->tok, s->ids + s->n - k, k, s->skip, &s->prefix, &inc);
        if (st) return st;
        if (!inc && s->prefix.len && s->prefix.len <= s->cur.len &&
            !memcmp(s->cur.p + s->cur.len - s->prefix.len, s->prefix.p, s->prefix.len)) {
            keep = k;
            break;
        }
    }
    if (keep == s->n) {
        s->prefix.len = 0;
        if (!tdm_tok_buf_put(&s->prefix, s->cur.p, s->cur.len)) return OOM;
    }
    memmove(s->ids, s->ids + s->n - keep, keep * sizeof *s->ids);
    s->n = keep;
    s->prefix_n = s->n;
    *piece_out = s->piece.p;
    if (len) *len = s->piece.len;
    return NULL;
}

void tdm_token_stream_free(tdm_token_stream *s) {
    if (!s) return;
    free(s->ids);
    free(s->prefix.p);
    free(s->cur.p);
    free(s->piece.p);
    free(s);
}
