/* The bad-input catalogue (issue 10), for the cases tests/unit/test_bad_models.c does not
 * cover: unknown data types and domains, missing type information, attribute lists whose
 * length disagrees with the input rank (Conv, pooling), negative and out-of-range indices
 * at run time (Gather, GatherElements, GatherND, ScatterND, ScatterElements, ArgMax, TopK,
 * OneHot...), integer division by zero and INT64_MIN / -1 (also in shape arithmetic), run
 * inputs with the wrong dtype / rank / dims, dims that overflow and huge declared sizes.
 *
 * Every case must give an error status with the expected code and a message that names the
 * node (models are built here; nodes are called n0, n1, ...) or the tensor; must leak
 * nothing (the environment's allocator hook counts live blocks); and the environment, and
 * for run-time cases the same session, must go on working: a good input runs right after.
 *
 * A case whose fix is pending is relaxed with the reason printed; TDM_CATALOGUE_STRICT=1
 * holds it to the intended behaviour. */
#include "catalogue_util.h"

/* ---- unknown data types and domains ---- */

static void test_unknown_dtype(void **state) {
    (void)state;
    int fails = 0;
    mb_model m;
    int64_t d4[1] = {4};
    float w[4] = {1, 2, 3, 4};

    /* an initializer of data type 99 */
    mb_init(&m, 17);
    mb_input(&m, "x", 1, d4);
    mb_init_raw(&m, "W", 99, 1, d4, w, sizeof w);
    mb_node(&m, "Add:x,W->y");
    mb_output(&m, "y");
    fails += expect_refused("initializer dtype 99", &m, TDM_ERR_UNSUPPORTED, BADMODEL, "'W'", "99");

    /* a graph input of element type 99 */
    mb_init(&m, 17);
    mb_input_t(&m, "x", 99, 1, d4);
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    fails += expect_refused("input elem_type 99", &m, TDM_ERR_UNSUPPORTED, BADMODEL, "'x'", "99");

    /* a graph input of element type UNDEFINED (0) */
    mb_init(&m, 17);
    mb_input_t(&m, "x", 0, 1, d4);
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    fails += expect_refused("input elem_type 0", &m, TDM_ERR_UNSUPPORTED, BADMODEL, "'x'", NULL);

    /* Cast to type 99 and to UNDEFINED */
    int64_t tos[2] = {99, 0};
    for (int i = 0; i < 2; i++) {
        mb_init(&m, 17);
        mb_input(&m, "x", 1, d4);
        mb_node(&m, "Cast:x->y");
        mb_attr_i(&m, m.nodes[0], "to", tos[i]);
        mb_output(&m, "y");
        char label[64];
        snprintf(label, sizeof label, "Cast to=%lld", (long long)tos[i]);
        fails += expect_refused(label, &m, INVALID, TDM_ERR_UNSUPPORTED, "'n0'", NULL);
    }

    /* a Constant whose tensor has data type 99, and one with data type 0 */
    int dts[2] = {99, 0};
    for (int i = 0; i < 2; i++) {
        mb_init(&m, 17);
        mb_input(&m, "x", 1, d4);
        Onnx__NodeProto *n = mb_node(&m, "Constant:->c");
        Onnx__TensorProto *cval = mb_new_tensor(&m, "cval", dts[i], 1, d4);
        mb_set_raw(&m, cval, w, sizeof w);
        mb_attr_tensor(&m, n, "value", cval);
        mb_node(&m, "Add:x,c->y");
        mb_output(&m, "y");
        char label[64];
        snprintf(label, sizeof label, "Constant dtype %d", dts[i]);
        fails += expect_refused(label, &m, TDM_ERR_UNSUPPORTED, BADMODEL, "cval", NULL);
    }
    assert_int_equal(fails, 0);
}

static void test_unknown_domain(void **state) {
    (void)state;
    int fails = 0;
    int64_t d4[1] = {4};
    mb_model m;
    /* a node of a domain the model imports but tandem does not know */
    mb_init(&m, 17);
    Onnx__OperatorSetIdProto evil = ONNX__OPERATOR_SET_ID_PROTO__INIT;
    evil.domain = "com.example.evil";
    evil.has_version = 1;
    evil.version = 1;
    Onnx__OperatorSetIdProto *ops[2] = {&m.opset, &evil};
    m.model.opset_import = ops;
    m.model.n_opset_import = 2;
    mb_input(&m, "x", 1, d4);
    mb_node(&m, "Relu:x->y");
    m.nodes[0]->domain = "com.example.evil";
    mb_output(&m, "y");
    size_t size;
    void *buf = mb_pack(&m, &size);
    m.nodes[0]->domain = NULL;
    m.model.opset_import = m.opsets;
    m.model.n_opset_import = 1;
    long live0 = live();
    tdm_session *s = NULL;
    fails += check("unknown domain", tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s),
                   TDM_ERR_UNSUPPORTED, NONE, "com.example.evil", "Relu") != 0;
    assert_null(s);
    free(buf);
    free(finish(&m, &size));

    /* a node of a domain the model does not import at all */
    mb_init(&m, 17);
    mb_input(&m, "x", 1, d4);
    mb_node(&m, "Relu:x->y");
    m.nodes[0]->domain = "com.example.missing";
    mb_output(&m, "y");
    buf = mb_pack(&m, &size);
    m.nodes[0]->domain = NULL;
    fails += check("domain not imported",
                   tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s),
                   TDM_ERR_UNSUPPORTED, BADMODEL, "com.example.missing", NULL) != 0;
    assert_null(s);
    free(buf);
    free(finish(&m, &size));
    assert_int_equal(live(), live0);
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* ---- missing type information ---- */

