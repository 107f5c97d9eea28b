/* Per-call overhead of runs (issue 3): a run with input shapes seen before allocates nothing
 * of its own through the env's allocator beyond the output tensors it hands to the caller,
 * and the shapes cached per input-shape signature follow a change of input shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

#define DLRM_DIR TANDEM_SOURCE_DIR "/tests/models/dlrm_like"
#define MLP_MODEL TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx"
#define IF_DIR TANDEM_SOURCE_DIR "/tests/models/if_chain_body"

#include "counting_alloc.h"

#include "test_ok.h"

static tdm_env *make_env(counter *c, int threads) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    if (c) {
        o.allocator.alloc = c_alloc;
        o.allocator.free = c_free;
        o.allocator.user = c;
    }
    o.threads = threads;
    tdm_env *env = NULL;
    tdm_status *st = tdm_env_create(&o, &env);
    if (st) {
        fprintf(stderr, "tdm_env_create: %s\n", tdm_status_message(st));
        tdm_status_free(st);
        return NULL;
    }
    return env;
}

/* Allocations made by one run of a model whose shapes were seen before: only the caller's
 * output tensors (at most two blocks each: header and data), plus `kernel_scratch` blocks
 * that kernels take for themselves per run (the executor, the session and the memory plan
 * take none). */
static void check_steady_runs(const char *model, int n_in, const char **names, tdm_tensor **ins,
                              int n_out, long kernel_scratch, tdm_env *env, counter *c) {
    tdm_session *s = NULL;
    OK(tdm_session_create(env, model, NULL, &s));
    tdm_tensor *outs[8] = {0};
    assert_true(n_out <= 8);
    long made[4] = {0};
    for (int r = 0; r < 4; r++) {
        long before = atomic_load(&c->total);
        OK(tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, NULL, outs));
        made[r] = atomic_load(&c->total) - before;
        for (int o = 0; o < n_out; o++) {
            assert_non_null(outs[o]);
            tdm_tensor_free(outs[o]);
            outs[o] = NULL;
        }
    }
    fprintf(stderr, "%s: allocations per run: %ld %ld %ld %ld\n", model, made[0], made[1],
            made[2], made[3]);
    assert_true(made[0] > 2L * n_out); /* the first run records sizes on the heap */
    assert_true(made[2] <= 2L * n_out + kernel_scratch);
    assert_true(made[3] == made[2]);
    tdm_session_free(s);
}

static void test_dlrm_no_alloc_after_first_run(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = make_env(&c, 1);
    assert_non_null(env);
    const char *names[4] = {"dense_features", "sparse_0", "sparse_1", "sparse_2"};
    tdm_tensor *ins[4] = {0};
    for (int i = 0; i < 4; i++) {
        char path[512];
        snprintf(path, sizeof path, DLRM_DIR "/test_data_set_0/input_%d.pb", i);
        OK(tdm_tensor_load_onnx(env, path, &ins[i]));
    }
    /* the Gather kernel (k_shape_index.c) takes one block per node for its indices: 4 */
    check_steady_runs(DLRM_DIR "/model.onnx", 4, names, ins, 1, 4, env, &c);
    for (int i = 0; i < 4; i++) tdm_tensor_free(ins[i]);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

/* An If whose branches are chains of small nodes with Constant weights (silero VAD's shape):
 * its body is planned once (kernels, prepared states, shapes, an arena), so a run with seen
 * shapes allocates only its output, whichever branch it takes. */
static void test_if_no_alloc_after_first_run(void **state) {
    (void)state;
    for (int branch = 0; branch < 2; branch++) {
        counter c = {0};
        tdm_env *env = make_env(&c, 1);
        assert_non_null(env);
        const char *names[2] = {"c", "X"};
        tdm_tensor *ins[2] = {0};
        OK(tdm_tensor_load_onnx(env, IF_DIR "/test_data_set_0/input_1.pb", &ins[1]));
        OK(tdm_tensor_create(env, TDM_BOOL, 0, NULL, &ins[0]));
        *(unsigned char *)tdm_tensor_data(ins[0]) = (unsigned char)(branch == 0);
        check_steady_runs(IF_DIR "/model.onnx", 2, names, ins, 1, 0, env, &c);
        for (int i = 0; i < 2; i++) tdm_tensor_free(ins[i]);
        tdm_env_free(env);
        assert_int_equal(atomic_load(&c.live), 0);
    }
}

static tdm_tensor *mlp_input(tdm_env *env, int64_t batch, float seed) {
    int64_t dims[3] = {batch, 4, 8};
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(env, TDM_FLOAT, 3, dims, &t));
    float *d = tdm_tensor_data(t);
    for (int64_t i = 0; i < batch * 32; i++) d[i] = seed * (float)((i * 37) % 17 - 8) / 8.0f;
    return t;
}

