/* Template: ArgMax/ArgMin, TopK selection and CumSum over [O, N, I] views for one compute
 * type. Included by k_reduce_arg.c once per type with T, SFX and RT_FLOAT defined, and
 * RD_CH / RD_GRAIN. */

#define RD_CAT2_(a, b) a##_##b
#define RD_CAT_(a, b) RD_CAT2_(a, b)
#define FN(name) RD_CAT_(name, SFX)

#if RT_FLOAT
#define RT_ISNAN(a) ((a) != (a))
#define RT_ADD(a, b) ((a) + (b))
#else
#define RT_ISNAN(a) 0
#define RT_ADD(a, b) ((T)((uint64_t)(a) + (uint64_t)(b))) /* wraps, no overflow */
#endif

/* ---- ArgMax / ArgMin ---- */

typedef struct FN(arg_arg) {
    const T *x;
    int64_t *y;
    int64_t N, I, chunks;
    int is_max, last;
} FN(arg_arg);

/* Whether v replaces the current best b (NaN values are never picked over a number). */
#define RD_TAKE(v, b)                                                                    \
    (a->is_max ? (a->last ? (v) >= (b) : (v) > (b)) : (a->last ? (v) <= (b) : (v) < (b)))

static void FN(arg_rows)(void *p, int64_t b, int64_t e) {
    const FN(arg_arg) *a = p;
    for (int64_t o = b; o < e; o++) {
        const T *x = a->x + o * a->N;
        T best = x[0];
        int64_t bi = 0;
        for (int64_t r = 1; r < a->N; r++) {
            if (RD_TAKE(x[r], best) || (RT_ISNAN(best) && !RT_ISNAN(x[r]))) {
                best = x[r];
                bi = r;
            }
        }
        a->y[o] = bi;
    }
}

static void FN(arg_cols)(void *p, int64_t b, int64_t e) {
    const FN(arg_arg) *a = p;
    T best[RD_CH];
    for (int64_t it = b; it < e; it++) {
        int64_t o = it / a->chunks, i0 = (it % a->chunks) * RD_CH;
        int64_t n = a->I - i0 < RD_CH ? a->I - i0 : RD_CH;
        const T *x = a->x + o * a->N * a->I + i0;
        int64_t *y = a->y + o * a->I + i0;
        for (int64_t i = 0; i < n; i++) {
            best[i] = x[i];
            y[i] = 0;
        }
        for (int64_t r = 1; r < a->N; r++) {
            const T *xr = x + r * a->I;
            for (int64_t i = 0; i < n; i++) {
                if (RD_TAKE(xr[i], best[i]) || (RT_ISNAN(best[i]) && !RT_ISNAN(xr[i]))) {
                    best[i] = xr[i];
                    y[i] = r;
                }
            }
        }
    }
}
#undef RD_TAKE

static void FN(argreduce)(tdm_threadpool *pool, const T *x, int64_t *y, int64_t O, int64_t N,
                          int64_t I, int is_max, int last) {
    FN(arg_arg) a = {x, y, N, I, 1, is_max, last};
    if (I == 1) {
        int64_t grain = RD_GRAIN / N;
        tdm_parallel_for(pool, O, grain > 0 ? grain : 1, FN(arg_rows), &a);
    } else {
        a.chunks = (I + RD_CH - 1) / RD_CH;
        int64_t grain = RD_GRAIN / (N * (I < RD_CH ? I : RD_CH));
        tdm_parallel_for(pool, O * a.chunks, grain > 0 ? grain : 1, FN(arg_cols), &a);
    }
}

/* ---- TopK selection ---- */

/* Whether (va, ia) ranks before (vb, ib): by value (NaN counts as the largest), ties by
 * the smaller index. */
static inline bool FN(topk_before)(T va, int64_t ia, T vb, int64_t ib, int largest) {
    bool na = RT_ISNAN(va), nb = RT_ISNAN(vb);
    if (na || nb) {
        if (na && nb) return ia < ib;
        return largest ? na : nb;
    }
    if (va != vb) return largest ? va > vb : va < vb;
    return ia < ib;
}

/* Picks the k best of v[0..N) into out[0..k) in rank order; heap has room for k. The heap
 * keeps the worst kept element at its root. */
static void FN(topk_select)(const T *v, int64_t N, int64_t k, int largest, int64_t *heap,
                            int64_t *out) {
    int64_t size = 0;
#define BEFORE(i, j) FN(topk_before)(v[heap[i]], heap[i], v[heap[j]], heap[j], largest)
#define SIFT_DOWN(start)                                                                 \
    do {                                                                                 \
        int64_t s_ = (start);                                                            \
        for (;;) {                                                                       \
            int64_t l_ = 2 * s_ + 1, r_ = l_ + 1, w_ = s_;                               \
            if (l_ < size && BEFORE(w_, l_)) w_ = l_;                                    \
            if (r_ < size && BEFORE(w_, r_)) w_ = r_;                                    \
            if (w_ == s_) break;                                                         \
            int64_t t_ = heap[s_];                                                       \
            heap[s_] = heap[w_];                                                         \
            heap[w_] = t_;                                                               \
            s_ = w_;                                                                     \
        }                                                                                \
    } while (0)
    for (int64_t i = 0; i < N; i++) {
        if (size < k) {
            int64_t c = size++;
            heap[c] = i;
            while (c > 0) {
                int64_t pa = (c - 1) / 2;
                if (!BEFORE(pa, c)) break;
                int64_t t = heap[pa];
                heap[pa] = heap[c];
                heap[c] = t;
                c = pa;
            }
        } else if (k > 0) {
            /* quick reject: strictly worse than the worst kept (NaN falls through) */
            T w = v[heap[0]];
            if (largest ? v[i] < w : v[i] > w) continue;
            if (FN(topk_before)(v[i], i, w, heap[0], largest)) {
                heap[0] = i;
                SIFT_DOWN(0);
            }
        }
    }
    while (size > 0) {
        out[size - 1] = heap[0];
        heap[0] = heap[--size];
        SIFT_DOWN(0);
    }
#undef SIFT_DOWN
#undef BEFORE
}

