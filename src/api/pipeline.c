/* User pipelines (include/tandem/pipeline.h): stages with worker threads of their own,
 * bounded FIFO queues between them, and a reorder buffer in front of the output.
 *
 * One mutex guards the whole pipeline (queues, reorder buffer, counters): the work between
 * two locks (a callback, a model run) is coarse, so the lock is never the bottleneck, and
 * one lock keeps the ordering and the end-of-stream logic easy to check. Items are linked
 * lists nodes; the queue in front of stage k and the reorder buffer are lists. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api_impl.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "tandem/pipeline.h"

#define MAX_WORKERS 64

struct tdm_pipeline_item {
    tdm_pipeline_item *next;
    const tdm_allocator *a;
    uint64_t seq;
    void *user;
    tdm_status *status;
    int failed_stage;
    size_t n, cap;
    char **names;
    tdm_tensor **tensors;
    int64_t enqueued_ns;
};

typedef struct stage {
    char *name;
    int workers;
    tdm_stage_fn fn; /* callback stage */
    void *user;
    tdm_session *session; /* model stage */
    /* the queue in front of the stage */
    tdm_pipeline_item *head, *tail;
    int count;
    bool input_done; /* nothing more will be queued */
    int active;      /* workers still running */
    pthread_cond_t cv_items, cv_space;
    pthread_t threads[MAX_WORKERS];
    int started;
    /* statistics */
    int64_t items, failed, waited;
    double busy_ms, wait_ms;
} stage;

struct tdm_pipeline {
    tdm_env *env;
    const tdm_allocator *a;
    int cap;
    tdm_output_fn on_output;
    void *on_output_user;
    stage **stages;
    size_t n_stages, cap_stages;
    pthread_mutex_t mu;
    pthread_cond_t cv_out;       /* the next item in order is ready, or the end */
    pthread_cond_t cv_out_space; /* ready items were taken */
    pthread_cond_t cv_delivered;
    bool started, closed, cancelled, freeing, start_failed;
    int workers_alive;
    uint64_t next_seq, next_out, delivered;
    tdm_pipeline_item *ready; /* reorder buffer, sorted by seq */
    pthread_t out_thread;
    bool out_started;
    int64_t start_ns;
};

tdm_status *tdm_status_create(tdm_code code, const char *fmt, ...) {
    char msg[1024] = "(no message)";
    if (fmt) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
    }
    if (code == TDM_OK) code = TDM_ERR_RUNTIME; /* a status is an error */
    return tdm_status_new(code, "%s", msg);
}

/* ---- items ---- */

