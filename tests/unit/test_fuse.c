/* Fusion passes (src/graph/fuse*.c): each pattern is built in memory, run with opt-level 0
 * (no passes) and 1 (fusion), and checked for the expected rewrite and for outputs that
 * agree within rtol 1e-4 / atol 1e-5. Each pattern also has a negative case where an
 * inner value has a second reader (or a shape forbids the rewrite) and nothing fuses. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cpu/cpu_kernels.h"
#include "fuse_models.h"
#include "model_builder.h"
#include "ops/fused.h"
#include "tandem/tandem.h"

/* ---- running ---- */

typedef struct fuse_result {
    size_t nodes;          /* node count after fusion */
    char ops[1024];        /* op histogram after fusion, "Op:n Op:n " */
    bool ref;              /* the optimised plan names a oneDNN reference implementation */
    bool unblk;            /* ... a convolution whose blocked input is reordered to plain */
} fuse_result;

static size_t op_count(const fuse_result *r, const char *op) {
    char key[64];
    snprintf(key, sizeof key, " %s:", op);
    char hay[1030];
    snprintf(hay, sizeof hay, " %s", r->ops);
    const char *p = strstr(hay, key);
    return p ? (size_t)strtoul(p + strlen(key), NULL, 10) : 0;
}

/* Runs the model at opt-level 0 and 1 on the same random inputs and compares every output.
 * Fills r with what the optimised session holds. */
static void run_both(mb_model *b, fuse_result *r) {
    size_t size = onnx__model_proto__get_packed_size(&b->model);
    void *buf = malloc(size);
    onnx__model_proto__pack(&b->model, buf);
    tdm_env *env = NULL;
    /* the channel-blocked layouts (test_layout checks channels-last too) */
    tdm_env_options eo = {.api_version = TDM_API_VERSION, .cpu_layout = "blocked"};
    assert_null(tdm_env_create(&eo, &env));
    size_t n_in = b->graph.n_input, n_out = b->graph.n_output;
    tdm_tensor *ins[MB_MAX] = {0}, *outs[2][MB_MAX] = {{0}};
    const char *names[MB_MAX];
    mb_rng_state = 12345;
    for (size_t i = 0; i < n_in; i++) {
        names[i] = b->ins[i]->name;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, b->in_rank[i], b->in_dims[i], &ins[i]));
        float *d = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) d[k] = 2.0f * mb_rnd();
    }
    for (int opt = 0; opt <= 1; opt++) {
        tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 2,
                                  .opt_level = opt};
        tdm_session *s = NULL;
        tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
        if (st) fail_msg("opt %d: %s", opt, tdm_status_message(st));
        const tdm_model *m = tdm_session_model(s);
        if (opt == 1) {
            r->nodes = tdm_model_node_count(m);
            size_t len = 0;
            r->ops[0] = 0;
            for (size_t i = 0; i < tdm_model_op_type_count(m); i++) {
                size_t c;
                const char *op = tdm_model_op_type(m, i, &c);
                len += (size_t)snprintf(r->ops + len, sizeof r->ops - len, "%s:%zu ", op, c);
            }
        }
        st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, NULL, outs[opt]);
        if (st) fail_msg("opt %d run: %s", opt, tdm_status_message(st));
        if (opt == 1) { /* the implementations, known after a run */
            char *json = NULL;
            if ((st = tdm_session_explain(s, TDM_EXPLAIN_JSON, &json)))
                fail_msg("explain: %s", tdm_status_message(st));
            r->ref = strstr(json, "ref:") != NULL;
            r->unblk = strstr(json, "input reordered to plain") != NULL;
            tdm_string_free(json);
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
            if (!(fabsf(x[k] - y[k]) <= 1e-5f + 1e-4f * fabsf(x[k])))
                fail_msg("output %zu element %lld: %.8g (opt 0) vs %.8g (opt 1); ops after: %s", o,
                         (long long)k, x[k], y[k], r->ops);
        tdm_tensor_free(outs[0][o]);
        tdm_tensor_free(outs[1][o]);
    }
    for (size_t i = 0; i < n_in; i++) tdm_tensor_free(ins[i]);
    tdm_env_free(env);
    free(buf);
}

/* ---- Conv + BatchNormalization ---- */

static void bn_node(mb_model *b, const char *spec) {
    int64_t m = 6;
    mb_weight(b, "scale", 1, &m, NULL, 1.0f, 0.5f);
    mb_weight(b, "shift", 1, &m, NULL, 0.0f, 0.5f);
    mb_weight(b, "mean", 1, &m, NULL, 0.0f, 0.5f);
    mb_weight(b, "var", 1, &m, NULL, 1.0f, 0.5f);
    Onnx__NodeProto *n = mb_node(b, spec);
    mb_attr_f(b, n, "epsilon", 1e-3f);
}

static void test_bn_fold(void **state) {
    (void)state;
    for (int bias = 0; bias <= 1; bias++) {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, bias, x_shape, NULL);
        bn_node(&b, "BatchNormalization:y,scale,shift,mean,var->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        assert_int_equal(r.nodes, 1);
        assert_int_equal(op_count(&r, "Conv"), 1);
        mb_free(&b);
    }
    /* negative: the Conv output is also a graph output */
    mb_model b;
    mb_init(&b, 17);
    conv_model(&b, true, x_shape, NULL);
    bn_node(&b, "BatchNormalization:y,scale,shift,mean,var->z");
    mb_output(&b, "z");
    mb_output(&b, "y");
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "BatchNormalization"), 1);
    mb_free(&b);
}

/* ---- Conv + activation ---- */

static void test_conv_activations(void **state) {
    (void)state;
    const char *acts[] = {"Relu", "LeakyRelu", "Clip", "Sigmoid", "Tanh", "HardSigmoid", "HardSwish"};
    for (size_t a = 0; a < sizeof acts / sizeof acts[0]; a++) {
        for (int with_bn = 0; with_bn <= 1; with_bn++) {
            mb_model b;
            mb_init(&b, 14); /* HardSwish-14 */
            conv_model(&b, true, x_shape, NULL);
            const char *src = "y";
            if (with_bn) {
                bn_node(&b, "BatchNormalization:y,scale,shift,mean,var->yb");
                src = "yb";
            }
            char spec[64];
            Onnx__NodeProto *n;
            if (strcmp(acts[a], "Clip") == 0) {
                mb_scalar(&b, "lo", -0.5f);
                mb_scalar(&b, "hi", 0.75f);
                snprintf(spec, sizeof spec, "Clip:%s,lo,hi->z", src);
                n = mb_node(&b, spec);
            } else {
                snprintf(spec, sizeof spec, "%s:%s->z", acts[a], src);
                n = mb_node(&b, spec);
            }
            if (strcmp(acts[a], "LeakyRelu") == 0) mb_attr_f(&b, n, "alpha", 0.2f);
            if (strcmp(acts[a], "HardSigmoid") == 0) {
                mb_attr_f(&b, n, "alpha", 0.3f);
                mb_attr_f(&b, n, "beta", 0.4f);
            }
            mb_output(&b, "z");
            fuse_result r;
            run_both(&b, &r);
            if (r.nodes != 1 || op_count(&r, "FusedConv") != 1)
                fail_msg("%s (bn %d): %s", acts[a], with_bn, r.ops);
            mb_free(&b);
        }
    }
    /* negative: the Conv output has a second reader */
    mb_model b;
    mb_init(&b, 13);
    conv_model(&b, true, x_shape, NULL);
    mb_node(&b, "Relu:y->z");
    mb_node(&b, "Neg:y->w");
    mb_output(&b, "z");
    mb_output(&b, "w");
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "FusedConv"), 0);
    mb_free(&b);
}

