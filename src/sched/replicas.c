/* Throughput mode: replicas of the plan, one per device.
 *
 * Split: a batched run is divided along its leading dim between the replicas in proportion to
 * their measured speed (time per item, exponentially smoothed after every run), so that they
 * finish together; the parts run at the same time and the outputs are joined. A split that is
 * not predicted to beat the fastest replica alone is not made. Replicas: a run that cannot be
 * split goes to the replica predicted to finish first (its queue times its time per run).
 * Every change of the ratio is logged with its reason; no_rebalance keeps the first ratio.
 *
 * Dropped devices: a replica whose run fails with a device error is taken out (its request
 * fails; later runs go to the others). After a back-off (options.probe_ms, doubling after
 * every failed probe up to 64x) the next run first probes it: one row of that run's input (or
 * the whole input when it cannot be split) runs on the replica alone, the result is thrown
 * away, and a success takes the replica back. Both are logged. The probe runs on the calling
 * thread before the run's own work, so that run pays one extra replica run.
 *
 * Cancellation (tdm_session_cancel, run deadlines): every part of a split batch runs with the
 * run's stop request and stops at its next node; a cancelled run makes no probe and takes no
 * device out (only device errors do). */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "sched/batch.h"

typedef struct part {
    tdm_session *s;
    int replica;
    int64_t begin, count;
    const tdm_tensor **inputs; /* per graph input: a view of the slice */
    tdm_tensor **outputs;      /* per graph output */
    tdm_status *st;
    double ms;
    pthread_t thread;
    const tdm_run_ctl *ctl; /* the run's stop request, or NULL */
} part;

static void *part_main(void *arg) {
    part *p = arg;
    tdm_replica *r = &p->s->replicas[p->replica];
    int64_t t0 = tdm_now_ns();
    p->st = tdm_plan_run_ctl(r->plan, p->inputs, p->outputs, p->ctl);
    p->ms = (double)(tdm_now_ns() - t0) / 1e6;
    return NULL;
}

/* Takes replica k out after a device error (never the last one in service). stats_mu held. */
static void take_out(tdm_session *s, int k, const tdm_status *why) {
    tdm_replica *r = &s->replicas[k];
    if (s->probe_ms < 0 || r->down || tdm_status_code(why) != TDM_ERR_DEVICE) return;
    int up = 0;
    for (int q = 0; q < s->n_replicas; q++) up += !s->replicas[q].down;
    if (up <= 1) return;
    r->down = true;
    r->backoff_ns = (int64_t)s->probe_ms * 1000000;
    r->probe_at_ns = tdm_now_ns() + r->backoff_ns;
    tdm_log(&s->env->log, TDM_LOG_WARN, "throughput: %s taken out after a device error (%s); probe in %d ms",
            r->device->name, tdm_status_message(why), s->probe_ms);
}

