/* Shape arguments stay where they are (TDM_KF_HOST_READS): a kernel on a device with memory
 * of its own that reads an input on the host (Reshape's shape, Slice's starts and ends, a
 * reduction's axes) gets it in host memory, with no upload and no event; Shape reads a
 * device tensor's dims with no download. The test device promises this as the CUDA tables
 * do. Both executors: the one-device run (everything on test:0) and the multi-device one
 * (the shape arithmetic on the CPU by affinity). Outputs against the CPU alone. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

static int setup(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    unsetenv("TANDEM_TEST_DEVICE_OPS");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    unsetenv("TANDEM_TEST_DEVICES");
    return 0;
}

/* x [2, 3, 4] -> Relu -> r; Shape(r) -> s [3]; Gather(s, [2]) -> last; Concat([-1], last)
 * -> target [2]; Reshape(r, target) -> y0 [6, 4]; Slice(y0, starts, ends) -> y1 [4, 2] with
 * starts, ends graph inputs; ReduceSum(y1, axes) -> y [4, 1] (axes a graph input). */
static void *model(size_t *size) {
    mb_model m;
    mb_init(&m, 18);
    int64_t dx[3] = {2, 3, 4}, d2[1] = {2}, d1[1] = {1};
    mb_input(&m, "x", 3, dx);
    mb_input_t(&m, "starts", MB_I64, 1, d2);
    mb_input_t(&m, "ends", MB_I64, 1, d2);
    mb_input_t(&m, "axes", MB_I64, 1, d1);
    int64_t idx = 2, minus1 = -1;
    mb_init_i64(&m, "idx", 1, &idx);
    mb_init_i64(&m, "minus1", 1, &minus1);
    mb_node(&m, "Relu:x->r");
    mb_node(&m, "Shape:r->s");
    mb_node(&m, "Gather:s,idx->last");
    Onnx__NodeProto *c = mb_node(&m, "Concat:minus1,last->target");
    mb_attr_i(&m, c, "axis", 0);
    mb_node(&m, "Reshape:r,target->y0");
    mb_node(&m, "Slice:y0,starts,ends->y1");
    Onnx__NodeProto *r = mb_node(&m, "ReduceSum:y1,axes->y");
    mb_attr_i(&m, r, "keepdims", 1);
    mb_output(&m, "y");
    void *bytes = mb_pack(&m, size);
    mb_free(&m);
    return bytes;
}

static tdm_tensor *i64(tdm_env *env, int n, const int64_t *v) {
    int64_t d = n;
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_create(env, TDM_INT64, 1, &d, &t));
    memcpy(tdm_tensor_data(t), v, (size_t)n * sizeof *v);
    return t;
}

/* One run; returns y (caller frees). */
static tdm_tensor *run(tdm_env *env, tdm_session *s) {
    int64_t dx[3] = {2, 3, 4};
    tdm_tensor *in[4] = {NULL};
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 3, dx, &in[0]));
    float *p = tdm_tensor_data(in[0]);
    for (int i = 0; i < 24; i++) p[i] = (float)(i % 7) - 2.5f;
    int64_t st[2] = {1, 1}, en[2] = {5, 3}, ax[1] = {1};
    in[1] = i64(env, 2, st);
    in[2] = i64(env, 2, en);
    in[3] = i64(env, 1, ax);
    const char *names[4] = {"x", "starts", "ends", "axes"}, *out = "y";
    tdm_tensor *y = NULL;
    assert_null(tdm_session_run(s, 4, names, (const tdm_tensor *const *)in, 1, &out, &y));
    for (int i = 0; i < 4; i++) tdm_tensor_free(in[i]);
    return y;
}

static void check(const char *affinity) {
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.threads = 2;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(&eo, &env));
    size_t size;
    void *buf = model(&size);
    tdm_session_options so = {0};
    so.api_version = TDM_API_VERSION;
    so.opt_level = 0; /* (no folding: every node runs) */
    so.devices = "cpu";
    tdm_session *ref = NULL, *s = NULL;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &ref));
    so.devices = "test:0,cpu";
    so.placement = "test:0";
    so.affinity = affinity;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
    free(buf);
    tdm_tensor *want = run(env, ref);
    tdm_tensor_free(run(env, s)); /* (the constants go up once, in the first run) */
    for (int r = 0; r < 3; r++) {
        tdm_session_monitor_reset(s);
        tdm_tensor *y = run(env, s);
        assert_int_equal(tdm_tensor_element_count(y), 4);
        assert_int_equal(tdm_tensor_element_count(want), 4);
        const float *a = tdm_tensor_data(y), *b = tdm_tensor_data(want);
        for (int i = 0; i < 4; i++) assert_true(fabsf(a[i] - b[i]) <= 1e-5f);
        tdm_tensor_free(y);
        tdm_device_monitor m;
        assert_null(tdm_session_monitor(s, 0, &m, sizeof m));
        assert_string_equal(m.device, "test:0");
        assert_true(m.kernels >= 3); /* Relu, Reshape, Slice, ReduceSum at least */
        /* x goes up; starts, ends, axes and the Reshape target do not (host reads) */
        assert_int_equal(m.uploads, 1);
        assert_int_equal(m.bytes_uploaded, 24 * 4);
        /* y comes down; nothing for Shape (it reads r's dims where r is); the Reshape target
         * made on test:0 comes down for the shape inference, once */
        assert_int_equal(m.downloads, affinity ? 1 : 2);
    }
    tdm_tensor_free(want);
    tdm_session_free(s);
    tdm_session_free(ref);
    tdm_env_free(env);
}

/* everything on test:0 but what it cannot run: one device's executor */
static void test_one_device(void **state) {
    (void)state;
    check(NULL);
}

/* the shape arithmetic on the CPU: the multi-device executor, Shape reading a test:0 tensor
 * from the CPU and Reshape taking a target the CPU made */
static void test_split_devices(void **state) {
    (void)state;
    check("Shape=cpu;Gather=cpu;Concat=cpu");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_device, setup, teardown),
        cmocka_unit_test_setup_teardown(test_split_devices, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