/* ---- Conv + Add (residual) + Relu ---- */

static void test_conv_residual(void **state) {
    (void)state;
    /* static shapes: Z is another input */
    {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, true, x_shape, NULL);
        int64_t zd[4] = {2, 6, 7, 7};
        mb_input_run(&b, "r", 4, zd, NULL);
        mb_node(&b, "Add:y,r->s");
        mb_node(&b, "Relu:s->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        assert_int_equal(r.nodes, 1);
        assert_int_equal(op_count(&r, "FusedConv"), 1);
        mb_free(&b);
    }
    /* dynamic batch: Z = Sigmoid(Conv2(x)) carries the same batch dim as the Conv output;
     * the first Conv takes the residual (Z added before the Relu) */
    {
        mb_model b;
        mb_init(&b, 17);
        int64_t decl[4] = {-1, 4, 7, 7};
        conv_model(&b, true, decl, x_shape);
        int64_t w2d[4] = {6, 4, 1, 1};
        mb_weight(&b, "W2", 4, w2d, NULL, 0, 0.5f);
        mb_node(&b, "Conv:x,W2->c2");
        mb_node(&b, "Sigmoid:c2->r");
        mb_node(&b, "Add:r,y->s");
        mb_node(&b, "Relu:s->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        /* Conv2 + Sigmoid and Conv + Add + Relu */
        if (r.nodes != 2 || op_count(&r, "FusedConv") != 2) fail_msg("%s", r.ops);
        mb_free(&b);
    }
    /* negative: the other operand broadcasts ([1, 6, 1, 1]): the Add stays */
    {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, true, x_shape, NULL);
        int64_t zd[4] = {1, 6, 1, 1};
        mb_input_run(&b, "r", 4, zd, NULL);
        mb_node(&b, "Add:y,r->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        assert_int_equal(op_count(&r, "FusedConv"), 0);
        assert_int_equal(op_count(&r, "Add"), 1);
        mb_free(&b);
    }
    /* negative: the Add's output is read twice: Conv + Add fuse, the Relu does not */
    {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, true, x_shape, NULL);
        int64_t zd[4] = {2, 6, 7, 7};
        mb_input_run(&b, "r", 4, zd, NULL);
        mb_node(&b, "Add:y,r->s");
        mb_node(&b, "Relu:s->z");
        mb_output(&b, "z");
        mb_output(&b, "s");
        fuse_result r;
        run_both(&b, &r);
        /* the Relu reading s makes the blocked-layout pass take the FusedConv on
         * (BlockedConv, tests/unit/test_layout.c) */
        assert_int_equal(op_count(&r, "FusedConv") + op_count(&r, "BlockedConv"), 1);
        assert_int_equal(op_count(&r, "Relu"), 1);
        mb_free(&b);
    }
}

/* ---- decomposed hard-swish, GELU, per-channel affine and Identity around a Conv ---- */

/* Conv(x) -> y, then the hard-swish of y in form f written into z:
 *  0: y * Clip(y + 3, 0, 6) / 6      1: Clip(3 + y, 0, 6) * y * (1/6)
 *  2: y * (Clip(y + 3, 0, 6) / 6)    3: y * HardSigmoid(y, 1/6, 1/2)
 *  4: as 0 with Clip-6's min / max attributes (opset 10)
 * lo, hi, div: the Clip bounds and the divisor (6 for the true hard-swish). */
static void hswish_model(mb_model *b, int f, float lo, float hi, float div) {
    mb_init(b, f == 4 ? 10 : 17);
    conv_model(b, true, x_shape, NULL);
    mb_scalar(b, "three", 3.0f);
    mb_scalar(b, "lo", lo);
    mb_scalar(b, "hi", hi);
    mb_scalar(b, "div", div);
    mb_scalar(b, "inv", 1.0f / div);
    if (f == 3) {
        Onnx__NodeProto *h = mb_node(b, "HardSigmoid:y->g");
        mb_attr_f(b, h, "alpha", 1.0f / div);
        mb_attr_f(b, h, "beta", 0.5f);
        mb_node(b, "Mul:y,g->z");
        return;
    }
    mb_node(b, f == 1 ? "Add:three,y->a" : "Add:y,three->a");
    if (f == 4) {
        Onnx__NodeProto *c = mb_node(b, "Clip:a->c");
        mb_attr_f(b, c, "min", lo);
        mb_attr_f(b, c, "max", hi);
    } else {
        mb_node(b, "Clip:a,lo,hi->c");
    }
    if (f == 0 || f == 4) {
        mb_node(b, "Mul:y,c->p");
        mb_node(b, "Div:p,div->z");
    } else if (f == 1) {
        mb_node(b, "Mul:c,y->p");
        mb_node(b, "Mul:p,inv->z");
    } else {
        mb_node(b, "Div:c,div->g");
        mb_node(b, "Mul:y,g->z");
    }
}

static void test_conv_hswish(void **state) {
    (void)state;
    for (int f = 0; f <= 4; f++) {
        mb_model b;
        hswish_model(&b, f, 0.0f, 6.0f, 6.0f);
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "FusedConv") != 1) fail_msg("form %d: %s", f, r.ops);
        mb_free(&b);
    }
    /* near misses: Clip(0, 5), a division by 7 (HardSigmoid alpha 1/7), an inner value or
     * the Conv output read by another node: the pattern's nodes stay */
    for (int f = 0; f <= 3; f++)
        for (int miss = f == 3 ? 1 : 0; miss < 4; miss++) {
            mb_model b;
            hswish_model(&b, f, 0.0f, miss == 0 ? 5.0f : 6.0f, miss == 1 ? 7.0f : 6.0f);
            mb_output(&b, "z");
            if (miss == 2) mb_output(&b, f == 3 ? "g" : "c");
            if (miss == 3) {
                mb_node(&b, "Neg:y->n");
                mb_output(&b, "n");
            }
            fuse_result r;
            run_both(&b, &r);
            /* (HardSigmoid alone may fuse into the Conv; the Mul stays) */
            size_t mul = op_count(&r, "Mul"), clip = op_count(&r, "Clip");
            if (mul < 1 || (f != 3 && clip != 1))
                fail_msg("form %d near miss %d fused: %s", f, miss, r.ops);
            mb_free(&b);
        }
}

static void test_conv_affine(void **state) {
    (void)state;
    /* Conv (no bias) -> Mul(scalar) -> Add(per-channel) -> Identity -> activation ->
     * Mul(scalar) -> Add(scalar): one FusedConv (for Relu, and for the decomposed
     * hard-swish) */
    for (int hs = 0; hs <= 1; hs++) {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, false, x_shape, NULL);
        int64_t one = 1, cd[4] = {1, 6, 1, 1};
        mb_weight(&b, "s", 1, &one, NULL, 1.0f, 0.5f);
        mb_weight(&b, "t", 4, cd, NULL, 0.0f, 0.5f);
        mb_node(&b, "Mul:s,y->m");
        mb_node(&b, "Add:m,t->a");
        mb_node(&b, "Identity:a->i");
        if (hs) {
            mb_scalar(&b, "three", 3.0f);
            mb_scalar(&b, "lo", 0.0f);
            mb_scalar(&b, "hi", 6.0f);
            mb_scalar(&b, "six", 6.0f);
            mb_node(&b, "Add:i,three->a3");
            mb_node(&b, "Clip:a3,lo,hi->c");
            mb_node(&b, "Mul:i,c->p");
            mb_node(&b, "Div:p,six->r");
        } else {
            mb_node(&b, "Relu:i->r");
        }
        mb_scalar(&b, "k", 0.7f);
        mb_scalar(&b, "d", -0.2f);
        mb_node(&b, "Mul:r,k->r2");
        mb_node(&b, "Add:d,r2->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "FusedConv") != 1) fail_msg("hard-swish %d: %s", hs, r.ops);
        mb_free(&b);
    }
    /* negative: the constant varies along W, not per channel: the Add stays */
    mb_model b;
    mb_init(&b, 17);
    conv_model(&b, true, x_shape, NULL);
    int64_t cd[4] = {1, 1, 1, 7};
    mb_weight(&b, "t", 4, cd, NULL, 0.0f, 0.5f);
    mb_node(&b, "Add:y,t->z");
    mb_output(&b, "z");
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "Add"), 1);
    mb_free(&b);
}

