/* Token sampling (sampler.h). The order: the logit bias, the repetition penalty (Hugging
 * Face's), the presence and frequency penalties (OpenAI's), then greedy (the arg max, lowest id
 * on ties) or temperature, top-k, top-p and a draw (Hugging Face's order). */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "llm/sampler.h"

/* A candidate for sorting: its logit's sort key (desc_key), its id. */
typedef struct scored {
    uint32_t key;
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
    s->cand = tdm_calloc(a, vocab + 16, sizeof *s->cand); /* (near_row's slack) */
    s->prob = tdm_calloc(a, vocab + 1, sizeof *s->prob);
    if (!s->work || !s->seen || !s->cand || !s->prob) {
        tdm_sampler_free(s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the sampler");
    }
    s->exp_row = tdm_sampler_exp_row;
    s->max_row = tdm_sampler_max_row;
    s->near_row = tdm_sampler_near_row;
    s->last_max = NAN;
    tdm_sampler_reseed(s);
    return NULL;
}

void tdm_sampler_set_exp_row(tdm_sampler *s, tdm_exp_row_fn fn) {
    s->exp_row = fn ? fn : tdm_sampler_exp_row;
}

void tdm_sampler_set_max_row(tdm_sampler *s, tdm_max_row_fn fn) {
    s->max_row = fn ? fn : tdm_sampler_max_row;
}

void tdm_sampler_set_near_row(tdm_sampler *s, tdm_near_row_fn fn) {
    s->near_row = fn ? fn : tdm_sampler_near_row;
}

float tdm_sampler_last_max(const tdm_sampler *s) { return s->last_max; }

void tdm_sampler_free(tdm_sampler *s) {
    tdm_free(s->a, s->work);
    tdm_free(s->a, s->seen);
    tdm_free(s->a, s->cand);
    tdm_free(s->a, s->prob);
    tdm_free(s->a, s->sorted);
    tdm_free(s->a, s->count);
    s->work = NULL, s->seen = NULL, s->cand = NULL, s->prob = NULL, s->sorted = NULL;
    s->near = NULL;
    s->count = NULL;
}

tdm_status *tdm_sampler_set_penalties(tdm_sampler *s, float presence, float frequency) {
    if (!isfinite(presence) || !isfinite(frequency))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "a presence or frequency penalty is not finite");
    s->presence = presence, s->frequency = frequency;
    if ((presence != 0 || frequency != 0) && !s->count) {
        s->count = tdm_calloc(s->a, s->vocab + 1, sizeof *s->count);
        if (!s->count) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for the sampler");
    }
    return NULL;
}

/* Four floats / int32 as GCC vector values (plain C on any target: SSE2 at x86-64's
 * baseline); the loops below keep four of them in flight. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

static inline v4f ld4(const float *p) {
    v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* The first index of the largest x[i] that is not NaN (0 when every one is NaN): the max row's
 * two passes, the largest value and then the first sixteen that hold it (the scan was one value
 * at a time: a row of 49,152, its largest value at 11,604 / at 49,000, 8.6-9.1 / 11.5-12.4 us
 * against 13.9-14.1 / 32.2-33.9 on the AMX Xeon, 1 thread, warm, four-wide); the largest in
 * *mx when mx != NULL. */
