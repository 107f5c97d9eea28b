/* Shared helpers of the generator and the engine (llm_graph.h). */
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/status.h"
#include "llm/llm_folder.h"
#include "llm/llm_graph.h"

void tdm_llm_put_index(void *buf, tdm_dtype t, size_t i, int64_t v) {
    if (t == TDM_INT64) ((int64_t *)buf)[i] = v;
    else ((int32_t *)buf)[i] = (int32_t)v;
}

void tdm_llm_set_view_dims(tdm_tensor *t, tdm_dtype dtype, void *buf, int rank,
                           const int64_t *dims) {
    memset(t, 0, sizeof *t);
    t->dtype = dtype;
    t->rank = rank;
    int64_t count = 1;
    for (int d = 0; d < rank; d++) {
        t->dims[d] = dims[d];
        count *= dims[d];
    }
    t->count = count;
    t->nbytes = (size_t)count * tdm_dtype_size(dtype);
    t->data = buf;
    t->pooled = true; /* not the run's to free */
}

void tdm_llm_set_view(tdm_tensor *t, tdm_dtype dtype, void *buf, size_t start, size_t n) {
    int64_t dims[2] = {1, (int64_t)n};
    tdm_llm_set_view_dims(t, dtype, (char *)buf + start * tdm_dtype_size(dtype), 2, dims);
}

int tdm_llm_find_input(const tdm_model *m, const char *name, tdm_value_desc *d) {
    for (size_t i = 0; i < tdm_model_input_count(m); i++) {
        tdm_value_desc v;
        if (!tdm_model_input(m, i, &v) && strcmp(v.name, name) == 0) {
            if (d) *d = v;
            return (int)i;
        }
    }
    return -1;
}

int tdm_llm_find_output(const tdm_model *m, const char *name, tdm_value_desc *d) {
    for (size_t i = 0; i < tdm_model_output_count(m); i++) {
        tdm_value_desc v;
        if (!tdm_model_output(m, i, &v) && strcmp(v.name, name) == 0) {
            if (d) *d = v;
            return (int)i;
        }
    }
    return -1;
}

bool tdm_llm_has_op(const tdm_model *m, const char *op) {
    for (size_t i = 0; i < tdm_model_op_type_count(m); i++)
        if (strcmp(tdm_model_op_type(m, i, NULL), op) == 0) return true;
    return false;
}

tdm_status *tdm_llm_parse_kv_type(const char *kv_type, tdm_dtype *out) {
    static const struct {
        const char *a, *b;
        tdm_dtype t;
    } names[] = {{"auto", "", TDM_UNDEFINED},  {"f32", "float32", TDM_FLOAT},
                 {"f16", "float16", TDM_FLOAT16}, {"int8", "q8", TDM_INT8},
                 {"int4", "q4", TDM_UINT8}};
    if (!kv_type) kv_type = "";
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(kv_type, names[i].a) || !strcmp(kv_type, names[i].b)) {
            *out = names[i].t;
            return NULL;
        }
    return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "kv_type '%s': give auto, f32, f16, int8 or int4",
                   kv_type);
}

void tdm_llm_layer_name(char *dst, const char *pattern, int layer) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
    snprintf(dst, TDM_LLM_NAME, pattern, layer); /* checked: one %d (llm_folder.c) */
#pragma GCC diagnostic pop
}

tdm_status *tdm_llm_new_value(tdm_graph *g, const char *base, const char *suffix, tdm_dtype dtype,
                              int rank, const int64_t *dims, tdm_tensor *data, int *out) {
    char name[TDM_LLM_NAME + 64];
    int idx = -1;
    for (int k = 0; k < 1000 && idx < 0; k++) {
        snprintf(name, sizeof name, "%.*s%s%d", TDM_LLM_NAME, base, suffix, k);
        if (tdm_graph_find_value(g, name) < 0) {
            tdm_status *st = tdm_graph_add_value(g, name, &idx);
            if (st) {
                tdm_tensor_destroy(data);
                return st;
            }
        }
    }
    if (idx < 0) {
        tdm_tensor_destroy(data);
        return TDM_ERR(TDM_ERR_INTERNAL, "no free value name for '%s'", base);
    }
    tdm_value *v = &g->values[idx];
    v->dtype = dtype;
    v->rank = rank;
    for (int d = 0; d < rank && d < TDM_MAX_RANK; d++) v->dims[d] = dims[d];
    v->data = data;
    *out = idx;
    return NULL;
}

tdm_status *tdm_llm_i64_const(tdm_graph *g, const char *base, const char *suffix, int64_t x,
                              int *out) {
    int64_t one = 1;
    tdm_tensor *t = NULL;
    TDM_TRY(tdm_tensor_new(g->alloc, TDM_INT64, 1, &one, &t));
    ((int64_t *)t->data)[0] = x;
    return tdm_llm_new_value(g, base, suffix, TDM_INT64, 1, &one, t, out);
}