/* x -> z: the tanh GELU as exporters write it (x * 0.5 * (1 + Tanh(k (x + c x^3)))). */
static void gelu_tanh(mb_model *b, const char *x, const char *z) {
    char spec[96];
    mb_scalar(b, "g_three", 3.0f);
    mb_scalar(b, "g_c", 0.044715f);
    mb_scalar(b, "g_k", 0.7978845608f);
    mb_scalar(b, "g_one", 1.0f);
    mb_scalar(b, "g_half", 0.5f);
    snprintf(spec, sizeof spec, "Pow:%s,g_three->g_p", x);
    mb_node(b, spec);
    mb_node(b, "Mul:g_p,g_c->g_q");
    snprintf(spec, sizeof spec, "Add:%s,g_q->g_r", x);
    mb_node(b, spec);
    mb_node(b, "Mul:g_k,g_r->g_s");
    mb_node(b, "Tanh:g_s->g_t");
    mb_node(b, "Add:g_t,g_one->g_a");
    snprintf(spec, sizeof spec, "Mul:%s,g_a->g_m", x);
    mb_node(b, spec);
    snprintf(spec, sizeof spec, "Mul:g_m,g_half->%s", z);
    mb_node(b, spec);
}

/* Conv -> Squeeze(spatial axis) -> Add / Mul(per-channel constant): folded into the Conv's B
 * (and W), the Squeeze stays (magika: Conv -> Squeeze(3) -> Add(C [1, 512, 1])), also behind
 * the Transpose that makes it a ConvNwc1d, then with a tanh GELU behind (ConvNwc1d takes it;
 * also without the Squeeze, through FusedConv). Negative cases: the constant varies along L, the
 * Squeeze's output has a second reader, a Squeeze of the channel axis. */
static void test_conv_squeeze_bias(void **state) {
    (void)state;
    enum { ADD, MUL, NWC, NWC_GELU, NWC_GELU4, ALONG_L, SECOND, CHAN };
    for (int kind = ADD; kind <= CHAN; kind++) {
        bool nwc = kind == NWC || kind == NWC_GELU || kind == NWC_GELU4;
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {2, 6, 9, 1}, wd[4] = {8, 6, 3, 1}, m = 8, ax[1] = {3};
        int64_t cd[3] = {1, 8, 1}, ld[3] = {1, 1, 7}, md[2] = {8, 1};
        if (nwc) xd[1] = 9, xd[2] = 6;
        if (kind == CHAN) wd[0] = m = 1, cd[1] = 1, ax[0] = 1;
        mb_input(&b, "x", 4, xd);
        mb_weight(&b, "W", 4, wd, NULL, 0, 0.5f);
        mb_weight(&b, "B", 1, &m, NULL, 0, 0.5f);
        if (nwc) {
            int64_t perm[4] = {0, 2, 1, 3};
            mb_attr_ints(&b, mb_node(&b, "Transpose:x->xt"), "perm", 4, perm);
            mb_node(&b, "Conv:xt,W,B->y");
        } else {
            mb_node(&b, "Conv:x,W,B->y");
        }
        mb_init_i64(&b, "ax", 1, ax);
        if (kind == NWC_GELU4) { /* no Squeeze: the Conv fusion takes the GELU first */
            gelu_tanh(&b, "y", "z");
            mb_output(&b, "z");
            fuse_result r;
            run_both(&b, &r);
            if (r.nodes != 1 || op_count(&r, "ConvNwc1d") != 1) fail_msg("case %d: %s", kind, r.ops);
            mb_free(&b);
            continue;
        }
        mb_node(&b, "Squeeze:y,ax->q");
        if (kind == MUL) mb_weight(&b, "c", 2, md, NULL, 1.0f, 0.5f);
        else mb_weight(&b, "c", 3, kind == ALONG_L ? ld : cd, NULL, 0.0f, 0.5f);
        mb_node(&b, kind == MUL ? "Mul:q,c->z0" : "Add:c,q->z0");
        if (kind == NWC_GELU) gelu_tanh(&b, "z0", "z");
        else mb_node(&b, "Identity:z0->z");
        mb_output(&b, "z");
        if (kind == SECOND) {
            mb_node(&b, "Relu:q->r");
            mb_output(&b, "r");
        }
        fuse_result r;
        run_both(&b, &r);
        bool folded = op_count(&r, kind == MUL ? "Mul" : "Add") == 0;
        if (folded != (kind <= NWC_GELU) || op_count(&r, "Squeeze") != 1 ||
            (nwc && op_count(&r, "ConvNwc1d") != 1) || (kind == NWC_GELU && r.nodes != 2))
            fail_msg("case %d: %s", kind, r.ops);
        mb_free(&b);
    }
}

static void test_conv_gelu(void **state) {
    (void)state;
    mb_model b;
    mb_init(&b, 17);
    conv_model(&b, true, x_shape, NULL);
    mb_scalar(&b, "sq2", 1.41421356f);
    mb_scalar(&b, "one", 1.0f);
    mb_scalar(&b, "half", 0.5f);
    mb_node(&b, "Div:y,sq2->d");
    mb_node(&b, "Erf:d->e");
    mb_node(&b, "Add:e,one->a");
    mb_node(&b, "Mul:y,a->m");
    mb_node(&b, "Mul:m,half->z");
    mb_output(&b, "z");
    fuse_result r;
    run_both(&b, &r);
    if (r.nodes != 1 || op_count(&r, "FusedConv") != 1) fail_msg("%s", r.ops);
    mb_free(&b);
}

static void test_reduce_pool(void **state) {
    (void)state;
    /* ReduceMean over H and W with keepdims: GlobalAveragePool; other axes or keepdims 0:
     * ReduceMean */
    const int64_t axes[3][2] = {{2, 3}, {-1, -2}, {1, 2}};
    for (int k = 0; k < 4; k++) {
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {2, 6, 5, 7};
        mb_input(&b, "x", 4, xd);
        Onnx__NodeProto *n = mb_node(&b, "ReduceMean:x->z");
        mb_attr_ints(&b, n, "axes", 2, axes[k < 3 ? k : 0]);
        if (k == 3) mb_attr_i(&b, n, "keepdims", 0);
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        size_t gap = op_count(&r, "GlobalAveragePool");
        if (gap != (k < 2 ? 1u : 0u)) fail_msg("case %d: %s", k, r.ops);
        mb_free(&b);
    }
}

/* A MobileNetV3 block with dynamic N, H, W: Conv + hard-swish, a squeeze-excitation
 * (GlobalAveragePool, 1x1 Conv + Relu to 5 channels, 1x1 Conv + HardSigmoid, Mul), two
 * stride-2 convolutions added. Everything stays in the blocked layout: one FromBlocked (the
 * output), the SE Mul on blocked tensors, the residual Add in a convolution (the window
 * origins prove both stride-2 outputs the same size); the 1x1 Conv over 5 blocked channels
 * has oneDNN's JIT kernel through a plain copy of its input. */
