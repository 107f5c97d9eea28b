/* Template: one reduction pass over [O, R, I] (R reduced, I contiguous) for one compute
 * type. Included by k_reduce.c once per type with these defined:
 *   T          the compute type
 *   SFX        function-name suffix
 *   RT_FLOAT   1 for float/double (enables exp/log/sqrt and NaN-aware max/min)
 *   RT_LOW, RT_HIGH  identities of max and min
 *   RT_ABS(v)  absolute value
 *   RT_EXP, RT_LOG, RT_SQRT  (RT_FLOAT only)
 * and the RD_ACC_*, RD_MAP_*, RD_POST_* and RD_CH constants of k_reduce.c. */

#define RD_CAT2_(a, b) a##_##b
#define RD_CAT_(a, b) RD_CAT2_(a, b)
#define FN(name) RD_CAT_(name, SFX)

#if RT_FLOAT
#define RT_ADD(a, b) ((a) + (b))
#define RT_MUL(a, b) ((a) * (b))
#else /* integers wrap (two's complement) instead of overflowing */
#define RT_ADD(a, b) ((T)((uint64_t)(a) + (uint64_t)(b)))
#define RT_MUL(a, b) ((T)((uint64_t)(a) * (uint64_t)(b)))
#endif

#if RT_FLOAT
/* a > b, with NaN greater than anything so that NaN propagates through max. */
#define RT_GT(a, b) ((a) > (b) || ((a) != (a) && (b) == (b)))
#define RT_LT(a, b) ((a) < (b) || ((a) != (a) && (b) == (b)))
#else
#define RT_GT(a, b) ((a) > (b))
#define RT_LT(a, b) ((a) < (b))
#endif

/* Reduces R contiguous values. */
static T FN(row)(const T *x, int64_t R, int acc, int map) {
    switch (acc) {
    case RD_ACC_SUM: {
        T s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        int64_t r = 0;
        if (map == RD_MAP_NONE) {
            for (; r + 8 <= R; r += 8)
                for (int k = 0; k < 8; k++) s[k] = RT_ADD(s[k], x[r + k]);
            for (; r < R; r++) s[0] = RT_ADD(s[0], x[r]);
        } else if (map == RD_MAP_ABS) {
            for (; r + 8 <= R; r += 8)
                for (int k = 0; k < 8; k++) s[k] = RT_ADD(s[k], RT_ABS(x[r + k]));
            for (; r < R; r++) s[0] = RT_ADD(s[0], RT_ABS(x[r]));
        } else {
            for (; r + 8 <= R; r += 8)
                for (int k = 0; k < 8; k++) s[k] = RT_ADD(s[k], RT_MUL(x[r + k], x[r + k]));
            for (; r < R; r++) s[0] = RT_ADD(s[0], RT_MUL(x[r], x[r]));
        }
        return RT_ADD(RT_ADD(RT_ADD(s[0], s[1]), RT_ADD(s[2], s[3])),
                      RT_ADD(RT_ADD(s[4], s[5]), RT_ADD(s[6], s[7])));
    }
    case RD_ACC_PROD: {
        T p = 1;
        for (int64_t r = 0; r < R; r++) p = RT_MUL(p, x[r]);
        return p;
    }
    case RD_ACC_MAX:
    case RD_ACC_MIN: {
        /* 64 independent lanes so that the loops vectorize */
        T m = x[0];
        int64_t r = 1;
        if (R >= 128) {
            T v[64];
            for (int k = 0; k < 64; k++) v[k] = x[k];
            for (r = 64; r + 64 <= R; r += 64) {
                const T *xr = x + r;
                if (acc == RD_ACC_MAX) {
                    for (int k = 0; k < 64; k++) v[k] = RT_GT(xr[k], v[k]) ? xr[k] : v[k];
                } else {
                    for (int k = 0; k < 64; k++) v[k] = RT_LT(xr[k], v[k]) ? xr[k] : v[k];
                }
            }
            for (int k = 0; k < 64; k++) {
                if (acc == RD_ACC_MAX) m = RT_GT(v[k], m) ? v[k] : m;
                else m = RT_LT(v[k], m) ? v[k] : m;
            }
        }
        if (acc == RD_ACC_MAX) {
            for (; r < R; r++) m = RT_GT(x[r], m) ? x[r] : m;
        } else {
            for (; r < R; r++) m = RT_LT(x[r], m) ? x[r] : m;
        }
        return m;
    }
#if RT_FLOAT
    case RD_ACC_LSE: {
        T m = FN(row)(x, R, RD_ACC_MAX, RD_MAP_NONE);
        T sh = isfinite(m) ? m : 0;
        T v[64];
        for (int k = 0; k < 64; k++) v[k] = 0;
        int64_t r = 0;
        for (; r + 64 <= R; r += 64)
            for (int k = 0; k < 64; k++) v[k] += RT_EXP(x[r + k] - sh);
        for (; r < R; r++) v[0] += RT_EXP(x[r] - sh);
        T s = 0;
        for (int k = 0; k < 64; k++) s += v[k];
        return RT_LOG(s) + sh;
    }
#endif
    default: return 0;
    }
}

