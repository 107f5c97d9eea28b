/* Loader + graph IR: topological order, cycles, undefined inputs, nesting bound, constant
 * folding of exporter shape chains, dead-node removal. Models are built in memory. */
#include <float.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "backends/backend.h"
#include "graph/infer.h"
#include "model_builder.h"
#include "onnx/loader.h"
#include "sched/plan.h"
#include "tandem/tandem.h"

static tdm_status *load(mb_model *m, tdm_onnx_model **out) {
    size_t size;
    void *buf = mb_pack(m, &size);
    tdm_status *st = tdm_onnx_load_buffer(buf, size, NULL, NULL, out);
    free(buf);
    return st;
}

static tdm_status *eval_cpu(void *user, const tdm_node *n, const tdm_tensor *const *ins,
                            tdm_tensor **outs) {
    return tdm_eval_node(user, NULL, n, ins, outs);
}

static int count_op(const tdm_graph *g, const char *op) {
    int c = 0;
    for (size_t i = 0; i < g->n_nodes; i++) c += strcmp(g->nodes[i].op_type, op) == 0;
    return c;
}

/* Constant folding reaches If bodies: their Constant nodes, and a Slice of a main-graph
 * initializer the then branch reads from outside, fold and leave the bodies; the nodes that
 * read the If's data stay (tests/models/if_chain_body, tools/make_control_models.py). */
static void test_fold_reaches_bodies(void **state) {
    (void)state;
    tdm_onnx_model *om = NULL;
    assert_null(tdm_onnx_load_file(TANDEM_SOURCE_DIR "/tests/models/if_chain_body/model.onnx",
                                   NULL, &om));
    tdm_device *cpu[1] = {NULL};
    int n = 0;
    char why[128];
    assert_null(tdm_backend_cpu.discover(NULL, NULL, NULL, cpu, 1, &n, why, sizeof why));
    assert_int_equal(n, 1);
    const tdm_node *node = &om->graph->nodes[0];
    assert_string_equal(node->op_type, "If");
    const tdm_graph *then = tdm_node_attr(node, "then_branch")->g;
    const tdm_graph *els = tdm_node_attr(node, "else_branch")->g;
    assert_int_equal(then->n_nodes, 13); /* 6 Constant, Slice, 6 on the data */
    assert_int_equal(els->n_nodes, 10);  /* 4 Constant, 6 on the data */
    int folded = 0;
    assert_null(tdm_graph_fold_constants(om->graph, eval_cpu, cpu[0], &folded));
    assert_int_equal(folded, 7 + 4);
    assert_int_equal(then->n_nodes, 6);
    assert_int_equal(els->n_nodes, 6);
    assert_int_equal(count_op(then, "Constant") + count_op(then, "Slice"), 0);
    assert_int_equal(count_op(els, "Constant"), 0);
    assert_int_equal(count_op(then, "MatMul"), 2);
    tdm_device_close(cpu[0]);
    tdm_onnx_model_free(om);
}

/* Subnormal float32 weights of a dense op (MatMul's w) become (signed) 0 in a copy, the
 * other elements stay; a constant no dense op multiplies (Add's b) is left as it is, its
 * subnormal included, and not copied. */
static void test_flush_subnormal_constants(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[1] = {4}, dx[2] = {1, 4};
    mb_input(&m, "x", 2, dx);
    const float w[4] = {1e-40f, -1e-41f, 1.0f, FLT_MIN}, b[4] = {1, -2, 1e-40f, 0};
    mb_init_f32(&m, "w", 1, d, 4, w);
    mb_init_f32(&m, "b", 1, d, 4, b);
    mb_node(&m, "MatMul:x,w->t");
    mb_node(&m, "Add:t,b->y");
    mb_output(&m, "y");
    tdm_onnx_model *om = NULL;
    assert_null(load(&m, &om));
    tdm_graph *g = om->graph;
    int vw = -1, vb = -1;
    for (size_t v = 0; v < g->n_values; v++) {
        if (!strcmp(g->values[v].name, "w")) vw = (int)v;
        if (!strcmp(g->values[v].name, "b")) vb = (int)v;
    }
    assert_true(vw >= 0 && vb >= 0);
    const tdm_tensor *tb = g->values[vb].data;
    int changed = -1;
    assert_null(tdm_graph_flush_subnormal_constants(g, &changed));
    assert_int_equal(changed, 1);
    assert_ptr_equal(g->values[vb].data, tb);
    assert_true(((const float *)tb->data)[2] == 1e-40f);
    const float *fw = g->values[vw].data->data;
    assert_true(fw[0] == 0.0f && !signbit(fw[0]));
    assert_true(fw[1] == 0.0f && signbit(fw[1]));
    assert_true(fw[2] == 1.0f && fw[3] == FLT_MIN);
    assert_null(tdm_graph_flush_subnormal_constants(g, &changed));
    assert_int_equal(changed, 0);
    tdm_onnx_model_free(om);
    mb_free(&m);
}