static void test_se_blocked(void **state) {
    (void)state;
    {
        mb_model b;
        mb_init(&b, 17);
        int64_t decl[4] = {-1, 4, -1, -1}, run[4] = {2, 4, 9, 11};
        mb_input_run(&b, "x", 4, decl, run);
        int64_t w1[4] = {20, 4, 3, 3}, w2[4] = {5, 20, 1, 1}, w3[4] = {20, 5, 1, 1};
        int64_t w4[4] = {6, 20, 3, 3}, m20 = 20, m5 = 5, m6 = 6;
        mb_weight(&b, "W1", 4, w1, NULL, 0, 0.5f);
        mb_weight(&b, "B1", 1, &m20, NULL, 0, 0.5f);
        mb_weight(&b, "W2", 4, w2, NULL, 0, 0.5f);
        mb_weight(&b, "B2", 1, &m5, NULL, 0, 0.5f);
        mb_weight(&b, "W3", 4, w3, NULL, 0, 0.5f);
        mb_weight(&b, "B3", 1, &m20, NULL, 0, 0.5f);
        mb_weight(&b, "W4", 4, w4, NULL, 0, 0.3f);
        mb_weight(&b, "W5", 4, w4, NULL, 0, 0.3f);
        mb_weight(&b, "B4", 1, &m6, NULL, 0, 0.5f);
        int64_t p1[4] = {1, 1, 1, 1}, s2[2] = {2, 2};
        mb_attr_ints(&b, mb_node(&b, "Conv:x,W1,B1->y"), "pads", 4, p1);
        mb_scalar(&b, "three", 3.0f);
        mb_scalar(&b, "lo", 0.0f);
        mb_scalar(&b, "hi", 6.0f);
        mb_scalar(&b, "six", 6.0f);
        mb_node(&b, "Add:y,three->a");
        mb_node(&b, "Clip:a,lo,hi->c");
        mb_node(&b, "Mul:y,c->p");
        mb_node(&b, "Div:p,six->h");
        mb_node(&b, "GlobalAveragePool:h->g");
        mb_node(&b, "Conv:g,W2,B2->q");
        mb_node(&b, "Relu:q->qr");
        mb_node(&b, "Conv:qr,W3,B3->e");
        Onnx__NodeProto *hs = mb_node(&b, "HardSigmoid:e->es");
        mb_attr_f(&b, hs, "alpha", 0.2f);
        mb_node(&b, "Mul:h,es->se");
        Onnx__NodeProto *c4 = mb_node(&b, "Conv:se,W4,B4->o1");
        mb_attr_ints(&b, c4, "pads", 4, p1);
        mb_attr_ints(&b, c4, "strides", 2, s2);
        Onnx__NodeProto *c5 = mb_node(&b, "Conv:h,W5->o2");
        mb_attr_ints(&b, c5, "pads", 4, p1);
        mb_attr_ints(&b, c5, "strides", 2, s2);
        mb_node(&b, "Add:o1,o2->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (op_count(&r, "FromBlocked") != 1 || op_count(&r, "BlockedConv") != 5 ||
            op_count(&r, "BlockedPool") != 1 || op_count(&r, "Add") != 0 ||
            op_count(&r, "Mul") != 1 || r.ref)
            fail_msg("%s", r.ops);
        mb_free(&b);
    }
}

/* A dense 3x3 convolution over 5 blocked channels (fewer than the block): oneDNN has only
 * its reference kernel for that input layout, so the kernel reorders the blocked input to
 * plain NCHW and takes a JIT primitive (no ref, no own fallback); batch 2 on 2 threads
 * (one image per primitive) and as the plain reference says. */
static void test_narrow_blocked_input(void **state) {
    (void)state;
    mb_model b;
    mb_init(&b, 17);
    int64_t xd[4] = {2, 4, 9, 11};
    mb_input(&b, "x", 4, xd);
    int64_t w0[4] = {20, 4, 3, 3}, w1[4] = {5, 20, 1, 1}, w2[4] = {20, 5, 3, 3};
    mb_weight(&b, "W0", 4, w0, NULL, 0, 0.3f);
    mb_weight(&b, "W1", 4, w1, NULL, 0, 0.3f);
    mb_weight(&b, "W2", 4, w2, NULL, 0, 0.3f);
    int64_t p1[4] = {1, 1, 1, 1};
    mb_attr_ints(&b, mb_node(&b, "Conv:x,W0->a"), "pads", 4, p1);
    mb_node(&b, "Conv:a,W1->c");
    mb_node(&b, "Relu:c->cr");
    mb_attr_ints(&b, mb_node(&b, "Conv:cr,W2->d"), "pads", 4, p1);
    mb_node(&b, "Relu:d->z");
    mb_output(&b, "z");
    fuse_result r;
    run_both(&b, &r);
    if (op_count(&r, "BlockedConv") != 3 || r.ref || !r.unblk)
        fail_msg("ref %d, input reordered %d: %s", r.ref, r.unblk, r.ops);
    mb_free(&b);
}

static void test_conv_swish(void **state) {
    (void)state;
    /* Conv -> x * Sigmoid(x) in both operand orders: one FusedConv (SiLU); the Sigmoid's
     * output also a graph output: nothing fuses */
    for (int k = 0; k < 3; k++) {
        mb_model b;
        mb_init(&b, 17);
        conv_model(&b, true, x_shape, NULL);
        mb_node(&b, "Sigmoid:y->s");
        mb_node(&b, k == 1 ? "Mul:s,y->z" : "Mul:y,s->z");
        mb_output(&b, "z");
        if (k == 2) mb_output(&b, "s");
        fuse_result r;
        run_both(&b, &r);
        bool fused = r.nodes == 1 && op_count(&r, "FusedConv") == 1;
        if (fused != (k < 2) || r.ref) fail_msg("case %d: %s", k, r.ops);
        mb_free(&b);
    }
}

/* ---- MatMul + bias + activation ---- */


static void test_matmul_bias_relu(void **state) {
    (void)state;
    int ranks[] = {2, 3, 4};
    for (int i = 0; i < 3; i++)
        for (int relu = 0; relu <= 1; relu++) {
            mb_model b;
            mb_init(&b, 17);
            matmul_model(&b, ranks[i], ranks[i] == 4);
            mb_node(&b, relu ? "Add:y,bias->s" : "Add:bias,y->z");
            if (relu) mb_node(&b, "Relu:s->z");
            mb_output(&b, "z");
            fuse_result r;
            run_both(&b, &r);
            if (r.nodes != 1 || op_count(&r, "FusedMatMul") != 1) fail_msg("%s", r.ops);
            mb_free(&b);
        }
    /* negative: the MatMul output has a second reader */
    mb_model b;
    mb_init(&b, 17);
    matmul_model(&b, 3, false);
    mb_node(&b, "Add:y,bias->s");
    mb_node(&b, "Relu:s->z");
    mb_output(&b, "z");
    mb_output(&b, "y");
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "FusedMatMul"), 0);
    mb_free(&b);
}

