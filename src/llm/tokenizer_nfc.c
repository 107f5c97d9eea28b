/* Unicode normalization form C (the NFC normalizer of tokenizer.json): full canonical
 * decomposition, canonical ordering, canonical composition (UAX #15), with the tables that
 * tools/gen_unicode_tables.py generates and Hangul syllables by their formula. Text below
 * U+0300 is always NFC and is copied as it is. */
#include <stdlib.h>
#include <string.h>

#include "llm/tokenizer_impl.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19,
       V_COUNT = 21, T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

static unsigned ccc(uint32_t c) {
    if (c < 0x300) return 0;
    size_t lo = 0, hi = tdm_tok_ccc_n_ranges;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < tdm_tok_ccc_ranges[mid].lo) hi = mid;
        else if (c > tdm_tok_ccc_ranges[mid].hi) lo = mid + 1;
        else return tdm_tok_ccc_ranges[mid].cls;
    }
    return 0;
}

static const tdm_tok_decomp *decomp(uint32_t c) {
    size_t lo = 0, hi = tdm_tok_n_decomps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (c < tdm_tok_decomps[mid].cp) hi = mid;
        else if (c > tdm_tok_decomps[mid].cp) lo = mid + 1;
        else return &tdm_tok_decomps[mid];
    }
    return NULL;
}

static uint32_t compose(uint32_t a, uint32_t b) {
    if (a >= L_BASE && a < L_BASE + L_COUNT && b >= V_BASE && b < V_BASE + V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a >= S_BASE && a < S_BASE + S_COUNT && (a - S_BASE) % T_COUNT == 0 && b > T_BASE &&
        b < T_BASE + T_COUNT)
        return a + (b - T_BASE);
    size_t lo = 0, hi = tdm_tok_n_comps;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        const tdm_tok_comp *p = &tdm_tok_comps[mid];
        if (a < p->a || (a == p->a && b < p->b)) hi = mid;
        else if (a > p->a || b > p->b) lo = mid + 1;
        else return p->c;
    }
    return 0;
}

typedef struct cps {
    uint32_t *p;
    unsigned char *cc;
    size_t n, cap;
} cps;

static bool cps_put(cps *v, uint32_t c) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        uint32_t *p = realloc(v->p, cap * sizeof *p);
        if (!p) return false;
        v->p = p;
        unsigned char *cc = realloc(v->cc, cap);
        if (!cc) return false;
        v->cc = cc;
        v->cap = cap;
    }
    v->cc[v->n] = (unsigned char)ccc(c);
    v->p[v->n++] = c;
    return true;
}

/* Stable sort of the run [a, b) by combining class (all non-zero): insertion for short
 * runs, counting sort for long ones (no quadratic time on hostile input). */
static bool order_run(cps *v, size_t a, size_t b) {
    if (b - a <= 16) {
        for (size_t i = a + 1; i < b; i++) {
            uint32_t c = v->p[i];
            unsigned char k = v->cc[i];
            size_t j = i;
            for (; j > a && v->cc[j - 1] > k; j--) {
                v->p[j] = v->p[j - 1];
                v->cc[j] = v->cc[j - 1];
            }
            v->p[j] = c;
            v->cc[j] = k;
        }
        return true;
    }
    size_t count[257] = {0};
    uint32_t *tmp = malloc((b - a) * sizeof *tmp);
    if (!tmp) return false;
    for (size_t i = a; i < b; i++) count[v->cc[i] + 1]++;
    for (int k = 1; k < 257; k++) count[k] += count[k - 1];
    for (size_t i = a; i < b; i++) tmp[count[v->cc[i]]++] = v->p[i];
    memcpy(v->p + a, tmp, (b - a) * sizeof *tmp);
    free(tmp);
    for (size_t i = a; i < b; i++) v->cc[i] = (unsigned char)ccc(v->p[i]);
    return true;
}

bool tdm_tok_nfc(tdm_tok_buf *out, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && (unsigned char)s[i] < 0xCC) i++; /* lead bytes below 0xCC: below U+0300 */
    if (i == n) return tdm_tok_buf_put(out, s, n);
    cps v = {0};
    bool ok = true;
    /* decompose */
    for (i = 0; i < n && ok;) {
        uint32_t c;
        i += tdm_tok_utf8_dec((const unsigned char *)s + i, n - i, &c);
        if (c >= S_BASE && c < S_BASE + S_COUNT) {
            uint32_t k = c - S_BASE;
            ok = cps_put(&v, L_BASE + k / N_COUNT) && cps_put(&v, V_BASE + (k % N_COUNT) / T_COUNT);
            if (ok && k % T_COUNT) ok = cps_put(&v, T_BASE + k % T_COUNT);
            continue;
        }
        const tdm_tok_decomp *d = c >= 0xC0 ? decomp(c) : NULL;
        if (!d) {
            ok = cps_put(&v, c);
            continue;
        }
        for (uint32_t k = 0; k < d->len && ok; k++) ok = cps_put(&v, tdm_tok_decomp_data[d->off + k]);
    }
    /* canonical order */
    for (size_t a = 0; a < v.n && ok;) {
        if (!v.cc[a]) {
            a++;
            continue;
        }
        size_t b = a;
        while (b < v.n && v.cc[b]) b++;
        ok = order_run(&v, a, b);
        a = b;
    }
    /* compose */
    size_t o = 0, starter = SIZE_MAX;
    unsigned last = 0;
    for (size_t k = 0; k < v.n && ok; k++) {
        uint32_t c = v.p[k];
        unsigned cc = v.cc[k];
        if (starter != SIZE_MAX && (o == starter + 1 || (last != 0 && last < cc))) {
            uint32_t comp = compose(v.p[starter], c);
            if (comp) {
                v.p[starter] = comp;
                continue;
            }
        }
        if (cc == 0) starter = o;
        last = cc;
        v.p[o++] = c;
    }
    for (size_t k = 0; k < o && ok; k++) {
        char e[4];
        ok = tdm_tok_buf_put(out, e, tdm_tok_utf8_enc(v.p[k], e));
    }
    free(v.p);
    free(v.cc);
    return ok;
}
