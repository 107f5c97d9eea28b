/* Calibration: the float model runs on the samples with every candidate activation made a
 * graph output; ranges, histograms and the three methods (minmax, percentile, entropy). */
#include <float.h>
#include <math.h>
#include <string.h>

#include "api/api_impl.h"
#include "quant/quant_impl.h"

void tdm_quant_scale_zp(double rmin, double rmax, int qmin, int qmax, bool symmetric, float *scale,
                        int32_t *zp) {
    if (rmin > 0) rmin = 0;
    if (rmax < 0) rmax = 0;
    if (symmetric) {
        double m = fmax(fabs(rmin), fabs(rmax));
        rmin = -m;
        rmax = m;
    }
    double s = (rmax - rmin) / (double)(qmax - qmin);
    if (!(s >= FLT_MIN) || !isfinite(s)) {
        *scale = 1.f;
        *zp = 0;
        return;
    }
    double z = symmetric ? nearbyint((qmin + qmax) / 2.0) : nearbyint(qmin - rmin / s);
    if (z < qmin) z = qmin;
    if (z > qmax) z = qmax;
    *scale = (float)s;
    *zp = (int32_t)z;
}

/* ---- the calibration session: activations as extra graph outputs ---- */

typedef struct extra_outputs {
    const char *const *names;
    size_t n;
} extra_outputs;

static tdm_status *add_outputs(tdm_graph *g, void *user) {
    const extra_outputs *e = user;
    int *outs = tdm_alloc(g->alloc, (g->n_outputs + e->n + 1) * sizeof *outs);
    if (!outs) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (g->n_outputs) memcpy(outs, g->outputs, g->n_outputs * sizeof *outs);
    size_t n = g->n_outputs;
    for (size_t i = 0; i < e->n; i++) {
        int v = tdm_graph_find_value(g, e->names[i]);
        if (v < 0) {
            tdm_free(g->alloc, outs);
            return TDM_ERR(TDM_ERR_INTERNAL, "calibration: no value '%s'", e->names[i]);
        }
        if (g->values[v].is_output) continue;
        g->values[v].is_output = true;
        outs[n++] = v;
    }
    tdm_free(g->alloc, g->outputs);
    g->outputs = outs;
    g->n_outputs = n;
    return tdm_graph_finalize(g);
}

static void observe_range(q_act *x, const tdm_tensor *t) {
    const float *d = t->data;
    for (int64_t i = 0; i < t->count; i++) {
        float v = d[i];
        if (v != v) continue; /* NaN */
        if (!x->seen) {
            x->omin = x->omax = v;
            x->seen = true;
        }
        if (v < x->omin) x->omin = v;
        if (v > x->omax) x->omax = v;
    }
}

/* Percentile: bins over [omin, omax]; entropy: |x| over [0, max |x|]. */
static void observe_hist(const tdm_quantizer *q, q_act *x, const tdm_tensor *t) {
    if (!x->hist || !x->seen) return;
    int B = q->opt.bins;
    bool absolute = q->opt.method == TDM_QUANT_ENTROPY;
    double lo = absolute ? 0 : x->omin;
    double hi = absolute ? fmax(fabs(x->omin), fabs(x->omax)) : x->omax;
    double w = (hi - lo) / B;
    if (!(w > 0)) return;
    const float *d = t->data;
    for (int64_t i = 0; i < t->count; i++) {
        double v = d[i];
        if (v != v) continue;
        if (absolute) v = fabs(v);
        int b = (int)((v - lo) / w);
        if (b < 0) b = 0;
        if (b >= B) b = B - 1;
        x->hist[b] += 1;
    }
}

static tdm_status *check_float(const tdm_tensor *t, const char *name) {
    if (t->dtype != TDM_FLOAT)
        return TDM_ERR(TDM_ERR_RUNTIME, "calibration: activation '%s' is %s, not float32", name,
                       tdm_dtype_name(t->dtype));
    return NULL;
}

/* One pass over the samples: ranges (pass 0) or histograms (pass 1). */
static tdm_status *calib_pass(tdm_quantizer *q, tdm_session *s, int pass, size_t n_samples,
                              size_t n_inputs, const char *const *names,
                              const tdm_tensor *const *samples, const char *const *out_names,
                              const int *out_act, size_t n_out, tdm_tensor **outs) {
    for (size_t k = 0; k < n_samples; k++) {
        const tdm_tensor *const *in = samples + k * n_inputs;
        for (size_t i = 0; i < n_inputs; i++) {
            int a = -1;
            for (size_t j = 0; j < q->n_acts; j++)
                if (q->acts[j].is_input && !strcmp(q->acts[j].name, names[i])) a = (int)j;
            if (a < 0) continue;
            TDM_TRY(check_float(in[i], names[i]));
            if (pass == 0) observe_range(&q->acts[a], in[i]);
            else observe_hist(q, &q->acts[a], in[i]);
        }
        if (!n_out) continue;
        tdm_status *st = tdm_session_run(s, n_inputs, names, in, n_out, out_names, outs);
        if (st) return tdm_status_wrap(st, "calibration sample %zu: ", k);
        for (size_t o = 0; o < n_out && !st; o++) {
            st = check_float(outs[o], out_names[o]);
            if (out_act[o] < 0) { /* a pending Softmax input: is its axis the last? */
                size_t k2 = (size_t)(-out_act[o] - 1);
                int64_t axis = q->pending_axis[k2], rank = tdm_tensor_rank(outs[o]);
                if (axis != -1 && axis != rank - 1) q->bump_blocker = q->pending_node[k2];
                continue;
            }
            if (!st && pass == 0) observe_range(&q->acts[out_act[o]], outs[o]);
            if (!st && pass == 1) observe_hist(q, &q->acts[out_act[o]], outs[o]);
        }
        for (size_t o = 0; o < n_out; o++) {
            tdm_tensor_free(outs[o]);
            outs[o] = NULL;
        }
        if (st) return st;
    }
    return NULL;
}