/* Gemm + Relu, B transposed or not; negative: alpha != 1 */
static void test_gemm_relu(void **state) {
    (void)state;
    for (int variant = 0; variant < 3; variant++) {
        mb_model b;
        mb_init(&b, 17);
        int64_t ad[2] = {5, 8}, wd[2] = {16, 8}, wnd[2] = {8, 16}, n = 16;
        mb_input_run(&b, "A", 2, ad, NULL);
        mb_weight(&b, "W", 2, variant == 1 ? wnd : wd, NULL, 0, 0.5f);
        mb_weight(&b, "C", 1, &n, NULL, 0, 0.5f);
        Onnx__NodeProto *g = mb_node(&b, "Gemm:A,W,C->y");
        if (variant != 1) mb_attr_i(&b, g, "transB", 1);
        if (variant == 2) mb_attr_f(&b, g, "alpha", 0.5f);
        mb_node(&b, "Relu:y->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        size_t want = variant == 2 ? 0 : 1;
        if (op_count(&r, "FusedMatMul") != want || r.nodes != 2 - want)
            fail_msg("variant %d: %s", variant, r.ops);
        mb_free(&b);
    }
}

/* GELU as PyTorch exports it, in three orderings, and the tanh form */
static void test_matmul_gelu(void **state) {
    (void)state;
    for (int form = 0; form < 5; form++) {
        mb_model b;
        mb_init(&b, 17);
        matmul_model(&b, 3, false);
        mb_node(&b, "Add:y,bias->x");
        mb_scalar(&b, "one", 1.0f);
        mb_scalar(&b, "half", 0.5f);
        switch (form) {
        case 0: /* bert: (x * (erf(x / sqrt2) + 1)) * 0.5 */
            mb_erf_gelu(&b);
            break;
        case 1: /* (x * 0.5) * (1 + erf(x * 1/sqrt2)) */
            mb_scalar(&b, "isqrt2", 0.70710678f);
            mb_node(&b, "Mul:isqrt2,x->d");
            mb_node(&b, "Erf:d->e");
            mb_node(&b, "Add:one,e->a");
            mb_node(&b, "Mul:x,half->h");
            mb_node(&b, "Mul:h,a->z");
            break;
        case 2: /* ((1 + erf) * 0.5) * x */
            mb_scalar(&b, "sqrt2", 1.4142135f);
            mb_node(&b, "Div:x,sqrt2->d");
            mb_node(&b, "Erf:d->e");
            mb_node(&b, "Add:e,one->a");
            mb_node(&b, "Mul:a,half->m");
            mb_node(&b, "Mul:m,x->z");
            break;
        case 3: /* tanh form with Pow */
        case 4: /* tanh form with x * x * x */
            mb_scalar(&b, "three", 3.0f);
            mb_scalar(&b, "c", 0.044715f);
            mb_scalar(&b, "k", 0.7978845608f);
            if (form == 3) {
                mb_node(&b, "Pow:x,three->p");
            } else {
                mb_node(&b, "Mul:x,x->sq");
                mb_node(&b, "Mul:sq,x->p");
            }
            mb_node(&b, "Mul:p,c->q");
            mb_node(&b, "Add:x,q->r");
            mb_node(&b, "Mul:k,r->s");
            mb_node(&b, "Tanh:s->t");
            mb_node(&b, "Add:t,one->a");
            mb_node(&b, "Mul:x,a->m");
            mb_node(&b, "Mul:m,half->z");
            break;
        }
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "FusedMatMul") != 1) fail_msg("form %d: %s", form, r.ops);
        mb_free(&b);
    }
    /* negative: x (the GELU input) is also read outside the GELU: bias fuses, GELU stays */
    mb_model b;
    mb_init(&b, 17);
    matmul_model(&b, 3, false);
    mb_node(&b, "Add:y,bias->x");
    mb_scalar(&b, "one", 1.0f);
    mb_scalar(&b, "half", 0.5f);
    mb_erf_gelu(&b);
    mb_node(&b, "Neg:x->w");
    mb_output(&b, "z");
    mb_output(&b, "w");
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "Erf"), 1);
    assert_int_equal(op_count(&r, "FusedMatMul"), 1);
    mb_free(&b);
}

/* ---- decomposed LayerNorm ---- */

static void layernorm_model(mb_model *b, bool affine, bool extra_reader, bool dynamic) {
    int64_t decl[3] = {dynamic ? -1 : 2, 5, 16}, run[3] = {2, 5, 16}, n = 16, axes = -1;
    mb_input_run(b, "x", 3, decl, run);
    mb_scalar(b, "two", 2.0f);
    mb_scalar(b, "eps", 1e-5f);
    Onnx__NodeProto *m1 = mb_node(b, "ReduceMean:x->m");
    mb_attr_ints(b, m1, "axes", 1, &axes);
    mb_node(b, "Sub:x,m->d");
    mb_node(b, "Pow:d,two->p");
    Onnx__NodeProto *m2 = mb_node(b, "ReduceMean:p->v");
    mb_attr_ints(b, m2, "axes", 1, &axes);
    mb_node(b, "Add:v,eps->ve");
    mb_node(b, "Sqrt:ve->s");
    mb_node(b, affine ? "Div:d,s->nrm" : "Div:d,s->z");
    if (affine) {
        mb_weight(b, "gamma", 1, &n, NULL, 1.0f, 0.5f);
        mb_weight(b, "beta", 1, &n, NULL, 0.0f, 0.5f);
        mb_node(b, "Mul:nrm,gamma->g");
        mb_node(b, "Add:beta,g->z");
    }
    mb_output(b, "z");
    if (extra_reader) mb_output(b, "d");
}

static void test_layernorm(void **state) {
    (void)state;
    for (int affine = 0; affine <= 1; affine++)
        for (int dynamic = 0; dynamic <= 1; dynamic++) {
            mb_model b;
            mb_init(&b, 17);
            layernorm_model(&b, affine, false, dynamic);
            fuse_result r;
            run_both(&b, &r);
            if (r.nodes != 1 || op_count(&r, "LayerNormalization") != 1) fail_msg("%s", r.ops);
            mb_free(&b);
        }
    /* negative: d is also a graph output */
    mb_model b;
    mb_init(&b, 17);
    layernorm_model(&b, true, true, false);
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "LayerNormalization"), 0);
    mb_free(&b);
    /* negative: opset 13 has no LayerNormalization */
    mb_init(&b, 13);
    layernorm_model(&b, true, false, false);
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "LayerNormalization"), 0);
    mb_free(&b);
}

/* ---- attention ---- */

enum { K_TRANSPOSED_INPUT, K_TRANSPOSE_LAST2, K_TRANSPOSE_BERT };

static void attention_model(mb_model *b, int k_form, bool mask, bool div, bool extra_reader) {
    int64_t qd[4] = {2, 3, 5, 8}, kd_bert[4] = {2, 6, 3, 8}, ktd[4] = {2, 3, 8, 6};
    int64_t kd[4] = {2, 3, 6, 8}, vd[4] = {2, 3, 6, 4}, md[4] = {2, 1, 1, 6};
    mb_input_run(b, "q", 4, qd, NULL);
    mb_input_run(b, "v", 4, vd, NULL);
    if (k_form == K_TRANSPOSED_INPUT) {
        mb_input_run(b, "kt", 4, ktd, NULL);
    } else if (k_form == K_TRANSPOSE_LAST2) {
        int64_t perm[4] = {0, 1, 3, 2};
        mb_input_run(b, "k", 4, kd, NULL);
        mb_attr_ints(b, mb_node(b, "Transpose:k->kt"), "perm", 4, perm);
    } else {
        int64_t perm[4] = {0, 2, 3, 1};
        mb_input_run(b, "k", 4, kd_bert, NULL);
        mb_attr_ints(b, mb_node(b, "Transpose:k->kt"), "perm", 4, perm);
    }
    mb_node(b, "MatMul:q,kt->s");
    if (div) {
        mb_scalar(b, "c", 2.828427f);
        mb_node(b, "Div:s,c->ss");
    } else {
        mb_scalar(b, "c", 0.35f);
        mb_node(b, "Mul:c,s->ss");
    }
    if (mask) {
        mb_input_run(b, "mask", 4, md, NULL);
        mb_node(b, "Add:mask,ss->sm");
    }
    mb_attr_i(b, mb_node(b, mask ? "Softmax:sm->p" : "Softmax:ss->p"), "axis", -1);
    mb_node(b, "MatMul:p,v->z");
    mb_output(b, "z");
    if (extra_reader) mb_output(b, "p");
}

