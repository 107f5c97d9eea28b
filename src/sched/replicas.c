/* The replicas strategy (throughput mode): a plan per device.
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
 * device out (only device errors do).
 *
 * Every replica's graph is a copy of the one loaded graph (graph/clone.h); the last replica
 * takes the graph itself. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/clock.h"
#include "graph/clone.h"
#include "sched/batch.h"
#include "sched/strategy.h"

typedef struct tdm_replica {
    tdm_plan *plan;
    tdm_device *device;  /* the device the replica is for (its plan may fall back to the CPU) */
    double ms_per_item;  /* smoothed measured time per batch item; 0 = not measured yet */
    bool provisional;    /* ms_per_item is from a first run of its part size only (set-up
                            included): the next measurement replaces it */
    double share;        /* fraction of a split batch */
    int inflight;
    int64_t runs, items;
    double busy_ms;
    /* a device that failed is taken out until a probe run on it succeeds */
    bool down;
    bool probing;        /* a probe is running */
    int64_t probe_at_ns; /* when the next probe may run */
    int64_t backoff_ns;  /* the wait before the next probe (doubles, at most 64x probe_ms) */
    /* part sizes this replica has run (bit k: k rows, k < 128; larger ones in `big`): the
     * first run of a shape sets it up (cuDNN's algorithm search, memory plans, primitives)
     * and is not a measure of speed */
    uint64_t seen[2];
    int64_t big[8];
    int n_big;
} tdm_replica;

/* The strategy's context; replica fields after creation under stats_mu. */
typedef struct replicas {
    const tdm_allocator *a;
    const tdm_logger *log;
    int n_replicas;
    tdm_replica replicas[TDM_MAX_DEVICES];
    bool splittable;     /* every input and output has a dynamic leading (batch) dim */
    float alpha;
    bool no_rebalance;
    int probe_ms;        /* first back-off of a failed device (< 0: off) */
    tdm_threadpool *cpu_pool; /* the CPU replica's threads when accelerators run beside it */
    pthread_mutex_t stats_mu;
} replicas;

typedef struct part {
    replicas *s;
    int replica;
    int64_t begin, count;
    const tdm_tensor **inputs; /* per graph input: a view of the slice */
    tdm_tensor **outputs;      /* per graph output */
    tdm_status *st;
    double ms;
    pthread_t thread;
    const tdm_run_ctl *ctl; /* the run's stop request, or NULL */
} part;

static const tdm_graph *graph_of(const replicas *s) { return s->replicas[0].plan->graph; }

static void *part_main(void *arg) {
    part *p = arg;
    tdm_replica *r = &p->s->replicas[p->replica];
    int64_t t0 = tdm_now_ns();
    p->st = tdm_plan_run_ctl(r->plan, p->inputs, p->outputs, p->ctl);
    p->ms = (double)(tdm_now_ns() - t0) / 1e6;
    return NULL;
}

/* Takes replica k out after a device error (never the last one in service). stats_mu held. */
static void take_out(replicas *s, int k, const tdm_status *why) {
    tdm_replica *r = &s->replicas[k];
    if (s->probe_ms < 0 || r->down || tdm_status_code(why) != TDM_ERR_DEVICE) return;
    int up = 0;
    for (int q = 0; q < s->n_replicas; q++) up += !s->replicas[q].down;
    if (up <= 1) return;
    r->down = true;
    r->backoff_ns = (int64_t)s->probe_ms * 1000000;
    r->probe_at_ns = tdm_now_ns() + r->backoff_ns;
    tdm_log(s->log, TDM_LOG_WARN, "throughput: %s taken out after a device error (%s); probe in %d ms",
            r->device->name, tdm_status_message(why), s->probe_ms);
}

/* Probes one replica that is out and due (see the file comment). */
static void probe(replicas *s, const tdm_tensor *const *by_input, int64_t n) {
    const tdm_graph *g = graph_of(s);
    const tdm_allocator *a = s->a;
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
        tdm_log(s->log, TDM_LOG_INFO, "throughput: %s is back in service (a probe run succeeded)",
                r->device->name);
    } else {
        int64_t cap = (int64_t)s->probe_ms * 64 * 1000000;
        r->backoff_ns = r->backoff_ns * 2 > cap ? cap : r->backoff_ns * 2;
        r->probe_at_ns = tdm_now_ns() + r->backoff_ns;
        tdm_log(s->log, TDM_LOG_INFO, "throughput: probe of %s failed (%s); next in %lld ms",
                r->device->name, tdm_status_message(st), (long long)(r->backoff_ns / 1000000));
    }
    pthread_mutex_unlock(&s->stats_mu);
    tdm_status_free(st);
}

