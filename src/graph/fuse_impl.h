/* Fusion passes: what the src/graph/fuse*.c files share. Private to the fusion passes.
 *
 * A pass walks the live nodes, matches a pattern through the helpers below and rewrites it:
 * new nodes are appended (fz_new_node), replaced nodes are marked dead (fz_kill), new
 * constants become values without a producer (fz_new_const). The producer / consumer index
 * is rebuilt lazily after every rewrite (fz_refresh), so a pass can always trust it.
 *
 * Safety rule shared by every pass: a value inside a pattern (produced by one matched node
 * and read by another) must be read by matched nodes only: not a graph output, not read by
 * a subgraph, no reader outside the pattern (fz_sole_consumer / fz_uses_within). That is
 * also what keeps the rewritten graph acyclic: nothing outside the pattern depends on its
 * inner values, so the fused node can sit wherever its external inputs are ready. */
#ifndef TDM_GRAPH_FUSE_IMPL_H
#define TDM_GRAPH_FUSE_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "core/status.h"
#include "graph/graph.h"

typedef struct fz_ctx {
    tdm_graph *g;
    size_t n_values;    /* values covered by the index */
    int *producer;      /* per value: live node writing it, or -1 */
    int *cons_start;    /* per value (n_values + 1): start of its readers in cons[] */
    int *cons;          /* node index per (live) input slot reading the value */
    int *extra_uses;    /* per value: subgraph reads + graph-output uses (never rewired) */
    uint32_t *origin;   /* per value and dim: symbolic identity of an unknown dim */
    size_t n_origin;    /* values covered by origin[] */
    struct fz_derived *derived; /* origins made by windows (convolution, pooling) */
    size_t n_derived, cap_derived;
    uint32_t next_origin; /* the next derived origin code */
    bool dirty;
    int count;          /* rewrites so far */
} fz_ctx;

/* ---- index ---- */
tdm_status *fz_refresh(fz_ctx *fz);
/* Live node index writing value v (-1 for inputs, constants and unknown). */
int fz_producer(const fz_ctx *fz, int v);
/* Readers of v: every input slot of a live node, plus subgraph reads and graph outputs. */
int fz_uses(const fz_ctx *fz, int v);
/* The one live node reading v through exactly one input slot, when v is no graph output
 * and no subgraph reads it; else -1. */
int fz_sole_consumer(const fz_ctx *fz, int v);
/* Number of readers of v and their node indices (input slots; a node reading v twice
 * appears twice). */
int fz_consumers(const fz_ctx *fz, int v, const int **nodes);

/* ---- node and value tests ---- */
tdm_node *fz_node(const fz_ctx *fz, int i);
/* Live node i of the default domain with this op type. */
bool fz_is_op(const fz_ctx *fz, int i, const char *op);
/* Live node i (or node n) of tandem's fused domain with this op type. */
bool fz_is_fused(const fz_ctx *fz, int i, const char *op);
bool fz_node_is_fused(const tdm_node *n, const char *op);
/* Constant data of v (initializer or folded; not an overridable graph input), or NULL. */
const tdm_tensor *fz_const(const fz_ctx *fz, int v);
/* v is a float32 constant with one element and rank <= max_rank; its value in *val. */
bool fz_scalar(const fz_ctx *fz, int v, int max_rank, float *val);
/* |a - b| <= 1e-4 |b| */
bool fz_close(float a, float b);
bool fz_is_f32(const fz_ctx *fz, int v);
/* The input of binary node n that is not v (-1 when v is not an input or both are v). */
int fz_other_input(const tdm_node *n, int v);
/* Both values have known equal ranks and, per dim, equal known sizes or the same symbolic
 * origin (an unknown dim that provably has the same size, e.g. a batch dim carried through
 * convolutions and elementwise ops from the same graph input). */
bool fz_same_shape(const fz_ctx *fz, int a, int b);
/* The axes of node n (up to TDM_MAX_RANK, not normalized): its "axes" attribute before opset
 * input_since, its constant int64 input 1 from then on; *count 0 when there are none. False
 * when the input is not a constant (or holds another type, or too many). */
bool fz_axes_of(const fz_ctx *fz, const tdm_node *n, int input_since, int64_t *axes, int *count);
/* Reads the normalized axes of a Reduce* node (attribute before opset 18, constant input
 * after); false when unknown. */
bool fz_reduce_axes(const fz_ctx *fz, const tdm_node *n, int rank, int64_t *axes, int *count);

/* Dim da of value a and dim db of value b have the same size: both known and equal, or both
 * unknown with the same symbolic origin. */
bool fz_same_dim(const fz_ctx *fz, int a, int da, int b, int db);

/* ---- activations made of several nodes ---- */
#define FZ_ACT_MAX_NODES 12
typedef struct fz_act_match {
    const char *name;     /* the fused ops' activation name ("HardSwish", "Gelu", ...) */
    float params[2];      /* its activation_params */
    int n_params;
    int nodes[FZ_ACT_MAX_NODES]; /* the nodes it replaces */
    int n;
    int out;              /* its result */
} fz_act_match;
/* The decomposed hard-swish of x (fuse_act.c) / GELU of x (fuse_matmul.c), x of rank `rank`
 * read by the matched nodes alone; false when there is none. */
bool fz_match_hswish(const fz_ctx *fz, int x, int rank, fz_act_match *m);
bool fz_match_swish(const fz_ctx *fz, int x, fz_act_match *m); /* x * Sigmoid(x) (fuse_act.c) */
bool fz_match_gelu(const fz_ctx *fz, int x, int rank, fz_act_match *m);