static void test_attention(void **state) {
    (void)state;
    for (int k_form = 0; k_form < 3; k_form++)
        for (int variant = 0; variant < 2; variant++) {
            mb_model b;
            mb_init(&b, 17);
            attention_model(&b, k_form, variant == 0, variant == 0, false);
            fuse_result r;
            run_both(&b, &r);
            /* K^T given as an input: K comes from an inserted Transpose; a Transpose of the
             * last two axes disappears; bert's layout keeps one Transpose (0,2,1,3) */
            size_t transposes = k_form == K_TRANSPOSE_LAST2 ? 0 : 1;
            if (op_count(&r, "Attention") != 1 || op_count(&r, "Transpose") != transposes ||
                r.nodes != 1 + transposes)
                fail_msg("k_form %d variant %d: %s", k_form, variant, r.ops);
            mb_free(&b);
        }
    /* negative: the probabilities are also a graph output */
    mb_model b;
    mb_init(&b, 17);
    attention_model(&b, K_TRANSPOSE_LAST2, true, true, true);
    fuse_result r;
    run_both(&b, &r);
    assert_int_equal(op_count(&r, "Attention"), 0);
    mb_free(&b);
}

/* Rows longer than one 8-float vector (27 = 3 x 8 + 3: the vectorised softmax and its
 * tail), head size 16, a mask that pushes some scores to -1e4 (exp underflows to 0), per
 * column ([B,1,1,T]) or per row ([B,1,S,1]: one value for a whole row), one head (2 pairs:
 * each of the 2 threads takes one) and three (6 pairs, 3 per thread), and batch 1 with one
 * head (1 pair for 2 threads: the pair's rows in blocks of 7, 3 units). The unfused graph at
 * opt-level 0 is the reference (run_both: 1e-5 + 1e-4 relative). */
static void test_attention_wide(void **state) {
    (void)state;
    for (int form = 0; form < 6; form++) {
        int64_t heads = form % 2 && form < 4 ? 3 : 1, batch = form < 4 ? 2 : 1;
        bool cols = form < 2 || form == 4;
        int64_t qd[4] = {batch, heads, 21, 16}, kd[4] = {batch, heads, 27, 16},
                vd[4] = {batch, heads, 27, 12};
        int64_t md[4] = {batch, 1, cols ? 1 : 21, cols ? 27 : 1}, perm[4] = {0, 1, 3, 2};
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "q", 4, qd, NULL);
        mb_input_run(&b, "k", 4, kd, NULL);
        mb_input_run(&b, "v", 4, vd, NULL);
        mb_input_run(&b, "m0", 4, md, NULL);
        mb_scalar(&b, "half", 0.5f);
        mb_scalar(&b, "big", -1.0e4f);
        mb_scalar(&b, "c", 4.0f);
        mb_node(&b, "Greater:m0,half->mb"); /* about a quarter of the columns masked */
        mb_attr_i(&b, mb_node(&b, "Cast:mb->mf"), "to", 1);
        mb_node(&b, "Mul:mf,big->mask");
        mb_attr_ints(&b, mb_node(&b, "Transpose:k->kt"), "perm", 4, perm);
        mb_node(&b, "MatMul:q,kt->s");
        mb_node(&b, "Div:s,c->ss");
        mb_node(&b, "Add:ss,mask->sm");
        mb_attr_i(&b, mb_node(&b, "Softmax:sm->p"), "axis", -1);
        mb_node(&b, "MatMul:p,v->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (op_count(&r, "Attention") != 1) fail_msg("form %d: %s", form, r.ops);
        mb_free(&b);
    }
}

/* ---- dilated 1-D Conv: its pads as a Pad in front (fuse_conv.c, CPU) ----
 * attacut's form: kernel 5, dilation 3, pads 6 (and uneven pads, a Relu behind it: a
 * FusedConv); negative cases: no dilation, no pads, a 2-D dilated Conv. */
static void test_conv_prepad(void **state) {
    (void)state;
    struct {
        int rank;
        int64_t k, dil, pl, pr;
        bool relu;
        bool want;
    } cases[] = {
        {3, 5, 3, 6, 6, false, true}, {3, 9, 2, 8, 3, true, true}, {3, 5, 1, 2, 2, false, false},
        {3, 5, 3, 0, 0, false, false}, {4, 3, 2, 2, 2, false, false},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mb_model b;
        mb_init(&b, 17);
        int r = cases[c].rank;
        int64_t xd[4] = {2, 12, 37, 11}, wd[4] = {20, 12, cases[c].k, cases[c].k}, m = 20;
        if (r == 3) xd[2] = 37;
        mb_input_run(&b, "x", r, xd, NULL);
        mb_weight(&b, "W", r, wd, NULL, 0, 0.5f);
        mb_weight(&b, "B", 1, &m, NULL, 0, 0.5f);
        Onnx__NodeProto *n = mb_node(&b, cases[c].relu ? "Conv:x,W,B->y" : "Conv:x,W,B->z");
        int64_t pads[4] = {cases[c].pl, cases[c].pl, cases[c].pr, cases[c].pr};
        if (r == 3) pads[1] = cases[c].pr;
        int64_t dil[2] = {cases[c].dil, cases[c].dil};
        mb_attr_ints(&b, n, "pads", 2 * (r - 2), pads);
        mb_attr_ints(&b, n, "dilations", r - 2, dil);
        if (cases[c].relu) mb_node(&b, "Relu:y->z");
        mb_output(&b, "z");
        fuse_result res;
        run_both(&b, &res);
        if ((op_count(&res, "Pad") == 1) != cases[c].want || res.ref)
            fail_msg("case %zu: %s%s", c, res.ops, res.ref ? " (a reference kernel)" : "");
        mb_free(&b);
    }
}

/* ---- Transpose(0, 2, 1[, 3]) -> Conv along L as ConvNwc1d (fuse_conv.c, CPU) ----
 * magika's form at a small size: X [N 3, L 37, C 24, 1] -> Transpose -> Conv W [40, 24, 5, 1],
 * with and without B; the 1-D form with pads; dynamic N and L; a last dim known only at run
 * time that is not 1 (the op's plain loop). Negative cases: another perm, stride 2,
 * dilation 2, group 2, pads across the unit dim, a second reader of the Transpose, W not a
 * constant. Each against opt-level 0 (run_both: atol 1e-5, rtol 1e-4). */
