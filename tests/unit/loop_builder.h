/* A model with one Loop for the tests of Loop limits and run cancellation: inputs M (int64
 * trip count), cond (bool) and x (float [1]); the body adds 1 to x each iteration and keeps
 * the condition; output y is the final x. loop_model returns the serialised bytes (free()); value() builds tensor
 * value infos and pack_model() serialises hand-made graphs. Include after onnx/onnx.pb-c.h. */
#ifndef TDM_TESTS_LOOP_BUILDER_H
#define TDM_TESTS_LOOP_BUILDER_H

#include <stdint.h>
#include <stdlib.h>

#include "onnx/onnx.pb-c.h"

typedef struct vi {
    Onnx__ValueInfoProto v;
    Onnx__TypeProto t;
    Onnx__TypeProto__Tensor tt;
    Onnx__TensorShapeProto sh;
    Onnx__TensorShapeProto__Dimension d, *dp[1];
} vi;

/* rank 0 (scalar), rank 1 of size 1, or (-1) no shape */
static Onnx__ValueInfoProto *value(vi *x, const char *name, int elem, int rank) {
    onnx__value_info_proto__init(&x->v);
    onnx__type_proto__init(&x->t);
    onnx__type_proto__tensor__init(&x->tt);
    onnx__tensor_shape_proto__init(&x->sh);
    onnx__tensor_shape_proto__dimension__init(&x->d);
    x->d.value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
    x->d.dim_value = 1;
    x->dp[0] = &x->d;
    x->sh.n_dim = rank > 0 ? (size_t)rank : 0;
    x->sh.dim = x->dp;
    x->tt.has_elem_type = 1;
    x->tt.elem_type = elem;
    x->tt.shape = rank >= 0 ? &x->sh : NULL;
    x->t.value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    x->t.tensor_type = &x->tt;
    x->v.name = (char *)name;
    x->v.type = &x->t;
    return &x->v;
}

/* Serialises graph g as an opset-17 model (free() the bytes). */
static void *pack_model(Onnx__GraphProto *g, size_t *size) {
    Onnx__OperatorSetIdProto opset;
    onnx__operator_set_id_proto__init(&opset);
    opset.domain = "";
    opset.has_version = 1;
    opset.version = 17;
    Onnx__OperatorSetIdProto *opsets[] = {&opset};
    Onnx__ModelProto m;
    onnx__model_proto__init(&m);
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.n_opset_import = 1, m.opset_import = opsets;
    m.graph = g;
    *size = onnx__model_proto__get_packed_size(&m);
    void *buf = malloc(*size);
    assert_non_null(buf);
    onnx__model_proto__pack(&m, buf);
    return buf;
}

static void *loop_model(size_t *size) {
    enum { F32 = 1, I64 = 7, BOOL = 9 };
    /* body: (i, c_in, x_in) -> (c_out = Identity(c_in), x_out = Add(x_in, one)) */
    static char *add_in[] = {"x_in", "one"}, *add_out[] = {"x_out"};
    static char *id_in[] = {"c_in"}, *id_out[] = {"c_out"};
    Onnx__NodeProto add, id, loop;
    onnx__node_proto__init(&add);
    add.op_type = "Add";
    add.name = "add";
    add.n_input = 2, add.input = add_in;
    add.n_output = 1, add.output = add_out;
    onnx__node_proto__init(&id);
    id.op_type = "Identity";
    id.name = "id";
    id.n_input = 1, id.input = id_in;
    id.n_output = 1, id.output = id_out;
    Onnx__NodeProto *body_nodes[] = {&id, &add};
    Onnx__TensorProto one;
    onnx__tensor_proto__init(&one);
    int64_t one_dims[] = {1};
    float one_val[] = {1.0f};
    one.name = "one";
    one.has_data_type = 1;
    one.data_type = F32;
    one.n_dims = 1, one.dims = one_dims;
    one.n_float_data = 1, one.float_data = one_val;
    Onnx__TensorProto *body_inits[] = {&one};
    vi bi[3], bo[2];
    Onnx__ValueInfoProto *body_in[] = {value(&bi[0], "i", I64, 0), value(&bi[1], "c_in", BOOL, 0),
                                       value(&bi[2], "x_in", F32, 1)};
    Onnx__ValueInfoProto *body_out[] = {value(&bo[0], "c_out", BOOL, 0), value(&bo[1], "x_out", F32, 1)};
    Onnx__GraphProto body;
    onnx__graph_proto__init(&body);
    body.name = "body";
    body.n_node = 2, body.node = body_nodes;
    body.n_initializer = 1, body.initializer = body_inits;
    body.n_input = 3, body.input = body_in;
    body.n_output = 2, body.output = body_out;
    Onnx__AttributeProto attr;
    onnx__attribute_proto__init(&attr);
    attr.name = "body";
    attr.has_type = 1;
    attr.type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH;
    attr.g = &body;
    Onnx__AttributeProto *attrs[] = {&attr};
    static char *loop_in[] = {"M", "cond", "x"}, *loop_out[] = {"y"};
    onnx__node_proto__init(&loop);
    loop.op_type = "Loop";
    loop.name = "loop";
    loop.n_input = 3, loop.input = loop_in;
    loop.n_output = 1, loop.output = loop_out;
    loop.n_attribute = 1, loop.attribute = attrs;
    Onnx__NodeProto *nodes[] = {&loop};
    vi gi[3], go[1];
    Onnx__ValueInfoProto *g_in[] = {value(&gi[0], "M", I64, 0), value(&gi[1], "cond", BOOL, 0),
                                    value(&gi[2], "x", F32, 1)};
    Onnx__ValueInfoProto *g_out[] = {value(&go[0], "y", F32, 1)};
    Onnx__GraphProto g;
    onnx__graph_proto__init(&g);
    g.name = "g";
    g.n_node = 1, g.node = nodes;
    g.n_input = 3, g.input = g_in;
    g.n_output = 1, g.output = g_out;
    return pack_model(&g, size);
}

#endif
