#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "core/alloc.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/strlist.h"
#include "sched/monitor.h"
#include "sched/plan_access.h"
#include "sched/strategy.h"

struct async_job {
    async_job *next;
    const tdm_tensor **inputs; /* per graph input, NULL = default */
    size_t n_outputs;
    int *out_index;            /* graph output index per requested output */
    tdm_run_callback cb;
    void *user;
    tdm_run_id id;
    tdm_run_ctl ctl;           /* stop request: the flag tdm_session_cancel sets, the deadline */
};

static tdm_status *parse_devices(tdm_session *s, const char *list, bool no_fallback) {
    if (!list || !list[0]) list = "cpu";
    char buf[512];
    if (strlen(list) >= sizeof buf) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "device list is too long");
    snprintf(buf, sizeof buf, "%s", list);
    char *save = NULL;
    for (char *tok = tdm_list_next(buf, &save); tok; tok = tdm_list_next(NULL, &save)) {
        tdm_device *d = tdm_env_find_device(s->env, tok);
        if (!d) {
            char reasons[600] = "";
            size_t pos = 0;
            for (size_t i = 0; i < tdm_env_unavailable_count(s->env); i++) {
                const char *r = tdm_env_unavailable_reason(s->env, i);
                if (strncmp(r, tok, strcspn(tok, ":")) == 0 && pos < sizeof reasons)
                    pos += (size_t)snprintf(reasons + pos, sizeof reasons - pos, " (%s)", r);
            }
            char have[200] = "";
            pos = 0;
            for (int i = 0; i < s->env->n_devices && pos < sizeof have; i++)
                pos += (size_t)snprintf(have + pos, sizeof have - pos, "%s%s", i ? ", " : "",
                                        s->env->devices[i]->name);
            return TDM_ERR(TDM_ERR_DEVICE, "device '%s' is not available%s; available: %s", tok,
                           reasons, have);
        }
        bool dup = false;
        for (int i = 0; i < s->n_devices; i++)
            if (s->devices[i] == d) dup = true;
        if (dup) continue;
        if (s->n_devices == TDM_MAX_DEVICES) return TDM_ERR(TDM_ERR_LIMIT, "too many devices");
        s->devices[s->n_devices++] = d;
    }
    if (s->n_devices == 0) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the device list is empty");
    (void)no_fallback;
    return NULL;
}

/* tdm_session_options.precision: checked here, then handed to the session's devices that
 * take settings (tdm_device_iface.configure; the CPU takes bf16 and fp32). The setting belongs to the
 * device, which the environment's sessions share: the last session created with a
 * precision sets it for all. */
static tdm_status *configure_precision(tdm_session *s, const char *precision) {
    if (!precision) return NULL;
    static const char *const known[] = {"fp32", "tf32", "fp16", "bf16"};
    bool ok = false;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(precision, known[i]) == 0) ok = true;
    if (!ok)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "precision '%s' is not one of fp32, tf32, fp16, "
                       "bf16", precision);
    /* A device that cannot take it (the cpu without AVX512_BF16 for bf16) fails the session
     * when it is the only device; next to another one (cuda:0,cpu) it stays in fp32 with a
     * warning, as the CPU takes only what the accelerator lacks. */
    for (int i = 0; i < s->n_devices; i++) {
        tdm_status *st = tdm_device_configure(s->devices[i], "precision", precision);
        if (st && s->n_devices > 1 && tdm_status_code(st) == TDM_ERR_UNSUPPORTED) {
            tdm_log(&s->env->log, TDM_LOG_WARN, "%s: %s (that device stays in fp32)",
                    s->devices[i]->name, tdm_status_message(st));
            tdm_status_free(st);
            tdm_status_free(tdm_device_configure(s->devices[i], "precision", "fp32"));
            continue;
        }
        if (st) return st;
    }
    return NULL;
}

/* The model's graph without the optimisation passes, loaded once: every strategy makes its
 * plans from it (copies for replicas and pipeline stages). *hash: of the bytes, keying stored
 * measurements. */
