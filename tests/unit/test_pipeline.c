/* User pipelines (include/tandem/pipeline.h) and pipeline mode (TDM_MODE_PIPELINE):
 * order is kept with several workers per stage, a failing stage fails only its item,
 * back-pressure bounds what is queued, cancel and drain end cleanly, a model stage gives the
 * session's own result, pipeline-mode runs equal single-device runs for any batch size
 * (also smaller than the number of stages, and from several threads at once) and recover
 * after a device error, a slowed stage is reported, and throughput mode says which mode it
 * chose. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "tandem/pipeline.h"
#include "tandem/tandem.h"

#define MLP TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"
#define MOBILENET TANDEM_SOURCE_DIR "/tests/models/mobilenet_block/model.onnx"
#define RESNET TANDEM_SOURCE_DIR "/tests/models/resnet_blocks/model.onnx"

static void sleep_us(long us) {
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

#include "log_box.h"

static tdm_env *new_env(const char *test_devices, log_box *box) {
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    if (test_devices) setenv("TANDEM_TEST_DEVICES", test_devices, 1);
    else unsetenv("TANDEM_TEST_DEVICES");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    tdm_env_options eo = {TDM_API_VERSION, box ? keep_log : NULL, box, TDM_LOG_INFO, {0}, 1};
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&eo, &env);
    if (st) fail_msg("%s", tdm_status_message(st));
    return env;
}

/* ---- user pipelines ---- */

/* stage 0: attaches x = [seq] after an uneven sleep (workers finish out of order) */
static tdm_status *stage_make(void *user, tdm_pipeline_item *it) {
    tdm_env *env = user;
    uint64_t seq = tdm_pipeline_item_sequence(it);
    sleep_us((long)((seq * 7919) % 5) * 300);
    int64_t dims[1] = {1};
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_create(env, TDM_FLOAT, 1, dims, &t);
    if (st) return st;
    ((float *)tdm_tensor_data(t))[0] = (float)seq;
    return tdm_pipeline_item_set_tensor(it, "x", t);
}

/* stage 1: doubles x, fails every item with seq % 7 == 3 */
static tdm_status *stage_double(void *user, tdm_pipeline_item *it) {
    (void)user;
    uint64_t seq = tdm_pipeline_item_sequence(it);
    sleep_us((long)((seq * 104729) % 3) * 200);
    if (seq % 7 == 3) return tdm_status_create(TDM_ERR_INVALID_ARGUMENT, "item %llu is bad", (unsigned long long)seq);
    tdm_tensor *t = tdm_pipeline_item_tensor(it, "x");
    if (!t) return tdm_status_create(TDM_ERR_INTERNAL, "x is missing");
    ((float *)tdm_tensor_data(t))[0] *= 2;
    return NULL;
}

/* stage 2: counts the items it sees */
static tdm_status *stage_count(void *user, tdm_pipeline_item *it) {
    (void)it;
    int *n = user;
    (*n)++; /* one worker: no race */
    return NULL;
}

typedef struct producer {
    tdm_pipeline *p;
    int n;
    int failed;
} producer;

static void *produce(void *arg) {
    producer *pr = arg;
    for (int i = 0; i < pr->n; i++) {
        tdm_pipeline_item *it = NULL;
        tdm_status *st = tdm_pipeline_item_create(pr->p, NULL, &it);
        if (!st) st = tdm_pipeline_submit(pr->p, it, -1, NULL);
        if (st) {
            tdm_pipeline_item_free(it);
            tdm_status_free(st);
            pr->failed++;
        }
    }
    tdm_pipeline_close(pr->p);
    return NULL;
}