/* Probes one replica that is out and due (see the file comment). */
static void probe(tdm_session *s, const tdm_tensor **by_input, int64_t n) {
    const tdm_graph *g = s->plan->graph;
    const tdm_allocator *a = s->env->alloc;
    int64_t now = tdm_now_ns();
    int k = -1;
    pthread_mutex_lock(&s->stats_mu);
    for (int q = 0; q < s->n_replicas && k < 0; q++) {
        tdm_replica *r = &s->replicas[q];
        if (r->down && !r->probing && now >= r->probe_at_ns) k = q;
    }
    if (k >= 0) s->replicas[k].probing = true;
    pthread_mutex_unlock(&s->stats_mu);
    if (k < 0) return;
    tdm_replica *r = &s->replicas[k];
    const tdm_tensor **ins = tdm_calloc(a, g->n_inputs + 1, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(a, g->n_outputs + 1, sizeof *outs);
    tdm_status *st = ins && outs ? NULL : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory probing a device");
    for (size_t i = 0; i < g->n_inputs && !st; i++) {
        if (!by_input[i] || n < 1) {
            ins[i] = by_input[i];
            continue;
        }
        tdm_tensor *view = NULL;
        st = tdm_batch_slice(a, by_input[i], 0, 1, &view);
        ins[i] = view;
    }
    if (!st) st = tdm_plan_run(r->plan, ins, outs);
    for (size_t i = 0; ins && n >= 1 && i < g->n_inputs; i++) tdm_tensor_destroy((tdm_tensor *)ins[i]);
    for (size_t o = 0; outs && o < g->n_outputs; o++) tdm_tensor_destroy(outs[o]);
    tdm_free(a, ins);
    tdm_free(a, outs);
    pthread_mutex_lock(&s->stats_mu);
    r->probing = false;
    if (!st) {
        r->down = false;
        tdm_log(&s->env->log, TDM_LOG_INFO, "throughput: %s is back in service (a probe run succeeded)",
                r->device->name);
    } else {
        int64_t cap = (int64_t)s->probe_ms * 64 * 1000000;
        r->backoff_ns = r->backoff_ns * 2 > cap ? cap : r->backoff_ns * 2;
        r->probe_at_ns = tdm_now_ns() + r->backoff_ns;
        tdm_log(&s->env->log, TDM_LOG_INFO, "throughput: probe of %s failed (%s); next in %lld ms",
                r->device->name, tdm_status_message(st), (long long)(r->backoff_ns / 1000000));
    }
    pthread_mutex_unlock(&s->stats_mu);
    tdm_status_free(st);
}

static tdm_status *run_replica(tdm_session *s, const tdm_tensor **by_input, tdm_tensor **all,
                               const tdm_run_ctl *ctl) {
    /* the replica predicted to finish first: (queued + 1) x time per run */
    pthread_mutex_lock(&s->stats_mu);
    int best = 0;
    double best_t = INFINITY;
    for (int k = 0; k < s->n_replicas; k++) {
        tdm_replica *r = &s->replicas[k];
        if (r->down) continue;
        double per_run = r->runs ? r->busy_ms / (double)r->runs : 0; /* unmeasured: try it */
        double t = (r->inflight + 1) * per_run;
        if (t < best_t) {
            best_t = t;
            best = k;
        }
    }
    s->replicas[best].inflight++;
    pthread_mutex_unlock(&s->stats_mu);
    int64_t t0 = tdm_now_ns();
    tdm_status *st = tdm_plan_run_ctl(s->replicas[best].plan, by_input, all, ctl);
    double ms = (double)(tdm_now_ns() - t0) / 1e6;
    pthread_mutex_lock(&s->stats_mu);
    tdm_replica *r = &s->replicas[best];
    r->inflight--;
    if (!st) {
        r->runs++;
        r->items += 1;
        r->busy_ms += ms;
    } else {
        take_out(s, best, st);
    }
    pthread_mutex_unlock(&s->stats_mu);
    return st;
}

/* New shares from the smoothed per-item times. */
static void rebalance(tdm_session *s) {
    double inv_sum = 0;
    for (int k = 0; k < s->n_replicas; k++)
        if (s->replicas[k].ms_per_item > 0) inv_sum += 1.0 / s->replicas[k].ms_per_item;
    if (inv_sum <= 0) return;
    bool all_measured = true;
    for (int k = 0; k < s->n_replicas; k++) all_measured &= s->replicas[k].ms_per_item > 0;
    if (!all_measured) return;
    double moved = 0;
    for (int k = 0; k < s->n_replicas; k++) {
        double share = (1.0 / s->replicas[k].ms_per_item) / inv_sum;
        moved += fabs(share - s->replicas[k].share);
        s->replicas[k].share = share;
    }
    if (moved > 0.05) {
        char msg[512];
        size_t pos = 0;
        pos += (size_t)snprintf(msg, sizeof msg, "split ratio moved (measured time per item):");
        for (int k = 0; k < s->n_replicas && pos < sizeof msg; k++)
            pos += (size_t)snprintf(msg + pos, sizeof msg - pos, " %s %.1f%% (%.3f ms)",
                                    s->replicas[k].device->name, 100 * s->replicas[k].share,
                                    s->replicas[k].ms_per_item);
        tdm_log(&s->env->log, TDM_LOG_INFO, "%s", msg);
    }
}

tdm_status *tdm_throughput_run(tdm_session *s, const tdm_tensor **by_input, tdm_tensor **all,
                               const tdm_run_ctl *ctl) {
    const tdm_graph *g = s->plan->graph;
    const tdm_allocator *a = s->env->alloc;
    int64_t n = s->splittable ? tdm_batch_rows(g, by_input) : -1;
    TDM_TRY(tdm_run_ctl_check(ctl)); /* cancelled before it began: no probe either */
    probe(s, by_input, n);
    if (n < 2) return run_replica(s, by_input, all, ctl);

    /* how many items each replica gets */
    int K = s->n_replicas;
    int64_t counts[TDM_MAX_DEVICES] = {0};
    pthread_mutex_lock(&s->stats_mu);
    int64_t given = 0;
    int fastest = -1;
    double up_share = 0; /* replicas taken out get nothing; the others share their part */
    for (int k = 0; k < K; k++)
        if (!s->replicas[k].down) up_share += s->replicas[k].share;
    for (int k = 0; k < K; k++) {
        if (s->replicas[k].down) continue;
        counts[k] = up_share > 0 ? (int64_t)floor((double)n * s->replicas[k].share / up_share) : 0;
        given += counts[k];
        if (fastest < 0 || s->replicas[k].share > s->replicas[fastest].share) fastest = k;
    }
    if (fastest < 0) fastest = 0; /* cannot happen: the last replica is never taken out */
    counts[fastest] += n - given; /* remainder to the fastest */
    /* not worth splitting when the fastest alone is predicted no slower */
    bool measured = true;
    double split_ms = 0;
    for (int k = 0; k < K; k++) {
        if (s->replicas[k].down) continue;
        measured &= s->replicas[k].ms_per_item > 0;
        double t = (double)counts[k] * s->replicas[k].ms_per_item;
        if (t > split_ms) split_ms = t;
    }
    if (measured && (double)n * s->replicas[fastest].ms_per_item <= split_ms) {
        for (int k = 0; k < K; k++) counts[k] = k == fastest ? n : 0;
    }
    pthread_mutex_unlock(&s->stats_mu);

    part parts[TDM_MAX_DEVICES];
    int np = 0;
    tdm_status *st = NULL;
    int64_t begin = 0;
    for (int k = 0; k < K; k++) {
        if (!counts[k]) continue;
        part *p = &parts[np];
        memset(p, 0, sizeof *p);
        p->s = s;
        p->ctl = ctl;
        p->replica = k;
        p->begin = begin;
        p->count = counts[k];
        begin += counts[k];
        p->inputs = tdm_calloc(a, g->n_inputs + 1, sizeof *p->inputs);
        p->outputs = tdm_calloc(a, g->n_outputs + 1, sizeof *p->outputs);
        np++;
        if (!p->inputs || !p->outputs) {
            st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory splitting a batch");
            break;
        }
        for (size_t i = 0; i < g->n_inputs && !st; i++) {
            if (!by_input[i]) continue;
            tdm_tensor *view = NULL;
            st = tdm_batch_slice(a, by_input[i], p->begin, p->count, &view);
            p->inputs[i] = view;
        }
    }
    /* run the parts at the same time: the calling thread takes the first */
    int started = 0;
    if (!st) {
        for (int q = 1; q < np; q++) {
            if (pthread_create(&parts[q].thread, NULL, part_main, &parts[q]) != 0) {
                st = TDM_ERR(TDM_ERR_RUNTIME, "cannot start a thread for a batch part");
                break;
            }
            started = q;
        }
        if (!st) part_main(&parts[0]);
        for (int q = 1; q <= started; q++) pthread_join(parts[q].thread, NULL);
    }
    pthread_mutex_lock(&s->stats_mu);
    for (int q = 0; q < np; q++)
        if (parts[q].st) take_out(s, parts[q].replica, parts[q].st);
    pthread_mutex_unlock(&s->stats_mu);
    for (int q = 0; q < np && !st; q++)
        if (parts[q].st) {
            st = parts[q].st;
            parts[q].st = NULL;
            st = tdm_status_wrap(st, "%s's part of the batch: ", s->replicas[parts[q].replica].device->name);
        }
    /* join the outputs along the leading dim */
    for (size_t o = 0; o < g->n_outputs && !st; o++) {
        const tdm_tensor *outs[TDM_MAX_DEVICES];
        int64_t rows[TDM_MAX_DEVICES];
        for (int q = 0; q < np; q++) {
            outs[q] = parts[q].outputs[o];
            rows[q] = parts[q].count;
        }
        st = tdm_batch_join(a, outs, np, rows, g->values[g->outputs[o]].name, &all[o]);
    }
    if (st)
        for (size_t o = 0; o < g->n_outputs; o++) {
            tdm_tensor_destroy(all[o]);
            all[o] = NULL;
        }
    /* measurements feed the next split */
    if (!st) {
        pthread_mutex_lock(&s->stats_mu);
        for (int q = 0; q < np; q++) {
            tdm_replica *r = &s->replicas[parts[q].replica];
            double per_item = parts[q].ms / (double)parts[q].count;
            r->ms_per_item = r->ms_per_item > 0 ? s->alpha * per_item + (1 - s->alpha) * r->ms_per_item
                                                : per_item;
            r->runs++;
            r->items += parts[q].count;
            r->busy_ms += parts[q].ms;
        }
        /* a replica that got nothing this time keeps its old estimate; one never measured
         * gets a share so that it is measured */
        if (!s->no_rebalance) rebalance(s);
        pthread_mutex_unlock(&s->stats_mu);
    }
    for (int q = 0; q < np; q++) {
        tdm_status_free(parts[q].st);
        if (parts[q].inputs)
            for (size_t i = 0; i < g->n_inputs; i++) tdm_tensor_destroy((tdm_tensor *)parts[q].inputs[i]);
        if (parts[q].outputs)
            for (size_t o = 0; o < g->n_outputs; o++) tdm_tensor_destroy(parts[q].outputs[o]);
        tdm_free(a, parts[q].inputs);
        tdm_free(a, parts[q].outputs);
    }
    return st;
}
