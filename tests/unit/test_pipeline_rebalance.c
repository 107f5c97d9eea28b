/* Pipeline mode's rebalancer (src/api/pipeline_mode_rebalance.c and the generations of
 * src/api/pipeline_mode.c): the decision policy on made-up measurements (trial of the best
 * single device, moved cut, collapse, drift, kept), and sessions on the test devices with
 * one device slowed (TANDEM_TEST_DEVICE_DELAY_US): the cut moves off the slow device or the
 * pipeline collapses to the fast one within a bounded number of runs, every output on the
 * way equals the CPU's (|got - want| <= 1e-4 + 1e-3 |want|: stage plans fuse differently
 * than one plan), also with runs from several threads while stages are replaced; and
 * no_rebalance and user cut points keep the cut. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/pipeline_impl.h"
#include "api/pipeline_mode_rebalance.h"
#include "tandem/tandem.h"

#define MLP TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"
#define MOBILENET TANDEM_SOURCE_DIR "/tests/models/mobilenet_block/model.onnx"

/* ---- the policy on made-up measurements ---- */

static const char *const names2[] = {"slow:0", "fast:0"};

static tdm_pm_rebal *rebal_10_nodes(void) {
    double raw[2 * 10];
    for (int i = 0; i < 20; i++) raw[i] = 1.0; /* the cost model: every node 1 ms on both */
    tdm_pm_rebal *rb = NULL;
    tdm_status *st = tdm_pm_rebal_create(NULL, 2, 10, raw, names2, &rb);
    if (st) fail_msg("%s", tdm_status_message(st));
    return rb;
}

static void test_policy_trial_then_move_then_keep(void **state) {
    (void)state;
    tdm_pm_rebal *rb = rebal_10_nodes();
    assert_int_equal(tdm_pm_node_count(rb), 10);
    tdm_pm_config cur = {2, {0, 1}, {0, 5}}, next;
    char msg[1024];
    /* device 0 measured 1.5x its cost model: the best cut gives it 4 nodes (pace 6 vs 10
     * for device 1 alone), but device 1 alone was never measured: a trial first */
    tdm_pm_window w = {{7.5, 5.0}, {7.5, 5.0}, 0.12, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "trial"));
    assert_int_equal(next.n_stages, 1);
    assert_int_equal(next.device[0], 1);
    /* device 1 alone: 10 ms/row, 0.1 rows/ms; the pipeline is predicted 1.67x faster */
    cur = next;
    w = (tdm_pm_window){{10.0}, {10.0}, 0.1, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "moved from fast:0 alone to the cut slow:0 #0-#3, fast:0 #4-#9"));
    assert_int_equal(next.n_stages, 2);
    assert_int_equal(next.start[1], 4);
    /* the new cut measures faster than device 1 alone and as predicted: kept */
    cur = next;
    w = (tdm_pm_window){{6.0, 6.0}, {6.0, 6.0}, 0.16, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_KEEP);
    assert_non_null(strstr(msg, "kept slow:0 #0-#3, fast:0 #4-#9"));
    /* later windows without drift: nothing to decide */
    w.first = false;
    w.ms_per_row[0] = 6.9;
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_NOTHING);
    tdm_pm_rebal_free(rb);
}

/* The trial shows device 1 alone faster than the measured pipeline scaled to the new cut:
 * no second try. */
static void test_policy_trial_estimate_keeps(void **state) {
    (void)state;
    tdm_pm_rebal *rb = rebal_10_nodes();
    tdm_pm_config cur = {2, {0, 1}, {0, 5}}, next;
    char msg[1024];
    tdm_pm_window w = {{7.5, 5.0}, {7.5, 5.0}, 0.05, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "trial"));
    cur = next;
    /* the cut at 4 (pace 6) is estimated at 0.05 x 7.5 / 6 = 0.0625 rows/ms < 0.1 alone */
    w = (tdm_pm_window){{10.0}, {10.0}, 0.1, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_KEEP);
    assert_non_null(strstr(msg, "is estimated at 0.06"));
    w.first = false;
    w.ms_per_row[0] = 11.0;
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_NOTHING);
    tdm_pm_rebal_free(rb);
}