static tdm_status *run_replica(replicas *s, const tdm_tensor *const *by_input, tdm_tensor **all,
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
static void rebalance(replicas *s) {
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
        tdm_log(s->log, TDM_LOG_INFO, "%s", msg);
    }
}

/* How many of n items each replica gets (counts[k]): by share among those in service, the
 * remainder to the fastest; all to the fastest when it alone is predicted no slower. */
static void split_counts(replicas *s, int64_t n, int64_t *counts) {
    int K = s->n_replicas;
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
    /* the others' parts in steps of n / 8 rows, so that few part shapes come up (each new one
     * is set up once on each device: on an H200 the cuda:0 replica took 7-34 ms an item
     * against 0.4 ms alone while the ratio moved every run, most likely that set-up) */
    int64_t step = n >= 16 ? n / 8 : 1;
    for (int k = 0; k < K; k++)
        if (k != fastest && !s->replicas[k].down && step > 1) {
            int64_t c = (counts[k] + step / 2) / step * step;
            given += c - counts[k];
            counts[k] = c;
        }
    if (given > n) { /* rounding up gave more than n: take it back from the others */
        for (int k = 0; k < K && given > n; k++)
            if (k != fastest && counts[k] >= step) {
                counts[k] -= step;
                given -= step;
            }
    }
    counts[fastest] += n - given; /* remainder to the fastest */
    /* a replica whose estimate is provisional (a first run of its part size, set-up included)
     * gets a step of rows, so that a run of a size it has seen replaces the estimate: else an
     * estimate inflated by set-up starves it of rows for good */
    bool remeasure = false;
    for (int k = 0; k < K; k++) {
        int64_t want = step < n ? step : n - 1;
        if (k == fastest || s->replicas[k].down || !s->replicas[k].provisional || counts[k] >= want)
            continue;
        int64_t more = want - counts[k];
        if (counts[fastest] <= more) continue;
        counts[fastest] -= more;
        counts[k] = want;
        remeasure = true;
    }
    /* not worth splitting when the fastest alone is predicted no slower */
    bool measured = !remeasure;
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
}

/* The parts of a split batch: views of their rows of every input. Returns the parts made
 * (also on failure, for the caller to free). */
static tdm_status *make_parts(replicas *s, const tdm_tensor *const *by_input, const int64_t *counts,
                              const tdm_run_ctl *ctl, part *parts, int *np) {
    const tdm_graph *g = graph_of(s);
    const tdm_allocator *a = s->a;
    int64_t begin = 0;
    for (int k = 0; k < s->n_replicas; k++) {
        if (!counts[k]) continue;
        part *p = &parts[*np];
        memset(p, 0, sizeof *p);
        p->s = s;
        p->ctl = ctl;
        p->replica = k;
        p->begin = begin;
        p->count = counts[k];
        begin += counts[k];
        p->inputs = tdm_calloc(a, g->n_inputs + 1, sizeof *p->inputs);
        p->outputs = tdm_calloc(a, g->n_outputs + 1, sizeof *p->outputs);
        (*np)++;
        if (!p->inputs || !p->outputs) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory splitting a batch");
        for (size_t i = 0; i < g->n_inputs; i++) {
            if (!by_input[i]) continue;
            tdm_tensor *view = NULL;
            TDM_TRY(tdm_batch_slice(a, by_input[i], p->begin, p->count, &view));
            p->inputs[i] = view;
        }
    }
    return NULL;
}

/* Runs the parts at the same time: the calling thread takes the first. */
static tdm_status *run_parts(part *parts, int np) {
    tdm_status *st = NULL;
    int started = 0;
    for (int q = 1; q < np; q++) {
        if (pthread_create(&parts[q].thread, NULL, part_main, &parts[q]) != 0) {
            st = TDM_ERR(TDM_ERR_RUNTIME, "cannot start a thread for a batch part");
            break;
        }
        started = q;
    }
    if (!st) part_main(&parts[0]);
    for (int q = 1; q <= started; q++) pthread_join(parts[q].thread, NULL);
    return st;
}

