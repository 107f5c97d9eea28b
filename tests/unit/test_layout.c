/* Blocked-layout pass (src/graph/fuse_blocked.c) and the blocked kernels: small graphs run
 * with opt-level 0 (plain NCHW, no passes) and opt-level 1 (fusion + blocked layout), and
 * the outputs must agree within rtol 1e-4 / atol 1e-4 (the same oneDNN convolutions in
 * another layout: only the summation order differs). Each case also checks which ops the
 * optimised graph holds, so a pass that silently stops rewriting fails too. Channel counts
 * are mostly not multiples of the block (8 or 16: oneDNN's for the CPU) to exercise the
 * padding. The cases run with cpu_layout "blocked" (the CPU's channel block), and those that
 * say so with "channels_last" (taken where oneDNN prefers it, as on AVX-512 with brgemm
 * convolutions) or "auto" too; ctest runs the file again one ISA level below
 * (test_layout_isa_below). */
#define _XOPEN_SOURCE 700 /* (nftw) */
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/cpu_device.h"
#include "counting_alloc.h"
#include "model_builder.h"
#include "ops/fused.h"
#include "tandem/tandem.h"

typedef struct run_cfg {
    const char *devices;   /* of the optimised session (the reference runs on "cpu") */
    const char *placement;
    const char *affinity;
    int threads;
    const char *layout;    /* cpu_layout (NULL: "blocked"; the cases that check both say so) */
} run_cfg;

typedef struct layout_result {
    char ops[1024]; /* op histogram of the optimised session, "Op:n Op:n " */
    size_t off_cpu;  /* nodes of the optimised session placed on another device than "cpu" */
    bool cl;         /* the layout is channels-last (asked for, and oneDNN prefers it here) */
} layout_result;

/* Reads the optimised session's plan (explain JSON): counts the nodes off the CPU and fails
 * when a node of the blocked layout (or a node reading a blocked tensor, which only these
 * produce on the CPU side) is placed anywhere but on the CPU. */
static void check_devices(tdm_session *s, layout_result *r) {
    char *json = NULL;
    tdm_status *st = tdm_session_explain(s, TDM_EXPLAIN_JSON, &json);
    if (st) fail_msg("explain: %s", tdm_status_message(st));
    r->off_cpu = 0;
    for (const char *p = strstr(json, "\"op\":\""); p; p = strstr(p + 1, "\"op\":\"")) {
        char op[64] = "", dev[64] = "";
        sscanf(p, "\"op\":\"%63[^\"]", op);
        const char *d = strstr(p, "\"device\":\"");
        assert_non_null(d);
        sscanf(d, "\"device\":\"%63[^\"]", dev);
        if (strcmp(dev, "cpu") != 0) {
            r->off_cpu++;
            if (strstr(op, "Blocked")) fail_msg("%s placed on %s", op, dev);
        }
    }
    tdm_string_free(json);
}

static size_t op_count(const layout_result *r, const char *op) {
    char key[64], hay[1030];
    snprintf(key, sizeof key, " %s:", op);
    snprintf(hay, sizeof hay, " %s", r->ops);
    const char *p = strstr(hay, key);
    return p ? (size_t)strtoul(p + strlen(key), NULL, 10) : 0;
}

static void run_cmp(mb_model *b, const run_cfg *cfg, layout_result *r) {
    size_t size = onnx__model_proto__get_packed_size(&b->model);
    void *buf = malloc(size);
    assert_non_null(buf);
    onnx__model_proto__pack(&b->model, buf);
    tdm_env *env = NULL;
    const char *layout = cfg->layout ? cfg->layout : "blocked";
    tdm_env_options eo = {.api_version = TDM_API_VERSION, .cpu_layout = layout};
    assert_null(tdm_env_create(&eo, &env));
    bool prefers = false; /* (after the environment: oneDNN's ISA is capped then) */
    tdm_cpu_dnnl_probe_block(&prefers);
    r->cl = prefers && strcmp(layout, "channels_last") == 0;
    size_t n_in = b->graph.n_input, n_out = b->graph.n_output;
    tdm_tensor *ins[MB_MAX] = {0}, *outs[2][MB_MAX] = {{0}};
    const char *names[MB_MAX];
    mb_rng_state = 777;
    for (size_t i = 0; i < n_in; i++) {
        names[i] = b->ins[i]->name;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, b->in_rank[i], b->in_dims[i], &ins[i]));
        float *d = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) d[k] = mb_rnd();
    }
    for (int opt = 0; opt <= 1; opt++) {
        tdm_session_options so = {.api_version = TDM_API_VERSION,
                                  .devices = opt ? cfg->devices : "cpu",
                                  .threads = cfg->threads,
                                  .opt_level = opt,
                                  .placement = opt ? cfg->placement : NULL,
                                  .affinity = opt ? cfg->affinity : NULL};
        tdm_session *s = NULL;
        tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
        if (st) fail_msg("opt %d: %s", opt, tdm_status_message(st));
        if (opt == 1) {
            const tdm_model *m = tdm_session_model(s);
            size_t len = 0;
            r->ops[0] = 0;
            for (size_t i = 0; i < tdm_model_op_type_count(m); i++) {
                size_t c;
                const char *op = tdm_model_op_type(m, i, &c);
                len += (size_t)snprintf(r->ops + len, sizeof r->ops - len, "%s:%zu ", op, c);
            }
            check_devices(s, r);
        }
        for (int rep = 0; rep < 2; rep++) { /* the second run reuses cached primitives */
            for (size_t o = 0; o < n_out; o++) tdm_tensor_free(outs[opt][o]);
            st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, NULL,
                                 outs[opt]);
            if (st) fail_msg("opt %d run: %s", opt, tdm_status_message(st));
        }
        tdm_session_free(s);
    }
    for (size_t o = 0; o < n_out; o++) {
        const tdm_tensor *a = outs[0][o], *c = outs[1][o];
        assert_int_equal(tdm_tensor_rank(a), tdm_tensor_rank(c));
        for (int d = 0; d < tdm_tensor_rank(a); d++)
            assert_int_equal(tdm_tensor_dims(a)[d], tdm_tensor_dims(c)[d]);
        const float *x = tdm_tensor_data(outs[0][o]), *y = tdm_tensor_data(outs[1][o]);
        for (int64_t k = 0; k < tdm_tensor_element_count(a); k++)
            if (!(fabsf(x[k] - y[k]) <= 1e-4f + 1e-4f * fabsf(x[k])))
                fail_msg("output %zu element %lld: %.8g (plain) vs %.8g (blocked); ops: %s", o,
                         (long long)k, x[k], y[k], r->ops);
        tdm_tensor_free(outs[0][o]);
        tdm_tensor_free(outs[1][o]);
    }
    for (size_t i = 0; i < n_in; i++) tdm_tensor_free(ins[i]);
    tdm_env_free(env);
    free(buf);
}

