/* Pipeline mode's rebalancer: the cost model corrected by measurements (see the header).
 *
 * Correction: for every stage of a measured window, measured busy time per row / the cost
 * model's time of the stage's nodes on its device gives that device's correction factor
 * (smoothed: half old, half new after the first). Corrected costs = factor x cost model.
 *
 * Policy, at the end of a window on the current configuration:
 * - After the configuration's first window a decision is always made; after later windows
 *   only when a stage's time per row drifted by more than DRIFT from that first window (or
 *   the last drift decided on): another process took a core, a device throttles. A drift
 *   also forgets what other single devices measured (they are measured again when needed).
 * - From the corrected costs: the auto cut over the devices (pace P = its slowest stage per
 *   row) and the best single device d* (all nodes on it, time T*).
 * - A pipeline collapses to d* alone when T* <= (1 + MARGIN) x P (the pipeline is not
 *   clearly better), or when d* alone was measured at least as fast as this pipeline. When
 *   d* alone was never measured, it is measured for one window first (a trial), so that the
 *   pipeline is kept only where it measured faster than the best single device. No trial is
 *   needed when every run of the window was one micro-batch (so the stages measured what d*
 *   alone would pay per row) and the pipeline ran at least (1 + MARGIN) / T* rows per ms
 *   (it already beat d* alone as predicted from measurements), or would at the moved cut
 *   below: its rows/ms x its corrected pace / the new cut's pace (the same estimate as
 *   after a trial). The window on the moved cut checks that with its own measurements.
 * - Otherwise a pipeline moves to the new cut when that moves a node and lowers the
 *   predicted pace by MOVE_GAIN; else it is kept.
 * - One device alone goes (back) to a pipeline when the auto cut is clearly better (MARGIN)
 *   and no pipeline measured slower than it. After a trial, the cut is first estimated from
 *   the pipeline that was measured: its rows/ms x its corrected pace / the new cut's pace;
 *   when that is no faster than the device alone measured, the pipeline lost (without a
 *   second try). After a pipeline lost, only once the device
 *   alone (drifted) measures MARGIN slower than that pipeline did. It goes to another single
 *   device when that is predicted MARGIN faster; else it stays. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sched/pipeline_mode_rebalance.h"
#include "core/alloc.h"
#include "core/checked.h"

#define DRIFT 0.3      /* relative change of a stage's time per row that is a drift */
#define MARGIN 0.1     /* a pipeline must beat one device by this much (predicted) */
#define MOVE_GAIN 0.05 /* a new cut must lower the predicted pace by this much */
#define SMOOTH 0.5     /* weight of a new measurement in a correction factor */

struct tdm_pm_rebal {
    const tdm_allocator *a;
    int K;
    size_t n;
    double *raw;  /* K x n, the cost model */
    double *corr; /* K x n, corrected (scratch) */
    const char *const *names;
    double factor[TDM_MAX_DEVICES];
    bool known[TDM_MAX_DEVICES];
    double single_rate[TDM_MAX_DEVICES]; /* rows/ms measured with the device alone; 0 = never */
    bool pipe_lost;   /* a pipeline measured no faster than one device alone */
    double lost_rate; /* that pipeline's rows/ms */
    double trial_rate, trial_pace; /* the pipeline measured before a trial: rows/ms, corrected pace */
};

tdm_status *tdm_pm_rebal_create(const tdm_allocator *a, int K, size_t n, const double *raw,
                                const char *const *names, tdm_pm_rebal **out) {
    if (K < 1 || K > TDM_MAX_DEVICES || n == 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "pipeline rebalancer: %d devices, %zu nodes", K, n);
    size_t cells = 0;
    if (!tdm_mul_size(n, (size_t)K, &cells))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "pipeline rebalancer: too many nodes");
    tdm_pm_rebal *rb = tdm_calloc(a, 1, sizeof *rb);
    if (!rb) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the pipeline rebalancer");
    rb->a = a;
    rb->K = K;
    rb->n = n;
    rb->names = names;
    rb->raw = tdm_calloc(a, cells, sizeof *rb->raw);
    rb->corr = tdm_calloc(a, cells, sizeof *rb->corr);
    if (!rb->raw || !rb->corr) {
        tdm_pm_rebal_free(rb);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating the pipeline rebalancer");
    }
    memcpy(rb->raw, raw, cells * sizeof *raw);
    for (int k = 0; k < K; k++) rb->factor[k] = 1.0;
    *out = rb;
    return NULL;
}