static void test_order_and_stage_errors(void **state) {
    (void)state;
    tdm_env *env = new_env(NULL, NULL);
    tdm_pipeline *p = NULL;
    tdm_pipeline_options po = {TDM_API_VERSION, 3, NULL, NULL};
    int counted = 0;
    assert_null(tdm_pipeline_create(env, &po, &p));
    assert_null(tdm_pipeline_add_callback_stage(p, "make", 4, stage_make, env));
    assert_null(tdm_pipeline_add_callback_stage(p, "double", 3, stage_double, NULL));
    assert_null(tdm_pipeline_add_callback_stage(p, "count", 1, stage_count, &counted));
    tdm_status *bad = tdm_pipeline_add_callback_stage(p, "bad", 0, stage_count, NULL);
    assert_int_equal(tdm_status_code(bad), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(bad);
    assert_null(tdm_pipeline_start(p));
    producer pr = {p, 150, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, produce, &pr), 0);
    uint64_t expect = 0;
    int failed = 0;
    for (;;) {
        tdm_pipeline_item *it = NULL;
        tdm_status *st = tdm_pipeline_receive(p, 20000, &it);
        if (st) fail_msg("%s", tdm_status_message(st));
        if (!it) break;
        assert_int_equal(tdm_pipeline_item_sequence(it), expect); /* in order */
        if (expect % 7 == 3) {
            const tdm_status *is = tdm_pipeline_item_status(it);
            assert_int_equal(tdm_status_code(is), TDM_ERR_INVALID_ARGUMENT);
            assert_non_null(strstr(tdm_status_message(is), "stage 'double'"));
            assert_int_equal(tdm_pipeline_item_failed_stage(it), 1);
            failed++;
        } else {
            assert_null(tdm_pipeline_item_status(it));
            assert_int_equal(tdm_pipeline_item_failed_stage(it), -1);
            tdm_tensor *x = tdm_pipeline_item_tensor(it, "x");
            assert_non_null(x);
            assert_true(((float *)tdm_tensor_data(x))[0] == 2.0f * (float)expect);
        }
        tdm_pipeline_item_free(it);
        expect++;
    }
    pthread_join(th, NULL);
    assert_int_equal(pr.failed, 0);
    assert_int_equal(expect, 150);
    assert_int_equal(counted, 150 - failed); /* failed items skip the later stages */
    tdm_stage_stats ss;
    assert_null(tdm_pipeline_stage_stats(p, 0, &ss));
    assert_string_equal(ss.name, "make");
    assert_int_equal(ss.items, 150);
    assert_int_equal(ss.workers, 4);
    assert_true(ss.busy_ms > 0 && ss.utilisation > 0 && ss.utilisation <= 1 && ss.items_per_s > 0);
    assert_null(tdm_pipeline_stage_stats(p, 1, &ss));
    assert_int_equal(ss.failed, failed);
    assert_int_equal(tdm_pipeline_stage_count(p), 3);
    tdm_status *nf = tdm_pipeline_stage_stats(p, 3, &ss);
    assert_int_equal(tdm_status_code(nf), TDM_ERR_NOT_FOUND);
    tdm_status_free(nf);
    /* closed: no more submits */
    tdm_pipeline_item *late = NULL;
    assert_null(tdm_pipeline_item_create(p, NULL, &late));
    tdm_status *cl = tdm_pipeline_submit(p, late, 0, NULL);
    assert_non_null(cl);
    tdm_status_free(cl);
    tdm_pipeline_item_free(late);
    tdm_pipeline_free(p);
    tdm_env_free(env);
}

/* a stage that waits at a gate */
typedef struct gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool open;
    int entered;
} gate;

