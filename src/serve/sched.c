/* tandem serve: queue, dynamic batcher and instances of one model version (see sched.h). */
#define _GNU_SOURCE /* pthread_setname_np */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "serve/batch.h"
#include "serve/sched.h"

typedef struct sv_queue {
    sv_request *head, *tail;
    uint32_t n;
} sv_queue;

typedef struct sv_instance {
    struct sv_sched *s;
    tdm_session *session;
    char device[32];
    pthread_t th;
    bool started, stop;
    pthread_cond_t cv;
    sv_request **work; /* the batch being run, NULL when idle */
    int n_work;
    int64_t work_items;
    uint64_t busy_since;
    uint64_t busy_ns;
    double *est_ns; /* measured run time per batch size (moving average); 0 = unknown.
                       Instances on the same device share one array (est_owner false for all
                       but the first): they are the same hardware, and separate estimates,
                       measured while the instances competed for the cores or not, made the
                       batcher wait for a busy instance that had once measured faster while
                       an identical one stood idle. */
    bool est_owner;
    /* sv_sched_monitor: busy and window ms per device at the previous call */
    int mon_n;
    double mon_busy[SV_MON_DEVICES], mon_window[SV_MON_DEVICES];
} sv_instance;

struct sv_sched {
    tdm_env *env;
    const sv_model_config *cfg;
    const char *model_name, *version;
    sv_stats *stats;
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* wakes the batcher */
    pthread_cond_t idle_cv; /* wakes drain() */
    pthread_t th;
    bool started, stop, accepting;
    int n_levels;           /* queues: index 0 when there are no levels, else 1..levels */
    sv_queue *q;
    sv_queue delayed;       /* timed-out requests under the DELAY action */
    uint64_t n_queued;
    uint64_t next_deadline; /* no queued request times out before this (0 = none does) */
    int running;            /* batches being run */
    uint64_t next_seq;
    sv_request *ord_head, *ord_tail; /* preserve_ordering: accepted, unanswered, in order */
    int n_inst;
    sv_instance *inst;
    int max_items;          /* items per run (max_batch_size, or 1 without batching) */
    uint64_t next_sweep;    /* when the batcher next checks queued requests' clients */
    bool batcher_untimed;   /* the batcher waits without a timeout (submit wakes it) */
    uint64_t cancelled[SV_CANCEL_N];
};

static const sv_queue_policy no_policy = {false, 0, true, 0};

static const sv_queue_policy *policy(const sv_sched *s, uint32_t level) {
    return s->cfg->level_policy ? &s->cfg->level_policy[level] : &no_policy;
}

static void abs_time(struct timespec *ts, uint64_t deadline_ns) {
    /* condition variables use CLOCK_MONOTONIC (set at init) */
    ts->tv_sec = (time_t)(deadline_ns / 1000000000ull);
    ts->tv_nsec = (long)(deadline_ns % 1000000000ull);
}

static void cond_init_mono(pthread_cond_t *cv) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

/* ---- answering ------------------------------------------------------------------------------ */

static void notify(sv_request *r) { r->notify(r, r->notify_user); }

/* Marks r answered and releases answers (in arrival order with preserve_ordering). Locked. */
static void finish_locked(sv_sched *s, sv_request *r) {
    r->done = true;
    if (!s->cfg->preserve_ordering) {
        notify(r);
    } else {
        while (s->ord_head && s->ord_head->done) {
            sv_request *h = s->ord_head;
            s->ord_head = h->ord_next;
            if (!s->ord_head) s->ord_tail = NULL;
            notify(h); /* h may be freed from here on */
        }
    }
}

static void fail_locked(sv_sched *s, sv_request *r, sv_error *e) {
    uint64_t now = sv_now_ns();
    sv_stats_request(s->stats, false, now - r->t_recv, 0, 0, 0, 0);
    sv_infer_fail(r, e);
    finish_locked(s, r);
}

/* ---- the queue ------------------------------------------------------------------------------ */

static void q_push(sv_queue *q, sv_request *r) {
    r->next = NULL;
    if (q->tail) q->tail->next = r;
    else q->head = r;
    q->tail = r;
    q->n++;
}