tdm_status *tdm_pipeline_item_create(tdm_pipeline *p, void *user, tdm_pipeline_item **out) {
    if (!p || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_item_create: NULL argument");
    tdm_pipeline_item *it = tdm_calloc(p->a, 1, sizeof *it);
    if (!it) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a pipeline item");
    it->a = p->a;
    it->user = user;
    it->seq = UINT64_MAX;
    it->failed_stage = -1;
    *out = it;
    return NULL;
}

void tdm_pipeline_item_free(tdm_pipeline_item *it) {
    if (!it) return;
    for (size_t i = 0; i < it->n; i++) {
        tdm_free(it->a, it->names[i]);
        tdm_tensor_destroy(it->tensors[i]);
    }
    tdm_free(it->a, it->names);
    tdm_free(it->a, it->tensors);
    tdm_status_free(it->status);
    tdm_free(it->a, it);
}

uint64_t tdm_pipeline_item_sequence(const tdm_pipeline_item *it) { return it ? it->seq : UINT64_MAX; }
void *tdm_pipeline_item_user(const tdm_pipeline_item *it) { return it ? it->user : NULL; }
void tdm_pipeline_item_set_user(tdm_pipeline_item *it, void *user) {
    if (it) it->user = user;
}
const tdm_status *tdm_pipeline_item_status(const tdm_pipeline_item *it) { return it ? it->status : NULL; }
int tdm_pipeline_item_failed_stage(const tdm_pipeline_item *it) { return it ? it->failed_stage : -1; }
size_t tdm_pipeline_item_tensor_count(const tdm_pipeline_item *it) { return it ? it->n : 0; }
const char *tdm_pipeline_item_tensor_name(const tdm_pipeline_item *it, size_t i) {
    return it && i < it->n ? it->names[i] : NULL;
}

static size_t find_tensor(const tdm_pipeline_item *it, const char *name) {
    for (size_t i = 0; i < it->n; i++)
        if (!strcmp(it->names[i], name)) return i;
    return SIZE_MAX;
}

tdm_status *tdm_pipeline_item_set_tensor(tdm_pipeline_item *it, const char *name, tdm_tensor *t) {
    if (!it || !name || !t) {
        tdm_tensor_destroy(t);
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_item_set_tensor: NULL argument");
    }
    size_t i = find_tensor(it, name);
    if (i != SIZE_MAX) {
        if (it->tensors[i] != t) tdm_tensor_destroy(it->tensors[i]);
        it->tensors[i] = t;
        return NULL;
    }
    char *copy = tdm_strdup(it->a, name);
    if (copy && it->n == it->cap) {
        /* names and tensors grow together, to the same capacity */
        size_t cap = it->cap, cap2 = it->cap;
        if (tdm_grow(it->a, (void **)&it->names, &cap, it->n + 1, sizeof *it->names) ||
            tdm_grow(it->a, (void **)&it->tensors, &cap2, it->n + 1, sizeof *it->tensors)) {
            tdm_free(it->a, copy);
            copy = NULL;
        } else {
            it->cap = cap < cap2 ? cap : cap2;
        }
    }
    if (!copy) {
        tdm_tensor_destroy(t);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory attaching tensor '%s'", name);
    }
    it->names[it->n] = copy;
    it->tensors[it->n] = t;
    it->n++;
    return NULL;
}

tdm_tensor *tdm_pipeline_item_tensor(tdm_pipeline_item *it, const char *name) {
    if (!it || !name) return NULL;
    size_t i = find_tensor(it, name);
    return i == SIZE_MAX ? NULL : it->tensors[i];
}

tdm_tensor *tdm_pipeline_item_take_tensor(tdm_pipeline_item *it, const char *name) {
    if (!it || !name) return NULL;
    size_t i = find_tensor(it, name);
    if (i == SIZE_MAX) return NULL;
    tdm_tensor *t = it->tensors[i];
    tdm_free(it->a, it->names[i]);
    memmove(it->names + i, it->names + i + 1, (it->n - i - 1) * sizeof *it->names);
    memmove(it->tensors + i, it->tensors + i + 1, (it->n - i - 1) * sizeof *it->tensors);
    it->n--;
    return t;
}

/* ---- timing helpers ---- */

static void cond_init(pthread_cond_t *cv) {
    pthread_condattr_t at;
    pthread_condattr_init(&at);
    pthread_condattr_setclock(&at, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &at);
    pthread_condattr_destroy(&at);
}

static int64_t deadline_of(int timeout_ms) {
    return timeout_ms < 0 ? -1 : tdm_now_ns() + (int64_t)timeout_ms * 1000000;
}

/* Waits on cv until signalled or the deadline (< 0: none); the caller re-checks. */
static void wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t deadline) {
    if (deadline < 0) {
        pthread_cond_wait(cv, mu);
        return;
    }
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    int64_t now_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
    if (now_ns >= deadline) return;
    struct timespec ts = {(time_t)(deadline / 1000000000), (long)(deadline % 1000000000)};
    pthread_cond_timedwait(cv, mu, &ts);
}

static bool expired(int64_t deadline) {
    if (deadline < 0) return false;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec >= deadline;
}

/* ---- pipelines ---- */

tdm_status *tdm_pipeline_create(tdm_env *env, const tdm_pipeline_options *o, tdm_pipeline **out) {
    if (!env || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_create: NULL argument");
    if (o && o->api_version != TDM_API_VERSION)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_options.api_version is %d; expected %d",
                       o->api_version, TDM_API_VERSION);
    if (o && (o->queue_capacity < 0 || o->queue_capacity > 1 << 20))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "queue_capacity %d is out of range (0..%d)",
                       o->queue_capacity, 1 << 20);
    tdm_pipeline *p = tdm_calloc(env->alloc, 1, sizeof *p);
    if (!p) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a pipeline");
    p->env = env;
    p->a = env->alloc;
    p->cap = o && o->queue_capacity > 0 ? o->queue_capacity : 4;
    p->on_output = o ? o->on_output : NULL;
    p->on_output_user = o ? o->on_output_user : NULL;
    pthread_mutex_init(&p->mu, NULL);
    cond_init(&p->cv_out);
    cond_init(&p->cv_out_space);
    cond_init(&p->cv_delivered);
    *out = p;
    return NULL;
}

