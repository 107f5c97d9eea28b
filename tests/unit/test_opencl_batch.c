/* The OpenCL backend at large batches, against the CPU backend.
 *
 * Regression test for "too many temporary buffers in one kernel": a convolution ran one
 * GEMM per image, each with two new panel buffers, so batches of 8 and more ran out of the
 * fixed table of temporaries (MobileNetV2 at batch 8 failed with an internal error). Here
 * 1x1 (GEMM-only), grouped and im2col convolutions, a fused inverted-residual block and the
 * mobilenet_block model run at batches 9, 16 and 32 on opencl:0 alone (no fallback) and on
 * the CPU with the same random inputs; every output must match within
 * |got - want| <= atol + rtol * |want|, rtol 1e-3, atol 1e-4 (GEMM accumulation order
 * differs between the backends). test_scope_many holds 100 temporaries in one scope.
 *
 * Without an OpenCL device every test prints "skipped: no OpenCL device" and passes. */
#define _GNU_SOURCE
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "tandem/tandem.h"
#ifdef TANDEM_HAVE_OPENCL
#include "backends/opencl/ocl.h"
#endif

#define DH_DEVICE "opencl:0"
#define DH_KIND "OpenCL device"
#define DH_SEED 0x2545f4914f6cdd1dull
#include "device_harness.h"

#define RTOL 1e-3
#define ATOL 1e-4

/* Runs sessions sd (opencl:0) and sc (CPU) on the same random inputs (shapes given) and
 * compares every float output. Frees both sessions. */
static void compare(tdm_session *sd, tdm_session *sc, size_t ni, const char *const *names,
                    const int *ranks, const int64_t (*dims)[8], size_t no) {
    tdm_tensor *ins[8] = {0}, *od[4] = {0}, *oc[4] = {0};
    assert_true(ni <= 8 && no <= 4);
    for (size_t i = 0; i < ni; i++) {
        OK(tdm_tensor_create(g_env, TDM_FLOAT, ranks[i], dims[i], &ins[i]));
        float *p = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++)
            p[k] = 2.0f * frand() - 1.0f;
    }
    OK(tdm_session_run(sd, ni, names, (const tdm_tensor *const *)ins, no, NULL, od));
    OK(tdm_session_run(sc, ni, names, (const tdm_tensor *const *)ins, no, NULL, oc));
    for (size_t o = 0; o < no; o++) {
        assert_int_equal(tdm_tensor_dtype(od[o]), TDM_FLOAT);
        assert_int_equal(tdm_tensor_rank(od[o]), tdm_tensor_rank(oc[o]));
        for (int i = 0; i < tdm_tensor_rank(od[o]); i++)
            assert_int_equal(tdm_tensor_dims(od[o])[i], tdm_tensor_dims(oc[o])[i]);
        const float *a = tdm_tensor_data(od[o]), *b = tdm_tensor_data(oc[o]);
        int64_t n = tdm_tensor_element_count(od[o]);
        int bad = 0;
        for (int64_t k = 0; k < n; k++) {
            double x = a[k], y = b[k];
            if (fabs(x - y) <= ATOL + RTOL * fabs(y)) continue;
            if (bad++ < 5)
                fprintf(stderr, "  output %zu [%lld]: opencl %.9g, cpu %.9g\n", o, (long long)k,
                        x, y);
        }
        assert_int_equal(bad, 0);
    }
    for (size_t i = 0; i < ni; i++) tdm_tensor_free(ins[i]);
    for (size_t o = 0; o < no; o++) {
        tdm_tensor_free(od[o]);
        tdm_tensor_free(oc[o]);
    }
    tdm_session_free(sd);
    tdm_session_free(sc);
}

static const tdm_session_options *opts(tdm_session_options *so, const char *devices,
                                       int opt_level) {
    /* placement "first" with no fallback: every node runs on opencl:0 */
    *so = (tdm_session_options){.api_version = TDM_API_VERSION, .devices = devices,
                                .threads = 1, .opt_level = opt_level,
                                .no_fallback = strcmp(devices, "cpu") != 0,
                                .placement = "first"};
    return so;
}

/* A model built in memory, on opencl:0 and on the CPU. Frees the builder. */
static void check_built(mb_model *m, int opt_level) {
    size_t size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(size);
    assert_non_null(buf);
    onnx__model_proto__pack(&m->model, buf);
    tdm_session_options a, b;
    tdm_session *sd = NULL, *sc = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, opts(&a, "opencl:0", opt_level),
                                      &sd));
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, opts(&b, "cpu", opt_level), &sc));
    free(buf);
    const char *names[8];
    for (size_t i = 0; i < m->graph.n_input; i++) names[i] = m->ins[i]->name;
    compare(sd, sc, m->graph.n_input, names, m->in_rank, (const int64_t(*)[8])m->in_dims,
            m->graph.n_output);
    mb_free(m);
}

/* Conv of x[n, c, hw, hw] with weights (and bias) as graph inputs: they are uploaded to
 * temporaries of the kernel run too, as at the time of the failure. */
static void conv_case(int64_t n, int64_t c, int64_t hw, int64_t m_out, int64_t k, int64_t group,
                      int64_t stride, int64_t pad) {
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", n, c, hw, hw);
    IN(&m, "w", m_out, c / group, k, k);
    IN(&m, "b", m_out);
    Onnx__NodeProto *node = mb_node(&m, "Conv:x,w,b->y");
    int64_t s[2] = {stride, stride}, p[4] = {pad, pad, pad, pad};
    mb_attr_ints(&m, node, "strides", 2, s);
    mb_attr_ints(&m, node, "pads", 4, p);
    mb_attr_i(&m, node, "group", group);
    mb_output(&m, "y");
    check_built(&m, 0);
}

