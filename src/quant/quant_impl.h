/* Internal layout of the quantizer (include/tandem/quantize.h): the analysed model, the
 * calibration statistics, and the pieces the writer shares. */
#ifndef TDM_QUANT_IMPL_H
#define TDM_QUANT_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/alloc.h"
#include "core/status.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "onnx/loader.h"
#include "onnx/onnx.pb-c.h"
#include "tandem/quantize.h"

/* What a quantizable node is, for the roles of its inputs and outputs. */
typedef enum q_kind {
    QK_CONV,    /* Conv, ConvTranspose: X, W (per output channel), B (int32) */
    QK_MATMUL,  /* MatMul: A, B (constant: per column) */
    QK_GEMM,    /* Gemm: A, B (per output column), C (int32 when 1-D) */
    QK_ELTWISE, /* Add, Mul: every input */
    QK_CONCAT,  /* Concat: every input */
    QK_MAXPOOL, /* MaxPool: output shares its input's parameters */
    QK_AVGPOOL, /* AveragePool, GlobalAveragePool */
} q_kind;

/* The role of one node input. */
typedef enum q_role {
    QR_NONE,   /* left alone (not float, or not quantized by this node) */
    QR_ACT,    /* a float activation: Q/DQ pair with calibrated parameters */
    QR_WEIGHT, /* a constant weight: int8 symmetric, per channel along `axis` (-1: tensor) */
    QR_BIAS,   /* a constant bias: int32, scale = input scale x weight scale */
    QR_CONST,  /* a constant operand of an element-wise op / Concat: activation type, its own
                  min / max, per tensor */
} q_role;

typedef struct q_input {
    q_role role;
    int act;  /* QR_ACT: index into acts */
    int axis; /* QR_WEIGHT: the channel axis, -1 per tensor */
} q_input;

typedef struct q_node {
    int pos; /* index in the model's node list */
    const char *name, *op;
    q_kind kind;
    bool enabled;
    int n_in;
    q_input *in;
    int out_act; /* the float output's activation index, -1 when it is not quantized */
    /* Conv / ConvTranspose -> [Add(per-channel constant)] -> [BatchNormalization] folded
     * into one node (static mode): the Add's and BatchNormalization's positions (-1 when
     * absent), the last one's output (the Conv writes it), the folded float weight and bias
     * (owned); NULL when nothing was folded */
    int bn_pos, add_pos;
    const char *bn_out;
    tdm_tensor *fold_w, *fold_b;
} q_node;

/* A float activation that some quantizable node reads or writes. */
typedef struct q_act {
    const char *name;
    bool is_input;     /* a graph input (statistics from the samples themselves) */
    int share;         /* MaxPool output: the activation whose parameters it takes; -1 */
    bool from_constants; /* computed from constants only (a reshaped weight): the same in
                            every run, so its whole range is kept whatever the method */
    int consumers;     /* nodes of the main graph reading it */
    bool seen;         /* calibration saw it */
    double omin, omax; /* observed */
    double *hist;      /* bins counts (percentile: over [omin, omax]; entropy: |x| over
                          [0, max(|omin|, |omax|)]) */
    float rmin, rmax;  /* the method's range (0 included) */
    float scale;
    int32_t zp;
} q_act;

struct tdm_quantizer {
    tdm_env *env;
    const tdm_allocator *a;
    char *path;
    tdm_quantize_options opt;
    void *file;       /* the model file's bytes (protobuf-c points into nothing of it) */
    size_t file_size;
    Onnx__ModelProto *mp; /* unpacked, never modified: the writer builds copies of lists */
    struct q_arena *arena; /* the protobuf-c allocations of mp */
    tdm_onnx_model *ir;   /* the same model as IR (dtypes after shape inference, constants) */
    int64_t opset;        /* default domain */
    bool bump_opset;      /* an opset 11 / 12 model that means the same under 13: written
                             with 13 (per-channel DequantizeLinear) */
    /* Softmax-like inputs whose rank shape inference did not find: the opset 13 meaning is the
     * same only when `axis` is the last; calibration checks it (bump_checked, bump_blocker) */
    const char *pending[64], *pending_node[64];
    int64_t pending_axis[64];
    size_t n_pending;
    bool bump_checked;
    const char *bump_blocker; /* a node whose axis is not the last */
    q_node *nodes;
    size_t n_nodes;
    q_act *acts;
    size_t n_acts;
    bool calibrated;
};

/* quant_plan.c: allocations freed together (protobuf-c's allocator takes the first two) */
typedef struct q_arena q_arena;
q_arena *tdm_quant_arena_new(const tdm_allocator *a);
void *tdm_quant_arena_alloc(void *arena, size_t size);
void tdm_quant_arena_free_one(void *arena, void *p);
bool tdm_quant_arena_failed(const q_arena *ar);
void tdm_quant_arena_destroy(q_arena *ar);

/* quant_calib.c: the parameters of every activation from its statistics and the method. */
void tdm_quant_compute_params(tdm_quantizer *q);
/* The constant float data named `name` (an initializer or a Constant node's value), or NULL. */
const tdm_tensor *tdm_quant_constant(const tdm_quantizer *q, const char *name);

/* Symmetric / asymmetric scale and zero point of [rmin, rmax] (0 included) for the integer
 * range [qmin, qmax]. */
void tdm_quant_scale_zp(double rmin, double rmax, int qmin, int qmax, bool symmetric, float *scale,
                        int32_t *zp);

/* The main graph's nodes reading `name`. */
int tdm_quant_consumers(const tdm_quantizer *q, const char *name);

/* quant_write.c */
tdm_status *tdm_quant_write(tdm_quantizer *q, void **data, size_t *size);

#endif