static tdm_status *stage_gate(void *user, tdm_pipeline_item *it) {
    (void)it;
    gate *g = user;
    pthread_mutex_lock(&g->mu);
    g->entered++;
    pthread_cond_broadcast(&g->cv);
    while (!g->open) pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void open_gate(gate *g) {
    pthread_mutex_lock(&g->mu);
    g->open = true;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void test_back_pressure_and_cancel(void **state) {
    (void)state;
    tdm_env *env = new_env(NULL, NULL);
    gate g = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, false, 0};
    tdm_pipeline *p = NULL;
    tdm_pipeline_options po = {TDM_API_VERSION, 2, NULL, NULL};
    assert_null(tdm_pipeline_create(env, &po, &p));
    assert_null(tdm_pipeline_add_callback_stage(p, "gate", 1, stage_gate, &g));
    assert_null(tdm_pipeline_add_callback_stage(p, "double", 1, stage_double, NULL));
    assert_null(tdm_pipeline_start(p));
    /* one item inside the gate and two queued: the next submit times out */
    int accepted = 0;
    tdm_status *st = NULL;
    while (!st && accepted < 100) {
        tdm_pipeline_item *it = NULL;
        assert_null(tdm_pipeline_item_create(p, NULL, &it));
        st = tdm_pipeline_submit(p, it, 50, NULL);
        if (st) tdm_pipeline_item_free(it);
        else accepted++;
        if (accepted == 1) { /* wait until the first is inside the stage */
            pthread_mutex_lock(&g.mu);
            while (!g.entered) pthread_cond_wait(&g.cv, &g.mu);
            pthread_mutex_unlock(&g.mu);
        }
    }
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    tdm_status_free(st);
    assert_int_equal(accepted, 3); /* 1 in the stage + queue_capacity */
    tdm_pipeline_item *none = NULL;
    st = tdm_pipeline_receive(p, 10, &none);
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    tdm_status_free(st);
    /* cancel: the item inside the gate finishes its stage, everything else is cancelled;
     * all are delivered, in order */
    tdm_pipeline_cancel(p);
    open_gate(&g);
    uint64_t expect = 0;
    for (;;) {
        tdm_pipeline_item *it = NULL;
        assert_null(tdm_pipeline_receive(p, 20000, &it));
        if (!it) break;
        assert_int_equal(tdm_pipeline_item_sequence(it), expect);
        const tdm_status *is = tdm_pipeline_item_status(it);
        assert_non_null(is);
        assert_non_null(strstr(tdm_status_message(is), "cancelled"));
        tdm_pipeline_item_free(it);
        expect++;
    }
    assert_int_equal(expect, 3);
    tdm_pipeline_free(p);
    tdm_env_free(env);
}

typedef struct collector {
    pthread_mutex_t mu;
    uint64_t next;
    bool out_of_order;
    int n;
} collector;

static void collect(void *user, tdm_pipeline_item *it) {
    collector *c = user;
    pthread_mutex_lock(&c->mu);
    if (tdm_pipeline_item_sequence(it) != c->next) c->out_of_order = true;
    c->next++;
    c->n++;
    pthread_mutex_unlock(&c->mu);
    tdm_pipeline_item_free(it);
}

static void test_callback_output_and_drain(void **state) {
    (void)state;
    tdm_env *env = new_env(NULL, NULL);
    collector c = {PTHREAD_MUTEX_INITIALIZER, 0, false, 0};
    tdm_pipeline *p = NULL;
    tdm_pipeline_options po = {TDM_API_VERSION, 0, collect, &c};
    assert_null(tdm_pipeline_create(env, &po, &p));
    assert_null(tdm_pipeline_add_callback_stage(p, "make", 3, stage_make, env));
    assert_null(tdm_pipeline_start(p));
    tdm_pipeline_item *it = NULL;
    tdm_status *st = tdm_pipeline_receive(p, 0, &it); /* not with on_output */
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    for (int i = 0; i < 60; i++) {
        assert_null(tdm_pipeline_item_create(p, NULL, &it));
        uint64_t seq = 0;
        assert_null(tdm_pipeline_submit(p, it, -1, &seq));
        assert_int_equal(seq, (uint64_t)i);
    }
    assert_null(tdm_pipeline_drain(p, 20000));
    pthread_mutex_lock(&c.mu);
    assert_int_equal(c.n, 60);
    assert_false(c.out_of_order);
    pthread_mutex_unlock(&c.mu);
    tdm_pipeline_free(p);
    /* freeing a pipeline with items still inside */
    assert_null(tdm_pipeline_create(env, NULL, &p));
    assert_null(tdm_pipeline_add_callback_stage(p, "make", 2, stage_make, env));
    assert_null(tdm_pipeline_start(p));
    for (int i = 0; i < 3; i++) {
        assert_null(tdm_pipeline_item_create(p, NULL, &it));
        assert_null(tdm_pipeline_submit(p, it, -1, NULL));
    }
    tdm_pipeline_free(p);
    tdm_env_free(env);
}

/* ---- a model stage ---- */

static tdm_tensor *make_input(tdm_env *env, const tdm_model *m, int64_t batch, int seed) {
    tdm_value_desc d;
    assert_null(tdm_model_input(m, 0, &d));
    int64_t dims[TDM_MAX_RANK];
    for (int i = 0; i < d.rank; i++) dims[i] = d.dims[i] < 0 ? 1 : d.dims[i];
    if (batch > 0) dims[0] = batch;
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, d.rank, dims, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) p[i] = (float)sin((double)(i * 7 + seed * 13)) * 2.0f;
    return t;
}

static void assert_close(const tdm_tensor *a, const tdm_tensor *b) {
    assert_int_equal(tdm_tensor_rank(a), tdm_tensor_rank(b));
    for (int d = 0; d < tdm_tensor_rank(a); d++) assert_int_equal(tdm_tensor_dims(a)[d], tdm_tensor_dims(b)[d]);
    const float *x = tdm_tensor_data_const(a), *y = tdm_tensor_data_const(b);
    for (int64_t i = 0; i < tdm_tensor_element_count(a); i++)
        if (fabsf(x[i] - y[i]) > 1e-4f + 1e-3f * fabsf(y[i])) fail_msg("element %lld: %g vs %g", (long long)i, x[i], y[i]);
}