static void test_mlp_no_alloc_after_first_run(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = make_env(&c, 1);
    assert_non_null(env);
    const char *name = "input";
    tdm_tensor *in = mlp_input(env, 2, 1.0f);
    check_steady_runs(MLP_MODEL, 1, &name, &in, 2, 0, env, &c);
    tdm_tensor_free(in);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

static void assert_same(const tdm_tensor *a, const tdm_tensor *b) {
    assert_int_equal(tdm_tensor_rank(a), tdm_tensor_rank(b));
    const int64_t *da = tdm_tensor_dims(a), *db = tdm_tensor_dims(b);
    int64_t n = 1;
    for (int d = 0; d < tdm_tensor_rank(a); d++) {
        assert_int_equal(da[d], db[d]);
        n *= da[d];
    }
    const float *x = tdm_tensor_data_const(a), *y = tdm_tensor_data_const(b);
    for (int64_t i = 0; i < n; i++) {
        float diff = x[i] - y[i];
        if (diff < 0) diff = -diff;
        if (diff > 1e-5f) fail_msg("element %lld: %g vs %g", (long long)i, x[i], y[i]);
    }
}

/* Two batch sizes alternately through one session: every output equals a fresh session's
 * output for the same input (shapes cached for one signature must not leak to the other). */
static void test_shape_cache_follows_shapes(void **state) {
    (void)state;
    tdm_env *env = make_env(NULL, 1);
    assert_non_null(env);
    const char *name = "input";
    tdm_session *s = NULL;
    OK(tdm_session_create(env, MLP_MODEL, NULL, &s));
    int64_t batches[6] = {1, 3, 1, 3, 5, 1};
    for (int r = 0; r < 6; r++) {
        tdm_tensor *in = mlp_input(env, batches[r], 1.0f + (float)r);
        tdm_tensor *got[2] = {0}, *want[2] = {0};
        OK(tdm_session_run(s, 1, &name, (const tdm_tensor *const *)&in, 2, NULL, got));
        tdm_session *fresh = NULL;
        OK(tdm_session_create(env, MLP_MODEL, NULL, &fresh));
        OK(tdm_session_run(fresh, 1, &name, (const tdm_tensor *const *)&in, 2, NULL, want));
        for (int o = 0; o < 2; o++) {
            assert_int_equal(tdm_tensor_dims(got[o])[0], batches[r]);
            assert_same(got[o], want[o]);
            tdm_tensor_free(got[o]);
            tdm_tensor_free(want[o]);
        }
        tdm_session_free(fresh);
        tdm_tensor_free(in);
    }
    tdm_session_free(s);
    tdm_env_free(env);
}

/* Same input shape, different shapes inside the graph: NonZero's output (data-dependent)
 * feeds a Gather whose shapes are cached; its input shape changes from run to run, so its
 * cached shapes must not be reused. y = Relu(x[NonZero(x)]) has shape [1, nonzeros]. */
static void test_shape_cache_inner_shapes(void **state) {
    (void)state;
    tdm_env *env = make_env(NULL, 1);
    assert_non_null(env);
    (void)mb_init_i64; /* (model_builder.h: unused here) */
    mb_model m;
    mb_init(&m, 17);
    int64_t d4[1] = {6};
    mb_input(&m, "x", 1, d4);
    mb_node(&m, "NonZero:x->nz");
    mb_node(&m, "Gather:x,nz->g");
    mb_node(&m, "Relu:g->y");
    mb_output(&m, "y");
    size_t size = 0;
    void *buf = mb_pack(&m, &size);
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(env, buf, size, NULL, NULL, &s));
    static const float xs[4][6] = {{1, 0, 0, 0, 0, 0}, {1, 2, 3, 0, 0, 0},
                                   {0, 0, 5, 0, 0, 0}, {-1, 2, -3, 4, 5, 6}};
    static const int64_t nnz[4] = {1, 3, 1, 6};
    for (int r = 0; r < 8; r++) {
        tdm_tensor *in = NULL, *got = NULL, *want = NULL;
        OK(tdm_tensor_create(env, TDM_FLOAT, 1, d4, &in));
        memcpy(tdm_tensor_data(in), xs[r % 4], sizeof xs[0]);
        const char *name = "x";
        OK(tdm_session_run(s, 1, &name, (const tdm_tensor *const *)&in, 1, NULL, &got));
        tdm_session *fresh = NULL;
        OK(tdm_session_create_from_buffer(env, buf, size, NULL, NULL, &fresh));
        OK(tdm_session_run(fresh, 1, &name, (const tdm_tensor *const *)&in, 1, NULL, &want));
        assert_int_equal(tdm_tensor_rank(got), 2);
        assert_int_equal(tdm_tensor_dims(got)[1], nnz[r % 4]);
        assert_same(got, want);
        tdm_tensor_free(got);
        tdm_tensor_free(want);
        tdm_session_free(fresh);
        tdm_tensor_free(in);
    }
    tdm_session_free(s);
    free(buf);
    mb_free(&m);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dlrm_no_alloc_after_first_run),
        cmocka_unit_test(test_mlp_no_alloc_after_first_run),
        cmocka_unit_test(test_if_no_alloc_after_first_run),
        cmocka_unit_test(test_shape_cache_follows_shapes),
        cmocka_unit_test(test_shape_cache_inner_shapes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