static tdm_status *load_model(tdm_session *s, const void *data, size_t size, const char *base_dir,
                              tdm_onnx_model **m_out, uint64_t *hash) {
    TDM_TRY(tdm_onnx_load_buffer_ex(data, size, base_dir, s->map_weights ? TDM_ONNX_MAP_EXTERNAL : 0,
                                    s->env->alloc, m_out));
    tdm_onnx_log_lenient(*m_out, "the model", &s->env->log);
    uint64_t h = tdm_hash_bytes(TDM_HASH_INIT, data, size);
    *hash = h ? h : 1;
    return NULL;
}

/* A session without a model yet: options checked, devices found and configured, threads. */
static tdm_status *session_new(tdm_env *env, const tdm_session_options *o, tdm_session **out) {
    if (o->api_version != TDM_API_VERSION)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_options.api_version is %d; expected %d",
                       o->api_version, TDM_API_VERSION);
    if (o->mode != TDM_MODE_LATENCY && o->mode != TDM_MODE_THROUGHPUT && o->mode != TDM_MODE_PIPELINE)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_options.mode %d is unknown", o->mode);
    tdm_session *s = tdm_calloc(env->alloc, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory creating a session");
    s->env = env;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_cond_init(&s->idle_cv, NULL);
    /* an option that is set (negative: none) wins over the environment's setting */
    s->loop.max_iterations = o->loop_max_iterations > 0   ? o->loop_max_iterations
                             : o->loop_max_iterations < 0 ? 0
                                                          : env->settings.loop_max_iterations;
    s->loop.timeout_ms = o->loop_timeout_ms > 0   ? o->loop_timeout_ms
                         : o->loop_timeout_ms < 0 ? 0
                                                  : env->settings.loop_timeout_ms;
    tdm_status *st = parse_devices(s, o->devices, o->no_fallback);
    if (!st) st = tdm_residency_mapped(o->residency, &s->map_weights); /* loader flag */
    if (!st) st = configure_precision(s, o->precision);
    if (!st)
        st = tdm_threadpool_create(o->threads > 0 ? o->threads : env->threads,
                                   env->settings.spin_us, &s->pool);
    if (st) {
        tdm_session_free(s);
        return st;
    }
    *out = s;
    return NULL;
}

/* tdm_session_options.free_dims: every input dimension whose symbolic name (dim_param) is
 * listed takes the listed size, before any pass sees the graph. */
static tdm_status *fix_free_dims(tdm_graph *g, const char *spec, int mode) {
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "free_dims is too long");
    if (mode != TDM_MODE_LATENCY)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "free_dims needs the latency mode (the other "
                       "modes cut a run's batch into parts of other sizes)");
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    for (char *item = tdm_list_next(buf, &save); item; item = tdm_list_next(NULL, &save)) {
        char *eq = strchr(item, '='), *end = NULL;
        if (!eq || eq == item)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "free_dims item '%s' is not NAME=SIZE", item);
        *eq = 0;
        for (char *t = eq - 1; t > item && *t == ' '; t--) *t = 0; /* "NAME = SIZE" */
        long long size = strtoll(eq + 1, &end, 10);
        if (end == eq + 1 || *end || size < 1 || size > INT32_MAX)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "free_dims: the size of '%s' is not a whole "
                           "number from 1 to %d", item, INT32_MAX);
        int hits = 0;
        for (size_t i = 0; i < g->n_inputs; i++) {
            tdm_value *v = &g->values[g->inputs[i]];
            for (int d = 0; d < v->rank; d++)
                if (v->dim_params[d] && !strcmp(v->dim_params[d], item)) {
                    v->dims[d] = (int64_t)size;
                    hits++;
                }
        }
        if (!hits)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "free_dims: no input of the model has a "
                           "dimension named '%s'", item);
    }
    return NULL;
}

/* Gives the loaded model m to s's run strategy (sched/strategy.h; its graph to the
 * strategy's plans) and describes it. Frees s on failure; m is taken either way. */