static tdm_session *open_session(tdm_env *env, const char *path, const char *devices, int mode,
                                 const char *cuts, int micro_batch) {
    tdm_session *s = NULL;
    tdm_session_options so = {TDM_API_VERSION, devices, 1, 1, false};
    so.mode = mode;
    so.pipeline_cuts = cuts;
    so.micro_batch = micro_batch;
    tdm_status *st = tdm_session_create(env, path, &so, &s);
    if (st) fail_msg("%s: %s", devices, tdm_status_message(st));
    return s;
}

static tdm_status *run_all(tdm_session *s, const tdm_tensor *x, tdm_tensor **y) {
    tdm_value_desc in;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    size_t no = tdm_model_output_count(tdm_session_model(s));
    return tdm_session_run(s, 1, &in.name, &x, no, NULL, y);
}

typedef struct prep_ctx {
    tdm_env *env;
    const tdm_model *m;
} prep_ctx;

static tdm_status *stage_prep(void *user, tdm_pipeline_item *it) {
    prep_ctx *c = user;
    tdm_tensor *x = make_input(c->env, c->m, 1, (int)tdm_pipeline_item_sequence(it));
    return tdm_pipeline_item_set_tensor(it, "input", x);
}

static void test_model_stage(void **state) {
    (void)state;
    tdm_env *env = new_env(NULL, NULL);
    tdm_session *s = open_session(env, MLP, "cpu", TDM_MODE_LATENCY, NULL, 0);
    prep_ctx pc = {env, tdm_session_model(s)};
    tdm_pipeline *p = NULL;
    assert_null(tdm_pipeline_create(env, NULL, &p));
    assert_null(tdm_pipeline_add_callback_stage(p, "prep", 2, stage_prep, &pc));
    assert_null(tdm_pipeline_add_model_stage(p, "model", 2, s));
    assert_null(tdm_pipeline_start(p));
    producer pr = {p, 20, 0};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, produce, &pr), 0);
    int n = 0;
    for (;;) {
        tdm_pipeline_item *it = NULL;
        assert_null(tdm_pipeline_receive(p, 20000, &it));
        if (!it) break;
        assert_null(tdm_pipeline_item_status(it));
        assert_null(tdm_pipeline_item_tensor(it, "input")); /* consumed */
        tdm_tensor *x = make_input(env, pc.m, 1, (int)tdm_pipeline_item_sequence(it));
        tdm_tensor *y[2] = {NULL, NULL};
        assert_null(run_all(s, x, y));
        assert_close(tdm_pipeline_item_tensor(it, "logits"), y[0]);
        assert_close(tdm_pipeline_item_tensor(it, "probabilities"), y[1]);
        tdm_tensor_free(x);
        tdm_tensor_free(y[0]);
        tdm_tensor_free(y[1]);
        tdm_pipeline_item_free(it);
        n++;
    }
    pthread_join(th, NULL);
    assert_int_equal(n, 20);
    tdm_pipeline_free(p);
    tdm_session_free(s);
    tdm_env_free(env);
}

/* ---- pipeline mode ---- */

static void check_equal_to_cpu(tdm_env *env, const char *path, tdm_session *pipe, const int64_t *batches,
                               size_t nb) {
    tdm_session *ref = open_session(env, path, "cpu", TDM_MODE_LATENCY, NULL, 0);
    size_t no = tdm_model_output_count(tdm_session_model(ref));
    for (size_t b = 0; b < nb; b++) {
        tdm_tensor *x = make_input(env, tdm_session_model(ref), batches[b], (int)b);
        tdm_tensor *y0[4] = {NULL}, *y1[4] = {NULL};
        assert_null(run_all(ref, x, y0));
        tdm_status *st = run_all(pipe, x, y1);
        if (st) fail_msg("batch %lld: %s", (long long)batches[b], tdm_status_message(st));
        for (size_t o = 0; o < no; o++) {
            assert_close(y1[o], y0[o]);
            tdm_tensor_free(y0[o]);
            tdm_tensor_free(y1[o]);
        }
        tdm_tensor_free(x);
    }
    tdm_session_free(ref);
}