static const run_cfg cpu1 = {"cpu", NULL, NULL, 1};
static const run_cfg cpu2 = {"cpu", NULL, NULL, 2};

/* Conv with a [m, c, k, k] weight, pads k/2, stride s, bias; returns the node. */
static Onnx__NodeProto *conv(mb_model *b, const char *spec, const char *w, const char *bias, int64_t m,
                             int64_t c, int64_t k, int64_t s) {
    int64_t wd[4] = {m, c, k, k};
    mb_weight(b, w, 4, wd, NULL, 0, 0.5f);
    mb_weight(b, bias, 1, &m, NULL, 0, 0.5f);
    Onnx__NodeProto *n = mb_node(b, spec);
    int64_t p = k / 2, pads[4] = {p, p, p, p}, st[2] = {s, s};
    mb_attr_ints(b, n, "pads", 4, pads);
    mb_attr_ints(b, n, "strides", 2, st);
    return n;
}

/* Odd channel counts through a chain: Conv+Relu, strided Conv+Clip, MaxPool, depthwise
 * Conv, AveragePool, Conv, GlobalAveragePool, Flatten (plain). */
static void chain_model(mb_model *b, int64_t n) {
    int64_t xd[4] = {n, 5, 13, 13};
    mb_input_run(b, "x", 4, xd, NULL);
    conv(b, "Conv:x,W1,B1->c1", "W1", "B1", 12, 5, 3, 1);
    mb_node(b, "Relu:c1->r1");
    conv(b, "Conv:r1,W2,B2->c2", "W2", "B2", 20, 12, 3, 2);
    mb_scalar(b, "lo", 0.0f);
    mb_scalar(b, "hi", 0.6f);
    mb_node(b, "Clip:c2,lo,hi->r2");
    Onnx__NodeProto *mp = mb_node(b, "MaxPool:r2->p1");
    int64_t k3[2] = {3, 3}, s2[2] = {2, 2}, p1[4] = {1, 1, 1, 1};
    mb_attr_ints(b, mp, "kernel_shape", 2, k3);
    mb_attr_ints(b, mp, "strides", 2, s2);
    mb_attr_ints(b, mp, "pads", 4, p1);
    Onnx__NodeProto *dw = conv(b, "Conv:p1,W3,B3->c3", "W3", "B3", 20, 1, 3, 1);
    mb_attr_i(b, dw, "group", 20);
    Onnx__NodeProto *ap = mb_node(b, "AveragePool:c3->p2");
    int64_t k2[2] = {2, 2}, s1[2] = {1, 1};
    mb_attr_ints(b, ap, "kernel_shape", 2, k2);
    mb_attr_ints(b, ap, "strides", 2, s1);
    conv(b, "Conv:p2,W4,B4->c4", "W4", "B4", 11, 20, 1, 1);
    mb_node(b, "GlobalAveragePool:c4->g");
    mb_node(b, "Flatten:g->y");
    mb_output(b, "y");
}

static void test_chain_odd_channels(void **state) {
    (void)state;
    const run_cfg *cfgs[] = {&cpu1, &cpu2};
    for (int n = 1; n <= 3; n += 2)
        for (size_t c = 0; c < 2; c++) {
            mb_model b;
            mb_init(&b, 17);
            chain_model(&b, n);
            layout_result r;
            run_cmp(&b, cfgs[c], &r);
            if (op_count(&r, "BlockedConv") != 4 || op_count(&r, "BlockedPool") != 3 ||
                op_count(&r, "FromBlocked") != 1 || op_count(&r, "Conv") + op_count(&r, "MaxPool"))
                fail_msg("batch %d threads %d: %s", n, cfgs[c]->threads, r.ops);
            mb_free(&b);
        }
}