/* Joins the parts' outputs along the leading dim into all. */
static tdm_status *join_parts(replicas *s, part *parts, int np, tdm_tensor **all) {
    const tdm_graph *g = graph_of(s);
    const tdm_tensor *outs[TDM_MAX_DEVICES];
    int64_t rows[TDM_MAX_DEVICES];
    tdm_status *st = NULL;
    for (size_t o = 0; o < g->n_outputs && !st; o++) {
        for (int q = 0; q < np; q++) {
            outs[q] = parts[q].outputs[o];
            rows[q] = parts[q].count;
        }
        st = tdm_batch_join(s->a, outs, np, rows, g->values[g->outputs[o]].name, &all[o]);
    }
    if (st)
        for (size_t o = 0; o < g->n_outputs; o++) {
            tdm_tensor_destroy(all[o]);
            all[o] = NULL;
        }
    return st;
}

/* Whether replica r ran `rows` rows before; notes it. */
static bool seen_before(tdm_replica *r, int64_t rows) {
    if (rows >= 0 && rows < 128) {
        uint64_t bit = 1ull << (rows & 63);
        bool was = (r->seen[rows >> 6] & bit) != 0;
        r->seen[rows >> 6] |= bit;
        return was;
    }
    for (int i = 0; i < r->n_big; i++)
        if (r->big[i] == rows) return true;
    r->big[r->n_big < 8 ? r->n_big++ : (int)(rows % 8)] = rows;
    return false;
}

/* Measurements of a split run feed the next split. A replica's first run of a part size only
 * counts when nothing else has been measured on it, and then only until a run of a size seen
 * before replaces it: on an H200, ResNet-50's first cuda:0 part measured 31.7 ms an item
 * (0.38 alone), and blending that away took 12 runs, each with most of the batch on the CPU
 * (828 items/s against 2613 on cuda:0 alone). */
static void measure_parts(replicas *s, const part *parts, int np) {
    pthread_mutex_lock(&s->stats_mu);
    for (int q = 0; q < np; q++) {
        tdm_replica *r = &s->replicas[parts[q].replica];
        double per_item = parts[q].ms / (double)parts[q].count;
        bool first = !seen_before(r, parts[q].count);
        if (!(r->ms_per_item > 0) || (!first && r->provisional)) {
            r->ms_per_item = per_item;
            r->provisional = first;
        } else if (!first) {
            r->ms_per_item = s->alpha * per_item + (1 - s->alpha) * r->ms_per_item;
        }
        r->runs++;
        r->items += parts[q].count;
        r->busy_ms += parts[q].ms;
    }
    /* a replica that got nothing this time keeps its old estimate; one never measured
     * gets a share so that it is measured */
    if (!s->no_rebalance) rebalance(s);
    pthread_mutex_unlock(&s->stats_mu);
}

static tdm_status *rep_run(void *ctx, const tdm_tensor *const *by_input, tdm_tensor **all,
                           const tdm_run_ctl *ctl) {
    replicas *s = ctx;
    const tdm_graph *g = graph_of(s);
    int64_t n = s->splittable ? tdm_batch_rows(g, by_input) : -1;
    TDM_TRY(tdm_run_ctl_check(ctl)); /* cancelled before it began: no probe either */
    probe(s, by_input, n);
    if (n < 2) return run_replica(s, by_input, all, ctl);

    int64_t counts[TDM_MAX_DEVICES] = {0};
    split_counts(s, n, counts);
    part parts[TDM_MAX_DEVICES];
    int np = 0;
    tdm_status *st = make_parts(s, by_input, counts, ctl, parts, &np);
    if (!st) st = run_parts(parts, np);
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
    if (!st) st = join_parts(s, parts, np, all);
    if (!st) measure_parts(s, parts, np);
    for (int q = 0; q < np; q++) {
        tdm_status_free(parts[q].st);
        if (parts[q].inputs)
            for (size_t i = 0; i < g->n_inputs; i++) tdm_tensor_destroy((tdm_tensor *)parts[q].inputs[i]);
        if (parts[q].outputs)
            for (size_t o = 0; o < g->n_outputs; o++) tdm_tensor_destroy(parts[q].outputs[o]);
        tdm_free(s->a, parts[q].inputs);
        tdm_free(s->a, parts[q].outputs);
    }
    return st;
}