static void test_policy_collapse_drift_and_lost(void **state) {
    (void)state;
    tdm_pm_rebal *rb = rebal_10_nodes();
    tdm_pm_config cur = {2, {0, 1}, {0, 5}}, next;
    char msg[1024];
    /* device 0 10x slower than its cost model: its smallest stage (node 0, 10 ms) is as slow
     * as device 1 alone (10 ms): collapse to device 1 on the prediction */
    tdm_pm_window w = {{50.0, 5.0}, {50.0, 5.0}, 0.02, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "collapsed slow:0 #0-#4, fast:0 #5-#9 to fast:0: the best cut"));
    assert_int_equal(next.n_stages, 1);
    assert_int_equal(next.device[0], 1);
    cur = next;
    w = (tdm_pm_window){{10.0}, {10.0}, 0.1, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_KEEP);
    assert_non_null(strstr(msg, "kept fast:0 alone"));
    /* device 1 slows down 3x (another process took its cores): a drift; with device 1 at
     * 2x now (smoothed), a cut is predicted better than device 1 alone */
    w = (tdm_pm_window){{30.0}, {10.0}, 0.033, false};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "drifted from 10.000 to 30.000 ms/row"));
    assert_int_equal(next.n_stages, 2);
    /* ... but the pipeline measures slower than device 1 alone did: back, and stay */
    cur = next;
    assert_int_equal(cur.start[1], 1); /* device 0 keeps node 0 only */
    w = (tdm_pm_window){{10.0, 18.0}, {10.0, 18.0}, 0.02, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "the pipeline ran 0.02 rows/ms, fast:0 alone 0.03"));
    assert_int_equal(next.n_stages, 1);
    cur = next;
    w = (tdm_pm_window){{20.0}, {20.0}, 0.05, true};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_KEEP);
    assert_non_null(strstr(msg, "a pipeline measured slower"));
    /* noise: device 1 alone measures 40% slower, still faster than that pipeline ran: stay */
    w = (tdm_pm_window){{28.0}, {20.0}, 0.036, false};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_KEEP);
    assert_non_null(strstr(msg, "drifted from 20.000 to 28.000 ms/row; kept fast:0 alone: a pipeline measured slower"));
    /* device 1 alone now clearly slower than the pipeline was (0.01 < 0.02 rows/ms): again */
    w = (tdm_pm_window){{100.0}, {28.0}, 0.01, false};
    assert_int_equal(tdm_pm_decide(rb, &cur, &w, &next, msg, sizeof msg), TDM_PM_INSTALL);
    assert_non_null(strstr(msg, "moved from fast:0 alone to the cut"));
    assert_int_equal(next.n_stages, 2);
    tdm_pm_rebal_free(rb);
}

/* ---- sessions on test devices ---- */

#include "log_box.h"

/* One test device, slowed by delay_us per kernel. */
static tdm_env *slow_env(const char *delay_us, log_box *box) {
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_TEST_DEVICE_DELAY_US", delay_us, 1);
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    unsetenv("TANDEM_TEST_DEVICE_OPS");
    tdm_env_options eo = {TDM_API_VERSION, box ? keep_log : NULL, box, TDM_LOG_INFO, {0}, 1};
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&eo, &env);
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    if (st) fail_msg("%s", tdm_status_message(st));
    return env;
}

static tdm_session *open_session(tdm_env *env, const char *path, const char *devices, int mode,
                                 const char *cuts, bool no_rebalance) {
    tdm_session *s = NULL;
    tdm_session_options so = {TDM_API_VERSION, devices, 1, 1, false};
    so.mode = mode;
    so.pipeline_cuts = cuts;
    so.no_rebalance = no_rebalance;
    tdm_status *st = tdm_session_create(env, path, &so, &s);
    if (st) fail_msg("%s: %s", devices, tdm_status_message(st));
    return s;
}

static tdm_tensor *make_input(tdm_env *env, const tdm_model *m, int64_t batch, int seed) {
    tdm_value_desc d;
    assert_null(tdm_model_input(m, 0, &d));
    int64_t dims[TDM_MAX_RANK];
    for (int i = 0; i < d.rank; i++) dims[i] = d.dims[i] < 0 ? 1 : d.dims[i];
    dims[0] = batch;
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, d.rank, dims, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < tdm_tensor_element_count(t); i++) p[i] = (float)sin((double)(i * 7 + seed * 13)) * 2.0f;
    return t;
}

