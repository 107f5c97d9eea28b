/* Encoding: added tokens, normalizers, pre-tokenizers, BPE, post-processor.
 *
 * As Hugging Face's tokenizers does it: the text is cut at added tokens first (each
 * matched as itself, longest first); every other segment is normalized, pre-tokenized into
 * pieces, and each piece goes through BPE on its own. Nothing recurses on the input. */
#include <stdlib.h>
#include <string.h>

#include "core/status.h"
#include "llm/tokenizer_impl.h"

typedef struct ids_out {
    int32_t *p;
    size_t n, cap;
} ids_out;

static bool ids_put(ids_out *o, int32_t id) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        int32_t *p = realloc(o->p, cap * sizeof *p);
        if (!p) return false;
        o->p = p;
        o->cap = cap;
    }
    o->p[o->n++] = id;
    return true;
}

/* Scratch memory of one encode call. */
typedef struct work {
    tdm_tok_pieces a, b;
    tdm_tok_buf norm, mapped;
    struct sym {
        int32_t id, prev, next;
        bool alive;
    } *sym;
    size_t sym_cap;
    struct cand {
        uint32_t rank, pos;
        int32_t id;
    } *heap;
    size_t heap_n, heap_cap;
} work;

static void work_free(work *w) {
    tdm_tok_pieces_free(&w->a);
    tdm_tok_pieces_free(&w->b);
    free(w->norm.p);
    free(w->mapped.p);
    free(w->sym);
    free(w->heap);
}

/* ---- BPE ---- */
static bool cand_less(const struct cand *x, const struct cand *y) {
    return x->rank != y->rank ? x->rank < y->rank : x->pos < y->pos;
}

static bool heap_push(work *w, struct cand c) {
    if (w->heap_n == w->heap_cap) {
        size_t cap = w->heap_cap ? w->heap_cap * 2 : 64;
        struct cand *h = realloc(w->heap, cap * sizeof *h);
        if (!h) return false;
        w->heap = h;
        w->heap_cap = cap;
    }
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = c;
    return true;
}

static struct cand heap_pop(work *w) {
    struct cand top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        if (l >= n) break;
        m = l + 1 < n && cand_less(&w->heap[l + 1], &w->heap[l]) ? l + 1 : l;
        if (!cand_less(&w->heap[m], &last)) break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (n) w->heap[i] = last;
    return top;
}

static bool push_pair(const tdm_tokenizer *t, work *w, int32_t pos) {
    int32_t next = w->sym[pos].next;
    if (next < 0) return true;
    const tdm_tok_merge *m = tdm_tok_merge_find(t, w->sym[pos].id, w->sym[next].id);
    if (!m) return true;
    struct cand c = {m->rank, (uint32_t)pos, m->id};
    return heap_push(w, c);
}

static bool sym_add(work *w, size_t *n, int32_t id) {
    if (*n == w->sym_cap) {
        size_t cap = w->sym_cap ? w->sym_cap * 2 : 64;
        struct sym *s = realloc(w->sym, cap * sizeof *s);
        if (!s) return false;
        w->sym = s;
        w->sym_cap = cap;
    }
    w->sym[*n].id = id;
    w->sym[*n].prev = (int32_t)*n - 1;
    w->sym[*n].next = -1;
    w->sym[*n].alive = true;
    if (*n) w->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
    return true;
}

