#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static float f16_to_f32(uint16_t h) {
    uint32_t s = (h >> 15) & 1, e = (h >> 10) & 31, m = h & 1023;
    float v;
    if (e == 0) v = ldexpf((float)m, -24);
    else if (e == 31) v = m ? NAN : INFINITY;
    else v = ldexpf((float)(m | 1024), (int)e - 25);
    return s ? -v : v;
}

static double get_f64(const tdm_tensor *t, int64_t i) {
    const void *d = tdm_tensor_data_const(t);
    switch (tdm_tensor_dtype(t)) {
    case TDM_FLOAT: return ((const float *)d)[i];
    case TDM_DOUBLE: return ((const double *)d)[i];
    case TDM_FLOAT16: return f16_to_f32(((const uint16_t *)d)[i]);
    case TDM_BFLOAT16: {
        uint32_t b = (uint32_t)((const uint16_t *)d)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    case TDM_INT8: return ((const int8_t *)d)[i];
    case TDM_UINT8: case TDM_BOOL: return ((const uint8_t *)d)[i];
    case TDM_INT16: return ((const int16_t *)d)[i];
    case TDM_UINT16: return ((const uint16_t *)d)[i];
    case TDM_INT32: return ((const int32_t *)d)[i];
    case TDM_UINT32: return ((const uint32_t *)d)[i];
    case TDM_INT64: return (double)((const int64_t *)d)[i];
    case TDM_UINT64: return (double)((const uint64_t *)d)[i];
    default: return 0;
    }
}

const char *cli_shape_str(int rank, const int64_t *dims, char *buf, size_t size) {
    size_t pos = (size_t)snprintf(buf, size, "[");
    for (int i = 0; i < rank && pos < size; i++)
        pos += (size_t)snprintf(buf + pos, size - pos, i ? ",%lld" : "%lld", (long long)dims[i]);
    if (pos < size) snprintf(buf + pos, size - pos, "]");
    return buf;
}

int cli_parse_dims(const char *s, int64_t *dims, int max) {
    int n = 0;
    if (!*s) return 0;
    while (*s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || v < 0 || n == max) return -1;
        dims[n++] = v;
        s = end;
        if (*s == ',') s++;
        else if (*s) return -1;
    }
    return n;
}

/* Default [lo, hi] of random integers per dtype: small, so that they are safe as indices. */
static bool int_default(tdm_dtype dt, int64_t r[2]) {
    int64_t hi;
    switch (dt) {
    case TDM_BOOL: case TDM_INT32: case TDM_INT64: hi = 1; break;
    case TDM_UINT8: hi = 255; break;
    case TDM_INT8: case TDM_INT16: case TDM_UINT16: case TDM_UINT32: case TDM_UINT64: hi = 7; break;
    default: return false;
    }
    r[0] = 0, r[1] = hi;
    return true;
}

/* The dtype's own limits (for clamping a user's range). */
static void int_limits(tdm_dtype dt, double *lo, double *hi) {
    switch (dt) {
    case TDM_BOOL: *lo = 0, *hi = 1; break;
    case TDM_INT8: *lo = INT8_MIN, *hi = INT8_MAX; break;
    case TDM_UINT8: *lo = 0, *hi = UINT8_MAX; break;
    case TDM_INT16: *lo = INT16_MIN, *hi = INT16_MAX; break;
    case TDM_UINT16: *lo = 0, *hi = UINT16_MAX; break;
    case TDM_INT32: *lo = INT32_MIN, *hi = INT32_MAX; break;
    case TDM_UINT32: *lo = 0, *hi = UINT32_MAX; break;
    case TDM_UINT64: *lo = 0, *hi = 9.2e18; break;
    default: *lo = -9.2e18, *hi = 9.2e18; break;
    }
}

const char *cli_random_values(tdm_dtype dt, const int64_t *range, char *buf, size_t size) {
    int64_t r[2];
    if (dt == TDM_FLOAT || dt == TDM_DOUBLE) snprintf(buf, size, "in [-1, 1)");
    else if (dt == TDM_FLOAT16 || dt == TDM_BFLOAT16) snprintf(buf, size, "all 0.5");
    else if (dt == TDM_STRING) snprintf(buf, size, "all \"tandem\"");
    else if (int_default(dt, r)) {
        double lo, hi;
        int_limits(dt, &lo, &hi);
        if (range) {
            r[0] = (double)range[0] < lo ? (int64_t)lo : range[0];
            r[1] = (double)range[1] > hi ? (int64_t)hi : range[1];
        }
        snprintf(buf, size, "in [%lld, %lld]", (long long)r[0], (long long)r[1]);
    } else snprintf(buf, size, "zero");
    return buf;
}