/* Runs x on s and on ref; counts mismatches (and failures) into *bad. */
static void run_and_compare(tdm_env *env, tdm_session *s, tdm_session *ref, int64_t batch, int seed, int *bad) {
    tdm_value_desc in;
    assert_null(tdm_model_input(tdm_session_model(ref), 0, &in));
    size_t no = tdm_model_output_count(tdm_session_model(ref));
    tdm_tensor *x = make_input(env, tdm_session_model(ref), batch, seed);
    tdm_tensor *y0[4] = {NULL}, *y1[4] = {NULL};
    tdm_status *st = tdm_session_run(ref, 1, &in.name, (const tdm_tensor **)&x, no, NULL, y0);
    if (!st) st = tdm_session_run(s, 1, &in.name, (const tdm_tensor **)&x, no, NULL, y1);
    if (st) {
        fprintf(stderr, "run failed: %s\n", tdm_status_message(st));
        (*bad)++;
    }
    tdm_status_free(st);
    for (size_t o = 0; o < no && !st; o++) {
        const float *a = tdm_tensor_data_const(y0[o]), *b = tdm_tensor_data_const(y1[o]);
        if (tdm_tensor_element_count(y0[o]) != tdm_tensor_element_count(y1[o])) {
            (*bad)++;
            continue;
        }
        for (int64_t e = 0; e < tdm_tensor_element_count(y0[o]); e++)
            if (fabsf(a[e] - b[e]) > 1e-4f + 1e-3f * fabsf(a[e])) {
                fprintf(stderr, "output %zu element %lld: %g vs %g\n", o, (long long)e, b[e], a[e]);
                (*bad)++;
                break;
            }
    }
    for (size_t o = 0; o < no; o++) {
        tdm_tensor_free(y0[o]);
        tdm_tensor_free(y1[o]);
    }
    tdm_tensor_free(x);
}

typedef struct layout {
    int n, device[TDM_MAX_DEVICES], begin[TDM_MAX_DEVICES], end[TDM_MAX_DEVICES];
} layout;

static layout layout_of(tdm_session *s) {
    layout l;
    memset(&l, 0, sizeof l);
    assert_non_null(s->pipe);
    l.n = tdm_pipe_mode_layout(s->pipe, l.device, l.begin, l.end);
    return l;
}

/* test:0 (slow) first, the CPU second: the cost model rates them alike, so the auto cut
 * gives test:0 work; the stage on test:0 must shrink, or everything goes to the CPU. */
static void check_moves_off_slow(const char *model) {
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = slow_env("1500", &box);
    tdm_session *s = open_session(env, model, "test:0,cpu", TDM_MODE_PIPELINE, NULL, false);
    tdm_session *ref = open_session(env, model, "cpu", TDM_MODE_LATENCY, NULL, false);
    layout l0 = layout_of(s);
    if (l0.n != 2) fail_msg("the auto cut did not use both devices:\n%s", box.text);
    assert_int_equal(l0.device[0], 0);
    int bad = 0, runs = 0;
    bool moved = false;
    for (; runs < 64 && !moved; runs++) {
        run_and_compare(env, s, ref, 1 + runs % 3, runs, &bad);
        layout l = layout_of(s);
        moved = (l.n == 1 && l.device[0] == 1) || (l.n == 2 && l.device[0] == 0 && l.end[0] < l0.end[0]);
    }
    if (!moved) fail_msg("the cut did not move off the slow device in %d runs; log:\n%s", runs, box.text);
    for (int i = 0; i < 24; i++) run_and_compare(env, s, ref, 1 + i % 4, 100 + i, &bad); /* after the move */
    assert_int_equal(bad, 0);
    int64_t replans = 0;
    char last[1024];
    assert_true(tdm_pipe_mode_last_decision(s->pipe, &replans, last, sizeof last) >= 1);
    assert_true(replans >= 1);
    assert_true(logged(&box, "pipeline rebalance: "));
    if (getenv("TANDEM_TEST_SHOW_LOG")) fprintf(stderr, "%s", box.text);
    /* every row went through the stages of some cut: the CPU's entry counts them all when it
     * ended up alone */
    tdm_device_stats ds;
    assert_int_equal(tdm_session_device_count(s), 2);
    assert_null(tdm_session_device_stats(s, 1, &ds));
    assert_string_equal(ds.device, "cpu");
    assert_true(ds.items > 0);
    tdm_session_free(ref);
    tdm_session_free(s);
    tdm_env_free(env);
}