/* One piece (vocabulary characters) to ids. */
static tdm_status *bpe(const tdm_tokenizer *t, work *w, const char *s, size_t len, ids_out *out) {
    if (!len) return NULL;
    if (len > INT32_MAX / 2) return TDM_ERR(TDM_ERR_LIMIT, "tokenizer: a piece of text over 1 GiB");
    if (t->ignore_merges) {
        int32_t id = tdm_tok_vocab_find(t, s, len);
        if (id >= 0) return ids_put(out, id) ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    size_t n = 0;
    bool last_unk = false;
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t cl = tdm_tok_utf8_dec((const unsigned char *)s + i, len - i, &cp);
        int32_t id = tdm_tok_vocab_find(t, s + i, cl);
        bool ok = true;
        if (id >= 0) {
            ok = sym_add(w, &n, id);
            last_unk = false;
        } else {
            bool done = false;
            if (t->byte_fallback) {
                bool all = true;
                for (size_t k = 0; k < cl; k++) all = all && t->byte_tok[(unsigned char)s[i + k]] >= 0;
                if (all) {
                    for (size_t k = 0; k < cl && ok; k++) ok = sym_add(w, &n, t->byte_tok[(unsigned char)s[i + k]]);
                    done = true;
                    last_unk = false;
                }
            }
            if (!done && t->unk_id >= 0) {
                if (!(t->fuse_unk && last_unk)) ok = sym_add(w, &n, t->unk_id);
                last_unk = true;
            }
        }
        if (!ok) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
        i += cl;
    }
    w->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (!push_pair(t, w, (int32_t)i)) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    while (w->heap_n) {
        struct cand c = heap_pop(w);
        struct sym *a = &w->sym[c.pos];
        if (!a->alive || a->next < 0) continue;
        struct sym *b = &w->sym[a->next];
        const tdm_tok_merge *m = tdm_tok_merge_find(t, a->id, b->id);
        if (!m || m->id != c.id) continue; /* stale */
        a->id = c.id;
        b->alive = false;
        a->next = b->next;
        if (b->next >= 0) w->sym[b->next].prev = (int32_t)c.pos;
        if ((a->prev >= 0 && !push_pair(t, w, a->prev)) || !push_pair(t, w, (int32_t)c.pos))
            return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    }
    for (int32_t i = n ? 0 : -1; i >= 0; i = w->sym[i].next)
        if (!ids_put(out, w->sym[i].id)) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    return NULL;
}

/* ---- normalizers ---- */
bool tdm_tok_replace_all(tdm_tok_buf *out, const char *s, size_t n, const char *a, size_t na,
                        const char *b, size_t nb) {
    size_t i = 0, start = 0;
    while (i + na <= n) {
        if (s[i] == a[0] && memcmp(s + i, a, na) == 0) {
            if (!tdm_tok_buf_put(out, s + start, i - start) || !tdm_tok_buf_put(out, b, nb)) return false;
            i += na;
            start = i;
        } else {
            i++;
        }
    }
    return tdm_tok_buf_put(out, s + start, n - start);
}

/* Normalizes s[0..n) into w->norm (when there is a normalizer); *res, *rn the result. */
static bool normalize(const tdm_tokenizer *t, work *w, const char *s, size_t n, const char **res,
                      size_t *rn) {
    *res = s;
    *rn = n;
    tdm_tok_buf tmp = {0};
    for (size_t k = 0; k < t->n_norm; k++) {
        const tdm_tok_norm *d = &t->norm[k];
        tmp.len = 0;
        bool ok = true;
        if (d->kind == TDM_TOK_NORM_PREPEND) {
            if (!*rn) continue;
            ok = tdm_tok_buf_put(&tmp, d->a, d->na) && tdm_tok_buf_put(&tmp, *res, *rn);
        } else if (d->kind == TDM_TOK_NORM_REPLACE) {
            ok = tdm_tok_replace_all(&tmp, *res, *rn, d->a, d->na, d->b, d->nb);
        } else {
            ok = tdm_tok_nfc(&tmp, *res, *rn);
        }
        if (!ok) {
            free(tmp.p);
            return false;
        }
        tdm_tok_buf swap = w->norm; /* the result moves to w->norm, the old buffer is reused */
        w->norm = tmp;
        tmp = swap;
        *res = w->norm.p;
        *rn = w->norm.len;
    }
    free(tmp.p);
    return true;
}

/* ---- pre-tokenizers: each step maps the pieces in `in` to `out` ---- */
static bool step_split(const tdm_tok_pre *d, const char *p, size_t n, tdm_tok_pieces *out) {
    for (size_t i = 0; i < n;) {
        size_t m = tdm_tok_regex_match(d->re, (const unsigned char *)p + i, n - i);
        if (!tdm_tok_pieces_add(out, p + i, m, NULL, 0)) return false;
        i += m;
    }
    return true;
}