void cli_fill_random(tdm_tensor *t, unsigned long long seed, const int64_t *range) {
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    int64_t n = tdm_tensor_element_count(t);
    void *d = tdm_tensor_data(t);
    tdm_dtype dt = tdm_tensor_dtype(t);
    int64_t r[2] = {0, 0};
    bool integral = int_default(dt, r);
    double lo = (double)r[0], width = (double)r[1] - (double)r[0] + 1;
    if (integral && range) {
        double dlo, dhi;
        int_limits(dt, &dlo, &dhi);
        double a = (double)range[0] < dlo ? dlo : (double)range[0];
        double b = (double)range[1] > dhi ? dhi : (double)range[1];
        if (a > b) a = b; /* a range outside the dtype: its nearest limit */
        lo = a, width = b - a + 1;
    }
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        double u = (double)(x >> 11) / 9007199254740992.0; /* [0,1) */
        double v = floor(lo + u * width);
        switch (dt) {
        case TDM_FLOAT: ((float *)d)[i] = (float)(u * 2 - 1); break;
        case TDM_DOUBLE: ((double *)d)[i] = u * 2 - 1; break;
        case TDM_FLOAT16: case TDM_BFLOAT16: ((uint16_t *)d)[i] = 0x3800; break; /* 0.5 */
        case TDM_INT8: ((int8_t *)d)[i] = (int8_t)v; break;
        case TDM_UINT8: ((uint8_t *)d)[i] = (uint8_t)v; break;
        case TDM_BOOL: ((uint8_t *)d)[i] = range ? v != 0 : u < 0.5; break;
        case TDM_INT16: ((int16_t *)d)[i] = (int16_t)v; break;
        case TDM_UINT16: ((uint16_t *)d)[i] = (uint16_t)v; break;
        case TDM_INT32: ((int32_t *)d)[i] = (int32_t)v; break;
        case TDM_UINT32: ((uint32_t *)d)[i] = (uint32_t)v; break;
        case TDM_INT64: ((int64_t *)d)[i] = (int64_t)v; break;
        case TDM_UINT64: ((uint64_t *)d)[i] = (uint64_t)v; break;
        default: break;
        }
    }
}

void cli_print_summary(FILE *f, const char *name, const tdm_tensor *t) {
    char shape[256];
    tdm_dtype dt = tdm_tensor_dtype(t);
    int64_t n = tdm_tensor_element_count(t);
    fprintf(f, "%s: %s %s", name, tdm_dtype_name(dt),
            cli_shape_str(tdm_tensor_rank(t), tdm_tensor_dims(t), shape, sizeof shape));
    if (dt == TDM_STRING) {
        char *const *s = tdm_tensor_data_const(t);
        fprintf(f, " [");
        for (int64_t i = 0; i < n && i < 4; i++) fprintf(f, "%s\"%s\"", i ? ", " : "", s[i] ? s[i] : "");
        fprintf(f, "%s]\n", n > 4 ? ", ..." : "");
        return;
    }
    if (n > 0) {
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) {
            double v = get_f64(t, i);
            if (v < mn) mn = v;
            if (v > mx) mx = v;
            sum += v;
        }
        fprintf(f, " min=%.6g max=%.6g mean=%.6g [", mn, mx, sum / (double)n);
        for (int64_t i = 0; i < n && i < 6; i++) fprintf(f, "%s%.6g", i ? ", " : "", get_f64(t, i));
        fprintf(f, "%s]", n > 6 ? ", ..." : "");
    }
    fprintf(f, "\n");
}