/* Poolings oneDNN declines (AveragePool with ceil_mode and count_include_pad: ONNX's
 * divisor differs from oneDNN's) take the generic path through plain copies. */
static void test_pool_fallback(void **state) {
    (void)state;
    mb_model b;
    mb_init(&b, 17);
    int64_t xd[4] = {2, 3, 12, 12};
    mb_input_run(&b, "x", 4, xd, NULL);
    conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 11, 3, 3, 1);
    Onnx__NodeProto *ap = mb_node(&b, "AveragePool:c1->p");
    int64_t k3[2] = {3, 3}, s2[2] = {2, 2};
    mb_attr_ints(&b, ap, "kernel_shape", 2, k3);
    mb_attr_ints(&b, ap, "strides", 2, s2);
    mb_attr_i(&b, ap, "ceil_mode", 1);
    mb_attr_i(&b, ap, "count_include_pad", 1);
    conv(&b, "Conv:p,W2,B2->y", "W2", "B2", 4, 11, 3, 1);
    mb_output(&b, "y");
    layout_result r;
    run_cmp(&b, &cpu1, &r);
    if (op_count(&r, "BlockedPool") != 1 || op_count(&r, "BlockedConv") != 2) fail_msg("%s", r.ops);
    mb_free(&b);
}

/* Max pooling on blocked X at stride 1 and on channels-last X at any stride runs tandem's loop
 * (k_dnnl_pool.c max_rows), not oneDNN's: blocked 2x2 SAME_UPPER (PP-OCRv6 det's) and 3x3 pads
 * 1, odd channels (a padded last block); channels-last 3x3 stride 2 pads 1 (ResNet-50's) on 80
 * channels (64 lanes and a tail) and 3x3 stride 2 with ceil_mode on 11; outputs of both signs
 * (a padded position must never win), 1 and 2 threads. */
static void test_maxpool_own(void **state) {
    (void)state;
    for (int form = 0; form < 4; form++)
        for (int t = 1; t <= 2; t++) {
            mb_model b;
            mb_init(&b, 17);
            int64_t xd[4] = {2, 3, 17, 23}, m = form == 2 ? 80 : 11;
            mb_input_run(&b, "x", 4, xd, NULL);
            conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", m, 3, 3, 1);
            Onnx__NodeProto *mp = mb_node(&b, "MaxPool:c1->p");
            int64_t k2[2] = {2, 2}, k3[2] = {3, 3}, s1[2] = {1, 1}, s2[2] = {2, 2};
            int64_t p1[4] = {1, 1, 1, 1};
            mb_attr_ints(&b, mp, "kernel_shape", 2, form ? k3 : k2);
            mb_attr_ints(&b, mp, "strides", 2, form >= 2 ? s2 : s1);
            if (form == 0) mb_attr_s(&b, mp, "auto_pad", "SAME_UPPER");
            else if (form < 3) mb_attr_ints(&b, mp, "pads", 4, p1);
            else mb_attr_i(&b, mp, "ceil_mode", 1);
            conv(&b, "Conv:p,W2,B2->y", "W2", "B2", 4, m, 3, 1);
            mb_output(&b, "y");
            layout_result r;
            run_cfg cfg = {"cpu", NULL, NULL, t, form >= 2 ? "channels_last" : "blocked"};
            run_cmp(&b, &cfg, &r);
            if (op_count(&r, "BlockedPool") != 1 || op_count(&r, "BlockedConv") != 2)
                fail_msg("form %d threads %d: %s", form, t, r.ops);
            mb_free(&b);
        }
}

/* Residual blocks: Conv + Add fuse into a BlockedConv with a blocked Z; an Add of two
 * activated convolutions stays an Add on blocked tensors; a Z from a graph input gets a
 * ToBlocked. */
static void test_residual_add(void **state) {
    (void)state;
    mb_model b;
    mb_init(&b, 17);
    int64_t xd[4] = {2, 6, 10, 10}, zd[4] = {2, 10, 10, 10};
    mb_input_run(&b, "x", 4, xd, NULL);
    mb_input_run(&b, "z", 4, zd, NULL);
    conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 10, 6, 3, 1);
    mb_node(&b, "Relu:c1->r1");
    conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", 10, 10, 3, 1);
    mb_node(&b, "Add:c2,r1->s1");            /* fused: Z = r1 (blocked) */
    mb_node(&b, "Relu:s1->t1");
    conv(&b, "Conv:t1,W3,B3->c3", "W3", "B3", 10, 10, 1, 1);
    mb_node(&b, "Sigmoid:c3->a3");          /* fused into the conv */
    mb_node(&b, "Add:a3,t1->s2");            /* stays: both blocked */
    conv(&b, "Conv:s2,W4,B4->c4", "W4", "B4", 10, 10, 3, 1);
    mb_node(&b, "Add:c4,z->y");              /* fused: Z = ToBlocked(z) */
    mb_output(&b, "y");
    layout_result r;
    run_cmp(&b, &cpu2, &r);
    if (op_count(&r, "BlockedConv") != 4 || op_count(&r, "Add") != 1 ||
        op_count(&r, "ToBlocked") != 1 || op_count(&r, "FromBlocked") != 1)
        fail_msg("%s", r.ops);
    mb_free(&b);
}