static tdm_status *add_stage(tdm_pipeline *p, const char *name, int workers, tdm_stage_fn fn,
                             void *user, tdm_session *session) {
    if (!p || !name) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "adding a pipeline stage: NULL argument");
    if (workers < 1 || workers > MAX_WORKERS)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "stage '%s': workers %d is out of range (1..%d)", name,
                       workers, MAX_WORKERS);
    if (p->started) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "stage '%s': the pipeline was already started", name);
    if (p->n_stages == p->cap_stages &&
        tdm_grow(p->a, (void **)&p->stages, &p->cap_stages, p->n_stages + 1, sizeof *p->stages))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding stage '%s'", name);
    stage *s = tdm_calloc(p->a, 1, sizeof *s);
    if (!s || !(s->name = tdm_strdup(p->a, name))) {
        tdm_free(p->a, s);
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory adding stage '%s'", name);
    }
    s->workers = workers;
    s->fn = fn;
    s->user = user;
    s->session = session;
    cond_init(&s->cv_items);
    cond_init(&s->cv_space);
    p->stages[p->n_stages++] = s;
    return NULL;
}

tdm_status *tdm_pipeline_add_callback_stage(tdm_pipeline *p, const char *name, int workers,
                                            tdm_stage_fn fn, void *user) {
    if (!fn) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_add_callback_stage: NULL callback");
    return add_stage(p, name, workers, fn, user, NULL);
}

tdm_status *tdm_pipeline_add_model_stage(tdm_pipeline *p, const char *name, int workers,
                                         tdm_session *session) {
    if (!session) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_add_model_stage: NULL session");
    return add_stage(p, name, workers, NULL, NULL, session);
}

/* A model stage: the item's tensors named like the model's inputs in, every output out. */
static tdm_status *run_model_stage(const tdm_allocator *a, tdm_session *s, tdm_pipeline_item *it) {
    const tdm_model *m = tdm_session_model(s);
    size_t ni = tdm_model_input_count(m), no = tdm_model_output_count(m);
    const char **names = tdm_calloc(a, ni + 1, sizeof *names);
    const tdm_tensor **ins = tdm_calloc(a, ni + 1, sizeof *ins);
    tdm_tensor **outs = tdm_calloc(a, no + 1, sizeof *outs);
    tdm_status *st = NULL;
    size_t given = 0;
    if (!names || !ins || !outs) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory in a model stage");
    for (size_t i = 0; i < ni && !st; i++) {
        tdm_value_desc d;
        if ((st = tdm_model_input(m, i, &d))) break;
        tdm_tensor *t = tdm_pipeline_item_tensor(it, d.name);
        if (!t) continue; /* the session says so if it was required */
        names[given] = d.name;
        ins[given++] = t;
    }
    if (!st) st = tdm_session_run(s, given, names, ins, no, NULL, outs);
    if (!st) {
        for (size_t i = 0; i < given; i++) tdm_tensor_destroy(tdm_pipeline_item_take_tensor(it, names[i]));
        for (size_t o = 0; o < no && !st; o++) {
            tdm_value_desc d;
            st = tdm_model_output(m, o, &d);
            if (!st) st = tdm_pipeline_item_set_tensor(it, d.name, outs[o]);
            else tdm_tensor_destroy(outs[o]);
            outs[o] = NULL;
        }
        for (size_t o = 0; o < no; o++) tdm_tensor_destroy(outs[o]);
    }
    tdm_free(a, names);
    tdm_free(a, ins);
    tdm_free(a, outs);
    return st;
}

