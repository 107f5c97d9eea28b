/* Template: Softmax / LogSoftmax / Hardmax over [O, N, I] and LayerNormalization rows, for
 * float or double. Included by k_reduce_softmax.c with T, SFX, RT_EXP, RT_LOG, RT_SQRT
 * defined, and RD_CH / RD_GRAIN. */

#define RD_CAT2_(a, b) a##_##b
#define RD_CAT_(a, b) RD_CAT2_(a, b)
#define FN(name) RD_CAT_(name, SFX)

typedef struct FN(smx_arg) {
    const T *x;
    T *y;
    int64_t N, I, chunks;
    int mode;
} FN(smx_arg);

/* Max of a row, in 64 independent lanes so that the loop vectorizes. */
static T FN(row_max)(const T *x, int64_t N) {
    T m = x[0];
    int64_t r = 0;
    if (N >= 128) {
        T v[64];
        for (int k = 0; k < 64; k++) v[k] = x[k];
        for (r = 64; r + 64 <= N; r += 64)
            for (int k = 0; k < 64; k++) v[k] = x[r + k] > v[k] ? x[r + k] : v[k];
        for (int k = 0; k < 64; k++) m = v[k] > m ? v[k] : m;
    }
    for (; r < N; r++) m = x[r] > m ? x[r] : m;
    return m;
}