/* Channel Concat: a Concat on the block axis when every input's channel count is a multiple
 * of the block (8 or 16, oneDNN's for this CPU: 16 is a multiple of both), a BlockedConcat
 * that packs the channels otherwise (13 + 16 + 16); channels-last: a Concat on the last axis
 * either way. The chain stays blocked. */
static void test_concat(void **state) {
    (void)state;
    for (int v = 0; v < 4; v++) {
        int odd = v & 1;
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {1, 3, 9, 9};
        mb_input_run(&b, "x", 4, xd, NULL);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 16, 3, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", odd ? 13 : 16, 16, 3, 1);
        conv(&b, "Conv:r1,W3,B3->c3", "W3", "B3", 16, 16, 1, 1);
        Onnx__NodeProto *cc = mb_node(&b, "Concat:c2,c3,r1->cat");
        mb_attr_i(&b, cc, "axis", odd ? 1 : -3);
        conv(&b, "Conv:cat,W4,B4->y", "W4", "B4", 5, odd ? 45 : 48, 3, 1);
        mb_output(&b, "y");
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, 1, v < 2 ? "blocked" : "channels_last"};
        run_cmp(&b, &cfg, &r);
        bool packs = odd && !r.cl;
        if (op_count(&r, "Concat") != (packs ? 0u : 1u) ||
            op_count(&r, "BlockedConcat") != (packs ? 1u : 0u) || op_count(&r, "FromBlocked") != 1 ||
            op_count(&r, "BlockedConv") != 4 || op_count(&r, "Conv") != 0)
            fail_msg("odd %d, channels-last %d: %s", odd, r.cl, r.ops);
        mb_free(&b);
    }
}

/* Channel Split into counts that are not multiples of 8 or 16 (10 + 14), its sizes given as
 * an input (opset 13) and as an attribute (opset 11), then a squeeze-excitation scale on one
 * half ([N, C, 1, 1] broadcast over H and W) and a Concat back: channels-last keeps the
 * whole graph in its layout (Split and Concat on the last axis, one FromBlocked for the
 * output); the channel-blocked layouts read the Split through a FromBlocked. Batch 2, 1 and
 * 2 threads. */
static void test_split_odd(void **state) {
    (void)state;
    for (int v = 0; v < 8; v++) {
        int attr = v & 1;
        mb_model b;
        mb_init(&b, attr ? 11 : 13);
        int64_t xd[4] = {2, 5, 11, 9}, sz[2] = {10, 14};
        mb_input_run(&b, "x", 4, xd, NULL);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 24, 5, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        Onnx__NodeProto *sp;
        if (attr) {
            sp = mb_node(&b, "Split:r1->h1,h2");
            mb_attr_ints(&b, sp, "split", 2, sz);
        } else {
            mb_init_i64(&b, "sizes", 2, sz);
            sp = mb_node(&b, "Split:r1,sizes->h1,h2");
        }
        mb_attr_i(&b, sp, "axis", 1);
        conv(&b, "Conv:h1,W2,B2->c2", "W2", "B2", 10, 10, 3, 1);
        mb_node(&b, "GlobalAveragePool:h2->g");
        conv(&b, "Conv:g,W3,B3->c3", "W3", "B3", 14, 14, 1, 1);
        mb_node(&b, "Sigmoid:c3->s");
        mb_node(&b, "Mul:h2,s->m");
        Onnx__NodeProto *cc = mb_node(&b, "Concat:c2,m->cat");
        mb_attr_i(&b, cc, "axis", 1);
        conv(&b, "Conv:cat,W4,B4->y", "W4", "B4", 7, 24, 3, 2);
        mb_output(&b, "y");
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, v & 2 ? 2 : 1, v < 4 ? "blocked" : "channels_last"};
        run_cmp(&b, &cfg, &r);
        if (r.cl ? op_count(&r, "FromBlocked") != 1 || op_count(&r, "Split") != 1 ||
                       op_count(&r, "Concat") != 1 || op_count(&r, "Mul") != 1 ||
                       op_count(&r, "BlockedConv") != 4 || op_count(&r, "BlockedPool") != 1
                 : op_count(&r, "FromBlocked") < 2)
            fail_msg("variant %d (channels-last %d): %s", v, r.cl, r.ops);
        mb_free(&b);
    }
}

/* cpu_layout auto: channels-last (where oneDNN prefers it) when dense k x k convolutions with
 * channel counts in multiples of 16 do at least a quarter of the work (here a 32 -> 32 3x3,
 * ~90%), the channel block otherwise (the same graph with a 32 -> 24 3x3); and the channel
 * block with a known batch of 8 or more images per thread (8 images on 1 thread; on 2
 * threads, 4 each, channels-last). Seen in how the 13 + 32 (or 24) channel Concat is made: a
 * Concat on channels-last twins, a BlockedConcat on blocks. */