static void ready_insert(tdm_pipeline *p, tdm_pipeline_item *it) {
    tdm_pipeline_item **pp = &p->ready;
    while (*pp && (*pp)->seq < it->seq) pp = &(*pp)->next;
    it->next = *pp;
    *pp = it;
}

/* Items in the reorder buffer that can be delivered now (consecutive from next_out). */
static int ready_in_order(const tdm_pipeline *p) {
    int n = 0;
    for (const tdm_pipeline_item *it = p->ready; it && it->seq == p->next_out + (uint64_t)n; it = it->next) n++;
    return n;
}

typedef struct worker_arg {
    tdm_pipeline *p;
    size_t k;
} worker_arg;

static void *worker_main(void *arg) {
    worker_arg *wa = arg;
    tdm_pipeline *p = wa->p;
    size_t k = wa->k;
    tdm_free(p->a, wa);
    stage *s = p->stages[k];
    stage *next = k + 1 < p->n_stages ? p->stages[k + 1] : NULL;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!s->head && !s->input_done) pthread_cond_wait(&s->cv_items, &p->mu);
        if (!s->head) break;
        tdm_pipeline_item *it = s->head;
        s->head = it->next;
        if (!s->head) s->tail = NULL;
        it->next = NULL;
        s->count--;
        pthread_cond_broadcast(&s->cv_space);
        s->wait_ms += (double)(tdm_now_ns() - it->enqueued_ns) / 1e6;
        s->waited++;
        bool run = !it->status && !p->cancelled;
        if (!it->status && p->cancelled) {
            it->status = TDM_ERR(TDM_ERR_RUNTIME, "cancelled before stage '%s'", s->name);
            it->failed_stage = (int)k;
        }
        pthread_mutex_unlock(&p->mu);
        tdm_status *st = NULL;
        double ms = 0;
        if (run) {
            int64_t t0 = tdm_now_ns();
            st = s->fn ? s->fn(s->user, it) : run_model_stage(p->a, s->session, it);
            ms = (double)(tdm_now_ns() - t0) / 1e6;
        }
        pthread_mutex_lock(&p->mu);
        if (run) {
            s->items++;
            s->busy_ms += ms;
            if (st) {
                s->failed++;
                it->status = tdm_status_wrap(st, "stage '%s': ", s->name);
                it->failed_stage = (int)k;
            }
        }
        if (next) {
            while (next->count >= p->cap && !p->freeing) pthread_cond_wait(&next->cv_space, &p->mu);
            it->enqueued_ns = tdm_now_ns();
            if (next->tail) next->tail->next = it;
            else next->head = it;
            next->tail = it;
            next->count++;
            pthread_cond_signal(&next->cv_items);
        } else {
            /* finished items nobody takes hold the last stage back (back-pressure) */
            while (ready_in_order(p) >= p->cap && !p->freeing) pthread_cond_wait(&p->cv_out_space, &p->mu);
            ready_insert(p, it);
            pthread_cond_broadcast(&p->cv_out);
        }
    }
    if (--s->active == 0 && next) {
        next->input_done = true;
        pthread_cond_broadcast(&next->cv_items);
    }
    p->workers_alive--;
    pthread_cond_broadcast(&p->cv_out);
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