static bool step_digits(const tdm_tok_pre *d, const char *p, size_t n, tdm_tok_pieces *out) {
    size_t start = 0;
    int prev = -1; /* 1: in digits */
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t cl = tdm_tok_utf8_dec((const unsigned char *)p + i, n - i, &cp);
        int dig = tdm_tok_ucls(cp) == TDM_TOK_N;
        if (i > start && (dig != prev || (dig && d->individual))) {
            if (!tdm_tok_pieces_add(out, p + start, i - start, NULL, 0)) return false;
            start = i;
        }
        prev = dig;
        i += cl;
    }
    return n > start ? tdm_tok_pieces_add(out, p + start, n - start, NULL, 0) : true;
}

static bool step_bytelevel(const tdm_tok_pre *d, const char *p, size_t n, tdm_tok_buf *tmp,
                           tdm_tok_pieces *out) {
    if (d->add_prefix_space && !(n && p[0] == ' ')) {
        tmp->len = 0;
        if (!tdm_tok_buf_put(tmp, " ", 1) || !tdm_tok_buf_put(tmp, p, n)) return false;
        p = tmp->p;
        n = tmp->len;
    }
    for (size_t i = 0; i < n;) {
        size_t m = d->use_regex ? tdm_tok_regex_match(TDM_TOK_RE_GPT2, (const unsigned char *)p + i, n - i) : n;
        /* the piece, each byte as its character */
        size_t off = out->text.len;
        for (size_t k = i; k < i + m; k++) {
            char c[4];
            size_t cl = tdm_tok_utf8_enc(tdm_tok_byte_char((unsigned char)p[k]), c);
            if (!tdm_tok_buf_put(&out->text, c, cl)) return false;
        }
        if (!tdm_tok_pieces_end(out, off)) return false;
        i += m;
    }
    return true;
}

static bool step_metaspace(const tdm_tok_pre *d, const char *p, size_t n, bool first,
                           tdm_tok_buf *tmp, tdm_tok_pieces *out) {
    tmp->len = 0;
    bool pre = d->prepend == TDM_TOK_PREPEND_ALWAYS || (d->prepend == TDM_TOK_PREPEND_FIRST && first);
    /* spaces are replaced first: a piece that starts with one gets no second replacement */
    if (pre && !(n && p[0] == ' ') && !(n >= d->nrepl && memcmp(p, d->repl, d->nrepl) == 0) &&
        !tdm_tok_buf_put(tmp, d->repl, d->nrepl))
        return false;
    if (!tdm_tok_replace_all(tmp, p, n, " ", 1, d->repl, d->nrepl)) return false;
    if (!d->split) return tdm_tok_pieces_add(out, tmp->p, tmp->len, NULL, 0);
    /* each replacement starts a new piece */
    size_t start = 0;
    for (size_t i = 0; i + d->nrepl <= tmp->len; i++) {
        if (memcmp(tmp->p + i, d->repl, d->nrepl) == 0 && i > start) {
            if (!tdm_tok_pieces_add(out, tmp->p + start, i - start, NULL, 0)) return false;
            start = i;
        }
    }
    return tmp->len > start ? tdm_tok_pieces_add(out, tmp->p + start, tmp->len - start, NULL, 0) : true;
}