static void test_conv_nwc(void **state) {
    (void)state;
    enum { PLAIN, BIAS, R3PADS, R4PADS, DYN, DLAST, PERM, STRIDE, DIL, GROUP, WPADS, SECOND, WIN };
    struct {
        int kind;
        bool want;
    } cases[] = {{PLAIN, true},  {BIAS, true},    {R3PADS, true}, {R4PADS, true}, {DYN, true},
                 {DLAST, true},  {PERM, false},   {STRIDE, false}, {DIL, false},  {GROUP, false},
                 {WPADS, false}, {SECOND, false}, {WIN, false}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int kind = cases[c].kind, r = kind == R3PADS ? 3 : 4;
        mb_model b;
        mb_init(&b, 17);
        int64_t xd[4] = {3, 37, 24, 1}, xrun[4] = {3, 37, 24, 1};
        int64_t wd[4] = {40, kind == GROUP ? 12 : 24, 5, 1}, m = 40;
        int64_t perm[4] = {0, 2, 1, 3};
        if (kind == DYN) xd[0] = xd[1] = -1;
        if (kind == DLAST) xd[3] = -1, xrun[3] = 2;
        if (kind == PERM) { /* X [N, C, 1, L] -> [N, C, L, 1] */
            xd[1] = xrun[1] = 24, xd[2] = xrun[2] = 1, xd[3] = xrun[3] = 37;
            perm[1] = 1, perm[2] = 3, perm[3] = 2;
        }
        mb_input_run(&b, "x", r, xd, xrun);
        if (kind == WIN) mb_input(&b, "W", r, wd);
        else mb_weight(&b, "W", r, wd, NULL, 0, 0.5f);
        if (kind == BIAS || kind == R3PADS) mb_weight(&b, "B", 1, &m, NULL, 0, 0.5f);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x->xt"), "perm", r, perm);
        Onnx__NodeProto *n = mb_node(&b, kind == BIAS || kind == R3PADS ? "Conv:xt,W,B->y" : "Conv:xt,W->y");
        int64_t two[2] = {2, 2};
        if (kind == STRIDE) mb_attr_ints(&b, n, "strides", 2, two);
        if (kind == DIL) mb_attr_ints(&b, n, "dilations", 2, two);
        if (kind == GROUP) mb_attr_i(&b, n, "group", 2);
        if (kind == R3PADS) {
            int64_t pads[2] = {2, 1};
            mb_attr_ints(&b, n, "pads", 2, pads);
        }
        if (kind == R4PADS || kind == WPADS) {
            int64_t pl[4] = {3, 0, 1, 0}, pw[4] = {0, 1, 0, 1};
            mb_attr_ints(&b, n, "pads", 4, kind == R4PADS ? pl : pw);
        }
        mb_output(&b, "y");
        if (kind == SECOND) {
            mb_node(&b, "Relu:xt->t2");
            mb_output(&b, "t2");
        }
        fuse_result res;
        run_both(&b, &res);
        bool fused = op_count(&res, "ConvNwc1d") == 1 && op_count(&res, "Transpose") == 0;
        if (fused != cases[c].want || (!cases[c].want && op_count(&res, "ConvNwc1d")))
            fail_msg("case %zu: %s", c, res.ops);
        mb_free(&b);
    }
}

/* ---- Transpose / Reshape chains ---- */

static void test_layout(void **state) {
    (void)state;
    int64_t xd[4] = {2, 3, 4, 5};
    int64_t p1[4] = {0, 2, 1, 3}, p2[4] = {3, 1, 2, 0};
    /* identity composition: both Transposes go */
    {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x", 4, xd, NULL);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x->t1"), "perm", 4, p1);
        mb_attr_ints(&b, mb_node(&b, "Transpose:t1->t2"), "perm", 4, p1);
        mb_node(&b, "Relu:t2->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "Transpose") != 0) fail_msg("%s", r.ops);
        mb_free(&b);
    }
    /* identity composition into a graph output: an Identity keeps the name */
    {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x", 4, xd, NULL);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x->t1"), "perm", 4, p1);
        mb_attr_ints(&b, mb_node(&b, "Transpose:t1->z"), "perm", 4, p1);
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "Identity") != 1) fail_msg("%s", r.ops);
        mb_free(&b);
    }
    /* general composition (and a default perm): one Transpose */
    {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x", 4, xd, NULL);
        mb_node(&b, "Transpose:x->t1");
        mb_attr_ints(&b, mb_node(&b, "Transpose:t1->t2"), "perm", 4, p1);
        mb_attr_ints(&b, mb_node(&b, "Transpose:t2->z"), "perm", 4, p1);
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "Transpose") != 1) fail_msg("%s", r.ops);
        mb_free(&b);
    }
    /* Reshape chain: the last one stays */
    {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x", 4, xd, NULL);
        int64_t s1[2] = {6, 20}, s2[3] = {4, -1, 3};
        mb_init_i64(&b, "s1", 2, s1);
        mb_init_i64(&b, "s2", 3, s2);
        mb_node(&b, "Reshape:x,s1->r1");
        mb_node(&b, "Reshape:r1,s2->z");
        mb_output(&b, "z");
        fuse_result r;
        run_both(&b, &r);
        if (r.nodes != 1 || op_count(&r, "Reshape") != 1) fail_msg("%s", r.ops);
        mb_free(&b);
    }
    /* negatives: a middle value read twice; a second shape with 0 (copies a middle dim) */
    {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x", 4, xd, NULL);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x->t1"), "perm", 4, p1);
        mb_attr_ints(&b, mb_node(&b, "Transpose:t1->z"), "perm", 4, p2);
        int64_t s1[2] = {6, 20}, s2[3] = {0, 4, 5};
        mb_init_i64(&b, "s1", 2, s1);
        mb_init_i64(&b, "s2", 3, s2);
        mb_node(&b, "Reshape:x,s1->r1");
        mb_node(&b, "Reshape:r1,s2->w");
        mb_output(&b, "z");
        mb_output(&b, "t1");
        mb_output(&b, "w");
        fuse_result r;
        run_both(&b, &r);
        if (op_count(&r, "Transpose") != 2 || op_count(&r, "Reshape") != 2) fail_msg("%s", r.ops);
        mb_free(&b);
    }
}

/* ---- inside control-flow bodies ----
 * tests/models/if_fused_body (tools/make_control_models.py; against ONNX Runtime in
 * model_tests): the If's branches and the Loop inside the else branch are fused, with the
 * main graph's weights read from two scopes out; the else branch's Conv, whose output is
 * also a branch output, stays. Both branches, run four times (the body's memory plan is
 * built from the second run on), agree with opt-level 0. */
static void body_session(tdm_env *env, int opt, tdm_session **s) {
    tdm_session_options so = {.api_version = TDM_API_VERSION, .devices = "cpu", .threads = 1,
                              .opt_level = opt};
    tdm_status *st = tdm_session_create(
        env, TANDEM_SOURCE_DIR "/tests/models/if_fused_body/model.onnx", &so, s);
    if (st) fail_msg("opt %d: %s", opt, tdm_status_message(st));
}