static void test_topological_order(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[2] = {2, 3};
    mb_input(&m, "x", 2, d);
    mb_node(&m, "Relu:b->c"); /* listed before its producer */
    mb_node(&m, "Neg:x->b");
    mb_output(&m, "c");
    tdm_onnx_model *om = NULL;
    assert_null(load(&m, &om));
    assert_int_equal(om->graph->n_nodes, 2);
    assert_string_equal(om->graph->nodes[0].op_type, "Neg");
    assert_string_equal(om->graph->nodes[1].op_type, "Relu");
    tdm_onnx_model_free(om);
    mb_free(&m);
}

static void expect_error(mb_model *m, tdm_code code, const char *substr) {
    tdm_onnx_model *om = NULL;
    tdm_status *st = load(m, &om);
    assert_non_null(st);
    assert_null(om);
    if (tdm_status_code(st) != code || !strstr(tdm_status_message(st), substr))
        fail_msg("got [%s] %s", tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
    tdm_status_free(st);
}

static void test_cycle(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[1] = {4};
    mb_input(&m, "x", 1, d);
    mb_node(&m, "Add:x,b->a");
    mb_node(&m, "Relu:a->b");
    mb_output(&m, "b");
    expect_error(&m, TDM_ERR_INVALID_MODEL, "cycle");
    mb_free(&m);
}

static void test_undefined_input(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[1] = {4};
    mb_input(&m, "x", 1, d);
    mb_node(&m, "Add:x,ghost->y");
    mb_output(&m, "y");
    expect_error(&m, TDM_ERR_INVALID_MODEL, "ghost");
    mb_free(&m);
}

static void test_two_producers(void **state) {
    (void)state;
    mb_model m;
    mb_init(&m, 17);
    int64_t d[1] = {4};
    mb_input(&m, "x", 1, d);
    mb_node(&m, "Relu:x->y");
    mb_node(&m, "Neg:x->y");
    mb_output(&m, "y");
    expect_error(&m, TDM_ERR_INVALID_MODEL, "produced by two nodes");
    mb_free(&m);
}

/* Prepends a length-delimited header for field `field` to the bytes in buf[*start, cap). */
static void wrap_field(unsigned char *buf, size_t *start, size_t cap, unsigned field) {
    unsigned char hdr[16];
    size_t n = 0, l = cap - *start;
    hdr[n++] = (unsigned char)(field << 3 | 2);
    do {
        unsigned char b = l & 0x7f;
        l >>= 7;
        hdr[n++] = (unsigned char)(b | (l ? 0x80 : 0));
    } while (l);
    *start -= n;
    memcpy(buf + *start, hdr, n);
}

static void test_wire_depth(void **state) {
    (void)state;
    /* ModelProto.graph(7) -> GraphProto.input(11) -> ValueInfo.type(2) -> TypeProto
     * .sequence_type(4) -> Sequence.elem_type(1) -> TypeProto ... 100,000 levels: about 1 MB.
     * protobuf-c alone would recurse through all of it and overflow the stack. */
    enum { LEVELS = 100000 };
    size_t cap = (size_t)LEVELS * 2 * 8 + 64, start = cap;
    unsigned char *buf = calloc(1, cap);
    for (int i = 0; i < LEVELS; i++) {
        wrap_field(buf, &start, cap, 1); /* Sequence.elem_type */
        wrap_field(buf, &start, cap, 4); /* TypeProto.sequence_type */
    }
    wrap_field(buf, &start, cap, 2);  /* ValueInfoProto.type */
    wrap_field(buf, &start, cap, 11); /* GraphProto.input */
    wrap_field(buf, &start, cap, 7);  /* ModelProto.graph */
    size_t len = cap - start;
    tdm_onnx_model *om = NULL;
    tdm_status *st = tdm_onnx_load_buffer(buf + start, len, NULL, NULL, &om);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    assert_non_null(strstr(tdm_status_message(st), "nested deeper"));
    tdm_status_free(st);
    /* the same bytes cut in half: a framing error, not a crash */
    st = tdm_onnx_load_buffer(buf + start, len / 2, NULL, NULL, &om);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_MODEL);
    tdm_status_free(st);
    free(buf);
}