/* Unlinks r, which follows prev (NULL: r is the head). */
static void q_unlink(sv_queue *q, sv_request *prev, sv_request *r) {
    if (prev) prev->next = r->next;
    else q->head = r->next;
    if (q->tail == r) q->tail = prev;
    q->n--;
    r->next = NULL;
}

static sv_request *q_pop(sv_queue *q) {
    sv_request *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head) q->tail = NULL;
        q->n--;
        r->next = NULL;
    }
    return r;
}

/* The i-th list in batching order: levels by priority, then the delayed list. */
static sv_queue *list_at(sv_sched *s, int i) {
    if (i < s->n_levels) return &s->q[s->cfg->priority_levels ? i + 1 : 0];
    return i == s->n_levels ? &s->delayed : NULL;
}

/* Handles requests whose queue timeout passed; returns the earliest remaining deadline. */
static uint64_t expire_locked(sv_sched *s, uint64_t now) {
    if (!s->next_deadline || now < s->next_deadline) return s->next_deadline; /* nothing due */
    uint64_t next = 0;
    for (int i = 0; i < s->n_levels; i++) {
        sv_queue *q = list_at(s, i);
        sv_request *prev = NULL, *r = q->head;
        while (r) {
            sv_request *nx = r->next;
            if (r->t_deadline && now >= r->t_deadline) {
                q_unlink(q, prev, r);
                if (policy(s, r->level)->delay) {
                    r->delayed = true;
                    r->t_deadline = 0; /* runs later, without a deadline */
                    q_push(&s->delayed, r);
                } else {
                    s->n_queued--;
                    s->cancelled[SV_CANCEL_QUEUE_TIMEOUT]++;
                    fail_locked(s, r, sv_err(503, SV_TIMEOUT_MSG));
                }
            } else {
                if (r->t_deadline && (!next || r->t_deadline < next)) next = r->t_deadline;
                prev = r;
            }
            r = nx;
        }
    }
    s->next_deadline = next;
    return next;
}

/* Drops queued requests whose client has gone, among the first `max` in batching order (the
 * candidates of the next batch come first). Returns how many were dropped. Locked.
 *
 * gone() looks at the request's connection, which stays open while the request is queued:
 * the HTTP layer suspends it until notify, so its descriptor cannot have been reused. */
static int drop_gone_locked(sv_sched *s, int max) {
    int dropped = 0, seen = 0;
    for (int i = 0; seen < max; i++) {
        sv_queue *q = list_at(s, i);
        if (!q) break;
        sv_request *prev = NULL, *r = q->head;
        while (r && seen < max) {
            sv_request *nx = r->next;
            seen++;
            if (r->gone && r->gone(r, r->notify_user)) {
                q_unlink(q, prev, r);
                s->n_queued--;
                s->cancelled[SV_CANCEL_DISCONNECT]++;
                dropped++;
                fail_locked(s, r, sv_err(400, "Request was cancelled: the client closed the "
                                         "connection")); /* r may be freed from here on */
            } else {
                prev = r;
            }
            r = nx;
        }
    }
    return dropped;
}

/* Whether b can join a batch led by a: same inputs, same shapes after the first dim. */
static bool compatible(const sv_request *a, const sv_request *b) {
    if (a->n_in != b->n_in) return false;
    for (int i = 0; i < a->n_in; i++) {
        const sv_in *x = &a->in[i], *y = &b->in[i];
        if (x->cfg != y->cfg || x->dtype != y->dtype || x->rank != y->rank) return false;
        for (int k = 1; k < x->rank; k++)
            if (x->dims[k] != y->dims[k]) return false;
    }
    return true;
}

/* ---- instance choice -------------------------------------------------------------------------- */

static double estimate(const sv_instance *in, int64_t items, int max_items) {
    if (items < 1) items = 1;
    if (items <= max_items && in->est_ns[items] > 0) return in->est_ns[items];
    /* nearest measured size, scaled linearly */
    for (int d = 1; d <= max_items; d++) {
        int64_t k[2] = {items - d, items + d};
        for (int j = 0; j < 2; j++)
            if (k[j] >= 1 && k[j] <= max_items && in->est_ns[k[j]] > 0)
                return in->est_ns[k[j]] * (double)items / (double)k[j];
    }
    return 0;
}