static void test_pipeline_mode_equals_single(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = new_env("2", &box);
    const int64_t batches[] = {1, 2, 3, 7, 16, 5};
    /* user cut points over three devices; the CPU stage in the middle */
    tdm_session *s = open_session(env, MLP, "test:0,cpu,test:1", TDM_MODE_PIPELINE, "#2,#4", 0);
    assert_int_equal(tdm_session_device_count(s), 3);
    check_equal_to_cpu(env, MLP, s, batches, sizeof batches / sizeof batches[0]);
    tdm_device_stats ds;
    for (size_t k = 0; k < 3; k++) {
        assert_null(tdm_session_device_stats(s, k, &ds));
        assert_int_equal(ds.items, 1 + 2 + 3 + 7 + 16 + 5); /* every row went through every stage */
    }
    assert_null(tdm_session_device_stats(s, 1, &ds));
    assert_string_equal(ds.device, "cpu");
    tdm_session_free(s);
    /* one row per micro-batch */
    s = open_session(env, MLP, "cpu,test:0", TDM_MODE_PIPELINE, "#3", 1);
    check_equal_to_cpu(env, MLP, s, batches, sizeof batches / sizeof batches[0]);
    tdm_session_free(s);
    /* the auto cut, on a convolutional model */
    s = open_session(env, MOBILENET, "cpu,test:0", TDM_MODE_PIPELINE, NULL, 0);
    assert_true(logged(&box, "pipeline: auto cut into"));
    const int64_t small[] = {1, 3};
    check_equal_to_cpu(env, MOBILENET, s, small, 2);
    tdm_session_free(s);
    /* residual blocks cut everywhere in pairs: values that skip a whole stage (a residual
     * branch around a one-node stage) ride along on the item */
    const int64_t one[] = {1};
    const char *cuts[] = {"#5,#6", "#4,#9", "#9,#10", "#1,#28", "#14,#20"};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        s = open_session(env, RESNET, "test:0,cpu,test:1", TDM_MODE_PIPELINE, cuts[i], 0);
        check_equal_to_cpu(env, RESNET, s, one, 1);
        tdm_session_free(s);
    }
    /* bad cut points */
    tdm_session_options so = {TDM_API_VERSION, "cpu,test:0", 1, 1, false};
    so.mode = TDM_MODE_PIPELINE;
    const char *bad[] = {"#0", "#99", "nosuchnode", "#2,#4", "#x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        so.pipeline_cuts = bad[i];
        tdm_session *t = NULL;
        tdm_status *st = tdm_session_create(env, MLP, &so, &t);
        if (!st) fail_msg("cut '%s' was accepted", bad[i]);
        assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
        assert_null(t);
        tdm_status_free(st);
    }
    tdm_env_free(env);
}

typedef struct runner {
    tdm_env *env;
    tdm_session *pipe, *ref;
    int seed;
    int bad;
} runner;

static void *run_many(void *arg) {
    runner *r = arg;
    for (int i = 0; i < 6; i++) {
        int64_t batch = 1 + (r->seed + i) % 5;
        tdm_tensor *x = make_input(r->env, tdm_session_model(r->ref), batch, r->seed * 10 + i);
        tdm_tensor *y0[2] = {NULL}, *y1[2] = {NULL};
        tdm_status *st = run_all(r->ref, x, y0);
        if (!st) st = run_all(r->pipe, x, y1);
        if (st) r->bad++;
        tdm_status_free(st);
        for (int o = 0; o < 2 && y0[o] && y1[o]; o++) {
            const float *a = tdm_tensor_data_const(y0[o]), *b = tdm_tensor_data_const(y1[o]);
            if (tdm_tensor_element_count(y0[o]) != tdm_tensor_element_count(y1[o])) r->bad++;
            else
                for (int64_t e = 0; e < tdm_tensor_element_count(y0[o]); e++)
                    if (fabsf(a[e] - b[e]) > 1e-4f + 1e-3f * fabsf(a[e])) {
                        r->bad++;
                        break;
                    }
        }
        for (int o = 0; o < 2; o++) {
            tdm_tensor_free(y0[o]);
            tdm_tensor_free(y1[o]);
        }
        tdm_tensor_free(x);
    }
    return NULL;
}