/* One text segment (between added tokens) to ids. `first`: it starts the input. */
static tdm_status *encode_segment(const tdm_tokenizer *t, work *w, const char *s, size_t n,
                                  bool first, ids_out *out) {
    const tdm_status *oom_st = NULL;
    const char *p;
    size_t pn;
    if (!normalize(t, w, s, n, &p, &pn)) goto oom;
    tdm_tok_pieces_clear(&w->a);
    if (!tdm_tok_pieces_add(&w->a, p, pn, NULL, 0)) goto oom;
    for (size_t k = 0; k < t->n_pre; k++) {
        const tdm_tok_pre *d = &t->pre[k];
        tdm_tok_pieces_clear(&w->b);
        for (size_t i = 0; i < w->a.n; i++) {
            const char *q = tdm_tok_piece(&w->a, i);
            size_t qn = w->a.sp[i].len;
            bool ok = true;
            switch (d->kind) {
            case TDM_TOK_PRE_SPLIT: ok = step_split(d, q, qn, &w->b); break;
            case TDM_TOK_PRE_DIGITS: ok = step_digits(d, q, qn, &w->b); break;
            case TDM_TOK_PRE_BYTELEVEL: ok = step_bytelevel(d, q, qn, &w->mapped, &w->b); break;
            case TDM_TOK_PRE_METASPACE: ok = step_metaspace(d, q, qn, first && i == 0, &w->mapped, &w->b); break;
            }
            if (!ok) goto oom;
        }
        tdm_tok_pieces swap = w->a;
        w->a = w->b;
        w->b = swap;
    }
    for (size_t i = 0; i < w->a.n; i++)
        TDM_TRY(bpe(t, w, tdm_tok_piece(&w->a, i), w->a.sp[i].len, out));
    (void)oom_st;
    return NULL;
oom:
    return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
}

/* ---- added tokens ---- */
static const tdm_tok_added *added_at(const tdm_tokenizer *t, const char *s, size_t n, size_t i) {
    unsigned char b = (unsigned char)s[i];
    for (uint32_t k = t->added_first[b]; k < t->added_first[b + 1]; k++) {
        const tdm_tok_added *a = &t->added[k];
        if (a->len <= n - i && memcmp(s + i, a->content, a->len) == 0) return a;
    }
    return NULL;
}

/* Whitespace (Unicode White_Space) before s[end] back to `floor`, and after s[i]. */
static size_t ws_left(const char *s, size_t floor, size_t end) {
    while (end > floor) {
        size_t k = end - 1;
        while (k > floor && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        uint32_t cp;
        tdm_tok_utf8_dec((const unsigned char *)s + k, end - k, &cp);
        if (!tdm_tok_is_space(cp)) break;
        end = k;
    }
    return end;
}

static size_t ws_right(const char *s, size_t n, size_t i) {
    while (i < n) {
        uint32_t cp;
        size_t cl = tdm_tok_utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (!tdm_tok_is_space(cp)) break;
        i += cl;
    }
    return i;
}

tdm_status *tdm_tokenizer_encode(const tdm_tokenizer *t, const char *text, size_t len,
                                 bool add_special, int32_t **ids, size_t *n_ids) {
    if (!t || (!text && len) || !ids || !n_ids)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tokenizer_encode: NULL argument");
    size_t bad = tdm_tok_utf8_valid((const unsigned char *)text, len);
    if (bad != len)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_tokenizer_encode: the text is not valid UTF-8 (byte %zu)", bad);
    ids_out out = {0};
    work w = {0};
    tdm_status *st = NULL;
    bool ok = true;
    for (size_t k = 0; add_special && ok && k < t->n_post_prefix; k++) ok = ids_put(&out, t->post_prefix[k]);
    size_t seg = 0, i = 0;
    while (ok && !st && i < len) {
        const tdm_tok_added *a = t->n_added ? added_at(t, text, len, i) : NULL;
        if (!a) {
            i++;
            continue;
        }
        size_t start = a->lstrip ? ws_left(text, seg, i) : i;
        size_t end = a->rstrip ? ws_right(text, len, i + a->len) : i + a->len;
        if (start > seg) st = encode_segment(t, &w, text + seg, start - seg, seg == 0, &out);
        if (!st) ok = ids_put(&out, a->id);
        seg = i = end;
    }
    if (ok && !st && len > seg) st = encode_segment(t, &w, text + seg, len - seg, seg == 0, &out);
    for (size_t k = 0; add_special && ok && !st && k < t->n_post_suffix; k++) ok = ids_put(&out, t->post_suffix[k]);
    work_free(&w);
    if (!ok && !st) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    if (st) {
        free(out.p);
        return st;
    }
    if (!out.p && !(out.p = malloc(sizeof *out.p))) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "tokenizer: out of memory");
    *ids = out.p;
    *n_ids = out.n;
    return NULL;
}

void tdm_tokens_free(int32_t *ids) { free(ids); }
