/* Pieces the generator (generator.c) and the engine (engine*.c) share: tensor headers over
 * index buffers, the model's inputs and outputs by name, and new values and constants for
 * their graph edits. Internal to src/llm. */
#ifndef TDM_LLM_GRAPH_H
#define TDM_LLM_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "graph/graph.h"
#include "tandem/tandem.h"

static inline bool tdm_llm_is_index_dtype(tdm_dtype t) { return t == TDM_INT64 || t == TDM_INT32; }

/* buf[i] = v as int64 or int32. */
void tdm_llm_put_index(void *buf, tdm_dtype t, size_t i, int64_t v);
/* Header `t` over `buf` elements [start, start + n) as a [1, n] tensor (not a run's to free). */
void tdm_llm_set_view(tdm_tensor *t, tdm_dtype dtype, void *buf, size_t start, size_t n);
/* Header `t` over `buf` with `rank` dims (not a run's to free). */
void tdm_llm_set_view_dims(tdm_tensor *t, tdm_dtype dtype, void *buf, int rank,
                           const int64_t *dims);
/* The index of the model's input / output named `name` (its description in *d), or -1. */
int tdm_llm_find_input(const tdm_model *m, const char *name, tdm_value_desc *d);
int tdm_llm_find_output(const tdm_model *m, const char *name, tdm_value_desc *d);
bool tdm_llm_has_op(const tdm_model *m, const char *op);
/* A KV cache type option (tdm_generator_options.kv_type, tdm_llm_engine_options.kv_type) as
 * a dtype: NULL, "" or "auto" = TDM_UNDEFINED (the model's), "f32" / "float32" = TDM_FLOAT,
 * "f16" / "float16" = TDM_FLOAT16, "int8" / "q8" = TDM_INT8, "int4" / "q4" = TDM_UINT8 (4-bit
 * codes in bytes). Anything else: TDM_ERR_INVALID_ARGUMENT naming the accepted values. */
tdm_status *tdm_llm_parse_kv_type(const char *kv_type, tdm_dtype *out);
/* `pattern` (a folder name with one %d, checked by llm_folder.c) for `layer`. */
void tdm_llm_layer_name(char *dst, const char *pattern, int layer);

/* A new value of g named `base` + `suffix` + a number (unique), of `dtype` and `rank` dims,
 * with `data` (taken, even on failure) when not NULL. */
tdm_status *tdm_llm_new_value(tdm_graph *g, const char *base, const char *suffix, tdm_dtype dtype,
                              int rank, const int64_t *dims, tdm_tensor *data, int *out);
/* A new int64 [1] constant x. */
tdm_status *tdm_llm_i64_const(tdm_graph *g, const char *base, const char *suffix, int64_t x,
                              int *out);

#endif