/* The instance expected to finish a batch of `items` first; sets *idle. */
static sv_instance *choose_instance(sv_sched *s, int64_t items, uint64_t now, bool *idle) {
    sv_instance *best = NULL;
    double best_t = 0;
    for (int i = 0; i < s->n_inst; i++) {
        sv_instance *in = &s->inst[i];
        double start = (double)now;
        if (in->work) {
            double end = (double)in->busy_since + estimate(in, in->work_items, s->max_items);
            if (end > start) start = end;
        }
        double t = start + estimate(in, items, s->max_items);
        /* ties go to an idle instance, then to the lower index */
        if (!best || t < best_t || (t == best_t && best->work && !in->work)) {
            best = in;
            best_t = t;
        }
    }
    *idle = best && !best->work;
    return best;
}

/* ---- the batcher ------------------------------------------------------------------------------ */

typedef struct candidate {
    int count;     /* requests in the batch */
    int64_t items; /* their batch elements */
    bool blocked;  /* the next request cannot join */
    uint64_t oldest;
} candidate;

static void form(sv_sched *s, candidate *c, int *pref_count) {
    const sv_model_config *cfg = s->cfg;
    memset(c, 0, sizeof *c);
    *pref_count = 0;
    int64_t best_pref = 0;
    const sv_request *lead = NULL;
    int max_requests = cfg->dynamic_batching && cfg->max_batch_size > 0 ? INT32_MAX : 1;
    for (int i = 0; !c->blocked; i++) {
        sv_queue *q = list_at(s, i);
        if (!q) break;
        for (sv_request *r = q->head; r; r = r->next) {
            if (!lead) {
                lead = r;
            } else if (c->count >= max_requests || c->items + r->batch > s->max_items ||
                       !compatible(lead, r)) {
                c->blocked = true;
                break;
            }
            c->count++;
            c->items += r->batch;
            if (!c->oldest || r->t_enqueue < c->oldest) c->oldest = r->t_enqueue;
            for (int p = 0; p < cfg->n_preferred; p++)
                if (cfg->preferred[p] == c->items && c->items > best_pref) {
                    best_pref = c->items;
                    *pref_count = c->count;
                }
        }
    }
}

static bool ready(const sv_sched *s, const candidate *c, uint64_t now, uint64_t *wake) {
    const sv_model_config *cfg = s->cfg;
    if (!cfg->dynamic_batching || cfg->max_batch_size == 0) return true;
    if (c->items >= s->max_items || c->blocked || cfg->max_queue_delay_us == 0) return true;
    int max_pref = 0;
    for (int p = 0; p < cfg->n_preferred; p++)
        if (cfg->preferred[p] > max_pref) max_pref = cfg->preferred[p];
    if (max_pref && c->items >= max_pref) return true;
    uint64_t due = c->oldest + cfg->max_queue_delay_us * 1000ull;
    if (now >= due) return true;
    *wake = due;
    return false;
}

/* Forms batches and hands them to instances while a batch is ready and the instance that
 * would finish it first is idle. Called by the batcher thread, by submit and by instances
 * that just finished, so that a request usually needs no extra thread hop. Returns when the
 * batcher must look again on its own (0 = only when signalled). Locked. */
static uint64_t dispatch_locked(sv_sched *s, const sv_instance *self) {
    for (;;) {
        uint64_t now = sv_now_ns();
        uint64_t wake = expire_locked(s, now);
        if (!s->n_queued) {
            if (!s->running) pthread_cond_broadcast(&s->idle_cv);
            return wake;
        }
        candidate c;
        int pref_count;
        form(s, &c, &pref_count);
        uint64_t due = 0;
        bool go = ready(s, &c, now, &due);
        bool idle = false;
        sv_instance *in = go ? choose_instance(s, c.items, now, &idle) : NULL;
        if (!go || !idle) {
            if (due && (!wake || due < wake)) wake = due;
            return wake;
        }
        int take = pref_count && pref_count < c.count ? pref_count : c.count;
        if (drop_gone_locked(s, take)) continue; /* nobody waits for some: form it again */
        sv_request **batch = calloc((size_t)take, sizeof *batch);
        if (!batch) { /* answer the lead request rather than spin */
            for (int i = 0; i <= s->n_levels; i++) {
                sv_request *r = q_pop(list_at(s, i));
                if (r) {
                    s->n_queued--;
                    fail_locked(s, r, sv_err(500, "out of memory forming a batch"));
                    break;
                }
            }
            continue;
        }
        int64_t items = 0;
        for (int i = 0, k = 0; k < take; i++) {
            sv_queue *q = list_at(s, i);
            while (k < take && q->head) {
                batch[k] = q_pop(q);
                items += batch[k]->batch;
                k++;
            }
        }
        s->n_queued -= (uint64_t)take;
        in->work = batch;
        in->n_work = take;
        in->work_items = items;
        in->busy_since = now;
        s->running++;
        if (in != self) pthread_cond_signal(&in->cv);
    }
}