/* Reduces n columns (stride I between the R rows) into y[0..n). */
static void FN(cols)(const T *x, T *y, int64_t R, int64_t I, int64_t n, int acc, int map) {
    if (acc == RD_ACC_SUM && map == RD_MAP_ABS) {
        for (int64_t i = 0; i < n; i++) y[i] = RT_ABS(x[i]);
    } else if (acc == RD_ACC_SUM && map == RD_MAP_SQ) {
        for (int64_t i = 0; i < n; i++) y[i] = RT_MUL(x[i], x[i]);
    } else {
        for (int64_t i = 0; i < n; i++) y[i] = x[i];
    }
    for (int64_t r = 1; r < R; r++) {
        const T *xr = x + r * I;
        switch (acc) {
        case RD_ACC_SUM:
            if (map == RD_MAP_NONE) {
                for (int64_t i = 0; i < n; i++) y[i] = RT_ADD(y[i], xr[i]);
            } else if (map == RD_MAP_ABS) {
                for (int64_t i = 0; i < n; i++) y[i] = RT_ADD(y[i], RT_ABS(xr[i]));
            } else {
                for (int64_t i = 0; i < n; i++) y[i] = RT_ADD(y[i], RT_MUL(xr[i], xr[i]));
            }
            break;
        case RD_ACC_PROD:
            for (int64_t i = 0; i < n; i++) y[i] = RT_MUL(y[i], xr[i]);
            break;
        case RD_ACC_MAX:
        case RD_ACC_LSE:
            for (int64_t i = 0; i < n; i++) y[i] = RT_GT(xr[i], y[i]) ? xr[i] : y[i];
            break;
        case RD_ACC_MIN:
            for (int64_t i = 0; i < n; i++) y[i] = RT_LT(xr[i], y[i]) ? xr[i] : y[i];
            break;
        default: break;
        }
    }
#if RT_FLOAT
    if (acc == RD_ACC_LSE) { /* y holds the maxima; sum exp in blocks of RD_CH columns */
        T s[RD_CH], sh[RD_CH];
        for (int64_t j0 = 0; j0 < n; j0 += RD_CH) {
            int64_t m = n - j0 < RD_CH ? n - j0 : RD_CH;
            for (int64_t i = 0; i < m; i++) {
                sh[i] = isfinite(y[j0 + i]) ? y[j0 + i] : 0;
                s[i] = 0;
            }
            for (int64_t r = 0; r < R; r++) {
                const T *xr = x + r * I + j0;
                for (int64_t i = 0; i < m; i++) s[i] += RT_EXP(xr[i] - sh[i]);
            }
            for (int64_t i = 0; i < m; i++) y[j0 + i] = RT_LOG(s[i]) + sh[i];
        }
    }
#endif
}

typedef struct FN(pass_arg) {
    const T *x;
    T *y;
    int64_t R, I, chunks, width; /* columns per task */
    int acc, map;
} FN(pass_arg);

static void FN(pass_rows)(void *p, int64_t b, int64_t e) {
    const FN(pass_arg) *a = p;
    for (int64_t o = b; o < e; o++) a->y[o] = FN(row)(a->x + o * a->R, a->R, a->acc, a->map);
}

static void FN(pass_cols)(void *p, int64_t b, int64_t e) {
    const FN(pass_arg) *a = p;
    for (int64_t it = b; it < e; it++) {
        int64_t o = it / a->chunks, i0 = (it % a->chunks) * a->width;
        int64_t n = a->I - i0 < a->width ? a->I - i0 : a->width;
        FN(cols)(a->x + o * a->R * a->I + i0, a->y + o * a->I + i0, a->R, a->I, n, a->acc, a->map);
    }
}

/* y[O, I] = reduce over r of x[O, R, I]; R >= 1. */
static void FN(pass)(tdm_threadpool *pool, const T *x, T *y, int64_t O, int64_t R, int64_t I,
                     int acc, int map) {
    FN(pass_arg) a = {x, y, R, I, 1, I, acc, map};
    if (I == 1) {
        int64_t grain = RD_GRAIN / R;
        tdm_parallel_for(pool, O, grain > 0 ? grain : 1, FN(pass_rows), &a);
    } else {
        /* Wide column blocks keep the row reads long and contiguous; split them only as
         * much as needed to give every thread a few tasks. */
        int64_t want = 4 * (int64_t)tdm_threadpool_size(pool);
        int64_t split = O >= want ? 1 : (want + O - 1) / O;
        int64_t w = (I + split - 1) / split;
        w = (w + 15) & ~(int64_t)15;
        if (w < RD_CH) w = RD_CH;
        if (w > RD_MAX_WIDTH) w = RD_MAX_WIDTH;
        a.width = w < I ? w : I;
        a.chunks = (I + a.width - 1) / a.width;
        int64_t grain = RD_GRAIN / (R * a.width);
        tdm_parallel_for(pool, O * a.chunks, grain > 0 ? grain : 1, FN(pass_cols), &a);
    }
}

/* Finishing step on the reduced values (N = number of values reduced into each). */
static void FN(post)(T *y, int64_t n, int post, int64_t N) {
    switch (post) {
    case RD_POST_MEAN:
#if RT_FLOAT
        for (int64_t i = 0; i < n; i++) y[i] /= (T)N;
#else
        if (N > 0)
            for (int64_t i = 0; i < n; i++) y[i] /= (T)N;
#endif
        break;
#if RT_FLOAT
    case RD_POST_SQRT:
        for (int64_t i = 0; i < n; i++) y[i] = RT_SQRT(y[i]);
        break;
    case RD_POST_LOG:
        for (int64_t i = 0; i < n; i++) y[i] = RT_LOG(y[i]);
        break;
#endif
    default: break;
    }
}

/* The value of a reduction over the empty set, before post. */
static void FN(fill_empty)(T *y, int64_t n, int acc) {
    T v = 0;
    switch (acc) {
    case RD_ACC_PROD: v = 1; break;
    case RD_ACC_MAX:
    case RD_ACC_LSE: v = RT_LOW; break;
    case RD_ACC_MIN: v = RT_HIGH; break;
    default: break;
    }
    for (int64_t i = 0; i < n; i++) y[i] = v;
}

#undef RT_GT
#undef RT_ADD
#undef RT_MUL
#undef RT_LT
#undef FN
#undef RD_CAT_
#undef RD_CAT2_