/* ---- rewriting ---- */
/* Appends a node (op in `domain`; opset and schema resolved as finalize will) with inputs
 * and outputs -1; may reallocate g->nodes: re-take node pointers after it. */
tdm_status *fz_new_node(fz_ctx *fz, const char *op, const char *domain, const char *name,
                        int n_in, int n_out, int *index);
/* Adds a constant value owning `t` (freed on error too); name derived from `base`. */
tdm_status *fz_new_const(fz_ctx *fz, const char *base, tdm_tensor *t, int *v);
/* Adds a value with a unique name derived from `base`, dtype/shape as given (rank -1 =
 * unknown). */
tdm_status *fz_new_value(fz_ctx *fz, const char *base, tdm_dtype dt, int rank,
                         const int64_t *dims, int *v);
void fz_kill(fz_ctx *fz, int node);
/* Attribute appenders (copies). */
tdm_status *fz_attr_copy(fz_ctx *fz, int node, const tdm_attr *src);
tdm_status *fz_attr_string(fz_ctx *fz, int node, const char *name, const char *s);
tdm_status *fz_attr_float(fz_ctx *fz, int node, const char *name, float f);
tdm_status *fz_attr_floats(fz_ctx *fz, int node, const char *name, const float *f, int n);
tdm_status *fz_attr_ints(fz_ctx *fz, int node, const char *name, const int64_t *v, int n);
tdm_status *fz_attr_int(fz_ctx *fz, int node, const char *name, int64_t i);
/* True when every attribute of n has a type fz_attr_copy handles. */
bool fz_attrs_copyable(const tdm_node *n);
/* A 1-D float32 constant of n elements from constant c, which holds n values or one value
 * to repeat, with every dim but the last equal to 1 (and rank <= max_rank): reuses c's
 * value when it already is [n], else adds a new constant. -1 via *v when c does not fit. */
tdm_status *fz_vector_const(fz_ctx *fz, int c, int64_t n, int max_rank, int *v);

/* ---- the passes (one file each) ---- */
tdm_status *fz_pass_layout(fz_ctx *fz);    /* fuse_layout.c: Transpose/Reshape chains */
/* fuse_layout.c: Max(Transpose(a, p), Transpose(b, p)) -> Transpose(Max(a, b), p) */
tdm_status *fz_pass_sink_transpose(fz_ctx *fz);
tdm_status *fz_pass_identity(fz_ctx *fz);  /* fuse_act.c: Identity nodes dropped */
tdm_status *fz_pass_conv_bias(fz_ctx *fz); /* fuse_act.c: Conv + Add / Mul(per-channel constant) */
tdm_status *fz_pass_reduce_pool(fz_ctx *fz); /* fuse_act.c: ReduceMean(H, W) -> GlobalAveragePool */
tdm_status *fz_pass_bn_fold(fz_ctx *fz);   /* fuse_conv.c: Conv + BatchNormalization */
tdm_status *fz_pass_conv(fz_ctx *fz);      /* fuse_conv.c: Conv (+Add) (+activation) */
tdm_status *fz_pass_conv_prepad(fz_ctx *fz); /* fuse_conv.c: dilated 1-D Conv: pads as a Pad */
/* fuse_conv.c: Transpose(0, 2, 1[, 3]) -> Conv along L -> ConvNwc1d (CPU alone) */
tdm_status *fz_pass_conv_nwc(fz_ctx *fz);
tdm_status *fz_pass_layernorm(fz_ctx *fz); /* fuse_norm.c: decomposed LayerNorm */
tdm_status *fz_pass_attention(fz_ctx *fz); /* fuse_attn.c: scaled dot-product attention */
tdm_status *fz_pass_matmul(fz_ctx *fz);    /* fuse_matmul.c: MatMul (+bias) (+Relu/GELU) */
tdm_status *fz_pass_gelu(fz_ctx *fz);      /* fuse_matmul.c: decomposed tanh GELU -> FastGelu
                                              (CPU alone: tdm_graph_fuse_cpu) */
/* fuse_onehot.c: Cast(Equal(X, 0..K-1)) @ W (+ b) -> Gather of W's rows */
tdm_status *fz_pass_onehot_matmul(fz_ctx *fz);
tdm_status *fz_pass_noop_slice(fz_ctx *fz); /* fuse_act.c: Slice over whole axes dropped */
tdm_status *fz_pass_stack_reduce(fz_ctx *fz); /* fuse_act.c: ReduceMax(Concat(Unsqueeze..)) -> Max */
/* fuse_qdq.c: DequantizeLinear -> Conv / MatMul / Gemm / Add / data movement -> QuantizeLinear
 * into integer operators (run before constant folding, which would fold DQ(weights)) */
tdm_status *fz_pass_qdq(fz_ctx *fz);
/* fuse_qdq.c: 8-bit tensors channels-last between QConv / QAdd / Concat (a CPU alone) */
tdm_status *fz_pass_q8_nhwc(fz_ctx *fz);
/* fuse_blocked.c: channel-blocked layout (block B) between oneDNN-friendly ops */
tdm_status *fz_pass_blocked(fz_ctx *fz, int64_t block, int channels_last, int threads);
/* fuse_nbits.c: MatMulNBits -> MatMulNBitsPacked (packed constant weights) */
tdm_status *fz_pass_nbits(fz_ctx *fz);

#endif