typedef struct FN(topk_arg) {
    const T *x;
    int64_t *idx; /* [O, k, I] */
    int64_t O, N, I, k, parts;
    int largest;
    char *scratch; /* per part: N values (when I > 1), then 2k indices */
    size_t part_bytes;
} FN(topk_arg);

static void FN(topk_part)(void *p, int64_t b, int64_t e) {
    const FN(topk_arg) *a = p;
    int64_t lines = a->O * a->I;
    for (int64_t part = b; part < e; part++) {
        char *s = a->scratch + (size_t)part * a->part_bytes;
        T *col = (T *)s;
        int64_t *heap = (int64_t *)(s + (a->I > 1 ? (size_t)a->N * sizeof(T) : 0));
        heap = (int64_t *)(((uintptr_t)heap + 7) & ~(uintptr_t)7);
        int64_t *sel = heap + a->k;
        int64_t l0 = lines * part / a->parts, l1 = lines * (part + 1) / a->parts;
        for (int64_t l = l0; l < l1; l++) {
            int64_t o = l / a->I, i = l % a->I;
            const T *v = a->x + o * a->N * a->I + i;
            if (a->I > 1) {
                for (int64_t r = 0; r < a->N; r++) col[r] = v[r * a->I];
                v = col;
            }
            FN(topk_select)(v, a->N, a->k, a->largest, heap, sel);
            int64_t *dst = a->idx + o * a->k * a->I + i;
            for (int64_t j = 0; j < a->k; j++) dst[j * a->I] = sel[j];
        }
    }
}

static void FN(topk)(tdm_threadpool *pool, const T *x, int64_t *idx, int64_t O, int64_t N,
                    int64_t I, int64_t k, int largest, char *scratch, int64_t parts,
                    size_t part_bytes) {
    FN(topk_arg) a = {x, idx, O, N, I, k, parts, largest, scratch, part_bytes};
    tdm_parallel_for(pool, parts, 1, FN(topk_part), &a);
}

/* ---- CumSum ---- */

typedef struct FN(cum_arg) {
    const T *x;
    T *y;
    int64_t N, I, chunks;
    int exclusive, reverse;
} FN(cum_arg);

static void FN(cum_part)(void *p, int64_t b, int64_t e) {
    const FN(cum_arg) *a = p;
    T acc[RD_CH];
    for (int64_t it = b; it < e; it++) {
        int64_t o = it / a->chunks, i0 = (it % a->chunks) * RD_CH;
        int64_t n = a->I - i0 < RD_CH ? a->I - i0 : RD_CH;
        const T *x = a->x + o * a->N * a->I + i0;
        T *y = a->y + o * a->N * a->I + i0;
        for (int64_t i = 0; i < n; i++) acc[i] = 0;
        for (int64_t s = 0; s < a->N; s++) {
            int64_t r = a->reverse ? a->N - 1 - s : s;
            const T *xr = x + r * a->I;
            T *yr = y + r * a->I;
            if (a->exclusive) {
                for (int64_t i = 0; i < n; i++) {
                    yr[i] = acc[i];
                    acc[i] = RT_ADD(acc[i], xr[i]);
                }
            } else {
                for (int64_t i = 0; i < n; i++) {
                    acc[i] = RT_ADD(acc[i], xr[i]);
                    yr[i] = acc[i];
                }
            }
        }
    }
}

static void FN(cum_rows)(void *p, int64_t b, int64_t e) {
    const FN(cum_arg) *a = p;
    int64_t N = a->N;
    for (int64_t o = b; o < e; o++) {
        const T *x = a->x + o * N;
        T *y = a->y + o * N;
        T acc = 0;
        if (!a->reverse && !a->exclusive) {
            for (int64_t r = 0; r < N; r++) y[r] = acc = RT_ADD(acc, x[r]);
        } else if (!a->reverse) {
            for (int64_t r = 0; r < N; r++) {
                y[r] = acc;
                acc = RT_ADD(acc, x[r]);
            }
        } else if (!a->exclusive) {
            for (int64_t r = N - 1; r >= 0; r--) y[r] = acc = RT_ADD(acc, x[r]);
        } else {
            for (int64_t r = N - 1; r >= 0; r--) {
                y[r] = acc;
                acc = RT_ADD(acc, x[r]);
            }
        }
    }
}

static void FN(cumsum)(tdm_threadpool *pool, const T *x, T *y, int64_t O, int64_t N, int64_t I,
                       int exclusive, int reverse) {
    FN(cum_arg) a = {x, y, N, I, (I + RD_CH - 1) / RD_CH, exclusive, reverse};
    if (I == 1) {
        int64_t grain = RD_GRAIN / N;
        tdm_parallel_for(pool, O, grain > 0 ? grain : 1, FN(cum_rows), &a);
        return;
    }
    int64_t grain = RD_GRAIN / (N * (I < RD_CH ? I : RD_CH));
    tdm_parallel_for(pool, O * a.chunks, grain > 0 ? grain : 1, FN(cum_part), &a);
}

#undef RT_ISNAN
#undef RT_ADD
#undef FN
#undef RD_CAT_
#undef RD_CAT2_