static void test_auto_layout(void **state) {
    (void)state;
    bool prefers = false;
    tdm_cpu_dnnl_probe_block(&prefers);
    for (int v = 0; v < 5; v++) {
        int aligned = v != 0, threads = v == 4 ? 2 : 1;
        int64_t n = v >= 2 ? 8 : v == 1 ? 7 : 1;
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {n, 32, 20, 20}, m1 = aligned ? 32 : 24;
        mb_input_run(&b, "x", 4, xd, NULL);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", m1, 32, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", 13, m1, 1, 1);
        mb_attr_i(&b, mb_node(&b, "Concat:c2,r1->cat"), "axis", 1);
        conv(&b, "Conv:cat,W3,B3->y", "W3", "B3", 8, 13 + m1, 1, 1);
        mb_output(&b, "y");
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, threads, "auto"};
        run_cmp(&b, &cfg, &r);
        bool cl = prefers && aligned && n < 8 * threads;
        if (op_count(&r, "BlockedConcat") != (cl ? 0u : 1u) ||
            op_count(&r, "Concat") != (cl ? 1u : 0u) || op_count(&r, "BlockedConv") != 3)
            fail_msg("aligned %d, %lld images on %d threads (oneDNN prefers channels-last: %d): %s",
                     aligned, (long long)n, threads, prefers, r.ops);
        mb_free(&b);
    }
}

/* A dynamic batch under cpu_layout auto: the plan is made channels-last (the batch is not
 * known), and a run of 8 images on 1 thread takes the latency strategy's second plan, in
 * channel blocks (sched/strategy_latency.c), 1 image the first; both against opt level 0. */
static void test_dynamic_batch_plans(void **state) {
    (void)state;
    for (int v = 0; v < 2; v++) {
        mb_model b;
        mb_init(&b, 17);
        int64_t decl[4] = {-1, 32, 20, 20}, run[4] = {v ? 8 : 1, 32, 20, 20};
        mb_input_run(&b, "x", 4, decl, run);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 32, 32, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", 32, 32, 3, 1);
        mb_node(&b, "Add:c2,r1->s2");
        mb_attr_i(&b, mb_node(&b, "Concat:s2,r1->cat"), "axis", 1);
        conv(&b, "Conv:cat,W3,B3->y", "W3", "B3", 8, 64, 1, 1);
        mb_output(&b, "y");
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, 1, "auto"};
        run_cmp(&b, &cfg, &r);
        if (op_count(&r, "BlockedConv") != 3)
            fail_msg("%lld images: %s", (long long)run[0], r.ops);
        mb_free(&b);
    }
}

/* The latency strategy's copy of the graph for its second plan (a dynamic batch, channels-last
 * first plan) shares the weights' bytes: creating the session allocates less than a quarter
 * of the weights more than with the batch fixed at 1 (where no copy is kept); a full copy
 * would add all of them. Runs of 8 images (the second plan, made from the copy) and of 1, then
 * the session and the environment freed: no block left (and under ASan no read after a free,
 * no double free). */
static void test_dynamic_batch_shares_weights(void **state) {
    (void)state;
    const int64_t C = 128, HW = 8;
    const double w_bytes = 2.0 * (double)(C * C * 9 * 4);
    long made[2] = {0, 0};
    bool prefers = false;
    for (int dyn = 0; dyn < 2; dyn++) {
        mb_model b;
        mb_init(&b, 17);
        int64_t decl[4] = {dyn ? -1 : 1, C, HW, HW}, run[4] = {1, C, HW, HW};
        mb_input_run(&b, "x", 4, decl, run);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", C, C, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        conv(&b, "Conv:r1,W2,B2->y", "W2", "B2", C, C, 3, 1);
        mb_output(&b, "y");
        size_t size = onnx__model_proto__get_packed_size(&b.model);
        void *buf = malloc(size);
        assert_non_null(buf);
        onnx__model_proto__pack(&b.model, buf);
        mb_free(&b);
        counter c = {0};
        tdm_env_options eo = {.api_version = TDM_API_VERSION, .cpu_layout = "auto",
                              .allocator = {c_alloc, c_free, &c}};
        tdm_env *env = NULL;
        assert_null(tdm_env_create(&eo, &env));
        tdm_cpu_dnnl_probe_block(&prefers);
        tdm_session_options so = {.api_version = TDM_API_VERSION, .threads = 1, .opt_level = 1};
        tdm_session *s = NULL;
        long before = atomic_load(&c.bytes);
        assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
        made[dyn] = atomic_load(&c.bytes) - before;
        for (int k = 0; k < (dyn ? 2 : 1); k++) {
            int64_t dims[4] = {k ? 1 : (dyn ? 8 : 1), C, HW, HW};
            tdm_tensor *x = NULL, *y = NULL;
            assert_null(tdm_tensor_create(env, TDM_FLOAT, 4, dims, &x));
            float *d = tdm_tensor_data(x);
            for (int64_t i = 0; i < tdm_tensor_element_count(x); i++) d[i] = (float)(i % 13) * 0.1f;
            const char *name = "x";
            tdm_status *st = tdm_session_run(s, 1, &name, (const tdm_tensor *const *)&x, 1, NULL, &y);
            if (st) fail_msg("run of %lld: %s", (long long)dims[0], tdm_status_message(st));
            assert_int_equal(tdm_tensor_dims(y)[0], dims[0]);
            tdm_tensor_free(x);
            tdm_tensor_free(y);
        }
        tdm_session_free(s);
        tdm_env_free(env);
        free(buf);
        assert_int_equal(atomic_load(&c.live), 0);
    }
    print_message("  session bytes: batch 1 %ld, dynamic %ld (weights %.0f; oneDNN prefers "
                  "channels-last: %d)\n", made[0], made[1], w_bytes, prefers);
    assert_true((double)(made[1] - made[0]) < w_bytes / 4);
}