bool cli_compare(const tdm_tensor *got, const tdm_tensor *want, double rtol, double atol,
                 char *why, size_t why_size) {
    char a[200], b[200];
    if (tdm_tensor_dtype(got) != tdm_tensor_dtype(want)) {
        snprintf(why, why_size, "dtype %s, expected %s", tdm_dtype_name(tdm_tensor_dtype(got)),
                 tdm_dtype_name(tdm_tensor_dtype(want)));
        return false;
    }
    int r = tdm_tensor_rank(got);
    bool same = r == tdm_tensor_rank(want);
    for (int i = 0; same && i < r; i++)
        if (tdm_tensor_dims(got)[i] != tdm_tensor_dims(want)[i]) same = false;
    if (!same) {
        snprintf(why, why_size, "shape %s, expected %s",
                 cli_shape_str(r, tdm_tensor_dims(got), a, sizeof a),
                 cli_shape_str(tdm_tensor_rank(want), tdm_tensor_dims(want), b, sizeof b));
        return false;
    }
    int64_t n = tdm_tensor_element_count(got);
    tdm_dtype dt = tdm_tensor_dtype(got);
    if (dt == TDM_SEQUENCE || dt == TDM_MAP || dt == TDM_OPTIONAL) {
        for (size_t i = 0; i < tdm_value_item_count(got); i++) {
            const tdm_tensor *gi = tdm_value_item(got, i), *wi = tdm_value_item(want, i);
            if (!gi || !wi) {
                snprintf(why, why_size, "%s item %zu missing", tdm_dtype_name(dt), i);
                return false;
            }
            char w[300];
            if (!cli_compare(gi, wi, rtol, atol, w, sizeof w)) {
                snprintf(why, why_size, "%s item %zu: %s", tdm_dtype_name(dt), i, w);
                return false;
            }
        }
        return true;
    }
    if (dt == TDM_STRING) {
        char *const *g = tdm_tensor_data_const(got), *const *w = tdm_tensor_data_const(want);
        for (int64_t i = 0; i < n; i++)
            if (strcmp(g[i] ? g[i] : "", w[i] ? w[i] : "")) {
                snprintf(why, why_size, "element %lld is \"%.40s\", expected \"%.40s\"", (long long)i,
                         g[i] ? g[i] : "", w[i] ? w[i] : "");
                return false;
            }
        return true;
    }
    bool is_float = dt == TDM_FLOAT || dt == TDM_DOUBLE || dt == TDM_FLOAT16 || dt == TDM_BFLOAT16;
    if (dt == TDM_FLOAT16 || dt == TDM_BFLOAT16) {
        if (rtol < 1e-2) rtol = dt == TDM_BFLOAT16 ? 2e-2 : 1e-2;
        if (atol < 1e-3) atol = 1e-3;
    }
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!is_float) {
            if (dt == TDM_INT64 || dt == TDM_UINT64) {
                if (((const int64_t *)tdm_tensor_data_const(got))[i] !=
                    ((const int64_t *)tdm_tensor_data_const(want))[i]) {
                    if (first < 0) first = i;
                    bad++;
                }
            } else if (get_f64(got, i) != get_f64(want, i)) {
                if (first < 0) first = i;
                bad++;
            }
            continue;
        }
        double x = get_f64(got, i), y = get_f64(want, i);
        if (isnan(x) && isnan(y)) continue;
        if (isinf(x) || isinf(y)) {
            if (x == y) continue;
        } else {
            double err = fabs(x - y);
            if (err <= atol + rtol * fabs(y)) continue;
            if (err > worst) worst = err;
        }
        if (first < 0) first = i;
        bad++;
    }
    if (bad) {
        snprintf(why, why_size, "%lld of %lld elements differ; first at %lld: got %.9g, expected %.9g "
                 "(max abs error %.3g)", (long long)bad, (long long)n, (long long)first,
                 get_f64(got, first), get_f64(want, first), worst);
        return false;
    }
    return true;
}

int cli_run_random(tdm_env *env, tdm_session *s, int n_shapes, const char *const *shape_names,
                   const char *const *shape_dims, unsigned long long seed) {
    const tdm_model *m = tdm_session_model(s);
    size_t n_in = tdm_model_input_count(m), n_out = tdm_model_output_count(m);
    if (n_in > 64 || n_out > 64) {
        fprintf(stderr, "tandem: too many inputs or outputs\n");
        return 1;
    }
    tdm_tensor *ins[64] = {0}, *outs[64] = {0};
    const char *names[64], *onames[64];
    int rc = 0;
    tdm_status *st = NULL;
    for (size_t i = 0; i < n_in && rc == 0; i++) {
        tdm_value_desc d;
        tdm_model_input(m, i, &d);
        names[i] = d.name;
        int64_t dims[TDM_MAX_RANK];
        int rank = d.rank < 0 ? 0 : d.rank;
        for (int j = 0; j < rank; j++) dims[j] = d.dims[j] < 0 ? 1 : d.dims[j];
        for (int k = 0; k < n_shapes; k++)
            if (!strcmp(shape_names[k], d.name)) rank = cli_parse_dims(shape_dims[k], dims, TDM_MAX_RANK);
        if (rank < 0) {
            fprintf(stderr, "tandem: bad --shape for '%s'\n", d.name);
            rc = 1;
        } else if ((st = tdm_tensor_create(env, d.dtype, rank, dims, &ins[i]))) {
            rc = cli_fail(st, d.name);
        } else {
            cli_fill_random(ins[i], seed + i, NULL);
        }
    }
    for (size_t j = 0; j < n_out; j++) {
        tdm_value_desc d;
        tdm_model_output(m, j, &d);
        onames[j] = d.name;
    }
    if (rc == 0 && (st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, onames, outs)))
        rc = cli_fail(st, NULL);
    for (size_t i = 0; i < 64; i++) {
        tdm_tensor_free(ins[i]);
        tdm_tensor_free(outs[i]);
    }
    return rc;
}

void cli_print_memory_peaks(FILE *f, tdm_session *s) {
    for (size_t i = 0; i < tdm_session_monitor_count(s); i++) {
        tdm_device_monitor m;
        tdm_status *st = tdm_session_monitor(s, i, &m, sizeof m);
        if (st) {
            tdm_status_free(st);
            continue;
        }
        fprintf(f, "memory: %s peak %.2f MiB, in use %.2f MiB, uploaded %.2f MiB in %lld copies "
                "(peak %lld B, uploaded %lld B, of which from pinned memory %lld B)\n",
                m.device, (double)m.memory_peak / 1048576, (double)m.memory_in_use / 1048576,
                (double)m.bytes_uploaded / 1048576, (long long)m.uploads, (long long)m.memory_peak,
                (long long)m.bytes_uploaded, (long long)m.bytes_uploaded_pinned);
    }
}