/* Sum of a row in 8 lanes. */
static T FN(row_sum)(const T *x, int64_t N) {
    T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t r = 0;
    for (; r + 8 <= N; r += 8)
        for (int k = 0; k < 8; k++) s[k] += x[r + k];
    for (; r < N; r++) s[0] += x[r];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void FN(smx_rows)(void *p, int64_t b, int64_t e) {
    const FN(smx_arg) *a = p;
    int64_t N = a->N;
    for (int64_t o = b; o < e; o++) {
        const T *x = a->x + o * N;
        T *y = a->y + o * N;
        if (a->mode == 2) {
            int64_t bi = 0;
            for (int64_t r = 1; r < N; r++)
                if (x[r] > x[bi]) bi = r;
            for (int64_t r = 0; r < N; r++) y[r] = 0;
            y[bi] = 1;
            continue;
        }
        T m = FN(row_max)(x, N);
        for (int64_t r = 0; r < N; r++) y[r] = RT_EXP(x[r] - m);
        T s = FN(row_sum)(y, N);
        if (a->mode == 0) {
            T inv = 1 / s;
            for (int64_t r = 0; r < N; r++) y[r] *= inv;
        } else {
            T ls = RT_LOG(s);
            for (int64_t r = 0; r < N; r++) y[r] = (x[r] - m) - ls;
        }
    }
}

static void FN(smx_cols)(void *p, int64_t b, int64_t e) {
    const FN(smx_arg) *a = p;
    int64_t N = a->N, I = a->I;
    T m[RD_CH], s[RD_CH];
    int64_t bi[RD_CH];
    for (int64_t it = b; it < e; it++) {
        int64_t o = it / a->chunks, i0 = (it % a->chunks) * RD_CH;
        int64_t n = I - i0 < RD_CH ? I - i0 : RD_CH;
        const T *x = a->x + o * N * I + i0;
        T *y = a->y + o * N * I + i0;
        for (int64_t i = 0; i < n; i++) {
            m[i] = x[i];
            s[i] = 0;
            bi[i] = 0;
        }
        for (int64_t r = 1; r < N; r++) {
            const T *xr = x + r * I;
            if (a->mode == 2) {
                for (int64_t i = 0; i < n; i++)
                    if (xr[i] > m[i]) {
                        m[i] = xr[i];
                        bi[i] = r;
                    }
            } else {
                for (int64_t i = 0; i < n; i++) m[i] = xr[i] > m[i] ? xr[i] : m[i];
            }
        }
        if (a->mode == 2) {
            for (int64_t r = 0; r < N; r++)
                for (int64_t i = 0; i < n; i++) y[r * I + i] = bi[i] == r ? 1 : 0;
            continue;
        }
        for (int64_t r = 0; r < N; r++) {
            const T *xr = x + r * I;
            T *yr = y + r * I;
            if (a->mode == 0) {
                for (int64_t i = 0; i < n; i++) {
                    yr[i] = RT_EXP(xr[i] - m[i]);
                    s[i] += yr[i];
                }
            } else {
                for (int64_t i = 0; i < n; i++) s[i] += RT_EXP(xr[i] - m[i]);
            }
        }
        if (a->mode == 0) {
            for (int64_t i = 0; i < n; i++) s[i] = 1 / s[i];
            for (int64_t r = 0; r < N; r++)
                for (int64_t i = 0; i < n; i++) y[r * I + i] *= s[i];
        } else {
            for (int64_t i = 0; i < n; i++) s[i] = RT_LOG(s[i]);
            for (int64_t r = 0; r < N; r++)
                for (int64_t i = 0; i < n; i++) y[r * I + i] = (x[r * I + i] - m[i]) - s[i];
        }
    }
}

static void FN(softmax)(tdm_threadpool *pool, int mode, const T *x, T *y, int64_t O, int64_t N,
                        int64_t I) {
    if (O * N * I == 0) return;
    FN(smx_arg) a = {x, y, N, I, 1, mode};
    if (I == 1) {
        int64_t grain = RD_GRAIN / N;
        tdm_parallel_for(pool, O, grain > 0 ? grain : 1, FN(smx_rows), &a);
    } else {
        a.chunks = (I + RD_CH - 1) / RD_CH;
        int64_t grain = RD_GRAIN / (N * (I < RD_CH ? I : RD_CH));
        tdm_parallel_for(pool, O * a.chunks, grain > 0 ? grain : 1, FN(smx_cols), &a);
    }
}

/* ---- LayerNormalization over rows of N ---- */

typedef struct FN(ln_arg) {
    const T *x, *scale, *bias; /* scale/bias: N values, or O*N when *_full */
    T *y, *mean, *inv;         /* mean/inv: O values or NULL */
    int64_t N;
    bool scale_full, bias_full;
    T eps;
} FN(ln_arg);

static void FN(ln_rows)(void *p, int64_t b, int64_t e) {
    const FN(ln_arg) *a = p;
    int64_t N = a->N;
    for (int64_t o = b; o < e; o++) {
        const T *x = a->x + o * N;
        T *y = a->y + o * N;
        T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t r = 0;
        for (; r + 8 <= N; r += 8)
            for (int k = 0; k < 8; k++) s[k] += x[r + k];
        for (; r < N; r++) s[0] += x[r];
        T mean = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) / (T)N;
        for (int k = 0; k < 8; k++) s[k] = 0;
        for (r = 0; r + 8 <= N; r += 8)
            for (int k = 0; k < 8; k++) s[k] += (x[r + k] - mean) * (x[r + k] - mean);
        for (; r < N; r++) s[0] += (x[r] - mean) * (x[r] - mean);
        T var = (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))) / (T)N;
        T inv = 1 / RT_SQRT(var + a->eps);
        const T *sc = a->scale + (a->scale_full ? o * N : 0);
        if (a->bias) {
            const T *bi = a->bias + (a->bias_full ? o * N : 0);
            for (r = 0; r < N; r++) y[r] = ((x[r] - mean) * inv) * sc[r] + bi[r];
        } else {
            for (r = 0; r < N; r++) y[r] = ((x[r] - mean) * inv) * sc[r];
        }
        if (a->mean) a->mean[o] = mean;
        if (a->inv) a->inv[o] = inv;
    }
}

static void FN(layer_norm)(tdm_threadpool *pool, FN(ln_arg) *a, int64_t O) {
    int64_t grain = RD_GRAIN / (a->N > 0 ? a->N : 1);
    tdm_parallel_for(pool, O, grain > 0 ? grain : 1, FN(ln_rows), a);
}

#undef FN
#undef RD_CAT_
#undef RD_CAT2_