static void test_missing_type(void **state) {
    (void)state;
    int fails = 0;
    int64_t d4[1] = {4};
    mb_model m;

    /* a graph input without a type */
    mb_init(&m, 17);
    mb_input(&m, "x", 1, d4);
    Onnx__TypeProto *saved = m.ins[0]->type;
    m.ins[0]->type = NULL;
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    size_t size;
    void *buf = mb_pack(&m, &size);
    m.ins[0]->type = saved;
    long live0 = live();
    tdm_session *s = NULL;
    fails += check("input without type", tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s),
                   BADMODEL, NONE, "'x'", "type") != 0;
    free(buf);

    /* a TypeProto with no value (neither tensor nor sequence...) */
    Onnx__TypeProto empty = ONNX__TYPE_PROTO__INIT;
    m.ins[0]->type = &empty;
    buf = mb_pack(&m, &size);
    m.ins[0]->type = saved;
    fails += check("input with empty type", tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s),
                   BADMODEL, NONE, "'x'", "type") != 0;
    free(buf);

    /* a graph output without a type is fine in ONNX (its type is inferred) */
    Onnx__TypeProto *out_saved = m.outs[0]->type;
    m.outs[0]->type = NULL;
    buf = mb_pack(&m, &size);
    m.outs[0]->type = out_saved;
    tdm_status *st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s);
    if (st) fails += check("output without type", st, BADMODEL, NONE, "'y'", "type") != 0;
    tdm_session_free(s);
    s = NULL;
    free(buf);
    free(finish(&m, &size));
    assert_int_equal(live(), live0);

    /* a tensor type without elem_type: loads; a run takes the dtype it is given */
    mb_init(&m, 17);
    mb_input(&m, "x", 1, d4);
    m.ins[0]->type->tensor_type->has_elem_type = 0;
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    buf = finish(&m, &size);
    st = tdm_session_create_from_buffer(g_env, buf, size, NULL, NULL, &s);
    free(buf);
    if (!st) {
        tdm_tensor *x = iota(1, d4), *y = NULL;
        const char *in = "x";
        st = run(s, 1, &in, &x, &y);
        if (st) fails += check("no elem_type: run", st, INVALID, NONE, "'x'", NULL) != 0;
        tdm_tensor_free(y);
        tdm_tensor_free(x);
        tdm_session_free(s);
    } else {
        fails += check("no elem_type", st, BADMODEL, NONE, "'x'", NULL) != 0;
    }
    assert_int_equal(live(), live0);
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* ---- a required output left out ---- */

/* An output named "" is an omitted one (so is a name starting with a NUL byte: protobuf-c's
 * strings end there; fuzz regression arity_sign_output_nul_name.onnx). Only optional outputs
 * may be left out: Sign's only output is required, so that model is refused instead of its
 * kernel writing through a null tensor; Dropout's mask is optional, so that one loads. */
static void test_omitted_required_output(void **state) {
    (void)state;
    int64_t d4[1] = {4};
    mb_model m;
    mb_init(&m, 13);
    mb_input(&m, "x", 1, d4);
    mb_node(&m, "Relu:x->y");
    Onnx__NodeProto *n = mb_node(&m, "Sign:x->s");
    mb_output(&m, "y");
    n->output[0] = "";
    assert_int_equal(expect_refused("Sign output named \"\"", &m, BADMODEL, NONE,
                                    "required output 0 is missing", "Sign"),
                     0);

    mb_init(&m, 13);
    mb_input(&m, "x", 1, d4);
    n = mb_node(&m, "Dropout:x->y,mask");
    mb_output(&m, "y");
    n->output[1] = "";
    tdm_session *s = NULL;
    tdm_status *st = load_model(&m, &s);
    if (st) fail_msg("Dropout without its mask: %s", tdm_status_message(st));
    tdm_session_free(s);
    env_still_serves();
}

/* ---- attribute lists against the input rank ---- */

typedef struct conv_case {
    const char *label;
    const char *op;          /* Conv, MaxPool, AveragePool, ConvTranspose */
    const char *attr;        /* NULL: none */
    int n;
    int64_t v[6];
    const char *attr2;
    int n2;
    int64_t v2[6];
} conv_case;

static const conv_case conv_cases[] = {
    {"Conv kernel_shape of length 1", "Conv", "kernel_shape", 1, {3}, NULL, 0, {0}},
    {"Conv kernel_shape of length 3", "Conv", "kernel_shape", 3, {3, 3, 3}, NULL, 0, {0}},
    {"Conv kernel_shape disagrees with W", "Conv", "kernel_shape", 2, {2, 2}, NULL, 0, {0}},
    {"Conv pads of length 2", "Conv", "pads", 2, {1, 1}, NULL, 0, {0}},
    {"Conv pads of length 6", "Conv", "pads", 6, {1, 1, 1, 1, 1, 1}, NULL, 0, {0}},
    {"Conv negative pads", "Conv", "pads", 4, {-9, -9, -9, -9}, NULL, 0, {0}},
    {"Conv dilations of length 3", "Conv", "dilations", 3, {1, 1, 1}, NULL, 0, {0}},
    {"Conv dilations 0", "Conv", "dilations", 2, {0, 0}, NULL, 0, {0}},
    {"Conv strides of length 1", "Conv", "strides", 1, {1}, NULL, 0, {0}},
    {"Conv strides 0", "Conv", "strides", 2, {0, 0}, NULL, 0, {0}},
    {"Conv strides -1", "Conv", "strides", 2, {-1, -1}, NULL, 0, {0}},
    {"Conv group 0", "Conv", "group", -1, {0}, NULL, 0, {0}},
    {"Conv group 3 (channels 1)", "Conv", "group", -1, {3}, NULL, 0, {0}},
    {"Conv huge dilation", "Conv", "dilations", 2, {INT64_MAX, INT64_MAX}, NULL, 0, {0}},
    {"Conv huge pads", "Conv", "pads", 4, {INT64_MAX, 0, INT64_MAX, 0}, NULL, 0, {0}},
    {"MaxPool without kernel_shape", "MaxPool", NULL, 0, {0}, NULL, 0, {0}},
    {"MaxPool kernel_shape of length 1", "MaxPool", "kernel_shape", 1, {2}, NULL, 0, {0}},
    {"MaxPool kernel 0", "MaxPool", "kernel_shape", 2, {0, 0}, NULL, 0, {0}},
    {"MaxPool kernel larger than input", "MaxPool", "kernel_shape", 2, {9, 9}, NULL, 0, {0}},
    {"MaxPool pads of length 2", "MaxPool", "kernel_shape", 2, {2, 2}, "pads", 2, {1, 1}},
    {"MaxPool strides 0", "MaxPool", "kernel_shape", 2, {2, 2}, "strides", 2, {0, 0}},
    {"MaxPool dilations 0", "MaxPool", "kernel_shape", 2, {2, 2}, "dilations", 2, {0, 0}},
    {"AveragePool strides of length 3", "AveragePool", "kernel_shape", 2, {2, 2}, "strides", 3,
     {1, 1, 1}},
    {"AveragePool strides 0", "AveragePool", "kernel_shape", 2, {2, 2}, "strides", 2, {0, 0}},
    {"AveragePool negative kernel", "AveragePool", "kernel_shape", 2, {-2, 2}, NULL, 0, {0}},
    {"ConvTranspose strides 0", "ConvTranspose", "strides", 2, {0, 0}, NULL, 0, {0}},
    {"ConvTranspose output_padding of length 1", "ConvTranspose", "output_padding", 1, {1}, NULL,
     0, {0}},
    {"ConvTranspose output_shape of length 3", "ConvTranspose", "output_shape", 3, {5, 5, 5}, NULL,
     0, {0}},
};

/* attribute `name` (none when NULL) of node 0: an int when n < 0, else n ints */
static void case_attr(mb_model *m, const char *name, int n, const int64_t *v) {
    if (!name) return;
    if (n < 0) mb_attr_i(m, m->nodes[0], name, v[0]);
    else mb_attr_ints(m, m->nodes[0], name, n, v);
}