/* The chain of test_row_chunks and test_cl_batch over n images of 6 x 47 x 29: 3x3 at
 * strides 1 and 2, 1x1, a depthwise 5x5 with pads 2, residual Zs, a plain graph input; a
 * small image with many channels at the end (more weights than activations). */
static void cl_chain(mb_model *b, int64_t n) {
    mb_init(b, 17);
    int64_t xd[4] = {n, 6, 47, 29};
    mb_input_run(b, "x", 4, xd, NULL);
    conv(b, "Conv:x,W1,B1->c1", "W1", "B1", 24, 6, 3, 1);
    mb_node(b, "Relu:c1->r1");
    conv(b, "Conv:r1,W2,B2->c2", "W2", "B2", 24, 24, 5, 1);
    mb_node(b, "Add:c2,r1->s1"); /* (Z) */
    Onnx__NodeProto *dw = conv(b, "Conv:s1,W3,B3->c3", "W3", "B3", 24, 1, 5, 1);
    mb_attr_i(b, dw, "group", 24);
    mb_node(b, "Sigmoid:c3->a3");
    conv(b, "Conv:a3,W4,B4->c4", "W4", "B4", 40, 24, 3, 2);
    conv(b, "Conv:c4,W5,B5->c5", "W5", "B5", 33, 40, 1, 1);
    conv(b, "Conv:c5,W6,B6->c6", "W6", "B6", 48, 33, 3, 2);
    mb_node(b, "Tanh:c6->t6");
    conv(b, "Conv:t6,W7,B7->c7", "W7", "B7", 48, 48, 3, 1); /* (32 + 16 channels) */
    mb_node(b, "Add:c7,t6->y");
    mb_output(b, "y");
}

/* One image on 2, 3 and 4 threads: channels-last convolutions cut the image into chunks of
 * output rows, each with its own pads and input rows (first, middle and last chunks differ;
 * the 5x5 kernel with pads 2 at stride 1 reads past the bottom from the last two chunks);
 * on the small image with many channels, chunks of channels (each written dense and
 * reordered into the channels-last Y, and Z into the chunk). The channel-blocked layouts
 * cut channels as before. */
static void test_row_chunks(void **state) {
    (void)state;
    for (int v = 0; v < 6; v++) {
        int t = 2 + v % 3;
        mb_model b;
        cl_chain(&b, 1);
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, t, v < 3 ? "blocked" : "channels_last"};
        run_cmp(&b, &cfg, &r);
        if (op_count(&r, "BlockedConv") != 7 || op_count(&r, "FromBlocked") != 1)
            fail_msg("%d threads, channels-last %d: %s", t, r.cl, r.ops);
        mb_free(&b);
    }
}

/* Three images in channels-last on 1 and 2 threads: the convolutions run image by image at
 * 1 thread too (k_dnnl_conv.c: no primitive over the batch in channels-last), each image at
 * its own offset in X, Y and Z; the channel block at 1 thread (one primitive over the batch)
 * alongside. */
static void test_cl_batch(void **state) {
    (void)state;
    for (int v = 0; v < 4; v++) {
        mb_model b;
        cl_chain(&b, 3);
        layout_result r;
        run_cfg cfg = {"cpu", NULL, NULL, 1 + v % 2, v < 2 ? "channels_last" : "blocked"};
        run_cmp(&b, &cfg, &r);
        if (op_count(&r, "BlockedConv") != 7 || op_count(&r, "FromBlocked") != 1)
            fail_msg("%d threads, channels-last %d: %s", cfg.threads, r.cl, r.ops);
        mb_free(&b);
    }
}

/* A plain reader in the middle of a chain (Reshape, and a graph output) reads through
 * FromBlocked while the chain goes on blocked. */
static void test_plain_reader(void **state) {
    (void)state;
    mb_model b;
    mb_init(&b, 17);
    int64_t xd[4] = {2, 4, 8, 8};
    mb_input_run(&b, "x", 4, xd, NULL);
    conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 9, 4, 3, 1);
    mb_attr_f(&b, mb_node(&b, "LeakyRelu:c1->r1"), "alpha", 0.1f);
    int64_t shp[2] = {2, -1};
    mb_init_i64(&b, "shape", 2, shp);
    mb_node(&b, "Reshape:r1,shape->flat");
    conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", 7, 9, 3, 2);
    mb_node(&b, "Tanh:c2->y");
    mb_output(&b, "flat");
    mb_output(&b, "y");
    mb_output(&b, "r1");
    layout_result r;
    run_cmp(&b, &cpu2, &r);
    if (op_count(&r, "BlockedConv") != 2 || op_count(&r, "FromBlocked") != 2 ||
        op_count(&r, "Reshape") != 1)
        fail_msg("%s", r.ops);
    mb_free(&b);
}

