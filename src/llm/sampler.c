/* Token sampling (sampler.h). The order is Hugging Face's: repetition penalty, temperature,
 * top-k, top-p, then a draw. Greedy (temperature 0) takes the arg max, lowest id on ties. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "llm/sampler.h"

typedef struct scored { /* a candidate for sorting */
    float v;
    int32_t id;
} scored;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(uint64_t *s) { /* xoshiro256** */
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, 1). */
static double next_unit(uint64_t *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

void tdm_sampler_reseed(tdm_sampler *s) {
    uint64_t x = s->cfg.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
}

tdm_status *tdm_sampler_init(tdm_sampler *s, const tdm_allocator *a, size_t vocab,
                             const tdm_sampling *cfg) {
    memset(s, 0, sizeof *s);
    s->a = a;
    s->vocab = vocab;
    if (cfg) s->cfg = *cfg;
    s->work = tdm_calloc(a, vocab + 1, sizeof *s->work);
    s->seen = tdm_calloc(a, vocab + 1, 1);
    s->cand = tdm_calloc(a, vocab + 1, sizeof *s->cand);
    s->prob = tdm_calloc(a, vocab + 1, sizeof *s->prob);
    s->sorted = tdm_calloc(a, vocab + 1, sizeof(scored));
    if (!s->work || !s->seen || !s->cand || !s->prob || !s->sorted) {
        tdm_sampler_free(s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the sampler");
    }
    tdm_sampler_reseed(s);
    return NULL;
}

void tdm_sampler_free(tdm_sampler *s) {
    tdm_free(s->a, s->work);
    tdm_free(s->a, s->seen);
    tdm_free(s->a, s->cand);
    tdm_free(s->a, s->prob);
    tdm_free(s->a, s->sorted);
    s->work = NULL, s->seen = NULL, s->cand = NULL, s->prob = NULL, s->sorted = NULL;
}

/* Four floats / int32 as GCC vector values (SSE2 at x86-64's baseline). */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

/* The largest x[i] that is not NaN (-inf when none is): sixteen lanes at a time, the lanes
 * starting at -inf, so a NaN is never taken and no lane is lost to one. */
float tdm_sampler_max(const float *x, size_t n) {
    float best = -INFINITY;
    size_t i = 0;
    if (n >= 16) {
        v4f m[4];
        for (int q = 0; q < 4; q++) m[q] = (v4f){-INFINITY, -INFINITY, -INFINITY, -INFINITY};
        for (; i + 16 <= n; i += 16)
            for (int q = 0; q < 4; q++) {
                v4f v;
                memcpy(&v, x + i + 4 * q, sizeof v);
                v4i c = v > m[q];
                m[q] = (v4f)((c & (v4i)v) | (~c & (v4i)m[q]));
            }
        for (int q = 0; q < 4; q++)
            for (int l = 0; l < 4; l++) best = m[q][l] > best ? m[q][l] : best;
    }
    for (; i < n; i++) best = x[i] > best ? x[i] : best;
    return best;
}

/* The first index of the largest x[i] that is not NaN (0 when every one is NaN): the largest
 * value (tdm_sampler_max), then the first index holding it, sixteen at a time (the scan was
 * one value at a time). A row of 49,152, its largest value at 11,604 / at 49,000: 8.6-9.1 /
 * 11.5-12.4 us against 13.9-14.1 / 32.2-33.9 (AMX Xeon, 1 thread, warm). */
static int32_t arg_max(const float *x, size_t n) {
    float best = tdm_sampler_max(x, n);
    size_t i;
    for (i = 0; i + 16 <= n; i += 16) { /* the first sixteen that hold it */
        v4i any = {0, 0, 0, 0};
        for (int q = 0; q < 4; q++) {
            v4f v;
            memcpy(&v, x + i + 4 * q, sizeof v);
            any |= v == best;
        }
        if (any[0] | any[1] | any[2] | any[3]) break;
    }
    for (; i < n; i++)
        if (x[i] == best) return (int32_t)i;
    return 0; /* every value NaN */
}

/* Sorting candidates by logit, highest first, lower id first on ties. */
static int by_logit_desc(const void *pa, const void *pb) {
    const scored *a = pa, *b = pb;
    if (a->v != b->v) return a->v > b->v ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

/* Min-heap of candidate ids keyed by logit (ties: the higher id is "smaller", so the lower
 * id stays), for top-k without sorting the vocabulary. */
static bool heap_less(const float *x, int32_t a, int32_t b) {
    return x[a] < x[b] || (x[a] == x[b] && a > b);
}

static void heap_down(const float *x, int32_t *h, size_t n, size_t i) {
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && heap_less(x, h[l], h[m])) m = l;
        if (r < n && heap_less(x, h[r], h[m])) m = r;
        if (m == i) return;
        int32_t t = h[i];
        h[i] = h[m];
        h[m] = t;
        i = m;
    }
}

/* The k best ids of x in cand[0..k), best first. */
static void top_k(const float *x, size_t n, size_t k, int32_t *cand) {
    for (size_t i = 0; i < k; i++) cand[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;) heap_down(x, cand, k, i);
    for (size_t i = k; i < n; i++)
        if (heap_less(x, cand[0], (int32_t)i)) {
            cand[0] = (int32_t)i;
            heap_down(x, cand, k, 0);
        }
    /* heap sort: pop the smallest to the back */
    for (size_t m = k; m > 1; m--) {
        int32_t t = cand[0];
        cand[0] = cand[m - 1];
        cand[m - 1] = t;
        heap_down(x, cand, m - 1, 0);
    }
}

int32_t tdm_sampler_pick(tdm_sampler *s, const float *logits, const int32_t *seq, size_t n_seq) {
    size_t V = s->vocab;
    const tdm_sampling *c = &s->cfg;
    const float *x = logits;
    if (c->repetition_penalty > 0 && c->repetition_penalty != 1.0f) {
        memcpy(s->work, logits, V * sizeof *s->work);
        for (size_t i = 0; i < n_seq; i++) {
            int32_t t = seq[i];
            if (t < 0 || (size_t)t >= V || s->seen[t]) continue;
            s->seen[t] = 1;
            float v = s->work[t];
            s->work[t] = v > 0 ? v / c->repetition_penalty : v * c->repetition_penalty;
        }
        for (size_t i = 0; i < n_seq; i++)
            if (seq[i] >= 0 && (size_t)seq[i] < V) s->seen[seq[i]] = 0;
        x = s->work;
    }
    if (!(c->temperature > 0) || c->top_k == 1) return arg_max(x, V);
    /* candidates, best first */
    size_t n = V;
    if (c->top_k > 0 && (size_t)c->top_k < V) {
        n = (size_t)c->top_k;
        top_k(x, V, n, s->cand);
    } else {
        for (size_t i = 0; i < V; i++) s->cand[i] = (int32_t)i;
        if (c->top_p > 0 && c->top_p < 1) { /* top-p needs them in order */
            scored *sc = s->sorted;
            for (size_t i = 0; i < V; i++) sc[i] = (scored){x[i], (int32_t)i};
            qsort(sc, V, sizeof *sc, by_logit_desc);
            for (size_t i = 0; i < V; i++) s->cand[i] = sc[i].id;
        }
    }
    /* softmax of the candidates at the temperature */
    float mx = x[s->cand[0]];
    for (size_t i = 1; i < n; i++) mx = fmaxf(mx, x[s->cand[i]]);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        s->prob[i] = expf((x[s->cand[i]] - mx) / c->temperature);
        sum += s->prob[i];
    }
    if (c->top_p > 0 && c->top_p < 1) { /* the smallest prefix reaching top_p */
        double acc = 0;
        size_t keep = 0;
        while (keep < n) {
            acc += s->prob[keep++] / sum;
            if (acc >= c->top_p) break;
        }
        n = keep;
        sum = 0;
        for (size_t i = 0; i < n; i++) sum += s->prob[i];
    }
    double r = next_unit(s->rng) * sum, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) return s->cand[i];
    }
    return s->cand[n - 1];
}
