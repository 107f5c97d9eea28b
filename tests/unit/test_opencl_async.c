/* The OpenCL device's asynchronous members (device interface version 3) and the executor's
 * asynchronous copies (sched/xfer.h) on it.
 *
 * Device level: non-blocking uploads and download_async round trips of many sizes (0 bytes,
 * odd sizes, unaligned host pointers, from and to host_alloc staging memory reused across
 * rounds); an event chain across two queues (two opened instances of the device, each with
 * its context and queue: A -> host staging -> B); an event waited on in its own queue.
 * Model level: the bundled model tests split across opencl:0 and the CPU (affinity rules put
 * some ops on the CPU, so tensors cross both ways) give the CPU-only outputs within
 * rtol 1e-3 / atol 1e-4 on three runs of one session (staging memory reused) and with
 * the sync_copies setting; a run that fails on the device (Gather index out of range) leaves the
 * session usable; a convolution over 4 spatial dims is not claimed by opencl:0 and runs on
 * the CPU. Every test prints "skipped" and passes without an OpenCL device. */
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

#include "backends/backend.h"
#include "sched/cost.h"
#include "sched/profile.h"
#include "tandem/tandem.h"

#define DH_DEVICE "opencl:0"
#define DH_KIND "OpenCL device"
#define DH_SEED 0x243f6a8885a308d3ull
#include "device_harness.h"

#ifdef TANDEM_HAVE_OPENCL
/* Opens the OpenCL devices (a new context and queue per call); NULL when there is none. */
static tdm_device *open_ocl(void) {
    tdm_device *devs[8];
    int n = 0;
    char why[200] = "";
    tdm_status *st = tdm_backend_opencl.discover(NULL, NULL, ocl_test_settings(), devs, 8, &n, why, sizeof why);
    tdm_status_free(st);
    for (int i = 1; i < n; i++) tdm_device_close(devs[i]);
    return n > 0 ? devs[0] : NULL;
}
#endif

static void fill(unsigned char *p, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 8)) & 0xff);
}

static void test_roundtrips(void **state) {
    (void)state;
#ifndef TANDEM_HAVE_OPENCL
    printf("skipped: built without the OpenCL backend\n");
#else
    tdm_device *d = open_ocl();
    if (!d) {
        printf("skipped: no OpenCL device\n");
        return;
    }
    const tdm_device_iface *f = d->iface;
    assert_true(f->api_version >= 3);
    assert_non_null(f->event_record);
    assert_non_null(f->download_async);
    assert_non_null(f->host_alloc);
    static const size_t sizes[] = {0, 1, 3, 4, 5, 63, 64, 4095, 4097, 65539, (1u << 20) + 7};
    size_t max = (1u << 20) + 64;
    unsigned char *src = malloc(max + 16), *dst = malloc(max + 16);
    void *stage_in = NULL, *stage_out = NULL; /* allocated once, reused by every round */
    OK(f->host_alloc(d, max, &stage_in));
    OK(f->host_alloc(d, max, &stage_out));
    assert_non_null(stage_in);
    for (int round = 0; round < 2; round++)
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            size_t n = sizes[i];
            bool staged = (i + (size_t)round) % 2 == 1;
            unsigned char *in = staged ? stage_in : src + 1 + i % 7;  /* unaligned */
            unsigned char *out = staged ? stage_out : dst + 3 + i % 5;
            fill(in, n, (unsigned)(i + 10 * (size_t)round));
            memset(out, 0xee, n);
            void *buf = NULL, *ev = NULL;
            OK(f->buffer_alloc(d, n, &buf));
            OK(f->upload(d, buf, in, n));
            OK(f->download_async(d, out, buf, n, &ev));
            assert_non_null(ev);
            OK(f->event_sync(d, ev));
            f->event_free(d, ev);
            if (n) assert_memory_equal(in, out, n);
            f->buffer_free(d, buf);
        }
    /* an event waited on in its own queue (a barrier), then on the host */
    void *e1 = NULL, *e2 = NULL;
    OK(f->event_record(d, &e1));
    OK(f->event_wait(d, d, e1));
    OK(f->event_record(d, &e2));
    OK(f->event_sync(d, e2));
    OK(f->event_sync(d, e1));
    f->event_free(d, e1);
    f->event_free(d, e2);
    OK(f->configure(d, "precision", "fp16")); /* declined, not an error */
    OK(f->configure(d, "unknown-key", "x"));
    tdm_status *st = f->configure(d, "precision", "fp7");
    assert_non_null(st);
    tdm_status_free(st);
    f->host_free(d, stage_in);
    f->host_free(d, stage_out);
    free(src);
    free(dst);
    tdm_device_close(d);