static void test_slowed_device_loses_its_stage(void **state) {
    (void)state;
    check_moves_off_slow(MLP);
}

static void test_slowed_device_loses_its_stage_conv(void **state) {
    (void)state;
    check_moves_off_slow(MOBILENET);
}

typedef struct runner {
    tdm_env *env;
    tdm_session *s, *ref;
    int seed, bad;
} runner;

static void *run_many(void *arg) {
    runner *r = arg;
    for (int i = 0; i < 16; i++) run_and_compare(r->env, r->s, r->ref, 1 + (r->seed + i) % 4, r->seed * 100 + i, &r->bad);
    return NULL;
}

/* Runs from three threads while the rebalancer replaces the stages: none fails or differs. */
static void test_replan_under_concurrent_runs(void **state) {
    (void)state;
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = slow_env("800", &box);
    tdm_session *s = open_session(env, MLP, "test:0,cpu", TDM_MODE_PIPELINE, NULL, false);
    tdm_session *ref = open_session(env, MLP, "cpu", TDM_MODE_LATENCY, NULL, false);
    runner r[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        r[i] = (runner){env, s, ref, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, run_many, &r[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].bad, 0);
    }
    int64_t replans = 0;
    assert_true(tdm_pipe_mode_last_decision(s->pipe, &replans, NULL, 0) >= 1);
    if (replans < 1) fail_msg("no new stages in 48 runs; log:\n%s", box.text);
    tdm_session_free(ref);
    tdm_session_free(s);
    tdm_env_free(env);
}

/* no_rebalance, and user cut points: the cut stays (the imbalance is only reported). */
static void check_cut_stays(const char *cuts, bool no_rebalance) {
    log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env *env = slow_env("1500", &box);
    tdm_session *s = open_session(env, MLP, "test:0,cpu", TDM_MODE_PIPELINE, cuts, no_rebalance);
    tdm_session *ref = open_session(env, MLP, "cpu", TDM_MODE_LATENCY, NULL, false);
    layout l0 = layout_of(s);
    assert_int_equal(l0.n, 2);
    int bad = 0;
    for (int i = 0; i < 32; i++) run_and_compare(env, s, ref, 1 + i % 3, i, &bad);
    assert_int_equal(bad, 0);
    layout l1 = layout_of(s);
    assert_memory_equal(&l0, &l1, sizeof l0);
    int64_t replans = -1;
    assert_int_equal(tdm_pipe_mode_last_decision(s->pipe, &replans, NULL, 0), 0);
    assert_int_equal(replans, 0);
    assert_false(logged(&box, "pipeline rebalance: "));
    if (!logged(&box, "stage 0 on test:0")) fail_msg("no imbalance reported; log:\n%s", box.text);
    tdm_session_free(ref);
    tdm_session_free(s);
    tdm_env_free(env);
}

static void test_no_rebalance_keeps_the_cut(void **state) {
    (void)state;
    check_cut_stays(NULL, true);
}

static void test_user_cuts_are_not_moved(void **state) {
    (void)state;
    check_cut_stays("#3", false);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_policy_trial_then_move_then_keep),
        cmocka_unit_test(test_policy_trial_estimate_keeps),
        cmocka_unit_test(test_policy_collapse_drift_and_lost),
        cmocka_unit_test(test_slowed_device_loses_its_stage),
        cmocka_unit_test(test_slowed_device_loses_its_stage_conv),
        cmocka_unit_test(test_replan_under_concurrent_runs),
        cmocka_unit_test(test_no_rebalance_keeps_the_cut),
        cmocka_unit_test(test_user_cuts_are_not_moved),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