/* Devices listed together: with placement "cpu" (everything on the CPU) and with placement
 * auto the blocked-layout pass runs on the CPU's part of the plan, like for the CPU alone;
 * affinity that puts the element-wise ops and the second convolution on the test device (CPU
 * kernels on memory of its own) leaves nothing on the CPU worth blocking: the lone
 * convolutions stay plain, and no blocked tensor crosses a device (check_devices). */
static void test_split_devices(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    unsetenv("TANDEM_TEST_DEVICE_OPS");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    const run_cfg cfgs[] = {{"cpu,test:0", "cpu", NULL, 1},
                            {"cpu,test:0", "cpu", "Add=test:0;Relu=test:0;/^n2$/=test:0", 1},
                            {"cpu,test:0", NULL, NULL, 1}};
    for (int c = 0; c < 3; c++) {
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {2, 6, 10, 10};
        mb_input_run(&b, "x", 4, xd, NULL);
        conv(&b, "Conv:x,W1,B1->c1", "W1", "B1", 10, 6, 3, 1);
        mb_node(&b, "Relu:c1->r1");
        conv(&b, "Conv:r1,W2,B2->c2", "W2", "B2", 10, 10, 3, 1);
        mb_node(&b, "Sigmoid:c2->a2");
        mb_node(&b, "Add:a2,r1->s");
        mb_node(&b, "Relu:s->t");
        mb_node(&b, "GlobalMaxPool:t->y");
        mb_output(&b, "y");
        layout_result r;
        run_cmp(&b, &cfgs[c], &r);
        size_t blocked = op_count(&r, "BlockedConv") + op_count(&r, "BlockedPool");
        bool ok = c == 1 ? blocked == 0 && r.off_cpu >= 3
                         : op_count(&r, "BlockedConv") == 2 && op_count(&r, "BlockedPool") == 1;
        if (c == 0 && r.off_cpu) ok = false;
        if (!ok) fail_msg("case %d (%zu nodes off the CPU): %s", c, r.off_cpu, r.ops);
        mb_free(&b);
    }
    unsetenv("TANDEM_TEST_DEVICES");
}

/* A longer chain with one convolution forced onto the test device by a node-name rule: the
 * CPU regions before and after it go blocked, the convolution on the test device reads a
 * plain tensor (FromBlocked on the CPU) and writes a plain one (the next BlockedConv takes
 * plain input), and the outputs equal the CPU-only plain run. Node names are n<index>: n4 is
 * the third Conv (fused with its Relu n5), n8 the fifth. */
static void split_chain(mb_model *b) {
    int64_t xd[4] = {1, 5, 12, 12};
    mb_input_run(b, "x", 4, xd, NULL);
    conv(b, "Conv:x,W1,B1->c1", "W1", "B1", 12, 5, 3, 1);       /* n0 */
    mb_node(b, "Relu:c1->r1");                                /* n1 */
    conv(b, "Conv:r1,W2,B2->c2", "W2", "B2", 9, 12, 3, 1);      /* n2 */
    mb_node(b, "Relu:c2->r2");                                /* n3 */
    conv(b, "Conv:r2,W3,B3->c3", "W3", "B3", 16, 9, 3, 1);      /* n4 */
    mb_node(b, "Relu:c3->r3");                                /* n5 */
    conv(b, "Conv:r3,W4,B4->c4", "W4", "B4", 7, 16, 3, 2);      /* n6 */
    mb_node(b, "Relu:c4->r4");                                /* n7 */
    conv(b, "Conv:r4,W5,B5->c5", "W5", "B5", 10, 7, 1, 1);      /* n8 */
    Onnx__NodeProto *mp = mb_node(b, "MaxPool:c5->p");        /* n9 */
    int64_t k2[2] = {2, 2}, s2[2] = {2, 2};
    mb_attr_ints(b, mp, "kernel_shape", 2, k2);
    mb_attr_ints(b, mp, "strides", 2, s2);
    mb_node(b, "GlobalAveragePool:p->y");                     /* n10 */
    mb_output(b, "y");
}

static void test_split_regions(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    unsetenv("TANDEM_TEST_DEVICE_OPS");
    unsetenv("TANDEM_TEST_DEVICE_DELAY_US");
    unsetenv("TANDEM_TEST_DEVICE_FAIL_EVERY");
    /* middle conv on test:0: BlockedConv n0 n2 | n4 plain | BlockedConv n6 n8, two pools;
     * last conv on test:0: n0 n2 n4 n6 blocked, n8 and the pools plain (their input comes
     * from the test device); both threads counts; placement auto with the rule (outputs
     * and devices checked only) */
    const run_cfg cfgs[] = {{"cpu,test:0", "cpu", "/^n4$/=test:0", 1},
                            {"cpu,test:0", "cpu", "/^n4$/=test:0", 2},
                            {"cpu,test:0", "cpu", "/^n8$/=test:0", 1},
                            {"cpu,test:0", NULL, "/^n4$/=test:0", 1}};
    const size_t want_conv[] = {4, 4, 4, 4}, want_pool[] = {2, 2, 0, 2}, want_from[] = {2, 2, 1, 2};
    for (int c = 0; c < 4; c++) {
        mb_model b;
        mb_init(&b, 17);
        split_chain(&b);
        layout_result r;
        run_cmp(&b, &cfgs[c], &r);
        if (c == 3) { /* auto: where the rest goes is the cost model's call */
            if (r.off_cpu < 1) fail_msg("case 3: n4 is not on test:0: %s", r.ops);
        } else if (op_count(&r, "BlockedConv") != want_conv[c] || op_count(&r, "BlockedPool") != want_pool[c] ||
            op_count(&r, "FromBlocked") != want_from[c] || op_count(&r, "ToBlocked") != 0 ||
            r.off_cpu != 1)
            fail_msg("case %d (%zu nodes off the CPU): %s", c, r.off_cpu, r.ops);
        mb_free(&b);
    }
    unsetenv("TANDEM_TEST_DEVICES");
}