static tdm_status *session_finish(tdm_session *s, const tdm_session_options *o, tdm_onnx_model *m,
                                  uint64_t hash, tdm_session **out) {
    tdm_env *env = s->env;
    tdm_status *st = NULL;
    if (o->free_dims && o->free_dims[0]) { /* (measurements of the fixed graph apart) */
        st = fix_free_dims(m->graph, o->free_dims, o->mode);
        hash = tdm_hash_str(hash, o->free_dims);
        if (!hash) hash = 1;
    }
    tdm_strategy_setup su = {env->alloc, &env->log, env, s->pool, s->devices, s->n_devices, o, hash,
                             &env->settings, s->loop};
    tdm_graph *g = m->graph;
    m->graph = NULL;
    if (!st) st = tdm_strategy_create(&su, g, &s->strategy);
    else tdm_graph_free(g);
    /* device counters (issue 9 monitoring): one set shared by every plan of the session */
    if (!st && !(st = tdm_monitor_create(env->alloc, &s->monitor))) tdm_strategy_set_monitor(s->strategy, s->monitor);
    if (!st) {
        m->graph = tdm_plan_graph(tdm_strategy_plan(s->strategy));
        st = tdm_model_wrap(env, m, true, &s->model);
    }
    if (st) {
        m->graph = NULL; /* the plan's, if any */
        tdm_onnx_model_free(m);
        tdm_session_free(s);
        return st;
    }
    *out = s;
    return NULL;
}

static const tdm_session_options default_options = {TDM_API_VERSION, NULL, 0, 1, false, NULL, NULL,
                                                    false, 0, 0, false};

tdm_status *tdm_session_create(tdm_env *env, const char *path, const tdm_session_options *o,
                               tdm_session **out) {
    return tdm_session_create_edited(env, path, o, NULL, NULL, out);
}

tdm_status *tdm_session_create_edited(tdm_env *env, const char *path, const tdm_session_options *o,
                                      tdm_graph_edit_fn edit, void *user, tdm_session **out) {
    if (!env || !path || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_create: NULL argument");
    if (!o) o = &default_options;
    tdm_session *s = NULL;
    tdm_status *st = session_new(env, o, &s);
    if (st) return tdm_status_wrap(st, "'%s': ", path);
    void *data = NULL;
    size_t size = 0;
    tdm_onnx_model *m = NULL;
    uint64_t hash = 0;
    char dir[PATH_MAX];
    st = tdm_read_file(path, env->alloc, TDM_MAX_MODEL_BYTES, &data, &size);
    if (!st) st = load_model(s, data, size, tdm_path_dir(path, dir, sizeof dir), &m, &hash);
    tdm_free(env->alloc, data); /* parsed once: the IR is all the session keeps */
    if (!st && edit) {
        st = edit(m->graph, user);
        hash = tdm_hash_str(hash, "edited"); /* measurements of the edited graph apart */
        if (!hash) hash = 1;
    }
    if (st) {
        tdm_onnx_model_free(m);
        tdm_session_free(s);
        return tdm_status_wrap(st, "'%s': ", path);
    }
    return tdm_status_wrap(session_finish(s, o, m, hash, out), "'%s': ", path);
}

tdm_status *tdm_session_create_from_buffer(tdm_env *env, const void *data, size_t size,
                                           const char *base_dir, const tdm_session_options *o,
                                           tdm_session **out) {
    if (!env || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_create_from_buffer: NULL argument");
    if (!o) o = &default_options;
    tdm_session *s = NULL;
    TDM_TRY(session_new(env, o, &s));
    tdm_onnx_model *m = NULL;
    uint64_t hash = 0;
    tdm_status *st = load_model(s, data, size, base_dir, &m, &hash);
    if (st) {
        tdm_session_free(s);
        return st;
    }
    return session_finish(s, o, m, hash, out);
}

const tdm_model *tdm_session_model(const tdm_session *s) { return s ? s->model : NULL; }

/* The graph whose inputs and outputs a run names: the strategy's plan's. */
static const tdm_graph *session_graph(const tdm_session *s) {
    return tdm_plan_graph(tdm_strategy_plan(s->strategy));
}

/* Maps names to graph input/output positions. */
static tdm_status *bind(tdm_session *s, size_t n_inputs, const char *const *input_names,
                        const tdm_tensor *const *inputs, size_t n_outputs,
                        const char *const *output_names, const tdm_tensor **by_input,
                        int *out_index) {
    const tdm_graph *g = session_graph(s);
    for (size_t i = 0; i < n_inputs; i++) {
        if (!input_names || !input_names[i] || !inputs || !inputs[i])
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input %zu: NULL name or tensor", i);
        size_t j = 0;
        while (j < g->n_inputs && strcmp(g->values[g->inputs[j]].name, input_names[i])) j++;
        if (j == g->n_inputs)
            return TDM_ERR(TDM_ERR_NOT_FOUND, "the model has no input named '%s'", input_names[i]);
        if (by_input[j])
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "input '%s' is given twice", input_names[i]);
        by_input[j] = inputs[i];
    }
    if (!output_names) {
        if (n_outputs != g->n_outputs)
            return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "without output names, n_outputs must equal "
                           "the model's %zu outputs", g->n_outputs);
        for (size_t i = 0; i < n_outputs; i++) out_index[i] = (int)i;
        return NULL;
    }
    for (size_t i = 0; i < n_outputs; i++) {
        if (!output_names[i]) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "output name %zu is NULL", i);
        size_t j = 0;
        while (j < g->n_outputs && strcmp(g->values[g->outputs[j]].name, output_names[i])) j++;
        if (j == g->n_outputs)
            return TDM_ERR(TDM_ERR_NOT_FOUND, "the model has no output named '%s'", output_names[i]);
        out_index[i] = (int)j;
    }
    return NULL;
}

