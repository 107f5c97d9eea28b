/* Operator schemas: name, domain, first supported opset, input/output counts and the shape
 * and type function. Independent of any device.
 *
 * The shape function (infer) is the single source of output shapes: it runs at load time
 * on what is statically known (dims may be TDM_DIM_UNKNOWN, rank may be -1, data may be
 * NULL), and at run time on the real inputs (all dims known, data present for inputs in
 * host memory). With incomplete knowledge it fills what it can and returns NULL; it
 * returns an error status only when the node is certainly invalid (message names the
 * node). */
#ifndef TDM_OPS_OP_H
#define TDM_OPS_OP_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"

typedef struct tdm_value_info {
    bool present;            /* false for an omitted optional input/output */
    tdm_dtype dtype;         /* TDM_UNDEFINED if unknown */
    int rank;                /* -1 if unknown */
    int64_t dims[TDM_MAX_RANK]; /* TDM_DIM_UNKNOWN if unknown */
    const tdm_tensor *data;  /* contents known now (constant or run-time input), or NULL */
} tdm_value_info;

typedef struct tdm_infer_ctx {
    const tdm_node *node;
    int opset;
    int n_in;
    const tdm_value_info *in;
    int n_out;
    tdm_value_info *out; /* prefilled: present per the node, dtype undefined, rank -1 */
} tdm_infer_ctx;

typedef tdm_status *(*tdm_infer_fn)(tdm_infer_ctx *ctx);

enum {
    /* Output shapes depend on computed values (NonZero, NonMaxSuppression, Unique...):
     * infer leaves dims unknown and the kernel allocates its outputs itself. */
    TDM_OP_DATA_DEPENDENT = 1u << 0,
    /* The first min_inputs inputs are positions the node must write, but each may be empty
     * ("") — Loop's M and cond: both optional, yet the loop-carried values come after them. */
    TDM_OP_OPTIONAL_SLOTS = 1u << 1,
};

typedef struct tdm_op_schema {
    const char *domain; /* "" = ai.onnx */
    const char *name;
    int since;          /* first opset version supported */
    int min_inputs, max_inputs;
    int min_outputs, max_outputs;
    tdm_infer_fn infer;
    unsigned flags;
    uint32_t shape_inputs; /* bitmask of inputs whose *values* infer reads (Reshape: 1<<1) */
} tdm_op_schema;

/* Looks up a schema by domain and op name for the given opset. NULL if unknown or the
 * opset is older than supported. ("ai.onnx" is treated as "".) */
const tdm_op_schema *tdm_op_find(const char *domain, const char *name, int opset);

/* ---- helpers for infer functions (ops/infer_util.c) ---- */

/* out = in (dtype and shape). */
void tdm_infer_copy(tdm_value_info *out, const tdm_value_info *in);
/* Multidirectional (numpy) broadcast of n inputs into out's shape; dtype left to caller.
 * Error if known dims conflict. */
tdm_status *tdm_infer_broadcast(const tdm_infer_ctx *ctx, int n, const tdm_value_info *const *ins,
                                tdm_value_info *out);
/* Normalizes a possibly negative axis against rank (accepts -rank..rank-1); error naming
 * the node if out of range. */
tdm_status *tdm_norm_axis(const tdm_node *node, int64_t axis, int rank, int *out);
/* True when the info has known rank and all dims known. */
bool tdm_info_known(const tdm_value_info *v);
/* Reads a 1-D (or scalar) integer tensor's values (int32/int64) into a malloc'd-free
 * caller buffer of at most `max` entries; error if too long or wrong type. */
tdm_status *tdm_read_ints(const tdm_node *node, const char *what, const tdm_tensor *t,
                          int64_t *vals, int max, int *count);
/* Error status naming the node: "<op> node '<name>': <message>". */
tdm_status *tdm_node_error(const tdm_node *node, tdm_code code, const char *fmt, ...)
    TDM_PRINTF(3, 4);

/* Family tables (one file per family, one source for the registry in ops/registry.c). */
#define TDM_OP_FAMILIES(X)                                                               \
    X(unary)                                                                             \
    X(binary)                                                                            \
    X(nn)                                                                                \
    X(shape)                                                                             \
    X(reduce)                                                                            \
    X(misc)                                                                              \
    X(rnn)                                                                               \
    X(text)                                                                              \
    X(ml)                                                                                \
    X(control)                                                                           \
    X(seq)                                                                               \
    X(fused)                                                                             \
    X(quant_nbits)                                                                   \
    X(contrib)                                                                           \
    X(contrib_attn)                                                                      \
    X(llm)

#define TDM_X_(fam)                                                                      \
    extern const tdm_op_schema tdm_ops_##fam[];                                          \
    extern const int tdm_ops_##fam##_count;
TDM_OP_FAMILIES(TDM_X_)
#undef TDM_X_

#endif