/* The batcher thread: waits out queue delays and timeouts. */
static void *batcher_main(void *arg) {
    sv_sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stop) {
        uint64_t now = sv_now_ns();
        if (s->n_queued && now >= s->next_sweep) { /* clients that went away meanwhile */
            drop_gone_locked(s, INT32_MAX);
            s->next_sweep = now + SV_SWEEP_MS * 1000000ull;
        }
        uint64_t wake = dispatch_locked(s, NULL);
        if (s->stop) break;
        if (s->n_queued && (!wake || s->next_sweep < wake)) wake = s->next_sweep;
        if (wake) {
            struct timespec ts;
            abs_time(&ts, wake);
            pthread_cond_timedwait(&s->cv, &s->mu, &ts);
        } else {
            s->batcher_untimed = true;
            pthread_cond_wait(&s->cv, &s->mu);
            s->batcher_untimed = false;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- running a batch (batch.c) ------------------------------------------------------------- */

static void *instance_main(void *arg) {
    sv_instance *in = arg;
    sv_sched *s = in->s;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!in->work && !in->stop) pthread_cond_wait(&in->cv, &s->mu);
        if (!in->work) break;
        sv_request **b = in->work;
        int n = in->n_work;
        int64_t items = in->work_items;
        pthread_mutex_unlock(&s->mu);

        uint64_t t[4];
        t[0] = sv_now_ns();
        bool timed_out = false;
        sv_batch_ctx x = {s->env, in->session, s->cfg, s->model_name, s->version};
        sv_error *e = sv_batch_run(&x, b, n, items, t, &timed_out);
        if (!e) sv_stats_execution(s->stats, items, t[1] - t[0], t[2] - t[1], t[3] - t[2]);

        pthread_mutex_lock(&s->mu);
        double ns = (double)(t[2] - t[1]);
        if (!e && items <= s->max_items) {
            double *est = &in->est_ns[items];
            *est = *est > 0 ? 0.8 * *est + 0.2 * ns : ns;
        }
        in->busy_ns += t[3] - t[0];
        if (timed_out) s->cancelled[SV_CANCEL_RUN_TIMEOUT] += (uint64_t)n;
        for (int i = 0; i < n; i++) {
            sv_request *r = b[i];
            if (e) {
                fail_locked(s, r, sv_err(e->http, "%s", e->msg));
            } else {
                uint64_t end = sv_now_ns();
                sv_stats_request(s->stats, r->http == 200, end - r->t_recv, t[0] - r->t_enqueue,
                                 t[1] - t[0], t[2] - t[1], t[3] - t[2]);
                finish_locked(s, r);
            }
        }
        sv_error_free(e);
        free(b);
        in->work = NULL;
        s->running--;
        /* take the next batch at once (possibly this instance's own) */
        if (dispatch_locked(s, in)) pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- lifecycle -------------------------------------------------------------------------------- */

sv_error *sv_sched_create(tdm_env *env, const sv_model_config *cfg, const char *model_name,
                          const char *version, sv_stats *stats, const sv_instance_desc *inst,
                          int n_inst, sv_sched **out) {
    sv_sched *s = calloc(1, sizeof *s);
    if (!s || n_inst < 1) {
        for (int i = 0; i < n_inst; i++) tdm_session_free(inst[i].session);
        free(s);
        return n_inst < 1 ? sv_err(400, "model '%s' has no instances", model_name)
                          : sv_err(500, "out of memory");
    }
    s->env = env;
    s->cfg = cfg;
    s->model_name = model_name;
    s->version = version;
    s->stats = stats;
    s->accepting = true;
    s->max_items = cfg->max_batch_size > 0 ? cfg->max_batch_size : 1;
    s->n_levels = cfg->priority_levels ? (int)cfg->priority_levels : 1;
    pthread_mutex_init(&s->mu, NULL);
    cond_init_mono(&s->cv);
    cond_init_mono(&s->idle_cv);
    s->q = calloc((size_t)s->n_levels + 1, sizeof *s->q);
    s->inst = calloc((size_t)n_inst, sizeof *s->inst);
    sv_error *e = (!s->q || !s->inst) ? sv_err(500, "out of memory") : NULL;
    for (int i = 0; i < n_inst; i++) {
        if (!s->inst) {
            tdm_session_free(inst[i].session);
            continue;
        }
        sv_instance *in = &s->inst[i];
        in->s = s;
        in->session = inst[i].session;
        snprintf(in->device, sizeof in->device, "%s", inst[i].device);
        pthread_cond_init(&in->cv, NULL);
        for (int j = 0; j < i && !in->est_ns; j++)
            if (!strcmp(s->inst[j].device, in->device)) in->est_ns = s->inst[j].est_ns;
        if (!in->est_ns) {
            in->est_ns = calloc((size_t)s->max_items + 1, sizeof *in->est_ns);
            in->est_owner = true;
        }
        if (!in->est_ns && !e) e = sv_err(500, "out of memory");
        s->n_inst++;
    }
    for (int i = 0; !e && i < s->n_inst; i++) {
        if (pthread_create(&s->inst[i].th, NULL, instance_main, &s->inst[i])) {
            e = sv_err(500, "cannot start an instance thread");
        } else {
            s->inst[i].started = true;
            pthread_setname_np(s->inst[i].th, "tdm-instance");
        }
    }
    if (!e) {
        if (pthread_create(&s->th, NULL, batcher_main, s)) {
            e = sv_err(500, "cannot start the batcher");
        } else {
            s->started = true;
            pthread_setname_np(s->th, "tdm-batcher");
        }
    }
    if (e) {
        sv_sched_free(s);
        return e;
    }
    *out = s;
    return NULL;
}

sv_error *sv_sched_submit(sv_sched *s, sv_request *r) {
    const sv_model_config *cfg = s->cfg;
    uint32_t level = 0;
    if (cfg->priority_levels) {
        level = r->priority ? r->priority : cfg->default_priority;
        if (level > cfg->priority_levels)
            return sv_err(400, "priority %u is out of range: model '%s' has %u priority levels",
                          r->priority, s->model_name, cfg->priority_levels);
    }
    const sv_queue_policy *p = policy(s, level);
    uint64_t timeout = p->default_timeout_us;
    if (r->timeout_us && (p->allow_timeout_override || !timeout) && (!timeout || r->timeout_us < timeout))
        timeout = r->timeout_us;
    pthread_mutex_lock(&s->mu);
    sv_error *e = NULL;
    sv_queue *q = &s->q[level];
    if (!s->accepting)
        e = sv_err(503, "model '%s' version %s is unloading", s->model_name, s->version);
    else if (p->max_queue_size && q->n >= p->max_queue_size)
        e = sv_err(503, "Exceeds maximum queue size");
    if (!e) {
        r->level = level;
        r->t_enqueue = sv_now_ns();
        r->t_deadline = timeout ? r->t_enqueue + timeout * 1000ull : 0;
        if (r->t_deadline && (!s->next_deadline || r->t_deadline < s->next_deadline))
            s->next_deadline = r->t_deadline;
        r->seq = s->next_seq++;
        r->done = false;
        q_push(q, r);
        s->n_queued++;
        if (cfg->preserve_ordering) {
            r->ord_next = NULL;
            if (s->ord_tail) s->ord_tail->ord_next = r;
            else s->ord_head = r;
            s->ord_tail = r;
        }
        /* the batcher waits out delays and timeouts, and sweeps a queue that is not empty */
        if (dispatch_locked(s, NULL) || (s->n_queued && s->batcher_untimed))
            pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return e;
}

void sv_sched_drain(sv_sched *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->accepting = false;
    pthread_cond_signal(&s->cv);
    while (s->n_queued || s->running) pthread_cond_wait(&s->idle_cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
}

void sv_sched_cancel_queued(sv_sched *s, const char *why) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i <= s->n_levels; i++) {
        sv_queue *q = list_at(s, i);
        sv_request *r;
        while ((r = q_pop(q))) {
            s->n_queued--;
            fail_locked(s, r, sv_err(503, "%s", why));
        }
    }
    if (!s->running) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

void sv_sched_free(sv_sched *s) {
    if (!s) return;
    if (s->started) sv_sched_drain(s);
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    for (int i = 0; i < s->n_inst; i++) {
        s->inst[i].stop = true;
        pthread_cond_broadcast(&s->inst[i].cv);
    }
    pthread_mutex_unlock(&s->mu);
    if (s->started) pthread_join(s->th, NULL);
    for (int i = 0; i < s->n_inst; i++) {
        sv_instance *in = &s->inst[i];
        if (in->started) pthread_join(in->th, NULL);
        pthread_cond_destroy(&in->cv);
        tdm_session_free(in->session);
    }
    for (int i = 0; i < s->n_inst; i++) /* after every join: instances share estimates */
        if (s->inst[i].est_owner) free(s->inst[i].est_ns);
    free(s->inst);
    free(s->q);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

uint64_t sv_sched_pending(sv_sched *s) {
    pthread_mutex_lock(&s->mu);
    uint64_t n = s->n_queued;
    for (int i = 0; i < s->n_inst; i++) n += s->inst[i].work ? (uint64_t)s->inst[i].n_work : 0;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void sv_sched_cancelled(sv_sched *s, uint64_t out[SV_CANCEL_N]) {
    pthread_mutex_lock(&s->mu);
    memcpy(out, s->cancelled, sizeof s->cancelled);
    pthread_mutex_unlock(&s->mu);
}

const char *sv_cancel_reason_name(sv_cancel_reason r) {
    switch (r) {
    case SV_CANCEL_DISCONNECT: return "disconnect";
    case SV_CANCEL_QUEUE_TIMEOUT: return "queue_timeout";
    case SV_CANCEL_RUN_TIMEOUT: return "run_timeout";
    default: return "other";
    }
}

int sv_sched_instances(sv_sched *s, int max, const char **devices, uint64_t *busy_ns) {
    pthread_mutex_lock(&s->mu);
    int n = s->n_inst < max ? s->n_inst : max;
    uint64_t now = sv_now_ns();
    for (int i = 0; i < n; i++) {
        devices[i] = s->inst[i].device;
        busy_ns[i] = s->inst[i].busy_ns + (s->inst[i].work ? now - s->inst[i].busy_since : 0);
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

int sv_sched_monitor(sv_sched *s, int i, int max, tdm_device_monitor *out, double *util) {
    if (i < 0 || i >= s->n_inst || max < 1) return 0;
    sv_instance *in = &s->inst[i];
    size_t nd = tdm_session_monitor_count(in->session);
    int n = nd < (size_t)max ? (int)nd : max;
    if (n > SV_MON_DEVICES) n = SV_MON_DEVICES;
    int got = 0;
    pthread_mutex_lock(&s->mu); /* the previous figures */
    for (int k = 0; k < n; k++) {
        tdm_device_monitor m;
        memset(&m, 0, sizeof m);
        tdm_status *st = tdm_session_monitor(in->session, (size_t)k, &m, sizeof m);
        if (st) {
            tdm_status_free(st);
            break;
        }
        double u = m.utilization;
        if (k < in->mon_n && m.window_ms > in->mon_window[k] && m.busy_ms >= in->mon_busy[k])
            u = (m.busy_ms - in->mon_busy[k]) / (m.window_ms - in->mon_window[k]);
        if (!(u >= 0)) u = 0; /* also NaN */
        if (u > 1) u = 1;
        in->mon_busy[k] = m.busy_ms;
        in->mon_window[k] = m.window_ms;
        out[k] = m;
        util[k] = u;
        got++;
    }
    in->mon_n = got;
    pthread_mutex_unlock(&s->mu);
    return got;
}