#endif
}

/* A -> staging -> B with events only: B's queue waits on A's download, uploads from the
 * staging memory, and B's download is waited for on the host. */
static void test_event_chain(void **state) {
    (void)state;
#ifndef TANDEM_HAVE_OPENCL
    printf("skipped: built without the OpenCL backend\n");
#else
    tdm_device *a = open_ocl(), *b = open_ocl();
    if (!a || !b) {
        printf("skipped: no OpenCL device\n");
        if (a) tdm_device_close(a);
        return;
    }
    const tdm_device_iface *f = a->iface;
    enum { N = 300007 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    for (int i = 0; i < N; i++) x[i] = (float)i * 0.25f - 7.0f;
    void *ba = NULL, *bb = NULL, *stage = NULL, *ev_a = NULL, *ev_b = NULL, *ev_up = NULL;
    OK(f->buffer_alloc(a, N * sizeof *x, &ba));
    OK(f->buffer_alloc(b, N * sizeof *x, &bb));
    OK(f->host_alloc(a, N * sizeof *x, &stage));
    for (int round = 0; round < 3; round++) {
        x[round] = (float)round; /* a different payload each round through the same staging */
        memset(y, 0, N * sizeof *y);
        OK(f->upload(a, ba, x, N * sizeof *x));
        OK(f->download_async(a, stage, ba, N * sizeof *x, &ev_a));
        OK(f->event_wait(b, a, ev_a)); /* another context: the host waits */
        OK(f->upload(b, bb, stage, N * sizeof *x));
        OK(f->event_record(b, &ev_up));
        OK(f->download_async(b, y, bb, N * sizeof *y, &ev_b));
        OK(f->event_sync(b, ev_b));
        OK(f->event_sync(b, ev_up));
        assert_memory_equal(x, y, N * sizeof *x);
        f->event_free(a, ev_a);
        f->event_free(b, ev_b);
        f->event_free(b, ev_up);
    }
    f->host_free(a, stage);
    f->buffer_free(a, ba);
    f->buffer_free(b, bb);
    free(x);
    free(y);
    tdm_device_close(a);
    tdm_device_close(b);
#endif
}

/* ---- models ---- */

static void expect_close(const tdm_tensor *got, const tdm_tensor *want, const char *what) {
    assert_int_equal(tdm_tensor_dtype(got), tdm_tensor_dtype(want));
    assert_int_equal(tdm_tensor_rank(got), tdm_tensor_rank(want));
    int64_t n = tdm_tensor_element_count(got);
    assert_int_equal(n, tdm_tensor_element_count(want));
    if (tdm_tensor_dtype(got) != TDM_FLOAT) {
        assert_memory_equal(tdm_tensor_data((tdm_tensor *)got), tdm_tensor_data((tdm_tensor *)want),
                            tdm_tensor_byte_size(got));
        return;
    }
    const float *a = tdm_tensor_data((tdm_tensor *)got), *b = tdm_tensor_data((tdm_tensor *)want);
    int bad = 0;
    for (int64_t k = 0; k < n; k++) {
        bool same = (isnan(a[k]) && isnan(b[k])) || fabs((double)a[k] - b[k]) <= 1e-4 + 1e-3 * fabs((double)b[k]);
        if (!same && bad++ < 5) fprintf(stderr, "  %s [%lld]: %.9g, cpu %.9g\n", what, (long long)k, a[k], b[k]);
    }
    assert_int_equal(bad, 0);
}

/* Random inputs for a model (dynamic dims 1); returns the count. */
static size_t make_inputs(tdm_session *s, tdm_tensor **ins, const char **names) {
    const tdm_model *m = tdm_session_model(s);
    size_t n = tdm_model_input_count(m);
    for (size_t i = 0; i < n; i++) {
        tdm_value_desc d;
        OK(tdm_model_input(m, i, &d));
        int64_t dims[TDM_MAX_RANK];
        for (int k = 0; k < d.rank; k++) dims[k] = d.dims[k] < 0 ? 1 : d.dims[k];
        names[i] = d.name;
        OK(tdm_tensor_create(g_env, d.dtype, d.rank, dims, &ins[i]));
        if (d.dtype == TDM_FLOAT) {
            float *p = tdm_tensor_data(ins[i]);
            for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) p[k] = 2.0f * frand() - 1.0f;
        } else if (d.dtype == TDM_INT64) { /* indices: small and in range */
            int64_t *p = tdm_tensor_data(ins[i]);
            for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) p[k] = (int64_t)(frand() * 2);
        }
    }
    return n;
}