static int32_t arg_max(const tdm_sampler *s, const float *x, size_t n, float *mx) {
    size_t at = 0;
    float m = s->max_row(x, n, &at);
    if (mx) *mx = m;
    return (int32_t)at;
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

/* The k best ids of x in cand[0..k), best first. A later id enters the heap only above its
 * least (a tie keeps the lower id there): sixteen at a time are compared with that value and
 * skipped together when none is above it, most of a vocabulary (top-k 40 of 49,152: 45 -> 11
 * us a pick, sampler_bench). */
static void top_k(const float *x, size_t n, size_t k, int32_t *cand) {
    for (size_t i = 0; i < k; i++) cand[i] = (int32_t)i;
    for (size_t i = k / 2; i-- > 0;) heap_down(x, cand, k, i);
    size_t i = k;
    while (i < n) {
        float least = x[cand[0]];
        if (i + 16 <= n) {
            v4f t = {least, least, least, least};
            v4i any = {0, 0, 0, 0};
            for (int q = 0; q < 4; q++) any |= ld4(x + i + 4 * q) > t;
            if (!(any[0] | any[1] | any[2] | any[3])) {
                i += 16;
                continue;
            }
        }
        for (size_t e = i + 16 < n ? i + 16 : n; i < e; i++)
            if (x[i] > x[cand[0]]) {
                cand[0] = (int32_t)i;
                heap_down(x, cand, k, 0);
            }
    }
    /* heap sort: pop the smallest to the back */
    for (size_t m = k; m > 1; m--) {
        int32_t t = cand[0];
        cand[0] = cand[m - 1];
        cand[m - 1] = t;
        heap_down(x, cand, m - 1, 0);
    }
}

/* prob[i] = e^((x[cand[i]] - mx) / T) for i < n, mx the candidates' largest; their sum. */
static double softmax_of(const tdm_sampler *s, const float *x, const int32_t *cand, size_t n,
                         float T, float *prob) {
    float mx = x[cand[0]];
    for (size_t i = 0; i < n; i++) {
        prob[i] = x[cand[i]];
        mx = fmaxf(mx, prob[i]);
    }
    return s->exp_row(prob, n, mx, 1.0f / T, prob);
}

/* Top-p over candidates best first (probabilities prob, `total` the sum over all of them, or
 * over more when these are the head of a longer list): the length of the smallest prefix whose
 * share reaches p (n when none does: *reached false) and that prefix's sum. */
static size_t nucleus(const float *prob, size_t n, double total, float p, double *kept,
                      bool *reached) {
    double acc = 0, sum = 0, q[256];
    size_t keep = 0;
    *reached = false;
    for (size_t i0 = 0; i0 < n && !*reached; i0 += 256) { /* the quotients a block at a time */
        size_t e = n - i0 < 256 ? n - i0 : 256;
        for (size_t i = 0; i < e; i++) q[i] = prob[i0 + i] / total; /* (vectorised) */
        for (size_t i = 0; i < e && !*reached; i++) { /* two independent chains */
            acc += q[i];
            sum += prob[i0 + i];
            keep++;
            *reached = acc >= p;
        }
    }
    *kept = sum;
    return keep;
}

/* A key that orders floats downwards as unsigned integers (-0 as +0; not for NaN). */
static uint32_t desc_key(float v) {
    v += 0.0f; /* -0 + 0 = +0 */
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascending with the float */
    return ~u;
}

/* a[0..m) by key, ascending (the highest logit first), the lower id first on ties given a in
 * id order: a stable LSD radix sort, 11 bits a pass, the three passes' counts in one read,
 * passes whose digit is the same for all skipped; tmp: m more. Returns a or tmp, whichever
 * holds the result. A nucleus of 45,000 of 49,152 tokens took qsort 2.6-5.3 ms. */
static scored *sort_desc(scored *a, scored *tmp, size_t m) {
    uint32_t at[3][2048] = {{0}}, end[2048];
    for (size_t i = 0; i < m; i++) {
        uint32_t k = a[i].key;
        at[0][k & 2047]++, at[1][(k >> 11) & 2047]++, at[2][k >> 22]++;
    }
    for (int pass = 0; pass < 3; pass++) {
        uint32_t *c = at[pass], sum = 0;
        bool one = false;
        for (int d = 0; d < 2048; d++) {
            uint32_t n = c[d];
            one = one || n == m;
            c[d] = sum;
            sum += n;
            end[d] = sum;
        }
        if (one) continue;
        /* the first half from each digit's start forwards, the second from its end backwards
         * (last element first): the same stable order, two chains of counter updates instead
         * of one (a run of equal digits waited for each store of its counter) */
        const int sh = 11 * pass;
        size_t h = m / 2, i = 0, r = m;
        for (; i < h; i++, r--) {
            tmp[c[(a[i].key >> sh) & 2047]++] = a[i];
            tmp[--end[(a[r - 1].key >> sh) & 2047]] = a[r - 1];
        }
        for (; i < r; i++) tmp[c[(a[i].key >> sh) & 2047]++] = a[i]; /* m odd: the middle one */
        scored *t = a;
        a = tmp, tmp = t;
    }
    return a;
}

/* Top-p alone, without sorting the vocabulary (a qsort of SmolLM2's 49,152 logits a token
 * took decode from 259 to 103 tokens/s at 2 threads). Tokens are bucketed by
 * z = (max - x) / T (NUC_PER_UNIT buckets a unit of z, the last one open) and their
 * probabilities summed per bucket; the buckets from the top down whose mass reaches p hold the
 * nucleus (z grows as x falls: they are a prefix of the sorted order), and only their tokens
 * are sorted (sort_desc) and cut as a full sort would cut them: the same candidates, order and
 * probabilities, so the same draw. The buckets' sums only say how many buckets to take (too few:
 * the cut falls short and one more is taken; too many: more to sort), so they come from the
 * tokens near the top alone: each token at z or beyond has probability at most
 * e^(-z / NUC_PER_UNIT) of the top one's 1, so the V tokens past
 * z_lim = NUC_PER_UNIT (ln(V / ((1 - p) total)) + 1) hold less than the (1 - p) total the
 * nucleus leaves out. One vector pass (near_row) lists the tokens below z_lim (for a peaked row
 * ~1,000 of 49,152) and another, over the row, the candidates of the buckets taken. Candidates in
 * s->cand / s->prob; returns how many, their sum in *kept, the logits' largest in *max. */
#define NUC_Z 64
#define NUC_PER_UNIT 16
#define NUC_BUCKETS (NUC_Z * NUC_PER_UNIT + 1)
static inline int nuc_bucket(float x, float mx, float k) {
    float z = (mx - x) * k;
    return z < (float)(NUC_BUCKETS - 1) ? (int)z : NUC_BUCKETS - 1;
}

static size_t nucleus_alone(tdm_sampler *s, const float *x, float T, double *kept, float *max) {
    size_t V = s->vocab;
    float mx = s->max_row(x, V, NULL), inv = 1.0f / T, k = inv * NUC_PER_UNIT, p = s->cfg.top_p;
    *max = mx;
    double total = s->exp_row(x, V, mx, inv, NULL);
    if (!(total >= 1) || isinf(total)) { /* every logit NaN, or infinities: the largest */
        s->cand[0] = arg_max(s, x, V, NULL);
        s->prob[0] = 1.0f;
        *kept = 1;
        return 1;
    }
    if (!s->sorted) { /* the first top-p pick: 20 bytes a token (SmolLM2: 983 KB) */
        s->sorted = tdm_calloc(s->a, 1, 2 * (V + 1) * sizeof(scored) + (V + 16) * sizeof(int32_t));
        if (s->sorted) s->near = (int32_t *)((scored *)s->sorted + 2 * (V + 1));
    }
    if (!s->sorted) { /* no memory for it: the same candidates by a heap sort of them all */
        top_k(x, V, V, s->cand);
        for (size_t i = 0; i < V; i++) s->prob[i] = x[s->cand[i]];
        s->exp_row(s->prob, V, mx, inv, s->prob);
        bool reached;
        return nucleus(s->prob, V, total, p, kept, &reached);
    }
    double out = (1.0 - (double)p) * total, zl = NUC_PER_UNIT * (log((double)V / out) + 1.0);
    int lim = out > 0 && zl < NUC_BUCKETS - 1 ? (int)zl : NUC_BUCKETS - 1;
    size_t m = s->near_row(x, V, mx, k, (float)lim, s->near);
    for (size_t j = 0; j < m; j++) s->prob[j] = x[s->near[j]];
    s->exp_row(s->prob, m, mx, inv, s->prob); /* each value as over the whole row */
    double mass[2][NUC_BUCKETS] = {{0}}; /* two sums a bucket: neighbours in one bucket do not
                                            wait for each other */
    size_t j = 0;
    for (; j + 2 <= m; j += 2)
        for (int h = 0; h < 2; h++) mass[h][nuc_bucket(x[s->near[j + h]], mx, k)] += s->prob[j + h];
    if (j < m) mass[0][nuc_bucket(x[s->near[j]], mx, k)] += s->prob[j];
    scored *sc = s->sorted;
    double acc = 0;
    int b = 0; /* buckets [0, b) hold the candidates */
    for (;;) {
        while (b < NUC_BUCKETS && acc < p * total) acc += mass[0][b] + mass[1][b], b++;
        size_t c = 0;
        if (b < NUC_BUCKETS) { /* z < b: bucket < b */
            c = s->near_row(x, V, mx, k, (float)b, s->cand);
            for (size_t i = 0; i < c; i++) sc[i] = (scored){desc_key(x[s->cand[i]]), s->cand[i]};
        } else { /* the open bucket too (z up to inf): every token but NaN */
            for (size_t i = 0; i < V; i++)
                if (x[i] == x[i]) sc[c++] = (scored){desc_key(x[i]), (int32_t)i};
        }
        const scored *o = sort_desc(sc, sc + V + 1, c);
        for (size_t i = 0; i < c; i++) {
            s->cand[i] = o[i].id;
            s->prob[i] = x[o[i].id];
        }
        s->exp_row(s->prob, c, mx, inv, s->prob);
        bool reached;
        size_t n = nucleus(s->prob, c, total, p, kept, &reached);
        if (reached || b == NUC_BUCKETS) return n;
        acc += mass[0][b] + mass[1][b], b++; /* the cut fell short of the buckets' sums */
    }
}

void tdm_sampler_set_bias(tdm_sampler *s, const int32_t *bias_ids, const float *bias_values,
                          size_t n) {
    s->bias_ids = bias_ids, s->bias_values = bias_values, s->n_bias = n;
}

int32_t tdm_sampler_pick(tdm_sampler *s, const float *logits, const int32_t *seq, size_t n_seq,
                         const int32_t *gen, size_t n_gen) {
    size_t V = s->vocab;
    const tdm_sampling *c = &s->cfg;
    const float *x = logits;
    if (s->n_bias) { /* the logit bias first, then the penalties on the biased logits */
        memcpy(s->work, logits, V * sizeof *s->work);
        for (size_t i = 0; i < s->n_bias; i++) s->work[s->bias_ids[i]] += s->bias_values[i];
        x = s->work;
    }
    if (c->repetition_penalty > 0 && c->repetition_penalty != 1.0f) {
        if (x != s->work) memcpy(s->work, logits, V * sizeof *s->work);
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
    if (s->count && (s->presence != 0 || s->frequency != 0) && n_gen) {
        /* OpenAI's: minus presence + frequency x count for each token generated so far */
        if (x != s->work) memcpy(s->work, logits, V * sizeof *s->work);
        x = s->work;
        for (size_t i = 0; i < n_gen; i++)
            if (gen[i] >= 0 && (size_t)gen[i] < V) s->count[gen[i]]++;
        for (size_t i = 0; i < n_gen; i++) {
            int32_t t = gen[i];
            if (t < 0 || (size_t)t >= V || !s->count[t]) continue;
            s->work[t] -= s->presence + s->frequency * (float)s->count[t];
            s->count[t] = 0; /* once per token; zero again for the next pick */
        }
    }
    bool raw = x == logits; /* no bias or penalty changed them: a maximum found is theirs */
    s->last_max = NAN;
    if (!(c->temperature > 0) || c->top_k == 1) {
        float mx;
        int32_t t = arg_max(s, x, V, &mx);
        if (raw) s->last_max = mx;
        return t;
    }
    /* candidates (best first, or every token by id) and their probabilities at the temperature */
    float T = c->temperature;
    bool top_p = c->top_p > 0 && c->top_p < 1, reached;
    size_t n = V;
    double sum;
    bool by_id = false;
    if (c->top_k > 0 && (size_t)c->top_k < V) {
        n = (size_t)c->top_k;
        top_k(x, V, n, s->cand);
        sum = softmax_of(s, x, s->cand, n, T, s->prob);
        if (top_p) n = nucleus(s->prob, n, sum, c->top_p, &sum, &reached);
    } else if (top_p) {
        float mx;
        n = nucleus_alone(s, x, T, &sum, &mx);
        if (raw) s->last_max = mx; /* a log-probability row needs no second scan */
    } else { /* every token, by id: candidate i is token i */
        by_id = true;
        float mx = s->max_row(x, V, NULL);
        sum = s->exp_row(x, V, mx, 1.0f / T, s->prob);
        if (raw) s->last_max = mx;
    }
    double r = next_unit(s->rng) * sum, acc = 0;
    for (size_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (r < acc) return by_id ? (int32_t)i : s->cand[i];
    }
    return by_id ? (int32_t)(n - 1) : s->cand[n - 1];
}