tdm_status *tdm_quantizer_calibrate(tdm_quantizer *q, size_t n_samples, size_t n_inputs,
                                    const char *const *names, const tdm_tensor *const *samples) {
    if (!q || (n_samples && (!names || !samples)))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_quantizer_calibrate: NULL argument");
    if (n_samples == 0) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "calibration needs at least one sample");
    for (size_t i = 0; i < n_samples * n_inputs; i++)
        if (!samples[i]) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "calibration sample %zu: NULL input",
                                        i / n_inputs);
    for (size_t j = 0; j < q->n_acts; j++) {
        q_act *x = &q->acts[j];
        x->seen = false;
        x->omin = x->omax = 0;
        tdm_free(q->a, x->hist);
        x->hist = NULL;
    }
    q->calibrated = false;
    size_t cap = q->n_acts + q->n_pending + 1;
    const char **out_names = tdm_calloc(q->a, cap, sizeof *out_names);
    int *out_act = tdm_calloc(q->a, cap, sizeof *out_act);
    tdm_tensor **outs = tdm_calloc(q->a, cap, sizeof *outs);
    tdm_status *st = NULL;
    tdm_session *s = NULL;
    size_t n_out = 0;
    if (!out_names || !out_act || !outs) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    for (size_t j = 0; !st && j < q->n_acts; j++)
        if (!q->acts[j].is_input) {
            out_names[n_out] = q->acts[j].name;
            out_act[n_out++] = (int)j;
        }
    q->bump_blocker = NULL;
    for (size_t k = 0; !st && k < q->n_pending; k++) {
        bool dup = false;
        for (size_t o = 0; o < n_out; o++) dup |= !strcmp(out_names[o], q->pending[k]);
        if (dup) continue; /* (an activation too: its rank is not checked; rare) */
        out_names[n_out] = q->pending[k];
        out_act[n_out++] = -(int)k - 1;
    }
    if (!st) {
        tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu",
                                  .threads = q->opt.threads, .opt_level = 1};
        extra_outputs e = {out_names, n_out};
        st = tdm_session_create_edited(q->env, q->path, &so, add_outputs, &e, &s);
    }
    if (!st)
        st = calib_pass(q, s, 0, n_samples, n_inputs, names, samples, out_names, out_act, n_out, outs);
    if (!st && q->opt.method != TDM_QUANT_MINMAX) {
        for (size_t j = 0; !st && j < q->n_acts; j++)
            if (!(q->acts[j].hist = tdm_calloc(q->a, (size_t)q->opt.bins, sizeof(double))))
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        if (!st)
            st = calib_pass(q, s, 1, n_samples, n_inputs, names, samples, out_names, out_act, n_out, outs);
    }
    tdm_session_free(s);
    tdm_free(q->a, outs);
    tdm_free(q->a, out_act);
    tdm_free(q->a, out_names);
    if (st) return st;
    tdm_quant_compute_params(q);
    q->calibrated = true;
    q->bump_checked = true;
    return NULL;
}

/* ---- methods ---- */

static void range_percentile(const tdm_quantizer *q, const q_act *x, double *lo, double *hi) {
    int B = q->opt.bins;
    double total = 0;
    for (int b = 0; b < B; b++) total += x->hist[b];
    double w = (x->omax - x->omin) / B;
    *lo = x->omin;
    *hi = x->omax;
    if (!(total > 0) || !(w > 0)) return;
    double cut = total * (100.0 - q->opt.percentile) / 200.0; /* per side */
    double c = 0;
    int b = 0;
    while (b < B - 1 && c + x->hist[b] <= cut) c += x->hist[b++];
    *lo = x->omin + b * w;
    c = 0;
    b = B - 1;
    while (b > 0 && c + x->hist[b] <= cut) c += x->hist[b--];
    *hi = x->omin + (b + 1) * w;
}