static void run_split(tdm_env *env, const char *model, const char *affinity, int runs) {
    char path[512];
    snprintf(path, sizeof path, "%s/tests/models/%s/model.onnx", TANDEM_SOURCE_DIR, model);
    tdm_session_options so_mix = {.api_version = TDM_API_VERSION, .devices = "opencl:0,cpu",
                                  .threads = 1, .opt_level = 1, .placement = "first",
                                  .affinity = affinity};
    tdm_session_options so_cpu = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 1,
                                  .opt_level = 1};
    tdm_session *sm = NULL, *sc = NULL;
    OK(tdm_session_create(env, path, &so_mix, &sm));
    OK(tdm_session_create(env, path, &so_cpu, &sc));
    tdm_tensor *ins[16] = {0};
    const char *names[16];
    size_t ni = make_inputs(sc, ins, names);
    size_t no = tdm_model_output_count(tdm_session_model(sc));
    assert_true(no <= 8);
    tdm_tensor *oc[8] = {0};
    OK(tdm_session_run(sc, ni, names, (const tdm_tensor *const *)ins, no, NULL, oc));
    for (int r = 0; r < runs; r++) {
        tdm_tensor *om[8] = {0};
        OK(tdm_session_run(sm, ni, names, (const tdm_tensor *const *)ins, no, NULL, om));
        for (size_t o = 0; o < no; o++) {
            expect_close(om[o], oc[o], model);
            tdm_tensor_free(om[o]);
        }
    }
    for (size_t i = 0; i < ni; i++) tdm_tensor_free(ins[i]);
    for (size_t o = 0; o < no; o++) tdm_tensor_free(oc[o]);
    tdm_session_free(sm);
    tdm_session_free(sc);
}

static const struct {
    const char *model, *affinity;
} splits[] = {
    {"resnet_blocks", "Add=cpu;GlobalAveragePool=cpu"},
    {"mobilenet_block", "Relu=cpu;Clip=cpu;Add=cpu"},
    {"bert_layer", "Softmax=cpu;Add=cpu"},
    {"yolo_like_head", "Concat=cpu;Sigmoid=cpu"},
    {"dlrm_like", "Concat=cpu;Relu=cpu"},
    {"mlp_dynamic_batch", "Relu=cpu"},
};

static void test_split_models(void **state) {
    (void)state;
    NEED_DEVICE();
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) run_split(g_env, splits[i].model, splits[i].affinity, 3);
}

static void test_split_models_blocking(void **state) {
    (void)state;
    NEED_DEVICE();
    /* the sync_copies setting (TANDEM_SYNC_COPIES=1) belongs to the environment */
    tdm_env_options eo = {.api_version = TDM_API_VERSION, .sync_copies = TDM_SETTING_ON};
    tdm_env *env = NULL;
    OK(tdm_env_create(&eo, &env));
    for (size_t i = 0; i < sizeof splits / sizeof splits[0]; i++) run_split(env, splits[i].model, splits[i].affinity, 1);
    tdm_env_free(env);
}