/* x [1,1,4,4] (static, or rank unknown when `dynamic`); W [1,1,3,3] for convolutions. */
static void build_conv(mb_model *m, const conv_case *c, bool dynamic) {
    mb_init(m, 17);
    int64_t xd[4] = {1, 1, 4, 4}, wd[4] = {1, 1, 3, 3};
    mb_input(m, "x", dynamic ? -1 : 4, xd);
    bool conv = strncmp(c->op, "Conv", 4) == 0;
    if (conv) {
        float w[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
        mb_init_raw(m, "W", 1, 4, wd, w, sizeof w);
    }
    char spec[64];
    snprintf(spec, sizeof spec, "%s:x%s->y", c->op, conv ? ",W" : "");
    mb_node(m, spec);
    case_attr(m, c->attr, c->n, c->v);
    case_attr(m, c->attr2, c->n2, c->v2);
    mb_output(m, "y");
}

static void test_conv_attributes_vs_rank(void **state) {
    (void)state;
    int fails = 0;
    for (size_t i = 0; i < sizeof conv_cases / sizeof conv_cases[0]; i++) {
        const conv_case *c = &conv_cases[i];
        /* static shapes: refused when the session is made */
        mb_model m;
        build_conv(&m, c, false);
        fails += expect_refused(c->label, &m, INVALID, BADMODEL, "'n0'", NULL) != 0;

        /* rank unknown until the run: the session may load; the run must fail cleanly and
         * the session must fail the same way again (no state left behind) */
        build_conv(&m, c, true);
        long live0 = live();
        tdm_session *s = NULL;
        tdm_status *st = load_model(&m, &s);
        char label[160];
        snprintf(label, sizeof label, "%s (dynamic)", c->label);
        if (st) {
            fails += check(label, st, INVALID, BADMODEL, "'n0'", NULL) != 0;
        } else {
            int64_t xd[4] = {1, 1, 4, 4};
            tdm_tensor *x = iota(4, xd);
            const char *in = "x";
            for (int rep = 0; rep < 2; rep++)
                fails += expect_run_fails(label, s, 1, &in, &x, INVALID, TDM_ERR_LIMIT, "'n0'",
                                          NULL) != 0;
            tdm_tensor_free(x);
            tdm_session_free(s);
        }
        if (live() != live0) {
            fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
            fails++;
        }
    }
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* Conv with a dimension of 0 known only at the run (fuzz_model found both): input channels 0
 * make every output a sum of nothing, the bias (or 0); a weight with a spatial dimension of 0
 * and no kernel_shape is refused with a code, as a kernel_shape of 0 is. */
static tdm_status *conv_dims_run(bool bias, const int64_t *xd, const int64_t *wd, tdm_tensor **y) {
    mb_model m;
    mb_init(&m, 17);
    int64_t dyn[4] = {-1, -1, -1, -1}, two[1] = {2};
    mb_input(&m, "x", 4, dyn);
    mb_input(&m, "W", 4, dyn);
    if (bias) {
        float b[2] = {1.5f, -2.0f};
        mb_init_raw(&m, "B", 1, 1, two, b, sizeof b);
    }
    mb_node(&m, bias ? "Conv:x,W,B->y" : "Conv:x,W->y");
    mb_output(&m, "y");
    tdm_session *s = NULL;
    tdm_status *st = load_model(&m, &s);
    if (st) return st;
    tdm_tensor *ins[2] = {NULL, NULL};
    const char *names[2] = {"x", "W"};
    assert_null(tdm_tensor_create(g_env, TDM_FLOAT, 4, xd, &ins[0]));
    assert_null(tdm_tensor_create(g_env, TDM_FLOAT, 4, wd, &ins[1]));
    for (int k = 0; k < 2; k++) {
        float *p = tdm_tensor_data(ins[k]);
        for (int64_t i = 0; i < tdm_tensor_element_count(ins[k]); i++) p[i] = 1.0f;
    }
    const char *out = "y";
    st = tdm_session_run(s, 2, names, (const tdm_tensor *const *)ins, 1, &out, y);
    tdm_tensor_free(ins[0]);
    tdm_tensor_free(ins[1]);
    tdm_session_free(s);
    return st;
}

static void test_conv_empty_dims(void **state) {
    (void)state;
    long live0 = live();
    int64_t x0[4] = {1, 0, 4, 4}, w0[4] = {2, 0, 3, 3};
    for (int bias = 0; bias < 2; bias++) {
        tdm_tensor *y = NULL;
        tdm_status *st = conv_dims_run(bias, x0, w0, &y);
        if (st) fail_msg("Conv with 0 input channels: %s", tdm_status_message(st));
        assert_int_equal(tdm_tensor_element_count(y), 2 * 2 * 2);
        const float *v = tdm_tensor_data(y);
        for (int i = 0; i < 8; i++) assert_true(v[i] == (bias ? (i < 4 ? 1.5f : -2.0f) : 0.0f));
        tdm_tensor_free(y);
    }
    int64_t x1[4] = {1, 1, 5, 5}, w1[4] = {1, 1, 0, 3};
    tdm_tensor *y = NULL;
    assert_int_equal(check("Conv weight with a spatial dim of 0", conv_dims_run(false, x1, w1, &y),
                           TDM_ERR_INVALID_ARGUMENT, -1, "spatial dimension 0 is 0", NULL),
                     0);
    assert_null(y);
    assert_int_equal(live(), live0);
    env_still_serves();
}

/* ---- indices at run time ---- */

typedef struct idx_case {
    const char *label;
    int opset;
    const char *node;            /* inputs: data (float iota), idx (int64), upd (float) */
    const char *attr;            /* one int attribute, or NULL */
    int64_t attr_v;
    int data_rank;
    int64_t data_dims[3];
    int idx_rank;
    int64_t idx_dims[3];
    int upd_rank;                /* -1: no updates input */
    int64_t upd_dims[3];
    int n_idx;                   /* elements of idx */
    int64_t bad[4][6];           /* bad index contents (rows of n_idx) */
    int n_bad;
    int64_t good[6];
    int64_t want_count;          /* elements of the good output */
    float want_first;            /* its first element */
} idx_case;

#define BIG INT64_MAX
#define SMALL INT64_MIN

static const idx_case idx_cases[] = {
    {"Gather", 13, "Gather:data,idx->y", "axis", 0, 2, {5, 3}, 1, {3}, -1, {0}, 3,
     {{0, 5, 1}, {-6, 0, 0}, {SMALL, 0, 0}, {BIG, 0, 0}}, 4, {-1, 0, 4}, 9, 12.0f},
    {"Gather axis 1", 13, "Gather:data,idx->y", "axis", 1, 2, {5, 3}, 1, {3}, -1, {0}, 3,
     {{3, 0, 0}, {-4, 0, 0}, {SMALL, 0, 0}, {0, 0, BIG}}, 4, {2, -3, 1}, 15, 2.0f},
    {"GatherElements", 13, "GatherElements:data,idx->y", "axis", 1, 2, {2, 3}, 2, {2, 2}, -1, {0},
     4, {{0, 3, 0, 0}, {0, 0, -4, 0}, {SMALL, 0, 0, 0}, {0, 0, 0, BIG}}, 4, {2, -1, 0, 1}, 4,
     2.0f},
    {"GatherND", 13, "GatherND:data,idx->y", NULL, 0, 2, {2, 3}, 2, {2, 2}, -1, {0}, 4,
     {{0, 3, 0, 0}, {2, 0, 0, 0}, {-3, 0, 0, 0}, {SMALL, BIG, 0, 0}}, 4, {1, 2, -1, 0}, 2, 5.0f},
    {"GatherND last dim > rank", 13, "GatherND:data,idx->y", NULL, 0, 2, {2, 3}, 2, {1, 3}, -1,
     {0}, 3, {{0, 0, 0}}, 1, {0}, -1, 0.0f},
    {"ScatterND", 13, "ScatterND:data,idx,upd->y", NULL, 0, 1, {4}, 2, {2, 1}, 1, {2}, 2,
     {{4, 0}, {0, -5}, {SMALL, 0}, {0, BIG}}, 4, {3, -4}, 4, 101.0f},
    {"ScatterElements", 13, "ScatterElements:data,idx,upd->y", "axis", 0, 2, {2, 2}, 2, {1, 2}, 2,
     {1, 2}, 2, {{2, 0}, {0, -3}, {SMALL, 0}, {0, BIG}}, 4, {1, -2}, 4, 0.0f},
    {"OneHot depth", 11, "OneHot:idx,depth,vals->y", NULL, 0, 1, {2}, 1, {1}, -1, {0}, 1,
     {{-1}, {SMALL}, {(int64_t)1 << 40}}, 3, {3}, 6, 1.0f},
    {"ReduceSum axes", 13, "ReduceSum:data,idx->y", NULL, 0, 2, {2, 3}, 1, {1}, -1, {0}, 1,
     {{2}, {-3}, {SMALL}, {BIG}}, 4, {-1}, 2, 3.0f},
    {"TopK k", 11, "TopK:data,idx->y,yi", NULL, 0, 1, {5}, 1, {1}, -1, {0}, 1,
     {{6}, {-1}, {BIG}, {SMALL}}, 4, {2}, 2, 4.0f},
    {"Slice extremes", 13, "Slice:data,idx,idx2->y", NULL, 0, 1, {5}, 1, {1}, -1, {0}, 1,
     {{0}}, 0, {SMALL}, 5, 0.0f},
    {"Tile repeats", 13, "Tile:data,idx->y", NULL, 0, 1, {3}, 1, {1}, -1, {0}, 1,
     {{-1}, {SMALL}, {BIG}, {(int64_t)1 << 40}}, 4, {2}, 6, 0.0f},
    {"Expand shape", 13, "Expand:data,idx->y", NULL, 0, 1, {1}, 1, {2}, -1, {0}, 2,
     {{-1, 1}, {(int64_t)1 << 18, (int64_t)1 << 18}, {BIG, BIG}, {0, -7}}, 4, {2, 3}, 6, 0.0f},
    {"Reshape shape", 13, "Reshape:data,idx->y", NULL, 0, 1, {6}, 1, {2}, -1, {0}, 2,
     {{-1, -1}, {4, -1}, {-2, 3}, {BIG, 2}}, 4, {3, -1}, 6, 0.0f},
    {"ConstantOfShape", 13, "ConstantOfShape:idx->y", NULL, 0, 1, {1}, 1, {2}, -1, {0}, 2,
     {{-1, 2}, {(int64_t)1 << 40, (int64_t)1 << 40}, {BIG, BIG}, {(int64_t)1 << 20, (int64_t)1 << 20}},
     4, {2, 3}, 6, 0.0f},
    {"Pad pads", 13, "Pad:data,idx->y", NULL, 0, 1, {3}, 1, {2}, -1, {0}, 2,
     {{-4, 0}, {BIG, 0}, {0, SMALL}, {(int64_t)1 << 40, 0}}, 4, {1, 1}, 5, 0.0f},
    {"Range delta 0", 13, "Range:s,l,d->y", NULL, 0, 0, {0}, 0, {0}, -1, {0}, 1,
     {{0}}, 1, {1}, 4, 0.0f},
    {"Split sizes", 13, "Split:data,idx->y,y2", NULL, 0, 1, {5}, 1, {2}, -1, {0}, 2,
     {{3, 3}, {-1, 6}, {BIG, 1}, {6, -1}}, 4, {2, 3}, 2, 0.0f},
    {"Unsqueeze axes", 13, "Unsqueeze:data,idx->y", NULL, 0, 1, {3}, 1, {1}, -1, {0}, 1,
     {{3}, {-3}, {BIG}, {SMALL}}, 4, {-1}, 3, 0.0f},
    {"Squeeze axes", 13, "Squeeze:data,idx->y", NULL, 0, 2, {1, 3}, 1, {1}, -1, {0}, 1,
     {{1}, {2}, {-3}, {SMALL}}, 4, {0}, 3, 0.0f},
    {"CumSum axis", 14, "CumSum:data,idx->y", NULL, 0, 1, {3}, 0, {0}, -1, {0}, 1,
     {{1}, {-2}, {BIG}, {SMALL}}, 4, {0}, 3, 0.0f},
    {"Compress axis out of range", 11, "Compress:data,cond->y", "axis", 3, 1, {3}, 0, {0}, -1,
     {0}, 0, {{0}}, 1, {0}, -1, 0.0f},
};

/* Builds the model of an index case. Inputs: data (float), idx (int64, shaped), and the
 * case-specific extras. */
static tdm_session *idx_session(const idx_case *c, tdm_status **st) {
    mb_model m;
    mb_init(&m, c->opset);
    bool onehot = strncmp(c->node, "OneHot", 6) == 0;
    bool range = strncmp(c->node, "Range", 5) == 0;
    bool constofshape = strncmp(c->node, "ConstantOfShape", 15) == 0;
    bool compress = strncmp(c->node, "Compress", 8) == 0;
    if (range) {
        int64_t none[1] = {0};
        mb_input_t(&m, "s", 7, 0, none);
        mb_input_t(&m, "l", 7, 0, none);
        mb_input_t(&m, "d", 7, 0, none);
    } else if (onehot) {
        mb_input_t(&m, "idx", 7, c->data_rank, c->data_dims);
        int64_t one[1] = {1}, two[1] = {2};
        mb_input_t(&m, "depth", 7, 1, one);
        (void)one;
        float vals[2] = {0.0f, 1.0f};
        mb_init_raw(&m, "vals", 1, 1, two, vals, sizeof vals);
    } else if (constofshape) {
        mb_input_t(&m, "idx", 7, c->idx_rank, c->idx_dims);
    } else {
        mb_input(&m, "data", c->data_rank, c->data_dims);
        if (compress) {
            int64_t three[1] = {3};
            mb_input_t(&m, "cond", 9, 1, three);
        } else if (c->n_idx) {
            mb_input_t(&m, "idx", 7, c->idx_rank, c->idx_dims);
        }
        if (c->upd_rank >= 0) mb_input(&m, "upd", c->upd_rank, c->upd_dims);
        if (strncmp(c->node, "Slice", 5) == 0) {
            int64_t one[1] = {1};
            mb_input_t(&m, "idx2", 7, 1, one);
        }
    }
    mb_node(&m, c->node);
    if (c->attr) mb_attr_i(&m, m.nodes[0], c->attr, c->attr_v);
    mb_output_t(&m, "y", range ? 7 : 1, -1, NULL);
    if (strchr(strchr(c->node, '>'), ','))
        mb_output_t(&m, strrchr(c->node, ',') + 1, strncmp(c->node, "TopK", 4) == 0 ? 7 : 1, -1,
                    NULL);
    tdm_session *s = NULL;
    *st = load_model(&m, &s);
    return s;
}

static int run_idx(const idx_case *c, tdm_session *s, const int64_t *vals, bool expect_ok) {
    char label[160];
    tdm_tensor *ins[4] = {NULL};
    const char *names[4];
    int n = 0;
    bool onehot = strncmp(c->node, "OneHot", 6) == 0;
    bool range = strncmp(c->node, "Range", 5) == 0;
    bool constofshape = strncmp(c->node, "ConstantOfShape", 15) == 0;
    bool compress = strncmp(c->node, "Compress", 8) == 0;
    if (range) { /* Range(1, 5, delta): vals[0] is delta */
        int64_t a = 1, b = 5;
        names[n] = "s";
        ins[n++] = tensor(TDM_INT64, 0, NULL, &a);
        names[n] = "l";
        ins[n++] = tensor(TDM_INT64, 0, NULL, &b);
        names[n] = "d";
        ins[n++] = tensor(TDM_INT64, 0, NULL, &vals[0]);
    } else if (onehot) { /* OneHot(indices [0, 2], depth = vals[0]) */
        int64_t idx[2] = {0, 2};
        names[n] = "idx";
        ins[n++] = tensor(TDM_INT64, c->data_rank, c->data_dims, idx);
        names[n] = "depth";
        ins[n++] = tensor(TDM_INT64, c->idx_rank, c->idx_dims, vals);
    } else if (constofshape) {
        names[n] = "idx";
        ins[n++] = tensor(TDM_INT64, c->idx_rank, c->idx_dims, vals);
    } else {
        names[n] = "data";
        ins[n++] = iota(c->data_rank, c->data_dims);
        if (compress) {
            uint8_t cond[3] = {1, 0, 1};
            int64_t three[1] = {3};
            names[n] = "cond";
            ins[n++] = tensor(TDM_BOOL, 1, three, cond);
        } else if (c->n_idx) {
            names[n] = "idx";
            ins[n++] = tensor(TDM_INT64, c->idx_rank, c->idx_dims, vals);
        }
        if (c->upd_rank >= 0) {
            names[n] = "upd";
            tdm_tensor *u = iota(c->upd_rank, c->upd_dims);
            float *p = tdm_tensor_data(u);
            for (int64_t i = 0; i < tdm_tensor_element_count(u); i++) p[i] += 100.0f;
            ins[n++] = u;
        }
        if (strncmp(c->node, "Slice", 5) == 0) { /* Slice(data, starts = vals, ends = BIG) */
            int64_t one[1] = {1}, end = BIG;
            names[n] = "idx2";
            ins[n++] = tensor(TDM_INT64, 1, one, &end);
        }
    }
    int r = 0;
    const char *out_name = "y";
    if (expect_ok) {
        snprintf(label, sizeof label, "%s: good input", c->label);
        tdm_tensor *y = NULL;
        tdm_status *st = tdm_session_run(s, (size_t)n, names, (const tdm_tensor *const *)ins, 1,
                                         &out_name, &y);
        if (st) {
            fprintf(stderr, "[%s] failed: [%s] %s\n", label, tdm_code_name(tdm_status_code(st)),
                    tdm_status_message(st));
            tdm_status_free(st);
            r = -1;
        } else {
            if (tdm_tensor_element_count(y) != c->want_count) {
                fprintf(stderr, "[%s] %lld elements, expected %lld\n", label,
                        (long long)tdm_tensor_element_count(y), (long long)c->want_count);
                r = -1;
            } else if (c->want_count > 0 && tdm_tensor_dtype(y) == TDM_FLOAT &&
                       ((float *)tdm_tensor_data(y))[0] != c->want_first) {
                fprintf(stderr, "[%s] first element %g, expected %g\n", label,
                        ((float *)tdm_tensor_data(y))[0], c->want_first);
                r = -1;
            }
            tdm_tensor_free(y);
        }
    } else {
        char v[200] = "";
        size_t pos = 0;
        for (int i = 0; i < (c->n_idx ? c->n_idx : 1) && pos < sizeof v; i++)
            pos += (size_t)snprintf(v + pos, sizeof v - pos, "%s%lld", i ? "," : "",
                                    (long long)vals[i]);
        snprintf(label, sizeof label, "%s: [%s]", c->label, v);
        /* out-of-range values: invalid argument; sizes that cannot be had: limit or
         * out of memory */
        long live0 = live();
        tdm_tensor *y = (tdm_tensor *)&y;
        tdm_status *st = tdm_session_run(s, (size_t)n, names, (const tdm_tensor *const *)ins, 1,
                                         &out_name, &y);
        int code = st ? (int)tdm_status_code(st) : 0;
        int alt = code == TDM_ERR_LIMIT || code == TDM_ERR_OUT_OF_MEMORY ? code : TDM_ERR_LIMIT;
        r = check(label, st, INVALID, alt, "'n0'", NULL);
        if (!st && y != (tdm_tensor *)&y) tdm_tensor_free(y);
        if (live() != live0) {
            fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
            r = -1;
        }
    }
    for (int i = 0; i < n; i++) tdm_tensor_free(ins[i]);
    return r;
}

static void test_indices_at_run_time(void **state) {
    (void)state;
    int fails = 0;
    for (size_t i = 0; i < sizeof idx_cases / sizeof idx_cases[0]; i++) {
        const idx_case *c = &idx_cases[i];
        long live0 = live();
        tdm_status *st = NULL;
        tdm_session *s = idx_session(c, &st);
        if (!s) {
            /* refused at load: only right when no input could make the node valid */
            if (c->want_count >= 0) {
                fails += check(c->label, st, 0, NONE, NULL, NULL) != 0;
            } else {
                fails += check(c->label, st, INVALID, BADMODEL, "'n0'", NULL) != 0;
            }
            if (live() != live0) {
                fprintf(stderr, "[%s] %ld blocks leaked\n", c->label, live() - live0);
                fails++;
            }
            continue;
        }
        if (c->want_count < 0) { /* invalid whatever the input: every run fails */
            for (int b = 0; b < c->n_bad; b++)
                for (int rep = 0; rep < 2; rep++) fails += run_idx(c, s, c->bad[b], false) != 0;
            tdm_session_free(s);
            continue;
        }
        /* a bad input first, then a good one, then bad ones again, then good again */
        if (c->n_bad) fails += run_idx(c, s, c->bad[0], false) != 0;
        fails += run_idx(c, s, c->good, true) != 0;
        long live1 = live(); /* the first good run may keep a memory plan */
        for (int b = 0; b < c->n_bad; b++) fails += run_idx(c, s, c->bad[b], false) != 0;
        fails += run_idx(c, s, c->good, true) != 0;
        if (live() != live1) {
            fprintf(stderr, "[%s] %ld blocks leaked over the runs\n", c->label, live() - live1);
            fails++;
        }
        tdm_session_free(s);
        if (live() != live0) {
            fprintf(stderr, "[%s] %ld blocks leaked\n", c->label, live() - live0);
            fails++;
        }
    }
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* Index-like attributes that are invalid whatever the input: refused at load when the rank
 * is known, at the run (with the node named) when it is not. */
static void test_index_attributes(void **state) {
    (void)state;
    int fails = 0;
    struct {
        const char *label, *node, *attr;
        int64_t v;
        int rank;
    } cases[] = {
        {"Gather axis 2 of rank 2", "Gather:x,i->y", "axis", 2, 2},
        {"Gather axis -3 of rank 2", "Gather:x,i->y", "axis", -3, 2},
        {"ArgMax axis 2 of rank 2", "ArgMax:x->y", "axis", 2, 2},
        {"ArgMin axis INT64_MIN", "ArgMin:x->y", "axis", INT64_MIN, 2},
        {"Softmax axis 5", "Softmax:x->y", "axis", 5, 2},
        {"Concat axis 2", "Concat:x,x->y", "axis", 2, 2},
        {"Flatten axis 3", "Flatten:x->y", "axis", 3, 2},
        {"Split axis -3", "Split:x->y", "axis", -3, 2},
        {"LogSoftmax axis INT64_MAX", "LogSoftmax:x->y", "axis", INT64_MAX, 2},
        {"DepthToSpace blocksize 0", "DepthToSpace:x->y", "blocksize", 0, 4},
        {"SpaceToDepth blocksize 0", "SpaceToDepth:x->y", "blocksize", 0, 4},
        {"DepthToSpace blocksize -2", "DepthToSpace:x->y", "blocksize", -2, 4},
        {"LRN size 0", "LRN:x->y", "size", 0, 4},
        {"Transpose perm", "Transpose:x->y", "perm", 5, 2},
        {"Hardmax axis -9", "Hardmax:x->y", "axis", -9, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        for (int dynamic = 0; dynamic < 2; dynamic++) {
            mb_model m;
            mb_init(&m, 13);
            int64_t d[4] = {1, 4, 2, 2};
            mb_input(&m, "x", dynamic ? -1 : cases[i].rank, d);
            bool gather = strncmp(cases[i].node, "Gather", 6) == 0;
            if (gather) {
                int64_t one[1] = {1};
                int64_t zero = 0;
                mb_init_raw(&m, "i", 7, 1, one, &zero, sizeof zero);
            }
            mb_node(&m, cases[i].node);
            if (strcmp(cases[i].attr, "perm") == 0) {
                int64_t perm[2] = {0, cases[i].v};
                mb_attr_ints(&m, m.nodes[0], "perm", 2, perm);
            } else if (strncmp(cases[i].node, "DepthToSpace", 12) == 0 ||
                       strncmp(cases[i].node, "SpaceToDepth", 12) == 0 ||
                       strncmp(cases[i].node, "LRN", 3) == 0) {
                mb_attr_i(&m, m.nodes[0], cases[i].attr, cases[i].v);
            } else {
                mb_attr_i(&m, m.nodes[0], cases[i].attr, cases[i].v);
            }
            mb_output(&m, "y");
            char label[160];
            snprintf(label, sizeof label, "%s%s", cases[i].label, dynamic ? " (dynamic)" : "");
            if (!dynamic) {
                fails += expect_refused(label, &m, INVALID, BADMODEL, "'n0'", NULL) != 0;
                continue;
            }
            long live0 = live();
            tdm_session *s = NULL;
            tdm_status *st = load_model(&m, &s);
            if (st) {
                fails += check(label, st, INVALID, BADMODEL, "'n0'", NULL) != 0;
            } else {
                tdm_tensor *x = iota(cases[i].rank, d);
                const char *in = "x";
                for (int rep = 0; rep < 2; rep++)
                    fails += expect_run_fails(label, s, 1, &in, &x, INVALID, NONE, "'n0'", NULL) != 0;
                tdm_tensor_free(x);
                tdm_session_free(s);
            }
            if (live() != live0) {
                fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
                fails++;
            }
        }
    }
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* ---- integer division: by zero and INT64_MIN / -1 ---- */

/* In C both are undefined (x86 traps). tandem defines them (k_binary_arith.c): x / 0 and
 * x % 0 give 0, INT_MIN / -1 wraps to INT_MIN, INT_MIN % -1 is 0. An error status naming
 * the node would be acceptable too; a trap, garbage or a sanitizer report is not. */
static void test_integer_division(void **state) {
    (void)state;
    int fails = 0;
    const char *ops[2] = {"Div", "Mod"};
    for (int op = 0; op < 2; op++)
        for (int wide = 0; wide < 2; wide++) {
            tdm_dtype dt = wide ? TDM_INT64 : TDM_INT32;
            int64_t min = wide ? INT64_MIN : INT32_MIN;
            mb_model m;
            mb_init(&m, 13);
            int64_t d2[1] = {2};
            mb_input_t(&m, "a", dt, 1, d2);
            mb_input_t(&m, "b", dt, 1, d2);
            char spec[32];
            snprintf(spec, sizeof spec, "%s:a,b->y", ops[op]);
            mb_node(&m, spec);
            mb_output_t(&m, "y", dt, -1, NULL);
            tdm_session *s = session_of(&m);
            const char *names[2] = {"a", "b"};
            struct {
                int64_t a[2], b[2], div[2], mod[2];
                bool good;
            } cases[] = {
                {{7, 1}, {0, 2}, {0, 0}, {0, 1}, false},     /* x / 0 */
                {{min, 4}, {-1, 1}, {min, 4}, {0, 0}, false}, /* MIN / -1 */
                {{0, 0}, {0, 0}, {0, 0}, {0, 0}, false},     /* 0 / 0 */
                {{7, 9}, {2, 4}, {3, 2}, {1, 1}, true},      /* a good one on the same session */
                {{min, 0}, {0, -1}, {0, 0}, {0, 0}, false},  /* MIN / 0, 0 / -1 */
                {{-7, 9}, {2, -4}, {-3, -2}, {1, -3}, true}, /* signs: truncating / floor mod */
            };
            for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
                int32_t a32[2], b32[2];
                for (int k = 0; k < 2; k++) {
                    a32[k] = (int32_t)cases[c].a[k];
                    b32[k] = (int32_t)cases[c].b[k];
                }
                tdm_tensor *in[2] = {tensor(dt, 1, d2, wide ? (void *)cases[c].a : (void *)a32),
                                     tensor(dt, 1, d2, wide ? (void *)cases[c].b : (void *)b32)};
                char label[96];
                snprintf(label, sizeof label, "%s %s [%lld,%lld] by [%lld,%lld]", ops[op],
                         tdm_dtype_name(dt), (long long)cases[c].a[0], (long long)cases[c].a[1],
                         (long long)cases[c].b[0], (long long)cases[c].b[1]);
                long live0 = live();
                tdm_tensor *y = NULL;
                tdm_status *st = run(s, 2, names, in, &y);
                if (st) {
                    if (cases[c].good) fails += check(label, st, 0, NONE, NULL, NULL) != 0;
                    else fails += check(label, st, INVALID, NONE, "'n0'", NULL) != 0;
                    if (live() != live0) {
                        fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
                        fails++;
                    }
                } else {
                    const int64_t *want = op == 0 ? cases[c].div : cases[c].mod;
                    for (int k = 0; k < 2; k++) {
                        int64_t got = wide ? ((int64_t *)tdm_tensor_data(y))[k]
                                           : ((int32_t *)tdm_tensor_data(y))[k];
                        if (got != want[k]) {
                            fprintf(stderr, "[%s] element %d is %lld, expected %lld\n", label, k,
                                    (long long)got, (long long)want[k]);
                            fails++;
                        }
                    }
                }
                tdm_tensor_free(y);
                tdm_tensor_free(in[0]);
                tdm_tensor_free(in[1]);
            }
            tdm_session_free(s);
        }
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* Shape arithmetic on constants: Reshape(x, Div(a, b)) is folded while the session is made;
 * the fold must not trap. Whatever Div gives, the session either works (a Reshape to [0]
 * keeps the input dim) or a status names the node that cannot go on. */
static void test_shape_arithmetic_division(void **state) {
    (void)state;
    int fails = 0;
    struct {
        const char *label;
        int64_t a, b;
        const char *op;
    } cases[] = {
        {"Div by zero in a shape", 6, 0, "Div"},
        {"Mod by zero in a shape", 6, 0, "Mod"},
        {"INT64_MIN / -1 in a shape", INT64_MIN, -1, "Div"},
        {"INT64_MIN % -1 in a shape", INT64_MIN, -1, "Mod"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mb_model m;
        mb_init(&m, 13);
        int64_t d6[1] = {6}, one[1] = {1};
        mb_input(&m, "x", 1, d6);
        mb_init_i64(&m, "a", 1, &cases[i].a);
        mb_init_i64(&m, "b", 1, &cases[i].b);
        (void)one;
        char spec[32];
        snprintf(spec, sizeof spec, "%s:a,b->shape", cases[i].op);
        mb_node(&m, spec);
        mb_node(&m, "Reshape:x,shape->y");
        mb_output(&m, "y");
        long live0 = live();
        tdm_session *s = NULL;
        tdm_status *st = load_model(&m, &s);
        if (st) {
            const char *msg = tdm_status_message(st);
            fails += check(cases[i].label, st, INVALID, NONE, strstr(msg, "'n1'") ? "'n1'" : "'n0'",
                           NULL) != 0;
        } else {
            tdm_tensor *x = iota(1, d6), *y = NULL;
            const char *in = "x";
            for (int rep = 0; rep < 2; rep++) {
                st = run(s, 1, &in, &x, &y);
                if (st) {
                    const char *msg = tdm_status_message(st);
                    fails += check(cases[i].label, st, INVALID, NONE,
                                   strstr(msg, "'n1'") ? "'n1'" : "'n0'", NULL) != 0;
                } else if (tdm_tensor_element_count(y) != 6) {
                    fprintf(stderr, "[%s] %lld elements\n", cases[i].label,
                            (long long)tdm_tensor_element_count(y));
                    fails++;
                }
                tdm_tensor_free(y);
                y = NULL;
            }
            tdm_tensor_free(x);
            tdm_session_free(s);
        }
        if (live() != live0) {
            fprintf(stderr, "[%s] %ld blocks leaked\n", cases[i].label, live() - live0);
            fails++;
        }
    }
    env_still_serves();
    assert_int_equal(fails, 0);
}

/* ---- run inputs ---- */

static void test_run_inputs(void **state) {
    (void)state;
    int fails = 0;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[2] = {-1, 3};
    mb_input(&m, "x", 2, d);
    mb_node(&m, "Relu:x->y");
    mb_output(&m, "y");
    tdm_session *s = session_of(&m);
    const char *in = "x";
    int64_t good[2] = {2, 3};

    tdm_tensor *t = tensor(TDM_INT32, 2, good, NULL);
    fails += expect_run_fails("wrong dtype", s, 1, &in, &t, INVALID, NONE, "'x'", "float32") != 0;
    tdm_tensor_free(t);
    t = tensor(TDM_FLOAT, 3, (int64_t[]){2, 3, 1}, NULL);
    fails += expect_run_fails("wrong rank", s, 1, &in, &t, INVALID, NONE, "'x'", "rank") != 0;
    tdm_tensor_free(t);
    t = tensor(TDM_FLOAT, 2, (int64_t[]){2, 4}, NULL);
    fails += expect_run_fails("wrong dim", s, 1, &in, &t, INVALID, NONE, "'x'", NULL) != 0;
    tdm_tensor_free(t);
    t = tensor(TDM_FLOAT, 0, NULL, NULL);
    fails += expect_run_fails("scalar for a matrix", s, 1, &in, &t, INVALID, NONE, "'x'", NULL) != 0;
    tdm_tensor_free(t);
    /* an empty batch is a valid input */
    t = tensor(TDM_FLOAT, 2, (int64_t[]){0, 3}, NULL);
    tdm_tensor *y = NULL;
    tdm_status *st = run(s, 1, &in, &t, &y);
    if (st) fails += check("empty batch", st, 0, NONE, NULL, NULL) != 0;
    else assert_int_equal(tdm_tensor_element_count(y), 0);
    tdm_tensor_free(y);
    tdm_tensor_free(t);

    /* dims that overflow and huge sizes cannot even become tensors */
    long live0 = live();
    tdm_tensor *bad = NULL;
    int64_t over[2] = {INT64_C(1) << 62, 8};
    fails += check("tensor dims overflow", tdm_tensor_create(g_env, TDM_FLOAT, 2, over, &bad),
                   TDM_ERR_LIMIT, NONE, NULL, NULL) != 0;
    int64_t huge[2] = {INT64_C(1) << 36, 64}; /* 2^42 floats: past the 1 TiB limit */
    fails += check("tensor past the size limit", tdm_tensor_create(g_env, TDM_FLOAT, 2, huge, &bad),
                   TDM_ERR_LIMIT, NONE, NULL, NULL) != 0;
    int64_t big[2] = {INT64_C(1) << 30, 16}; /* 64 GiB: the allocator refuses */
    fails += check("tensor the allocator refuses", tdm_tensor_create(g_env, TDM_FLOAT, 2, big, &bad),
                   TDM_ERR_OUT_OF_MEMORY, NONE, NULL, NULL) != 0;
    float small[6] = {0};
    fails += check("wrap: declared size over the buffer",
                   tdm_tensor_wrap(g_env, TDM_FLOAT, 2, big, small, sizeof small, &bad), INVALID,
                   NONE, NULL, NULL) != 0;
    fails += check("wrap: dims overflow",
                   tdm_tensor_wrap(g_env, TDM_FLOAT, 2, over, small, sizeof small, &bad),
                   TDM_ERR_LIMIT, NONE, NULL, NULL) != 0;
    int64_t negd[2] = {-1, 3};
    fails += check("negative dim", tdm_tensor_create(g_env, TDM_FLOAT, 2, negd, &bad), INVALID,
                   NONE, NULL, NULL) != 0;
    fails += check("rank 9", tdm_tensor_create(g_env, TDM_FLOAT, 9, (int64_t[9]){1, 1, 1, 1, 1, 1, 1, 1, 1}, &bad),
                   TDM_ERR_LIMIT, NONE, NULL, NULL) != 0;
    fails += check("rank -1", tdm_tensor_create(g_env, TDM_FLOAT, -1, d, &bad), TDM_ERR_LIMIT,
                   INVALID, NULL, NULL) != 0;
    fails += check("dtype 99", tdm_tensor_create(g_env, (tdm_dtype)99, 1, good, &bad),
                   TDM_ERR_UNSUPPORTED, INVALID, NULL, NULL) != 0;
    /* containers come from their constructors (with items), not as empty shells */
    int64_t two = 2;
    fails += check("map by tdm_tensor_create", tdm_tensor_create(g_env, TDM_MAP, 1, &two, &bad),
                   INVALID, NONE, "tdm_map_create", NULL) != 0;
    fails += check("sequence by tdm_tensor_wrap",
                   tdm_tensor_wrap(g_env, TDM_SEQUENCE, 1, &two, small, sizeof small, &bad),
                   INVALID, NONE, "tdm_sequence_create", NULL) != 0;
    assert_null(bad);
    assert_int_equal(live(), live0);

    /* and the same session still runs */
    t = iota(2, good);
    st = run(s, 1, &in, &t, &y);
    if (st) fails += check("good run", st, 0, NONE, NULL, NULL) != 0;
    else assert_true(((float *)tdm_tensor_data(y))[5] == 5.0f);
    tdm_tensor_free(y);
    tdm_tensor_free(t);
    tdm_session_free(s);
    assert_int_equal(fails, 0);
}

/* A model whose declared input shape overflows: refused, or the run refuses every input. */
static void test_declared_size_overflow(void **state) {
    (void)state;
    int fails = 0;
    int64_t dims[2][3] = {{INT64_C(1) << 62, 4, 4}, {INT64_MAX, INT64_MAX, 2}};
    for (int i = 0; i < 2; i++) {
        mb_model m;
        mb_init(&m, 17);
        mb_input(&m, "x", 3, dims[i]);
        mb_node(&m, "Relu:x->r");
        mb_node(&m, "ReduceSum:r->y");
        mb_output(&m, "y");
        long live0 = live();
        tdm_session *s = NULL;
        tdm_status *st = load_model(&m, &s);
        char label[64];
        snprintf(label, sizeof label, "declared dims overflow %d", i);
        if (st) {
            fails += check(label, st, TDM_ERR_LIMIT, BADMODEL, "'x'", NULL) != 0;
        } else {
            tdm_tensor *x = iota(3, (int64_t[]){1, 4, 4});
            const char *in = "x";
            fails += expect_run_fails(label, s, 1, &in, &x, INVALID, NONE, "'x'", NULL) != 0;
            tdm_tensor_free(x);
            tdm_session_free(s);
        }
        if (live() != live0) {
            fprintf(stderr, "[%s] %ld blocks leaked\n", label, live() - live0);
            fails++;
        }
    }
    /* an initializer that declares 2^40 floats and holds none: refused before 4 TiB are
     * asked for (the hook refuses anything over 1 GiB and counts refusals) */
    mb_model m;
    mb_init(&m, 17);
    int64_t d4[1] = {4}, hd[2] = {INT64_C(1) << 20, INT64_C(1) << 18};
    mb_input(&m, "x", 1, d4);
    mb_init_raw(&m, "W", 1, 2, hd, NULL, 0);
    mb_node(&m, "Add:x,W->y");
    mb_output(&m, "y");
    long refused0 = atomic_load(&g_count.refused);
    if (strict()) {
        fails += expect_refused("huge initializer without data", &m, BADMODEL, NONE, "'W'", NULL) != 0;
    } else { /* known bug: the loader allocates (and zeroes) the declared size first */
        fails += expect_refused("huge initializer without data", &m, BADMODEL,
                                TDM_ERR_OUT_OF_MEMORY, NULL, NULL) != 0;
    }
    if (atomic_load(&g_count.refused) != refused0)
        printf("  SKIPPED part (known bug, reported): the loader asks for a huge initializer's "
               "declared size before checking its data\n");
    env_still_serves();
    assert_int_equal(fails, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_unknown_dtype, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unknown_domain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_missing_type, setup, teardown),
        cmocka_unit_test_setup_teardown(test_omitted_required_output, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv_attributes_vs_rank, setup, teardown),
        cmocka_unit_test_setup_teardown(test_conv_empty_dims, setup, teardown),
        cmocka_unit_test_setup_teardown(test_indices_at_run_time, setup, teardown),
        cmocka_unit_test_setup_teardown(test_index_attributes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_integer_division, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shape_arithmetic_division, setup, teardown),
        cmocka_unit_test_setup_teardown(test_run_inputs, setup, teardown),
        cmocka_unit_test_setup_teardown(test_declared_size_overflow, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