static void test_conv_batches(void **state) {
    (void)state;
    NEED_DEVICE();
    static const int64_t batches[] = {9, 32};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        int64_t n = batches[i];
        conv_case(n, 16, 7, 24, 1, 1, 1, 0); /* 1x1: GEMM over the input as it is */
        conv_case(n, 16, 6, 8, 1, 4, 1, 0);  /* grouped 1x1 */
        conv_case(n, 3, 12, 8, 3, 1, 2, 1);  /* 3x3 stride 2: im2col, one image at a time */
        conv_case(n, 8, 5, 12, 3, 2, 1, 1);  /* grouped 3x3 */
    }
    /* 1x1 with ~2 MiB of panels per image: more images than one GEMM takes (16 MiB of
     * panels), so GEMMs of 7 and 2 images on CPU devices */
    conv_case(9, 128, 64, 8, 1, 1, 1, 0);
}

static void weights(mb_model *m, const char *name, int rank, const int64_t *dims) {
    int n = 1;
    for (int i = 0; i < rank; i++) n *= (int)dims[i];
    float *v = malloc((size_t)n * sizeof *v);
    assert_non_null(v);
    for (int i = 0; i < n; i++) v[i] = frand() - 0.5f;
    mb_init_f32(m, name, rank, dims, n, v);
    free(v);
}

/* MobileNetV2 inverted residual: 1x1 expand + Relu, 3x3 depthwise + Relu, 1x1 project,
 * + x. At opt level 1 the graph passes fuse these into FusedConv (activation, residual). */
static void test_block_batch(void **state) {
    (void)state;
    NEED_DEVICE();
    for (int opt = 0; opt <= 1; opt++) {
        mb_model m;
        mb_init(&m, 13);
        IN(&m, "x", 32, 8, 10, 10);
        int64_t we[4] = {24, 8, 1, 1}, wd[4] = {24, 1, 3, 3}, wp[4] = {8, 24, 1, 1};
        int64_t b24[1] = {24}, b8[1] = {8};
        weights(&m, "we", 4, we);
        weights(&m, "be", 1, b24);
        weights(&m, "wd", 4, wd);
        weights(&m, "bd", 1, b24);
        weights(&m, "wp", 4, wp);
        weights(&m, "bp", 1, b8);
        mb_node(&m, "Conv:x,we,be->e");
        mb_node(&m, "Relu:e->er");
        Onnx__NodeProto *dw = mb_node(&m, "Conv:er,wd,bd->d");
        int64_t p[4] = {1, 1, 1, 1};
        mb_attr_ints(&m, dw, "pads", 4, p);
        mb_attr_i(&m, dw, "group", 24);
        mb_node(&m, "Relu:d->dr");
        mb_node(&m, "Conv:dr,wp,bp->q");
        mb_node(&m, "Add:q,x->y");
        mb_output(&m, "y");
        check_built(&m, opt);
    }
}

/* tests/models/mobilenet_block (input [batch, 3, 64, 64]) at batch 16 and 32 */
static void test_mobilenet_block_model(void **state) {
    (void)state;
    NEED_DEVICE();
    const char *path = TANDEM_SOURCE_DIR "/tests/models/mobilenet_block/model.onnx";
    static const int64_t batches[] = {16, 32};
    for (size_t i = 0; i < sizeof batches / sizeof batches[0]; i++) {
        tdm_session_options a, b;
        tdm_session *sd = NULL, *sc = NULL;
        OK(tdm_session_create(g_env, path, opts(&a, "opencl:0", 1), &sd));
        OK(tdm_session_create(g_env, path, opts(&b, "cpu", 1), &sc));
        const char *names[1] = {"input"};
        int ranks[1] = {4};
        int64_t dims[1][8] = {{batches[i], 3, 64, 64}};
        compare(sd, sc, 1, names, ranks, (const int64_t(*)[8])dims, 1);
    }
}

/* A kernel run may hold any number of temporaries: 100 of them (the table grows past the
 * ones inside the scope), each still holding the value written into it when made. */
static void test_scope_many(void **state) {
    (void)state;
    NEED_DEVICE();
#ifndef TANDEM_HAVE_OPENCL
    printf("skipped: built without the OpenCL backend\n");
#else
    tdm_device *devs[8];
    int n = 0;
    char why[200] = "";
    OK(tdm_backend_opencl.discover(NULL, NULL, ocl_test_settings(), devs, 8, &n, why, sizeof why));
    assert_true(n >= 1);
    ocl_device *d = devs[0]->ctx;
    enum { COUNT = 100 };
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem mem[COUNT];
    for (int i = 0; i < COUNT; i++) {
        float v[4] = {(float)i, (float)-i, 0.5f * (float)i, 7.0f};
        OK(ocl_temp(&s, sizeof v, v, &mem[i]));
    }
    assert_int_equal(s.n, COUNT);
    for (int i = 0; i < COUNT; i++) {
        float v[4] = {0};
        assert_int_equal(clEnqueueReadBuffer(d->queue, mem[i], CL_TRUE, 0, sizeof v, v, 0, NULL,
                                             NULL),
                         CL_SUCCESS);
        assert_true(v[0] == (float)i && v[1] == (float)-i && v[2] == 0.5f * (float)i &&
                    v[3] == 7.0f);
    }
    ocl_scope_end(&s);
    assert_int_equal(s.n, 0);
    assert_null(s.more);
    for (int i = 0; i < n; i++) tdm_device_close(devs[i]);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_conv_batches),
        cmocka_unit_test(test_block_batch),
        cmocka_unit_test(test_mobilenet_block_model),
        cmocka_unit_test(test_scope_many),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