/* Per-node times measured on the CPU alone (blocked graph: "n0/BlockedConv", ...) reach the
 * placement of a multi-device plan, which places the plain graph first (sched/measured.c
 * matches them by name): a profiling CPU session stores them, a cpu,test:0 session with one
 * convolution on test:0 uses them. The cache folder is removed afterwards. */
static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

/* Rewrites each line of a measured-times file with its time (the last field) infinite, NaN or
 * negative, in turn. */
static int n_damaged;
static int damage_times(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    if (flag != FTW_F || !strstr(path, ".txt")) return 0;
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    char lines[64][1024], line[1024];
    int n = 0;
    while (n < 64 && fgets(line, sizeof line, f)) {
        char *tab = strrchr(line, '\t');
        if (!tab) continue;
        static const char *const bad[] = {"inf", "1e999", "nan", "-0.5"};
        snprintf(lines[n], sizeof lines[n], "%.*s\t%s\n", (int)(tab - line), line, bad[n % 4]);
        n++;
    }
    fclose(f);
    if (!(f = fopen(path, "w"))) return 1;
    for (int i = 0; i < n; i++) fputs(lines[i], f);
    fclose(f);
    n_damaged += n;
    return 0;
}

static void test_measured_names(void **state) {
    (void)state;
    char dir[] = "/tmp/test_layout_measuredXXXXXX";
    assert_non_null(mkdtemp(dir));
    setenv("TANDEM_CACHE_DIR", dir, 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    mb_model b;
    mb_init(&b, 17);
    split_chain(&b);
    size_t size = onnx__model_proto__get_packed_size(&b.model);
    void *buf = malloc(size);
    assert_non_null(buf);
    onnx__model_proto__pack(&b.model, buf);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_tensor *x = NULL, *y = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, b.in_rank[0], b.in_dims[0], &x));
    float *d = tdm_tensor_data(x);
    for (int64_t k = 0; k < tdm_tensor_element_count(x); k++) d[k] = mb_rnd();
    const char *names[1] = {b.ins[0]->name};
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 1,
                              .opt_level = 1, .profile = true};
    tdm_session *s = NULL;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
    for (int r = 0; r < 2; r++) {
        assert_null(tdm_session_run(s, 1, names, (const tdm_tensor *const *)&x, 1, NULL, &y));
        tdm_tensor_free(y);
        y = NULL;
    }
    assert_null(tdm_session_save_measurements(s));
    tdm_session_free(s);
    so.devices = "cpu,test:0";
    so.affinity = "/^n4$/=test:0"; /* (another graph than the CPU's alone, at both placements) */
    so.profile = false;
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
    char *json = NULL;
    assert_null(tdm_session_explain(s, TDM_EXPLAIN_JSON, &json));
    const char *u = strstr(json, "\"measured_node_times_used\":");
    assert_non_null(u);
    int used = atoi(u + strlen("\"measured_node_times_used\":"));
    if (used < 6) fail_msg("%d measured node times used (4 blocked convolutions, 2 pools): %s", used, json);
    tdm_string_free(json);
    tdm_session_free(s);
    /* a damaged file: every time infinite, NaN or negative; none is used */
    assert_true(nftw(dir, damage_times, 8, FTW_PHYS) == 0 && n_damaged > 0);
    assert_null(tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s));
    assert_null(tdm_session_explain(s, TDM_EXPLAIN_JSON, &json));
    u = strstr(json, "\"measured_node_times_used\":");
    assert_non_null(u);
    assert_int_equal(atoi(u + strlen("\"measured_node_times_used\":")), 0);
    tdm_string_free(json);
    tdm_session_free(s);
    tdm_tensor_free(x);
    tdm_env_free(env);
    free(buf);
    mb_free(&b);
    unsetenv("TANDEM_TEST_DEVICES");
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    assert_int_equal(nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_chain_odd_channels),
        cmocka_unit_test(test_pool_fallback),
        cmocka_unit_test(test_maxpool_own),
        cmocka_unit_test(test_residual_add),
        cmocka_unit_test(test_concat),
        cmocka_unit_test(test_split_odd),
        cmocka_unit_test(test_row_chunks),
        cmocka_unit_test(test_cl_batch),
        cmocka_unit_test(test_auto_layout),
        cmocka_unit_test(test_dynamic_batch_plans),
        cmocka_unit_test(test_dynamic_batch_shares_weights),
        cmocka_unit_test(test_plain_reader),
        cmocka_unit_test(test_split_devices),
        cmocka_unit_test(test_split_regions),
        cmocka_unit_test(test_measured_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