static tdm_session *builder_session(mb_model *m, const char *devices, const char *placement) {
    size_t size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(size);
    onnx__model_proto__pack(&m->model, buf);
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = devices, .threads = 1,
                              .opt_level = 0, .placement = placement};
    tdm_session *s = NULL;
    OK(tdm_session_create_from_buffer(g_env, buf, size, NULL, &so, &s));
    free(buf);
    return s;
}

/* x (opencl) -> Relu -> Gather by runtime indices (opencl) -> Sinh (cpu): a bad index fails
 * the run; the next run with good indices works and matches the CPU. */
static void test_run_after_failure(void **state) {
    (void)state;
    NEED_DEVICE();
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 5, 3);
    Onnx__ValueInfoProto *iv = mb_value(&m, "i", ONNX__TENSOR_PROTO__DATA_TYPE__INT64, 1, (int64_t[]){2});
    m.in_rank[m.graph.n_input] = 1;
    m.in_dims[m.graph.n_input][0] = 2;
    m.ins[m.graph.n_input++] = iv;
    mb_node(&m, "Relu:x->r");
    mb_node(&m, "Gather:r,i->g");
    mb_node(&m, "Sinh:g->y");
    mb_output(&m, "y");
    tdm_session *s = builder_session(&m, "opencl:0,cpu", "first");
    tdm_session *c = builder_session(&m, "cpu", NULL);
    mb_free(&m);
    int64_t dx[2] = {5, 3}, di[1] = {2};
    tdm_tensor *in[2] = {NULL, NULL}, *y = NULL, *yc = NULL;
    OK(tdm_tensor_create(g_env, TDM_FLOAT, 2, dx, &in[0]));
    OK(tdm_tensor_create(g_env, TDM_INT64, 1, di, &in[1]));
    float *px = tdm_tensor_data(in[0]);
    for (int k = 0; k < 15; k++) px[k] = (float)k - 6.5f;
    int64_t *pi = tdm_tensor_data(in[1]);
    const char *names[2] = {"x", "i"};
    pi[0] = 1;
    pi[1] = 9; /* out of range */
    tdm_status *st = tdm_session_run(s, 2, names, (const tdm_tensor *const *)in, 1, NULL, &y);
    assert_non_null(st);
    assert_null(y);
    tdm_status_free(st);
    pi[1] = -1;
    OK(tdm_session_run(s, 2, names, (const tdm_tensor *const *)in, 1, NULL, &y));
    OK(tdm_session_run(c, 2, names, (const tdm_tensor *const *)in, 1, NULL, &yc));
    expect_close(y, yc, "after a failed run");
    tdm_tensor_free(y);
    tdm_tensor_free(yc);
    tdm_tensor_free(in[0]);
    tdm_tensor_free(in[1]);
    tdm_session_free(s);
    tdm_session_free(c);
}

/* A rank-6 input (4 spatial dims) is more than the OpenCL pooling and convolution kernels do:
 * the device does not claim the node, placement (auto, and "opencl:0", which puts there
 * everything the device claims) puts it on the CPU, and the run matches the CPU. */
static void test_high_rank_window_on_cpu(void **state) {
    (void)state;
    NEED_DEVICE();
    mb_model m;
    mb_init(&m, 13);
    int64_t dx[6] = {1, 2, 4, 4, 4, 4};
    m.in_rank[0] = 6;
    memcpy(m.in_dims[0], dx, sizeof dx);
    m.ins[m.graph.n_input++] = mb_value(&m, "x", 1, 6, dx);
    Onnx__NodeProto *n = mb_node(&m, "MaxPool:x->p");
    mb_attr_ints(&m, n, "kernel_shape", 4, (int64_t[]){2, 2, 2, 2});
    mb_node(&m, "Relu:p->y");
    mb_output(&m, "y");
    tdm_session *s[2] = {builder_session(&m, "opencl:0,cpu", NULL),
                         builder_session(&m, "opencl:0,cpu", "opencl:0")};
    tdm_session *c = builder_session(&m, "cpu", NULL);
    mb_free(&m);
    tdm_tensor *x = NULL, *yc = NULL;
    OK(tdm_tensor_create(g_env, TDM_FLOAT, 6, dx, &x));
    float *px = tdm_tensor_data(x);
    for (int k = 0; k < 512; k++) px[k] = frand() - 0.5f;
    const char *name = "x";
    OK(tdm_session_run(c, 1, &name, (const tdm_tensor *const *)&x, 1, NULL, &yc));
    for (int pass = 0; pass < 2; pass++) {
        char *text = NULL;
        OK(tdm_session_explain(s[pass], TDM_EXPLAIN_JSON, &text));
        const char *pool = strstr(text, "\"MaxPool\"");
        assert_non_null(pool);
        const char *dev = strstr(pool, "\"device\"");
        assert_non_null(dev);
        const char *cpu = strstr(dev, "\"cpu\"");
        assert_true(cpu && cpu - dev < 16); /* this node's device, not a later one's */
        tdm_string_free(text);
        tdm_tensor *y = NULL;
        OK(tdm_session_run(s[pass], 1, &name, (const tdm_tensor *const *)&x, 1, NULL, &y));
        expect_close(y, yc, "rank-6 MaxPool");
        tdm_tensor_free(y);
        tdm_session_free(s[pass]);
    }
    tdm_tensor_free(x);
    tdm_tensor_free(yc);
    tdm_session_free(c);
}