static void test_pipeline_mode_concurrent_runs(void **state) {
    (void)state;
    tdm_env *env = new_env("1", NULL);
    tdm_session *s = open_session(env, MLP, "cpu,test:0", TDM_MODE_PIPELINE, "#3", 1);
    tdm_session *ref = open_session(env, MLP, "cpu", TDM_MODE_LATENCY, NULL, 0);
    runner r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (runner){env, s, ref, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_many, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    tdm_session_free(ref);
    tdm_session_free(s);
    tdm_env_free(env);
}

static void test_pipeline_mode_recovers_after_device_error(void **state) {
    (void)state;
    tdm_env *env = new_env("1", NULL);
    setenv("TANDEM_TEST_DEVICE_FAIL_EVERY", "7", 1);
    tdm_env_free(env);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    tdm_env_options eo = {TDM_API_VERSION, NULL, NULL, TDM_LOG_INFO, {0}, 1};
    assert_null(tdm_env_create(&eo, &env));
    tdm_session *s = open_session(env, MLP, "cpu,test:0", TDM_MODE_PIPELINE, "#3", 0);
    tdm_session *ref = open_session(env, MLP, "cpu", TDM_MODE_LATENCY, NULL, 0);
    int failed = 0, ok = 0;
    for (int i = 0; i < 16; i++) {
        tdm_tensor *x = make_input(env, tdm_session_model(ref), 1 + i % 3, i);
        tdm_tensor *y0[2] = {NULL}, *y1[2] = {NULL};
        assert_null(run_all(ref, x, y0));
        tdm_status *st = run_all(s, x, y1);
        if (st) {
            assert_int_equal(tdm_status_code(st), TDM_ERR_DEVICE);
            assert_non_null(strstr(tdm_status_message(st), "injected failure"));
            assert_null(y1[0]);
            tdm_status_free(st);
            failed++;
        } else {
            assert_close(y1[0], y0[0]);
            assert_close(y1[1], y0[1]);
            ok++;
        }
        for (int o = 0; o < 2; o++) {
            tdm_tensor_free(y0[o]);
            tdm_tensor_free(y1[o]);
        }
        tdm_tensor_free(x);
    }
    assert_true(failed > 0 && ok > 0); /* runs after a failure succeed again */
    tdm_session_free(ref);
    tdm_session_free(s);
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
}

/* A slowed stage device: after some runs the pipeline says which stage sets its pace. */
static void test_pipeline_mode_reports_imbalance(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = new_env("1", &box);
    tdm_env_free(env);
    setenv("TANDEM_TEST_DEVICE_DELAY_US", "1500", 1);
    tdm_env_options eo = {TDM_API_VERSION, keep_log, &box, TDM_LOG_INFO, {0}, 1};
    assert_null(tdm_env_create(&eo, &env));
    tdm_session *s = open_session(env, MLP, "cpu,test:0", TDM_MODE_PIPELINE, "#3", 0);
    for (int i = 0; i < 20 && !logged(&box, "unbalanced"); i++) {
        tdm_tensor *x = make_input(env, tdm_session_model(s), 1, i), *y[2] = {NULL, NULL};
        assert_null(run_all(s, x, y));
        tdm_tensor_free(x);
        tdm_tensor_free(y[0]);
        tdm_tensor_free(y[1]);
    }
    if (!logged(&box, "stage 1 on test:0")) fail_msg("no imbalance reported; log:\n%s", box.text);
    tdm_session_free(s);
    tdm_env_free(env);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
}

static void test_throughput_mode_says_which(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = new_env("1", &box);
    /* a dynamic batch: split */
    tdm_session *s = open_session(env, MLP, "cpu,test:0", TDM_MODE_THROUGHPUT, NULL, 0);
    assert_true(logged(&box, "throughput mode: split"));
    tdm_session_free(s);
    /* a fixed batch of 1: replicas or a pipeline, from the cost model, with the reason */
    s = open_session(env, RESNET, "cpu,test:0", TDM_MODE_THROUGHPUT, NULL, 0);
    assert_true(logged(&box, "throughput mode: replicas: predicted") ||
                logged(&box, "throughput mode: pipeline: predicted"));
    const int64_t one[] = {1};
    check_equal_to_cpu(env, RESNET, s, one, 1);
    tdm_session_free(s);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_stage_errors),
        cmocka_unit_test(test_back_pressure_and_cancel),
        cmocka_unit_test(test_callback_output_and_drain),
        cmocka_unit_test(test_model_stage),
        cmocka_unit_test(test_pipeline_mode_equals_single),
        cmocka_unit_test(test_pipeline_mode_concurrent_runs),
        cmocka_unit_test(test_pipeline_mode_recovers_after_device_error),
        cmocka_unit_test(test_pipeline_mode_reports_imbalance),
        cmocka_unit_test(test_throughput_mode_says_which),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