static tdm_status *run_bound(tdm_session *s, const tdm_tensor **by_input, size_t n_outputs,
                             const int *out_index, tdm_tensor **outputs, const tdm_run_ctl *ctl) {
    const tdm_graph *g = session_graph(s);
    const tdm_allocator *a = s->env->alloc;
    tdm_tensor *all_stack[16] = {0}; /* small models: no allocation on the run path */
    tdm_tensor **all = g->n_outputs <= 16 ? all_stack : tdm_calloc(a, g->n_outputs, sizeof *all);
    if (!all) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    tdm_status *st = tdm_strategy_run(s->strategy, by_input, all, ctl);
    size_t done = 0;
    if (!st) {
        for (; done < n_outputs; done++) {
            int j = out_index[done];
            if (all[j]) {
                outputs[done] = all[j];
                all[j] = NULL;
            } else { /* the same output asked for twice: copy the first */
                size_t k = 0;
                while (out_index[k] != j) k++;
                if ((st = tdm_tensor_clone(a, outputs[k], &outputs[done]))) break;
            }
        }
    }
    if (st)
        for (size_t i = 0; i < done; i++) {
            tdm_tensor_destroy(outputs[i]);
            outputs[i] = NULL;
        }
    for (size_t j = 0; j < g->n_outputs; j++) tdm_tensor_destroy(all[j]);
    if (all != all_stack) tdm_free(a, all);
    return st;
}

static tdm_status *run_sync(tdm_session *s, size_t n_inputs, const char *const *input_names,
                           const tdm_tensor *const *inputs, size_t n_outputs,
                           const char *const *output_names, tdm_tensor **outputs,
                           const tdm_run_ctl *ctl) {
    const tdm_graph *g = session_graph(s);
    const tdm_allocator *a = s->env->alloc;
    const tdm_tensor *in_stack[16] = {0}; /* small models: no allocation on the run path */
    int out_stack[16] = {0};
    const tdm_tensor **by_input = g->n_inputs < 16 ? in_stack
                                                    : tdm_calloc(a, g->n_inputs + 1, sizeof *by_input);
    int *out_index = n_outputs < 16 ? out_stack : tdm_calloc(a, n_outputs + 1, sizeof *out_index);
    tdm_status *st = NULL;
    if (!by_input || !out_index) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st) st = bind(s, n_inputs, input_names, inputs, n_outputs, output_names, by_input, out_index);
    if (!st) st = run_bound(s, by_input, n_outputs, out_index, outputs, ctl);
    if (by_input != in_stack) tdm_free(a, by_input);
    if (out_index != out_stack) tdm_free(a, out_index);
    return st;
}

tdm_status *tdm_session_run(tdm_session *s, size_t n_inputs, const char *const *input_names,
                            const tdm_tensor *const *inputs, size_t n_outputs,
                            const char *const *output_names, tdm_tensor **outputs) {
    if (!s || (n_outputs && !outputs))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_run: NULL argument");
    return run_sync(s, n_inputs, input_names, inputs, n_outputs, output_names, outputs, NULL);
}