/* The profile's copy figures per direction and host memory kind, kept by the cache. */
static void test_profile_pinned(void **state) {
    (void)state;
    NEED_DEVICE();
    size_t idx = 0;
    for (size_t i = 0; i < tdm_env_device_count(g_env); i++)
        if (!strcmp(tdm_env_device_name(g_env, i), "opencl:0")) idx = i;
    tdm_device_info a, b;
    OK(tdm_env_device_profile(g_env, idx, false, &a));
    OK(tdm_env_device_profile(g_env, idx, false, &b));
    assert_true(b.from_cache);
    assert_true(a.h2d_gbps > 0 && a.d2h_gbps > 0 && a.h2d_pinned_gbps > 0 && a.d2h_pinned_gbps > 0);
    assert_true(a.h2d_latency_us > 0 && a.d2h_latency_us > 0);
    assert_true(a.h2d_pinned_latency_us > 0 && a.d2h_pinned_latency_us > 0);
    assert_true(a.h2d_pinned_gbps == b.h2d_pinned_gbps && a.d2h_pinned_latency_us == b.d2h_pinned_latency_us);
    printf("opencl:0 h2d %.2f GB/s %.1f us, pinned %.2f GB/s %.1f us; d2h %.2f GB/s %.1f us, "
           "pinned %.2f GB/s %.1f us\n", a.h2d_gbps, a.h2d_latency_us, a.h2d_pinned_gbps,
           a.h2d_pinned_latency_us, a.d2h_gbps, a.d2h_latency_us, a.d2h_pinned_gbps,
           a.d2h_pinned_latency_us);
}

/* The cost model reads the pinned figures of a device whose copies are staged. */
static void test_cost_staged(void **state) {
    (void)state;
    tdm_device_profile host = {.device = "cpu"}, dev = {.device = "acc"};
    dev.h2d_gbps = dev.d2h_gbps = 1;
    dev.link_latency_us = 100;
    dev.h2d_pinned_gbps = dev.d2h_pinned_gbps = 10;
    dev.h2d_pinned_latency_us = dev.d2h_pinned_latency_us = 10;
    double pageable = tdm_cost_copy_ms(1e6, &host, &dev);
    assert_true(fabs(pageable - (0.1 + 1.0)) < 1e-9); /* 100 us + 1 MB at 1 GB/s */
    dev.staged_copies = true;
    double pinned = tdm_cost_copy_ms(1e6, &host, &dev);
    assert_true(fabs(pinned - (0.01 + 0.1)) < 1e-9);
    assert_true(fabs(tdm_cost_copy_ms(1e6, &dev, &host) - (0.01 + 0.1)) < 1e-9);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrips),
        cmocka_unit_test(test_event_chain),
        cmocka_unit_test(test_split_models),
        cmocka_unit_test(test_split_models_blocking),
        cmocka_unit_test(test_run_after_failure),
        cmocka_unit_test(test_high_rank_window_on_cpu),
        cmocka_unit_test(test_profile_pinned),
        cmocka_unit_test(test_cost_staged),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