void tdm_pm_rebal_free(tdm_pm_rebal *rb) {
    if (!rb) return;
    tdm_free(rb->a, rb->raw);
    tdm_free(rb->a, rb->corr);
    tdm_free(rb->a, rb);
}

size_t tdm_pm_node_count(const tdm_pm_rebal *rb) { return rb ? rb->n : 0; }

/* ---- the auto cut ---- */

/* Fills stages in order while each stays within T; returns the stages used, 0 if T is too
 * small. starts[k] = first node of stage k. */
static int fill(const double *c, size_t n, int K, double T, int *starts) {
    int k = 0;
    double sum = 0;
    starts[0] = 0;
    for (size_t i = 0; i < n; i++) {
        double x = c[(size_t)k * n + i];
        if (sum + x > T && sum > 0) {
            if (++k >= K) return 0;
            starts[k] = (int)i;
            sum = 0;
            x = c[(size_t)k * n + i];
        }
        if (x > T) return 0;
        sum += x;
    }
    return k + 1;
}

int tdm_pm_auto_cut(const double *c, size_t n, int K, int *starts, double *stage_ms) {
    double hi = 0;
    for (size_t i = 0; i < n; i++) hi += c[i]; /* everything on stage 0 always fits */
    double lo = 0;
    for (int it = 0; it < 60 && hi - lo > 1e-9 * (hi + 1e-12); it++) {
        double mid = 0.5 * (lo + hi);
        if (fill(c, n, K, mid, starts)) hi = mid;
        else lo = mid;
    }
    int used = fill(c, n, K, hi * (1 + 1e-12) + 1e-15, starts);
    if (!used) { /* cannot happen (hi fits), but stay safe */
        starts[0] = 0;
        used = 1;
    }
    for (int k = 0; k < used; k++) {
        size_t e = k + 1 < used ? (size_t)starts[k + 1] : n;
        stage_ms[k] = 0;
        for (size_t i = (size_t)starts[k]; i < e; i++) stage_ms[k] += c[(size_t)k * n + i];
    }
    return used;
}

/* ---- decisions ---- */

static size_t stage_end(const tdm_pm_rebal *rb, const tdm_pm_config *c, int k) {
    return k + 1 < c->n_stages ? (size_t)c->start[k + 1] : rb->n;
}

/* The cost model's ms per row of stage k of c on its device. */
static double raw_stage(const tdm_pm_rebal *rb, const tdm_pm_config *c, int k) {
    double t = 0;
    const double *row = rb->raw + (size_t)c->device[k] * rb->n;
    for (size_t i = (size_t)c->start[k]; i < stage_end(rb, c, k); i++) t += row[i];
    return t;
}

double tdm_pm_predict(const tdm_pm_rebal *rb, const tdm_pm_config *c, int k) {
    return rb->factor[c->device[k]] * raw_stage(rb, c, k);
}

static double device_total(const tdm_pm_rebal *rb, int d) {
    double t = 0;
    for (size_t i = 0; i < rb->n; i++) t += rb->raw[(size_t)d * rb->n + i];
    return rb->factor[d] * t;
}

static double corrected_pace(const tdm_pm_rebal *rb, const tdm_pm_config *c) {
    double p = 0;
    for (int k = 0; k < c->n_stages; k++) {
        double t = rb->factor[c->device[k]] * raw_stage(rb, c, k);
        if (t > p) p = t;
    }
    return p;
}

static bool same_config(const tdm_pm_config *x, const tdm_pm_config *y) {
    if (x->n_stages != y->n_stages) return false;
    for (int k = 0; k < x->n_stages; k++)
        if (x->device[k] != y->device[k] || x->start[k] != y->start[k]) return false;
    return true;
}

/* "test:0 #0-#13, cpu #14-#28" or "cpu alone" */
static void describe(const tdm_pm_rebal *rb, const tdm_pm_config *c, char *buf, size_t size) {
    size_t pos = 0;
    buf[0] = 0;
    if (c->n_stages == 1) {
        snprintf(buf, size, "%s alone", rb->names[c->device[0]]);
        return;
    }
    for (int k = 0; k < c->n_stages && pos < size; k++) {
        int w = snprintf(buf + pos, size - pos, "%s%s #%d-#%zu", k ? ", " : "", rb->names[c->device[k]],
                         c->start[k], stage_end(rb, c, k) - 1);
        if (w < 0) break;
        pos += (size_t)w;
    }
}