/* ---- asynchronous runs ----
 *
 * One worker thread per session takes jobs from a FIFO. Cancellation (tdm_session_cancel):
 * every job is in exactly one place, guarded by s->mu: the queue, s->running (the worker runs
 * it), or nowhere (its callback is being called). Whoever takes a job out of the queue under
 * the lock (the worker to run it, a canceller to drop it) delivers its callback, once. A
 * running job is cancelled by setting its ctl flag under the lock; the worker clears
 * s->running under the same lock when the run returns and reads the flag there, so a cancel
 * that returned true always ends in TDM_ERR_CANCELLED, and one that comes later finds nothing.
 * Ids are never reused, so a cancel after completion is a no-op. */

static void job_free(const tdm_allocator *a, async_job *j) {
    tdm_free(a, j->inputs);
    tdm_free(a, j->out_index);
    tdm_free(a, j);
}

/* Calls the callback of a job that is in no list any more, frees it and counts it done. */
static void job_finish(tdm_session *s, async_job *j, tdm_status *st, tdm_tensor **outs) {
    if (st) j->cb(j->user, st, 0, NULL);
    else j->cb(j->user, NULL, j->n_outputs, outs);
    job_free(s->env->alloc, j);
    pthread_mutex_lock(&s->mu);
    if (--s->pending == 0) pthread_cond_broadcast(&s->idle_cv);
    pthread_mutex_unlock(&s->mu);
}

static void *async_main(void *vp) {
    tdm_session *s = vp;
    const tdm_allocator *a = s->env->alloc;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (!s->head && !s->stopping) pthread_cond_wait(&s->cv, &s->mu);
        if (!s->head) break;
        async_job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->running = j;
        pthread_mutex_unlock(&s->mu);
        /* a deadline that passed in the queue ends the run before it starts */
        tdm_status *st = tdm_run_ctl_check(&j->ctl);
        tdm_tensor **outs = NULL;
        if (!st) {
            outs = tdm_calloc(a, j->n_outputs + 1, sizeof *outs);
            st = outs ? run_bound(s, j->inputs, j->n_outputs, j->out_index, outs, &j->ctl)
                      : TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
        }
        pthread_mutex_lock(&s->mu);
        s->running = NULL; /* from here a cancel no longer finds the job */
        bool cancelled = __atomic_load_n(&j->ctl.cancelled, __ATOMIC_ACQUIRE);
        pthread_mutex_unlock(&s->mu);
        if (cancelled && tdm_status_code(st) != TDM_ERR_CANCELLED) {
            /* the cancel came after the last check: the promise of tdm_session_cancel */
            if (!st)
                for (size_t i = 0; i < j->n_outputs; i++) tdm_tensor_destroy(outs[i]);
            tdm_status_free(st);
            st = TDM_ERR(TDM_ERR_CANCELLED, "the run was cancelled");
        }
        job_finish(s, j, st, outs);
        tdm_free(a, outs);
        pthread_mutex_lock(&s->mu);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static tdm_status *run_options_get(const tdm_run_options *o, int64_t *timeout_ms) {
    *timeout_ms = 0;
    if (!o) return NULL;
    size_t need = offsetof(tdm_run_options, timeout_ms) + sizeof o->timeout_ms;
    if (o->struct_size < sizeof o->struct_size)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_run_options.struct_size is %zu; set it to "
                       "sizeof(tdm_run_options)", o->struct_size);
    if (o->struct_size >= need) *timeout_ms = o->timeout_ms;
    if (*timeout_ms < 0)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_run_options.timeout_ms is %lld; it must be "
                       ">= 0 (0 = none)", (long long)*timeout_ms);
    return NULL;
}

/* A stop request with the deadline of timeout_ms from now (0 = none). */
static void ctl_init(tdm_run_ctl *c, int64_t timeout_ms) {
    memset(c, 0, sizeof *c);
    c->timeout_ms = timeout_ms;
    int64_t ns;
    if (timeout_ms > 0 &&
        (__builtin_mul_overflow(timeout_ms, (int64_t)1000000, &ns) ||
         __builtin_add_overflow(tdm_now_ns(), ns, &c->deadline_ns)))
        c->deadline_ns = 0; /* beyond the clock's range: none */
}

