/* nn family: window geometry (Conv, ConvTranspose, pooling, MaxUnpool) and Einsum equation
 * parsing, shared by the schemas (ops/nn*.c) and the CPU kernels (backends/cpu/k_nn*.c).
 * Private to the nn family. */
#ifndef TDM_OPS_NN_GEOM_H
#define TDM_OPS_NN_GEOM_H

#include <stdbool.h>
#include <stdint.h>

#include "ops/op.h"

typedef enum tdm_nn_kind {
    TDM_NN_CONV,   /* Conv, ConvInteger: kernel from W (dims[2..]) unless kernel_shape */
    TDM_NN_CONVT,  /* ConvTranspose: output_padding, output_shape */
    TDM_NN_POOL,   /* MaxPool, AveragePool, LpPool: kernel_shape required, ceil_mode */
    TDM_NN_UNPOOL, /* MaxUnpool: output = (in - 1) * stride + kernel - pads */
} tdm_nn_kind;

typedef struct tdm_nn_geom {
    int nsp; /* number of spatial dims (input rank - 2) */
    int64_t in[TDM_MAX_RANK];  /* spatial input dims (TDM_DIM_UNKNOWN if unknown) */
    int64_t out[TDM_MAX_RANK]; /* spatial output dims (TDM_DIM_UNKNOWN if unknown) */
    int64_t kernel[TDM_MAX_RANK], stride[TDM_MAX_RANK], dil[TDM_MAX_RANK];
    int64_t pad_b[TDM_MAX_RANK], pad_e[TDM_MAX_RANK]; /* pads at the start / end */
    int64_t out_pad[TDM_MAX_RANK];                    /* ConvTranspose output_padding */
    bool kernel_known;
    bool ceil_mode;
} tdm_nn_geom;

/* Reads the window attributes of `node` and computes the spatial output size from the
 * input shape (x_rank/x_dims; dims may be TDM_DIM_UNKNOWN). w_dims: the weight shape for
 * Conv/ConvTranspose (rank x_rank) or NULL when unknown. Errors name the node. */
tdm_status *tdm_nn_geom_init(const tdm_node *node, int opset, tdm_nn_kind kind, int x_rank,
                             const int64_t *x_dims, const int64_t *w_dims, tdm_nn_geom *g);

/* ---- Einsum ---- */

#define TDM_EINSUM_MAX_OPS 16
#define TDM_EINSUM_LETTERS 52 /* a-z -> 0..25, A-Z -> 26..51; ellipsis dims 52.. */
#define TDM_EINSUM_MAX_LABELS (TDM_EINSUM_LETTERS + TDM_MAX_RANK)

typedef struct tdm_einsum_spec {
    int n_ops;
    int rank[TDM_EINSUM_MAX_OPS];                  /* operand rank */
    int labels[TDM_EINSUM_MAX_OPS][TDM_MAX_RANK];  /* label of each operand axis */
    int out_rank;
    int out_labels[TDM_MAX_RANK];
    int64_t dim[TDM_EINSUM_MAX_LABELS]; /* size of each label (broadcast; -1 unknown) */
    bool used[TDM_EINSUM_MAX_LABELS];
} tdm_einsum_spec;

/* Parses `equation` for n operands with the given ranks and dims (dims may be unknown; a
 * rank of -1 makes the parse fail with *ok = false and no error). */
tdm_status *tdm_nn_einsum_parse(const tdm_node *node, const char *equation, int n,
                                const int *ranks, const int64_t (*dims)[TDM_MAX_RANK],
                                tdm_einsum_spec *spec, bool *ok);

#endif
