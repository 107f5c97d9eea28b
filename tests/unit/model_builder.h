/* Test helper: builds small ONNX models in memory with the protobuf-c structs. Nodes are
 * given as "Op:in1,in2->out1,out2" strings; graph inputs/outputs as float tensors. */
#ifndef TDM_TEST_MODEL_BUILDER_H
#define TDM_TEST_MODEL_BUILDER_H

#include <stdlib.h>
#include <string.h>

#include "onnx/onnx.pb-c.h"

typedef struct mb_model {
    Onnx__ModelProto model;
    Onnx__GraphProto graph;
    Onnx__OperatorSetIdProto opset;
    Onnx__OperatorSetIdProto *opsets[1];
    Onnx__NodeProto *nodes[32];
    Onnx__ValueInfoProto *ins[8], *outs[8];
    Onnx__TensorProto *inits[8];
    char *strings[512];
    int n_strings;
} mb_model;

static char *mb_str(mb_model *m, const char *s, size_t n) {
    char *d = malloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    m->strings[m->n_strings++] = d;
    return d;
}

static void mb_init(mb_model *m, int opset) {
    memset(m, 0, sizeof *m);
    onnx__model_proto__init(&m->model);
    onnx__graph_proto__init(&m->graph);
    onnx__operator_set_id_proto__init(&m->opset);
    m->opset.domain = mb_str(m, "", 0);
    m->opset.has_version = 1;
    m->opset.version = opset;
    m->opsets[0] = &m->opset;
    m->model.has_ir_version = 1;
    m->model.ir_version = 8;
    m->model.n_opset_import = 1;
    m->model.opset_import = m->opsets;
    m->model.graph = &m->graph;
    m->graph.name = mb_str(m, "g", 1);
    m->graph.node = m->nodes;
    m->graph.input = m->ins;
    m->graph.output = m->outs;
    m->graph.initializer = m->inits;
}

/* "Op:a,b->c" ; empty names allowed ("Op:,b->c") */
static void mb_node(mb_model *m, const char *spec) {
    Onnx__NodeProto *n = calloc(1, sizeof *n);
    onnx__node_proto__init(n);
    const char *colon = strchr(spec, ':'), *arrow = strstr(spec, "->");
    n->op_type = mb_str(m, spec, (size_t)(colon - spec));
    char nm[32];
    snprintf(nm, sizeof nm, "n%zu", m->graph.n_node);
    n->name = mb_str(m, nm, strlen(nm));
    n->input = calloc(8, sizeof(char *));
    n->output = calloc(8, sizeof(char *));
    const char *p = colon + 1;
    while (p < arrow) {
        const char *q = p;
        while (q < arrow && *q != ',') q++;
        n->input[n->n_input++] = mb_str(m, p, (size_t)(q - p));
        p = q < arrow ? q + 1 : q;
    }
    p = arrow + 2;
    while (*p) {
        const char *q = p;
        while (*q && *q != ',') q++;
        n->output[n->n_output++] = mb_str(m, p, (size_t)(q - p));
        p = *q ? q + 1 : q;
    }
    m->nodes[m->graph.n_node++] = n;
}

static Onnx__ValueInfoProto *mb_value(mb_model *m, const char *name, int elem, int rank,
                                      const int64_t *dims) {
    Onnx__ValueInfoProto *v = calloc(1, sizeof *v);
    onnx__value_info_proto__init(v);
    v->name = mb_str(m, name, strlen(name));
    Onnx__TypeProto *t = calloc(1, sizeof *t);
    onnx__type_proto__init(t);
    Onnx__TypeProto__Tensor *tt = calloc(1, sizeof *tt);
    onnx__type_proto__tensor__init(tt);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    if (rank >= 0) {
        Onnx__TensorShapeProto *sh = calloc(1, sizeof *sh);
        onnx__tensor_shape_proto__init(sh);
        sh->dim = calloc((size_t)rank + 1, sizeof *sh->dim);
        for (int i = 0; i < rank; i++) {
            Onnx__TensorShapeProto__Dimension *d = calloc(1, sizeof *d);
            onnx__tensor_shape_proto__dimension__init(d);
            if (dims[i] >= 0) {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
                d->dim_value = dims[i];
            } else {
                d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
                d->dim_param = mb_str(m, "N", 1);
            }
            sh->dim[sh->n_dim++] = d;
        }
        tt->shape = sh;
    }
    t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    t->tensor_type = tt;
    v->type = t;
    return v;
}

static void mb_input(mb_model *m, const char *name, int rank, const int64_t *dims) {
    m->ins[m->graph.n_input++] = mb_value(m, name, 1, rank, dims);
}
static void mb_output(mb_model *m, const char *name) {
    m->outs[m->graph.n_output++] = mb_value(m, name, 1, -1, NULL);
}

static void mb_init_i64(mb_model *m, const char *name, int n, const int64_t *vals) {
    Onnx__TensorProto *t = calloc(1, sizeof *t);
    onnx__tensor_proto__init(t);
    t->name = mb_str(m, name, strlen(name));
    t->has_data_type = 1;
    t->data_type = 7;
    t->n_dims = 1;
    t->dims = calloc(1, sizeof(int64_t));
    t->dims[0] = n;
    t->n_int64_data = (size_t)n;
    t->int64_data = calloc((size_t)n + 1, sizeof(int64_t));
    memcpy(t->int64_data, vals, (size_t)n * sizeof(int64_t));
    m->inits[m->graph.n_initializer++] = t;
}

/* Serializes; caller frees the buffer. The structs leak in tests only by design of brevity:
 * mb_free releases them. */
static void *mb_pack(mb_model *m, size_t *size) {
    *size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(*size);
    onnx__model_proto__pack(&m->model, buf);
    return buf;
}

static void mb_free_value(Onnx__ValueInfoProto *v) {
    if (!v) return;
    if (v->type) {
        if (v->type->tensor_type) {
            if (v->type->tensor_type->shape) {
                for (size_t i = 0; i < v->type->tensor_type->shape->n_dim; i++)
                    free(v->type->tensor_type->shape->dim[i]);
                free(v->type->tensor_type->shape->dim);
                free(v->type->tensor_type->shape);
            }
            free(v->type->tensor_type);
        }
        free(v->type);
    }
    free(v);
}

static void mb_free(mb_model *m) {
    for (size_t i = 0; i < m->graph.n_node; i++) {
        free(m->nodes[i]->input);
        free(m->nodes[i]->output);
        free(m->nodes[i]);
    }
    for (size_t i = 0; i < m->graph.n_input; i++) mb_free_value(m->ins[i]);
    for (size_t i = 0; i < m->graph.n_output; i++) mb_free_value(m->outs[i]);
    for (size_t i = 0; i < m->graph.n_initializer; i++) {
        free(m->inits[i]->dims);
        free(m->inits[i]->int64_data);
        free(m->inits[i]);
    }
    for (int i = 0; i < m->n_strings; i++) free(m->strings[i]);
}

#endif