/* The delivery thread of the callback form: items in order to on_output. */
static void *output_main(void *arg) {
    tdm_pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        /* the end: everything delivered, or (freeing) no worker left to finish the rest */
        while (!(p->ready && p->ready->seq == p->next_out) && !(p->closed && p->delivered == p->next_seq) &&
               !(p->freeing && p->workers_alive == 0))
            pthread_cond_wait(&p->cv_out, &p->mu);
        if (!(p->ready && p->ready->seq == p->next_out)) break;
        tdm_pipeline_item *it = p->ready;
        p->ready = it->next;
        it->next = NULL;
        p->next_out++;
        pthread_cond_broadcast(&p->cv_out_space);
        pthread_mutex_unlock(&p->mu);
        p->on_output(p->on_output_user, it);
        pthread_mutex_lock(&p->mu);
        p->delivered++;
        pthread_cond_broadcast(&p->cv_delivered);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

tdm_status *tdm_pipeline_start(tdm_pipeline *p) {
    if (!p) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_start: NULL pipeline");
    if (p->started) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the pipeline was already started");
    if (!p->n_stages) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the pipeline has no stages");
    tdm_status *st = NULL;
    pthread_mutex_lock(&p->mu);
    p->started = true;
    p->start_ns = tdm_now_ns();
    for (size_t k = 0; k < p->n_stages && !st; k++) {
        stage *s = p->stages[k];
        for (int w = 0; w < s->workers && !st; w++) {
            worker_arg *wa = tdm_calloc(p->a, 1, sizeof *wa);
            if (!wa) {
                st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory starting stage '%s'", s->name);
                break;
            }
            wa->p = p;
            wa->k = k;
            if (pthread_create(&s->threads[w], NULL, worker_main, wa) != 0) {
                tdm_free(p->a, wa);
                st = TDM_ERR(TDM_ERR_RUNTIME, "cannot start a worker thread of stage '%s'", s->name);
                break;
            }
            s->started++;
            s->active++;
            p->workers_alive++;
        }
    }
    if (st) p->start_failed = true;
    if (!st && p->on_output) {
        if (pthread_create(&p->out_thread, NULL, output_main, p) != 0)
            st = TDM_ERR(TDM_ERR_RUNTIME, "cannot start the pipeline's output thread");
        else
            p->out_started = true;
    }
    pthread_mutex_unlock(&p->mu);
    /* on failure the pipeline is left closed: tdm_pipeline_free stops what started */
    if (st) tdm_pipeline_cancel(p);
    return st;
}

tdm_status *tdm_pipeline_submit(tdm_pipeline *p, tdm_pipeline_item *it, int timeout_ms, uint64_t *seq) {
    if (!p || !it) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_submit: NULL argument");
    if (it->a != p->a) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the item belongs to another environment");
    int64_t deadline = deadline_of(timeout_ms);
    stage *s0 = p->n_stages ? p->stages[0] : NULL;
    tdm_status *st = NULL;
    pthread_mutex_lock(&p->mu);
    if (!p->started) {
        st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the pipeline was not started");
    } else {
        while (!p->closed && s0->count >= p->cap && !expired(deadline)) wait_until(&s0->cv_space, &p->mu, deadline);
        if (p->closed) st = TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the pipeline is closed");
        else if (s0->count >= p->cap) st = TDM_ERR(TDM_ERR_LIMIT, "timed out after %d ms: the pipeline is full", timeout_ms);
    }
    if (!st) {
        it->seq = p->next_seq++;
        it->next = NULL;
        it->enqueued_ns = tdm_now_ns();
        if (s0->tail) s0->tail->next = it;
        else s0->head = it;
        s0->tail = it;
        s0->count++;
        pthread_cond_signal(&s0->cv_items);
        if (seq) *seq = it->seq;
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

tdm_status *tdm_pipeline_receive(tdm_pipeline *p, int timeout_ms, tdm_pipeline_item **out) {
    if (!p || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_receive: NULL argument");
    if (p->on_output) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the pipeline delivers through its on_output callback");
    int64_t deadline = deadline_of(timeout_ms);
    tdm_status *st = NULL;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        if (p->ready && p->ready->seq == p->next_out) {
            tdm_pipeline_item *it = p->ready;
            p->ready = it->next;
            it->next = NULL;
            p->next_out++;
            p->delivered++;
            pthread_cond_broadcast(&p->cv_out_space);
            pthread_cond_broadcast(&p->cv_delivered);
            *out = it;
            break;
        }
        if (p->closed && p->delivered == p->next_seq) {
            *out = NULL; /* the end */
            break;
        }
        if (expired(deadline)) {
            st = TDM_ERR(TDM_ERR_LIMIT, "timed out after %d ms waiting for the pipeline's output", timeout_ms);
            break;
        }
        wait_until(&p->cv_out, &p->mu, deadline);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void tdm_pipeline_close(tdm_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->closed = true;
    if (p->n_stages) {
        p->stages[0]->input_done = true;
        pthread_cond_broadcast(&p->stages[0]->cv_items);
        pthread_cond_broadcast(&p->stages[0]->cv_space);
    }
    pthread_cond_broadcast(&p->cv_out);
    pthread_mutex_unlock(&p->mu);
}

tdm_status *tdm_pipeline_drain(tdm_pipeline *p, int timeout_ms) {
    if (!p) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_drain: NULL pipeline");
    tdm_pipeline_close(p);
    int64_t deadline = deadline_of(timeout_ms);
    tdm_status *st = NULL;
    pthread_mutex_lock(&p->mu);
    while (p->delivered < p->next_seq) {
        if (expired(deadline)) {
            st = TDM_ERR(TDM_ERR_LIMIT, "timed out after %d ms draining the pipeline (%llu of %llu delivered)",
                         timeout_ms, (unsigned long long)p->delivered, (unsigned long long)p->next_seq);
            break;
        }
        wait_until(&p->cv_delivered, &p->mu, deadline);
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

void tdm_pipeline_cancel(tdm_pipeline *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->cancelled = true;
    pthread_mutex_unlock(&p->mu);
    tdm_pipeline_close(p);
}

void tdm_pipeline_free(tdm_pipeline *p) {
    if (!p) return;
    tdm_pipeline_cancel(p);
    pthread_mutex_lock(&p->mu);
    p->freeing = true; /* nothing waits for room any more: nobody will receive */
    pthread_cond_broadcast(&p->cv_out_space);
    pthread_cond_broadcast(&p->cv_out);
    for (size_t k = 0; k < p->n_stages; k++) {
        stage *s = p->stages[k];
        /* a start that failed may have left a stage without workers: the ones after it
         * would wait for its end forever */
        if (p->start_failed) s->input_done = true;
        pthread_cond_broadcast(&s->cv_space);
        pthread_cond_broadcast(&s->cv_items);
    }
    pthread_mutex_unlock(&p->mu);
    for (size_t k = 0; k < p->n_stages; k++)
        for (int w = 0; w < p->stages[k]->started; w++) pthread_join(p->stages[k]->threads[w], NULL);
    if (p->out_started) pthread_join(p->out_thread, NULL);
    while (p->ready) {
        tdm_pipeline_item *it = p->ready;
        p->ready = it->next;
        tdm_pipeline_item_free(it);
    }
    for (size_t k = 0; k < p->n_stages; k++) {
        stage *s = p->stages[k];
        while (s->head) { /* only after a start that failed */
            tdm_pipeline_item *it = s->head;
            s->head = it->next;
            tdm_pipeline_item_free(it);
        }
        pthread_cond_destroy(&s->cv_items);
        pthread_cond_destroy(&s->cv_space);
        tdm_free(p->a, s->name);
        tdm_free(p->a, s);
    }
    tdm_free(p->a, p->stages);
    pthread_cond_destroy(&p->cv_out);
    pthread_cond_destroy(&p->cv_out_space);
    pthread_cond_destroy(&p->cv_delivered);
    pthread_mutex_destroy(&p->mu);
    tdm_free(p->a, p);
}

size_t tdm_pipeline_stage_count(const tdm_pipeline *p) { return p ? p->n_stages : 0; }

tdm_status *tdm_pipeline_stage_stats(tdm_pipeline *p, size_t index, tdm_stage_stats *out) {
    if (!p || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_pipeline_stage_stats: NULL argument");
    if (index >= p->n_stages) return TDM_ERR(TDM_ERR_NOT_FOUND, "the pipeline has no stage %zu", index);
    pthread_mutex_lock(&p->mu);
    const stage *s = p->stages[index];
    double elapsed_ms = p->started ? (double)(tdm_now_ns() - p->start_ns) / 1e6 : 0;
    tdm_stage_stats r = {s->name, s->workers, s->items, s->failed, s->busy_ms, 0, 0, 0, s->count};
    if (elapsed_ms > 0) {
        r.utilisation = s->busy_ms / (elapsed_ms * s->workers);
        if (r.utilisation > 1) r.utilisation = 1;
        r.items_per_s = (double)s->items / (elapsed_ms / 1e3);
    }
    r.queue_wait_ms = s->waited ? s->wait_ms / (double)s->waited : 0;
    pthread_mutex_unlock(&p->mu);
    *out = r;
    return NULL;
}
