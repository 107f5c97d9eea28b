/* Pipeline mode's micro-batch size: fitted stage costs and the size they favour (see the
 * header for the model). */
#include <math.h>
#include <stdio.h>

#include "sched/pipeline_mode_mbatch.h"

#define MIN_SAMPLES 4  /* micro-batches per stage before a fit */
#define MAX_PARTS 64   /* micro-batches per run considered */
#define GAIN 0.05      /* another size must be predicted this much faster than the default */

void tdm_pm_mb_add(tdm_pm_mb_acc *acc, int64_t rows, double ms) {
    double x = (double)rows;
    if (!(ms >= 0) || !isfinite(ms) || rows < 1) return;
    if (acc->n == 0 || x < acc->x_min) acc->x_min = x;
    if (acc->n == 0 || x > acc->x_max) acc->x_max = x;
    acc->n += 1;
    acc->sx += x;
    acc->sy += ms;
    acc->sxx += x * x;
    acc->sxy += x * ms;
}

bool tdm_pm_mb_fit(const tdm_pm_mb_acc *acc, int n_stages, tdm_pm_mb_model *m) {
    if (n_stages < 1 || n_stages > TDM_MAX_DEVICES) return false;
    tdm_pm_mb_model r = {true, n_stages, {0}, {0}};
    for (int k = 0; k < n_stages; k++) {
        const tdm_pm_mb_acc *a = &acc[k];
        if (a->n < MIN_SAMPLES || a->x_max - a->x_min < 0.5) return false;
        double mx = a->sx / a->n, my = a->sy / a->n;
        double vx = a->sxx - a->n * mx * mx, cxy = a->sxy - a->n * mx * my;
        if (!(vx > 0)) return false;
        double slope = cxy / vx, fixed = my - slope * mx;
        if (slope < 0) { /* noise: time does not grow with rows; all of it is fixed */
            slope = 0;
            fixed = my;
        } else if (fixed < 0) { /* no fixed cost: a line through 0 */
            fixed = 0;
            slope = a->sxy / a->sxx;
        }
        r.fixed_ms[k] = fixed;
        r.row_ms[k] = slope;
    }
    *m = r;
    return true;
}

int64_t tdm_pm_mb_default(int64_t n, int n_stages) {
    if (n < 1) return 1;
    if (n_stages < 1) n_stages = 1;
    return (n + n_stages - 1) / n_stages;
}

double tdm_pm_mb_predict(const tdm_pm_mb_model *m, int64_t n, int64_t parts) {
    if (parts < 1) parts = 1;
    if (parts > n) parts = n;
    double b = (double)((n + parts - 1) / parts), sum = 0, slow = 0;
    for (int k = 0; k < m->n_stages; k++) {
        double t = m->fixed_ms[k] + b * m->row_ms[k];
        sum += t;
        if (t > slow) slow = t;
    }
    return sum + (double)(parts - 1) * slow;
}

int64_t tdm_pm_mb_choose(const tdm_pm_mb_model *m, int64_t n) {
    int64_t def = tdm_pm_mb_default(n, m ? m->n_stages : 1);
    if (!m || !m->valid || n < 2) return def;
    int64_t def_parts = (n + def - 1) / def, best = def_parts;
    double t_best = tdm_pm_mb_predict(m, n, def_parts);
    for (int64_t p = 1; p <= n && p <= MAX_PARTS; p++) {
        double t = tdm_pm_mb_predict(m, n, p);
        if (t < t_best) {
            t_best = t;
            best = p;
        }
    }
    if (!(t_best < (1 - GAIN) * tdm_pm_mb_predict(m, n, def_parts))) return def;
    return (n + best - 1) / best;
}

void tdm_pm_mb_describe(const tdm_pm_mb_model *m, const char *const *names, char *buf, size_t size) {
    size_t pos = 0;
    if (size) buf[0] = 0;
    for (int k = 0; k < m->n_stages && pos < size; k++) {
        int w = snprintf(buf + pos, size - pos, "%s%.3f ms per micro-batch + %.3f ms/row on %s", k ? ", " : "",
                         m->fixed_ms[k], m->row_ms[k], names[k]);
        if (w < 0) break;
        pos += (size_t)w;
    }
}