tdm_status *tdm_session_run_ctl(const tdm_run_options *options, tdm_run_ctl *ctl, bool *has) {
    int64_t timeout_ms;
    TDM_TRY(run_options_get(options, &timeout_ms));
    ctl_init(ctl, timeout_ms);
    *has = timeout_ms != 0;
    return NULL;
}

tdm_status *tdm_session_run_ex(tdm_session *s, size_t n_inputs, const char *const *input_names,
                               const tdm_tensor *const *inputs, size_t n_outputs,
                               const char *const *output_names, const tdm_run_options *options,
                               tdm_tensor **outputs) {
    if (!s || (n_outputs && !outputs))
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_run_ex: NULL argument");
    int64_t timeout_ms;
    TDM_TRY(run_options_get(options, &timeout_ms));
    tdm_run_ctl ctl;
    ctl_init(&ctl, timeout_ms);
    return run_sync(s, n_inputs, input_names, inputs, n_outputs, output_names, outputs,
                    timeout_ms ? &ctl : NULL);
}

tdm_status *tdm_session_run_async_ex(tdm_session *s, size_t n_inputs, const char *const *input_names,
                                     const tdm_tensor *const *inputs, size_t n_outputs,
                                     const char *const *output_names,
                                     const tdm_run_options *options, tdm_run_callback cb,
                                     void *user, tdm_run_id *id) {
    if (!s || !cb) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_run_async: NULL argument");
    int64_t timeout_ms;
    TDM_TRY(run_options_get(options, &timeout_ms));
    const tdm_allocator *a = s->env->alloc;
    const tdm_graph *g = session_graph(s);
    async_job *j = tdm_calloc(a, 1, sizeof *j);
    tdm_status *st = NULL;
    if (!j) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    j->inputs = tdm_calloc(a, g->n_inputs + 1, sizeof *j->inputs);
    j->out_index = tdm_calloc(a, n_outputs + 1, sizeof *j->out_index);
    j->n_outputs = n_outputs;
    j->cb = cb;
    j->user = user;
    ctl_init(&j->ctl, timeout_ms);
    if (!j->inputs || !j->out_index) st = TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory");
    if (!st) st = bind(s, n_inputs, input_names, inputs, n_outputs, output_names, j->inputs, j->out_index);
    if (!st) {
        pthread_mutex_lock(&s->mu);
        if (!s->worker_started) {
            if (pthread_create(&s->worker, NULL, async_main, s) != 0)
                st = TDM_ERR(TDM_ERR_RUNTIME, "cannot start the session's worker thread");
            else
                s->worker_started = true;
        }
        if (!st) {
            j->id = ++s->next_id;
            if (id) *id = j->id;
            if (s->tail) s->tail->next = j;
            else s->head = j;
            s->tail = j;
            s->pending++;
            pthread_cond_signal(&s->cv);
        }
        pthread_mutex_unlock(&s->mu);
    }
    if (st) job_free(a, j);
    return st;
}

tdm_status *tdm_session_run_async(tdm_session *s, size_t n_inputs, const char *const *input_names,
                                  const tdm_tensor *const *inputs, size_t n_outputs,
                                  const char *const *output_names, tdm_run_callback cb,
                                  void *user) {
    return tdm_session_run_async_ex(s, n_inputs, input_names, inputs, n_outputs, output_names, NULL,
                                    cb, user, NULL);
}

/* Takes the queued jobs `id` (or all when all) out of the queue into *dropped and flags the
 * running one. mu held. Returns how many were caught. */
static size_t cancel_locked(tdm_session *s, tdm_run_id id, bool all, async_job **dropped) {
    size_t n = 0;
    async_job **link = &s->head, *prev = NULL;
    while (*link) {
        async_job *j = *link;
        if (all || j->id == id) {
            *link = j->next;
            if (s->tail == j) s->tail = prev;
            j->next = *dropped;
            *dropped = j;
            n++;
            if (!all) return n;
        } else {
            prev = j;
            link = &j->next;
        }
    }
    async_job *r = s->running;
    if (r && (all || r->id == id) && !__atomic_load_n(&r->ctl.cancelled, __ATOMIC_RELAXED)) {
        __atomic_store_n(&r->ctl.cancelled, 1, __ATOMIC_RELEASE);
        n++;
    }
    return n;
}