/* KL(P || Q) of the reference distribution P (the first i bins of h, the outliers beyond
 * folded into its last bin) against its quantization into `levels` groups: each group's
 * count (of h, without the outliers) spread evenly over the group's bins where P is
 * non-zero (as TensorRT describes, and MXNet and ONNX Runtime implement it). A group's
 * bins share one Q value, so the sum over them needs only prefix sums of h (H), of
 * h log h (G) and of the non-zero bins (N): O(levels) per candidate, not O(i).
 * With ps = sum P = total and qs = sum Q = H(i), a bin with p = h != 0 and q = v adds
 * (h / ps) (log h - log ps - log v + log qs). */
static double kl_for(const double *H, const double *G, const double *N, const double *h, int i,
                     int levels, double total) {
    double qs = H[i], ps = total, outliers = total - H[i];
    if (!(qs > 0)) return INFINITY;
    double kl = 0, lps = log(ps), lqs = log(qs);
    for (int l = 0; l < levels; l++) {
        int s = (int)((int64_t)l * i / levels), e = (int)((int64_t)(l + 1) * i / levels);
        double sum = H[e] - H[s], nz = N[e] - N[s];
        bool last = e == i;
        double hl = last ? h[i - 1] : 0; /* the last bin apart: P has the outliers there */
        if (last && hl == 0 && outliers > 0) nz += 1;
        if (nz == 0) continue;
        double v = sum / nz;
        /* the bins with h != 0, but the last one */
        double sh = sum - hl, gh = G[e] - G[s] - (hl > 0 ? hl * log(hl) : 0);
        if (sh > 0) kl += (gh - sh * (lps + log(v) - lqs)) / ps;
        if (last && hl + outliers > 0) {
            double pp = (hl + outliers) / ps, qq = v > 0 ? v / qs : 1e-12;
            kl += pp * log(pp / qq);
        }
    }
    return kl;
}

#define ENTROPY_MAX_CLIPPED 0.01

static void range_entropy(const tdm_quantizer *q, const q_act *x, double *lo, double *hi) {
    int B = q->opt.bins;
    double absmax = fmax(fabs(x->omin), fabs(x->omax));
    bool nonneg = x->omin >= 0;
    int levels = nonneg ? 256 : 128;
    *lo = nonneg ? 0 : -absmax;
    *hi = absmax;
    double w = absmax / B;
    if (!(w > 0) || B <= levels) return;
    double *H = tdm_alloc(q->a, 3 * ((size_t)B + 1) * sizeof *H);
    if (!H) return; /* keeps the full range */
    double *G = H + B + 1, *N = G + B + 1;
    H[0] = G[0] = N[0] = 0;
    for (int b = 0; b < B; b++) {
        double c = x->hist[b];
        H[b + 1] = H[b] + c;
        G[b + 1] = G[b] + (c > 0 ? c * log(c) : 0);
        N[b + 1] = N[b] + (c != 0);
    }
    double best = INFINITY, total = H[B], beyond = 0;
    int best_i = B;
    for (int b = levels; b < B; b++) beyond += x->hist[b];
    for (int i = levels; i <= B; i++) {
        /* a threshold that clips more than 1% of the values is not a candidate: it guards
         * distributions far from 0 (all values in [0.1, 0.3], or all negative), where the
         * divergence of a nearly one-bin reference is small for any cut */
        if (beyond <= ENTROPY_MAX_CLIPPED * total) {
            double kl = kl_for(H, G, N, x->hist, i, levels, total);
            if (kl < best) {
                best = kl;
                best_i = i;
            }
        }
        if (i < B) beyond -= x->hist[i];
    }
    tdm_free(q->a, H);
    double t = fmin((best_i + 0.5) * w, absmax);
    *hi = t;
    *lo = nonneg ? 0 : -t;
}

void tdm_quant_compute_params(tdm_quantizer *q) {
    int qmin = q->opt.activation_type == TDM_INT8 ? -128 : 0;
    int qmax = q->opt.activation_type == TDM_INT8 ? 127 : 255;
    for (size_t j = 0; j < q->n_acts; j++) {
        q_act *x = &q->acts[j];
        double lo = x->omin, hi = x->omax;
        bool hist = x->seen && x->hist && !x->from_constants;
        if (hist && q->opt.method == TDM_QUANT_PERCENTILE) range_percentile(q, x, &lo, &hi);
        if (hist && q->opt.method == TDM_QUANT_ENTROPY) range_entropy(q, x, &lo, &hi);
        if (lo > 0) lo = 0;
        if (hi < 0) hi = 0;
        x->rmin = (float)lo;
        x->rmax = (float)hi;
        tdm_quant_scale_zp(x->rmin, x->rmax, qmin, qmax, false, &x->scale, &x->zp);
    }
    /* MaxPool outputs take their input's parameters (max commutes with quantization) */
    for (size_t j = 0; j < q->n_acts; j++) {
        int s = q->acts[j].share;
        for (int hops = 0; s >= 0 && q->acts[s].share >= 0 && hops < 64; hops++) s = q->acts[s].share;
        if (s < 0) continue;
        q->acts[j].rmin = q->acts[s].rmin;
        q->acts[j].rmax = q->acts[s].rmax;
        q->acts[j].scale = q->acts[s].scale;
        q->acts[j].zp = q->acts[s].zp;
    }
}