static void test_body_fusion(void **state) {
    (void)state;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session *s0 = NULL, *s1 = NULL;
    body_session(env, 0, &s0);
    body_session(env, 1, &s1);
    fuse_result r = {0};
    const tdm_model *m = tdm_session_model(s1);
    size_t len = 0;
    for (size_t i = 0; i < tdm_model_op_type_count(m); i++) {
        size_t c;
        const char *op = tdm_model_op_type(m, i, &c);
        len += (size_t)snprintf(r.ops + len, sizeof r.ops - len, "%s:%zu ", op, c);
    }
    /* then: Conv+Relu, Conv+Sigmoid, MatMul+Add+Relu; else: MatMul+Add; loop: Conv+Relu */
    if (op_count(&r, "FusedConv") != 3 || op_count(&r, "FusedMatMul") != 2 ||
        op_count(&r, "Conv") != 2 || op_count(&r, "Relu") != 1 || op_count(&r, "Sigmoid") != 0)
        fail_msg("%s", r.ops);
    int64_t xd[3] = {1, 4, 10}, vd[2] = {3, 16};
    tdm_tensor *ins[3] = {0};
    assert_null(tdm_tensor_create(env, TDM_BOOL, 0, NULL, &ins[0]));
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 3, xd, &ins[1]));
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 2, vd, &ins[2]));
    mb_rng_state = 777;
    for (int i = 1; i < 3; i++) {
        float *d = tdm_tensor_data(ins[i]);
        for (int64_t k = 0; k < tdm_tensor_element_count(ins[i]); k++) d[k] = 2.0f * mb_rnd();
    }
    const char *names[3] = {"c", "X", "V"};
    for (int branch = 0; branch < 2; branch++) {
        *(bool *)tdm_tensor_data(ins[0]) = branch == 0;
        tdm_tensor *want[3] = {0};
        const tdm_tensor *const *cins = (const tdm_tensor *const *)ins;
        tdm_status *st = tdm_session_run(s0, 3, names, cins, 3, NULL, want);
        if (st) fail_msg("opt 0 run: %s", tdm_status_message(st));
        for (int run = 0; run < 4; run++) {
            tdm_tensor *got[3] = {0};
            st = tdm_session_run(s1, 3, names, cins, 3, NULL, got);
            if (st) fail_msg("opt 1 run %d: %s", run, tdm_status_message(st));
            for (int o = 0; o < 3; o++) {
                int64_t count = tdm_tensor_element_count(want[o]);
                assert_int_equal(tdm_tensor_element_count(got[o]), count);
                const float *x = tdm_tensor_data(want[o]), *y = tdm_tensor_data(got[o]);
                for (int64_t k = 0; k < count; k++)
                    if (!(fabsf(x[k] - y[k]) <= 1e-5f + 1e-4f * fabsf(x[k])))
                        fail_msg("branch %d run %d output %d element %lld: %.8g vs %.8g", branch,
                                 run, o, (long long)k, x[k], y[k]);
                tdm_tensor_free(got[o]);
            }
        }
        for (int o = 0; o < 3; o++) tdm_tensor_free(want[o]);
    }
    for (int i = 0; i < 3; i++) tdm_tensor_free(ins[i]);
    tdm_session_free(s0);
    tdm_session_free(s1);
    tdm_env_free(env);
}

/* Max / Add over equally transposed inputs: the op first, one Transpose after it (fuse_layout.c);
 * negatives: a transposed value with a second reader, two different permutations */
static void test_sink_transpose(void **state) {
    (void)state;
    int64_t xd[3] = {2, 5, 3}, x2d[3] = {5, 2, 3}, p[3] = {0, 2, 1}, q[3] = {1, 2, 0};
    for (int c = 0; c < 4; c++) {
        mb_model b;
        mb_init(&b, 17);
        mb_input_run(&b, "x1", 3, xd, NULL);
        mb_input_run(&b, "x2", 3, c == 3 ? x2d : xd, NULL); /* case 3: [2,3,5] by another perm */
        mb_input_run(&b, "x3", 3, xd, NULL);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x1->t1"), "perm", 3, p);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x2->t2"), "perm", 3, c == 3 ? q : p);
        mb_attr_ints(&b, mb_node(&b, "Transpose:x3->t3"), "perm", 3, p);
        mb_node(&b, c == 1 ? "Add:t1,t2->m" : "Max:t1,t2,t3->m");
        mb_node(&b, "Relu:m->z");
        mb_output(&b, "z");
        if (c == 2) mb_output(&b, "t2");
        fuse_result r;
        run_both(&b, &r);
        size_t want = c <= 1 ? 1 : 3; /* (case 1: t3 is unread and goes) */
        if (op_count(&r, "Transpose") != want) fail_msg("case %d: %s", c, r.ops);
        mb_free(&b);
    }
}

/* ---- one-hot encoding times a constant matrix -> Gather ----
 * x * 4 cast to an integer (-8 .. 8: classes 0 .. 4 and values outside them on both sides),
 * one-hot against 0 .. K-1 (through an Expand or by the Equal's broadcast), Cast, MatMul
 * (+ bias). Cases: 0 int64 through an Expand of a dynamic batch, with the bias; 1 int32,
 * no Expand, the classes first, rank 2, no bias; negatives: 2 the classes not 0 .. K-1, 3 the
 * Equal's result also a graph output. */
static void test_onehot_matmul(void **state) {
    (void)state;
    for (int c = 0; c < 4; c++) {
        mb_model b;
        mb_init(&b, 17);
        bool r2 = c == 1;
        int64_t decl[3] = {-1, 6, 1}, run[3] = {3, 6, 1}, d2[2] = {6, 1};
        if (r2) mb_input_run(&b, "x", 2, d2, NULL);
        else mb_input_run(&b, "x", 3, decl, run);
        mb_scalar(&b, "four", 4.0f);
        mb_node(&b, "Mul:x,four->xs");
        Onnx__NodeProto *cast = mb_node(&b, "Cast:xs->xi");
        mb_attr_i(&b, cast, "to", c == 1 ? 6 : 7);
        int64_t cls64[5] = {0, 1, 2, 3, 4}, cd[3] = {1, 1, 5};
        int32_t cls32[5] = {0, 1, 2, 3, 4};
        if (c == 2) cls64[3] = 4, cls64[4] = 3;
        if (c == 1) mb_init_raw(&b, "C", 6, 2, cd + 1, cls32, sizeof cls32);
        else mb_init_raw(&b, "C", 7, 3, cd, cls64, sizeof cls64);
        if (c == 1) {
            mb_node(&b, "Equal:C,xi->e");
        } else {
            int64_t shp[3] = {3, 6, 5};
            mb_init_i64(&b, "S", 3, shp);
            mb_node(&b, "Expand:xi,S->xe");
            mb_node(&b, "Equal:xe,C->e");
        }
        mb_attr_i(&b, mb_node(&b, "Cast:e->oh"), "to", 1);
        int64_t wd[2] = {5, 4}, n = 4;
        mb_weight(&b, "W", 2, wd, NULL, 0, 1.0f);
        mb_node(&b, c == 1 ? "MatMul:oh,W->z" : "MatMul:oh,W->y");
        if (c != 1) {
            mb_weight(&b, "bias", 1, &n, NULL, 0, 1.0f);
            mb_node(&b, "Add:y,bias->z");
        }
        mb_output(&b, "z");
        if (c == 3) mb_output(&b, "oh");
        fuse_result r;
        run_both(&b, &r);
        bool want = c <= 1;
        if ((op_count(&r, "Gather") == 1) != want || (op_count(&r, "MatMul") +
                                                      op_count(&r, "FusedMatMul") == 0) != want ||
            (want && op_count(&r, "Equal") != 0))
            fail_msg("case %d: %s", c, r.ops);
        mb_free(&b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bn_fold),         cmocka_unit_test(test_conv_activations),
        cmocka_unit_test(test_conv_residual),   cmocka_unit_test(test_matmul_bias_relu),
        cmocka_unit_test(test_conv_hswish),     cmocka_unit_test(test_conv_affine),
        cmocka_unit_test(test_conv_gelu),       cmocka_unit_test(test_reduce_pool),
        cmocka_unit_test(test_conv_swish),
        cmocka_unit_test(test_se_blocked),      cmocka_unit_test(test_narrow_blocked_input),
        cmocka_unit_test(test_gemm_relu),
        cmocka_unit_test(test_matmul_gelu),     cmocka_unit_test(test_layernorm),
        cmocka_unit_test(test_attention),       cmocka_unit_test(test_attention_wide),
        cmocka_unit_test(test_layout),          cmocka_unit_test(test_body_fusion),
        cmocka_unit_test(test_sink_transpose), cmocka_unit_test(test_onehot_matmul),
        cmocka_unit_test(test_conv_prepad),
        cmocka_unit_test(test_conv_nwc),
        cmocka_unit_test(test_conv_squeeze_bias),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