static size_t rep_stats_count(void *ctx) { return (size_t)((replicas *)ctx)->n_replicas; }

static void rep_stats(void *ctx, size_t index, tdm_device_stats *out) {
    replicas *s = ctx;
    pthread_mutex_lock(&s->stats_mu);
    const tdm_replica *r = &s->replicas[index];
    *out = (tdm_device_stats){r->device->name, r->runs, r->items, r->busy_ms, r->share, r->ms_per_item};
    pthread_mutex_unlock(&s->stats_mu);
}

static void rep_set_monitor(void *ctx, struct tdm_monitor *mon) {
    replicas *s = ctx;
    for (int k = 0; k < s->n_replicas; k++) s->replicas[k].plan->monitor = mon;
}

static void rep_free(void *ctx) {
    replicas *s = ctx;
    if (!s) return;
    for (int k = 0; k < s->n_replicas; k++) tdm_plan_free(s->replicas[k].plan);
    tdm_threadpool_free(s->cpu_pool);
    pthread_mutex_destroy(&s->stats_mu);
    tdm_free(s->a, s);
}

static const tdm_strategy_iface replicas_iface = {
    TDM_STRATEGY_API_VERSION, "replicas", rep_run, rep_stats_count, rep_stats, rep_set_monitor, rep_free,
    NULL, /* no I/O binding */
};

tdm_status *tdm_replicas_create(const tdm_strategy_setup *su, tdm_graph *g, tdm_strategy **out) {
    const tdm_session_options *o = su->o;
    replicas *s = tdm_calloc(su->alloc, 1, sizeof *s);
    if (!s) {
        tdm_graph_free(g);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a session");
    }
    s->a = su->alloc;
    s->log = su->log;
    s->alpha = o->split_alpha > 0 && o->split_alpha <= 1 ? o->split_alpha : 0.3f;
    s->no_rebalance = o->no_rebalance;
    s->probe_ms = o->probe_ms ? o->probe_ms : 1000;
    pthread_mutex_init(&s->stats_mu, NULL);
    /* The CPU replica leaves a core to each accelerator's replica: that replica's thread
     * issues its kernels and copies, and with every core busy in the CPU replica's pool it
     * waited for one. On an H200 host (16 cores) ResNet-50 batch 32 measured 155 items/s in
     * throughput mode against 2448 on cuda:0 alone, the cuda:0 replica at 7-34 ms an item
     * against 0.4 alone. */
    int accels = 0, pool_size = tdm_threadpool_size(su->pool);
    for (int d = 0; d < su->n_devices; d++) accels += !su->devices[d]->host_memory;
    tdm_strategy_setup cpu_su = *su;
    tdm_status *st = NULL;
    if (accels > 0 && pool_size > 1) {
        int keep = pool_size - accels > 1 ? pool_size - accels : 1;
        st = tdm_threadpool_create(keep, su->settings ? su->settings->spin_us : 0, &s->cpu_pool);
        if (!st) {
            cpu_su.pool = s->cpu_pool;
            tdm_log(s->log, TDM_LOG_INFO, "throughput mode: the CPU replica runs %d of %d threads "
                    "(a core for each accelerator's replica)", keep, pool_size);
        }
    }
    /* a replica per device, each with the CPU behind it for what the device cannot run
     * (unless no_fallback); each plans a copy of g, the last g itself */
    for (int d = 0; d < su->n_devices && !st; d++) {
        tdm_graph *rg = g;
        if (d + 1 < su->n_devices) st = tdm_graph_clone(g, NULL, &rg);
        else g = NULL;
        tdm_replica *r = &s->replicas[s->n_replicas];
        r->device = su->devices[d];
        const tdm_strategy_setup *rsu = r->device->host_memory ? &cpu_su : su;
        if (!st) st = tdm_strategy_plan_on(rsu, rg, r->device, o->affinity, o->profile, su->model_hash, &r->plan);
        if (!st) s->n_replicas++;
    }
    tdm_graph_free(g);
    if (st) {
        rep_free(s);
        return st;
    }
    s->splittable = tdm_batch_splittable(graph_of(s));
    for (int k = 0; k < s->n_replicas; k++) s->replicas[k].share = 1.0 / s->n_replicas;
    return tdm_strategy_wrap(su->alloc, &replicas_iface, s, s->replicas[0].plan, out);
}