/* Delivers TDM_ERR_CANCELLED to jobs taken out of the queue (no lock held). */
static void finish_dropped(tdm_session *s, async_job *dropped) {
    /* in queue order: the list was built reversed */
    async_job *rev = NULL;
    while (dropped) {
        async_job *next = dropped->next;
        dropped->next = rev;
        rev = dropped;
        dropped = next;
    }
    while (rev) {
        async_job *next = rev->next;
        job_finish(s, rev, TDM_ERR(TDM_ERR_CANCELLED, "the run was cancelled before it started"),
                   NULL);
        rev = next;
    }
}

bool tdm_session_cancel(tdm_session *s, tdm_run_id id) {
    if (!s || !id) return false;
    async_job *dropped = NULL;
    pthread_mutex_lock(&s->mu);
    size_t n = cancel_locked(s, id, false, &dropped);
    pthread_mutex_unlock(&s->mu);
    finish_dropped(s, dropped);
    return n > 0;
}

size_t tdm_session_cancel_all(tdm_session *s) {
    if (!s) return 0;
    async_job *dropped = NULL;
    pthread_mutex_lock(&s->mu);
    size_t n = cancel_locked(s, 0, true, &dropped);
    pthread_mutex_unlock(&s->mu);
    finish_dropped(s, dropped);
    return n;
}

/* Asynchronous runs waiting to start (the monitoring API, src/api/monitor.c; declared in
 * api_impl.h). */
int tdm_session_queued_runs(tdm_session *s) {
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (const async_job *j = s->head; j; j = j->next) n++;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void tdm_session_free(tdm_session *s) {
    if (!s) return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    if (s->worker_started) pthread_join(s->worker, NULL); /* drains the queue first */
    tdm_model_free(s->model);
    tdm_plan_trace_discard(tdm_strategy_plan(s->strategy));
    tdm_strategy_free(s->strategy);
    tdm_monitor_free(s->env->alloc, s->monitor); /* after the plans that count into it */
    tdm_threadpool_free(s->pool);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    pthread_cond_destroy(&s->idle_cv);
    tdm_free(s->env->alloc, s);
}

tdm_status *tdm_session_explain(tdm_session *s, tdm_explain_format format, char **out) {
    if (!s || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_explain: NULL argument");
    if ((int)format < 0 || format > TDM_EXPLAIN_PROFILE)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_explain: unknown format %d", (int)format);
    return tdm_plan_explain(tdm_strategy_plan(s->strategy), (int)format, NULL, out);
}

void tdm_string_free(char *str) { free(str); }

tdm_status *tdm_session_trace_start(tdm_session *s) {
    if (!s) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_trace_start: NULL session");
    return tdm_plan_trace_start(tdm_strategy_plan(s->strategy));
}

tdm_status *tdm_session_trace_stop(tdm_session *s, const char *path) {
    if (!s) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_trace_stop: NULL session");
    return tdm_plan_trace_stop(tdm_strategy_plan(s->strategy), path);
}

size_t tdm_session_device_count(const tdm_session *s) { return s ? tdm_strategy_stats_count(s->strategy) : 0; }

tdm_status *tdm_session_device_stats(tdm_session *s, size_t index, tdm_device_stats *out) {
    if (!s || !out) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_device_stats: NULL argument");
    return tdm_strategy_stats(s->strategy, index, out);
}

tdm_status *tdm_session_save_measurements(tdm_session *s) {
    if (!s) return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "tdm_session_save_measurements: NULL session");
    return tdm_measured_save(tdm_strategy_plan(s->strategy));
}

void tdm_session_reset_measurements(tdm_session *s) {
    if (s) tdm_plan_reset_measurements(tdm_strategy_plan(s->strategy));
}

const tdm_graph *tdm_session_graph(const tdm_session *s) { return session_graph(s); }