static void test_fold_shape_chain(void **state) {
    (void)state;
    /* y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])) : exporter style */
    mb_model m;
    mb_init(&m, 13);
    int64_t d[3] = {2, 3, 4};
    mb_input(&m, "x", 3, d);
    int64_t zero = 0, minus1 = -1, axes0 = 0;
    mb_init_i64(&m, "idx", 1, &zero);
    mb_init_i64(&m, "minus1", 1, &minus1);
    mb_init_i64(&m, "axes", 1, &axes0);
    mb_node(&m, "Shape:x->s");
    mb_node(&m, "Gather:s,idx->g");
    mb_node(&m, "Concat:g,minus1->shape");
    mb_node(&m, "Reshape:x,shape->y");
    mb_node(&m, "Relu:x->unused");
    mb_output(&m, "y");
    /* Concat needs the axis attribute */
    Onnx__AttributeProto axis = ONNX__ATTRIBUTE_PROTO__INIT;
    Onnx__AttributeProto *attrs[1] = {&axis};
    axis.name = "axis";
    axis.has_type = 1;
    axis.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    axis.has_i = 1;
    axis.i = 0;
    m.nodes[2]->n_attribute = 1;
    m.nodes[2]->attribute = attrs;
    size_t size;
    void *buf = mb_pack(&m, &size);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    for (int opt = 0; opt <= 1; opt++) {
        tdm_session_options so = {TDM_API_VERSION, "cpu", 1, opt, false};
        tdm_session *s = NULL;
        tdm_status *st = tdm_session_create_from_buffer(env, buf, size, NULL, &so, &s);
        if (st) fail_msg("%s", tdm_status_message(st));
        /* opt 1: Shape, Gather, Concat folded, the unused Relu removed: Reshape remains */
        size_t nodes = tdm_model_node_count(tdm_session_model(s));
        assert_int_equal(nodes, opt ? 1 : 5);
        tdm_tensor *x = NULL, *y = NULL;
        assert_null(tdm_tensor_create(env, TDM_FLOAT, 3, d, &x));
        for (int i = 0; i < 24; i++) ((float *)tdm_tensor_data(x))[i] = (float)i;
        const char *in = "x", *out = "y";
        st = tdm_session_run(s, 1, &in, (const tdm_tensor *const *)&x, 1, &out, &y);
        if (st) fail_msg("%s", tdm_status_message(st));
        assert_int_equal(tdm_tensor_rank(y), 2);
        assert_int_equal(tdm_tensor_dims(y)[0], 2);
        assert_int_equal(tdm_tensor_dims(y)[1], 12);
        assert_true(((float *)tdm_tensor_data(y))[23] == 23.0f);
        tdm_tensor_free(x);
        tdm_tensor_free(y);
        tdm_session_free(s);
    }
    tdm_env_free(env);
    free(buf);
    m.nodes[2]->n_attribute = 0;
    m.nodes[2]->attribute = NULL;
    mb_free(&m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_topological_order), cmocka_unit_test(test_cycle),
        cmocka_unit_test(test_undefined_input),   cmocka_unit_test(test_two_producers),
        cmocka_unit_test(test_wire_depth),        cmocka_unit_test(test_fold_shape_chain),
        cmocka_unit_test(test_fold_reaches_bodies),
        cmocka_unit_test(test_flush_subnormal_constants),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