/* "measured test:0 1.520 ms/row (cost model 0.100), cpu ..." */
static void describe_measured(const tdm_pm_rebal *rb, const tdm_pm_config *c, const tdm_pm_window *w,
                              char *buf, size_t size) {
    size_t pos = 0;
    buf[0] = 0;
    for (int k = 0; k < c->n_stages && pos < size; k++) {
        int x = snprintf(buf + pos, size - pos, "%s%s %.3f ms/row (cost model %.3f)", k ? ", " : "",
                         rb->names[c->device[k]], w->ms_per_row[k], raw_stage(rb, c, k));
        if (x < 0) break;
        pos += (size_t)x;
    }
}

tdm_pm_verdict tdm_pm_decide(tdm_pm_rebal *rb, const tdm_pm_config *cur, const tdm_pm_window *w,
                             tdm_pm_config *next, char *msg, size_t msg_size) {
    int K = rb->K;
    size_t n = rb->n;
    msg[0] = 0;
    /* 1. correction factors from what each stage measured */
    for (int k = 0; k < cur->n_stages; k++) {
        double r = raw_stage(rb, cur, k), m = w->ms_per_row[k];
        int d = cur->device[k];
        if (!(r > 0) || !(m > 0) || !isfinite(m)) continue;
        double f = m / r;
        rb->factor[d] = rb->known[d] ? (1 - SMOOTH) * rb->factor[d] + SMOOTH * f : f;
        rb->known[d] = true;
    }
    bool single = cur->n_stages == 1;
    if (single && w->rows_per_ms > 0) rb->single_rate[cur->device[0]] = w->rows_per_ms;
    /* 2. after the first window: only a drift is worth a decision */
    char drift[256] = "";
    if (!w->first) {
        for (int k = 0; k < cur->n_stages && !drift[0]; k++) {
            double ref = w->ref_ms_per_row[k], m = w->ms_per_row[k];
            if (ref > 0 && m > 0 && fabs(m / ref - 1) > DRIFT)
                snprintf(drift, sizeof drift, "stage %d on %s drifted from %.3f to %.3f ms/row; ", k,
                         rb->names[cur->device[k]], ref, m);
        }
        if (!drift[0]) return TDM_PM_NOTHING;
        /* the device alone now measures clearly slower than the pipeline that lost did */
        if (single && rb->pipe_lost && w->rows_per_ms > 0 && w->rows_per_ms * (1 + MARGIN) < rb->lost_rate)
            rb->pipe_lost = false;
        for (int d = 0; d < K; d++)
            if (!single || d != cur->device[0]) rb->single_rate[d] = 0;
    }
    /* 3. the corrected auto cut and the best single device */
    for (int d = 0; d < K; d++)
        for (size_t i = 0; i < n; i++) rb->corr[(size_t)d * n + i] = rb->factor[d] * rb->raw[(size_t)d * n + i];
    tdm_pm_config prop = {0};
    double stage_ms[TDM_MAX_DEVICES] = {0};
    prop.n_stages = tdm_pm_auto_cut(rb->corr, n, K, prop.start, stage_ms);
    double P = 0;
    for (int k = 0; k < prop.n_stages; k++) {
        prop.device[k] = k;
        if (stage_ms[k] > P) P = stage_ms[k];
    }
    int best = 0;
    for (int d = 1; d < K; d++)
        if (device_total(rb, d) < device_total(rb, best)) best = d;
    double T = device_total(rb, best);
    tdm_pm_config alone = {1, {best}, {0}};
    double cur_pace = corrected_pace(rb, cur);
    char was[512], to[512], meas[640];
    describe(rb, cur, was, sizeof was);
    describe_measured(rb, cur, w, meas, sizeof meas);
    double rate = w->rows_per_ms;
    if (!single) {
        const char *why = NULL;
        char whyb[256];
        if (T <= (1 + MARGIN) * P) {
            snprintf(whyb, sizeof whyb, "the best cut's pace %.3f ms/row is not %.0f%% better than %s alone (%.3f)",
                     P, 100 * MARGIN, rb->names[best], T);
            why = whyb;
        } else if (rb->single_rate[best] > 0 && rate <= rb->single_rate[best]) {
            rb->pipe_lost = true;
            rb->lost_rate = rate;
            snprintf(whyb, sizeof whyb, "the pipeline ran %.2f rows/ms, %s alone %.2f", rate, rb->names[best],
                     rb->single_rate[best]);
            why = whyb;
        }
        bool move = !same_config(&prop, cur) && P < (1 - MOVE_GAIN) * cur_pace;
        double est = move && P > 0 ? rate * cur_pace / P : rate; /* rows/ms on the cut to install */
        bool beat = w->whole && T > 0 && est * T >= 1 + MARGIN;
        if (!why && !(rb->single_rate[best] > 0) && !beat) {
            snprintf(whyb, sizeof whyb,
                     "trial: measuring %s alone against the pipeline (%.2f rows/ms; predicted pace %.3f "
                     "ms/row vs %.3f alone)", rb->names[best], rate, P, T);
            why = whyb;
        }
        if (why) {
            rb->trial_rate = rb->single_rate[best] > 0 ? 0 : rate;
            rb->trial_pace = cur_pace;
            *next = alone;
            snprintf(msg, msg_size, "pipeline rebalance: %scollapsed %s to %s: %s; measured %s", drift, was,
                     rb->names[best], why, meas);
            return TDM_PM_INSTALL;
        }
        if (move) {
            *next = prop;
            describe(rb, &prop, to, sizeof to);
            char trial[160] = "";
            if (beat && !(rb->single_rate[best] > 0))
                snprintf(trial, sizeof trial, "; estimated %.3f rows/ms there, faster than that alone: no trial", est);
            snprintf(msg, msg_size,
                     "pipeline rebalance: %smoved the cut from %s to %s: corrected pace %.3f -> %.3f ms/row "
                     "(%s alone %.3f%s); measured %s", drift, was, to, cur_pace, P, rb->names[best], T, trial, meas);
            return TDM_PM_INSTALL;
        }
        snprintf(msg, msg_size,
                 "pipeline rebalance: %skept %s: corrected pace %.3f ms/row, best cut %.3f, %s alone %.3f, "
                 "%.2f rows/ms%s; measured %s", drift, was, cur_pace, P, rb->names[best], T, rate,
                 beat && !(rb->single_rate[best] > 0) ? " (faster than that alone: no trial)" : "", meas);
        return TDM_PM_KEEP;
    }
    int d = cur->device[0];
    double est = rb->trial_rate > 0 && P > 0 ? rb->trial_rate * rb->trial_pace / P : 0;
    rb->trial_rate = 0;
    if (!rb->pipe_lost && prop.n_stages > 1 && T > (1 + MARGIN) * P && est > 0 && rate > 0 && est <= rate) {
        rb->pipe_lost = true;
        rb->lost_rate = est;
        snprintf(msg, msg_size,
                 "pipeline rebalance: %skept %s: it measured %.2f rows/ms; the pipeline ran %.2f, so the best cut "
                 "%s is estimated at %.2f (corrected pace %.3f -> %.3f ms/row); measured %s", drift, was, rate,
                 est * P / rb->trial_pace, (describe(rb, &prop, to, sizeof to), to), est, rb->trial_pace, P, meas);
        return TDM_PM_KEEP;
    }
    if (!rb->pipe_lost && prop.n_stages > 1 && T > (1 + MARGIN) * P) {
        *next = prop;
        describe(rb, &prop, to, sizeof to);
        snprintf(msg, msg_size,
                 "pipeline rebalance: %smoved from %s to the cut %s: corrected pace %.3f ms/row vs %.3f with "
                 "%s alone; measured %s", drift, was, to, P, T, rb->names[best], meas);
        return TDM_PM_INSTALL;
    }
    if (best != d && T * (1 + MARGIN) < device_total(rb, d)) {
        *next = alone;
        snprintf(msg, msg_size, "pipeline rebalance: %smoved from %s to %s alone: corrected %.3f vs %.3f ms/row; "
                 "measured %s", drift, was, rb->names[best], T, device_total(rb, d), meas);
        return TDM_PM_INSTALL;
    }
    snprintf(msg, msg_size,
             "pipeline rebalance: %skept %s: %s; %.2f rows/ms, corrected %.3f ms/row, best cut %.3f; measured %s",
             drift, was, rb->pipe_lost ? "a pipeline measured slower" : "no cut is predicted clearly faster",
             rate, device_total(rb, d), P, meas);
    return TDM_PM_KEEP;
}
