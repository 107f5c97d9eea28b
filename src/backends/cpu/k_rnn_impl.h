/* Internal to the rnn kernel family: the parsed description of one RNN/GRU/LSTM node
 * (k_rnn.c) and the per-type recurrence cores (k_rnn_cell.c, from k_rnn_tmpl.h). */
#ifndef TDM_CPU_K_RNN_IMPL_H
#define TDM_CPU_K_RNN_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "backends/cpu/cpu_kernels.h"

enum tdm_rnn_cell { TDM_RNN_SIMPLE, TDM_RNN_GRU, TDM_RNN_LSTM };

enum tdm_rnn_act_kind {
    TDM_RA_RELU,
    TDM_RA_TANH,
    TDM_RA_SIGMOID,
    TDM_RA_AFFINE,
    TDM_RA_LEAKY_RELU,
    TDM_RA_THRESHOLDED_RELU,
    TDM_RA_SCALED_TANH,
    TDM_RA_HARD_SIGMOID,
    TDM_RA_ELU,
    TDM_RA_SOFTSIGN,
    TDM_RA_SOFTPLUS,
};

typedef struct tdm_rnn_act {
    int kind; /* enum tdm_rnn_act_kind */
    float alpha, beta;
} tdm_rnn_act;

/* Everything the recurrence needs besides the data. Gate blocks in W/R/B follow ONNX:
 * GRU z, r, h; LSTM i, o, f, c; peepholes i, o, f. */
typedef struct tdm_rnn_desc {
    int cell;        /* enum tdm_rnn_cell */
    int gates;       /* 1, 3, 4 */
    int dirs;        /* 1 or 2 */
    bool reverse;    /* single direction running backwards */
    int layout;      /* 0: [seq, batch, ...]; 1: [batch, seq, ...] */
    int64_t seq, batch, input, hidden;
    bool has_clip;
    float clip;
    bool linear_before_reset; /* GRU */
    bool input_forget;        /* LSTM */
    tdm_rnn_act act[2][3];    /* per direction: f, g, h (as many as the cell uses) */
    const int64_t *lens;      /* [batch] valid steps per batch entry (all in [0, seq]) */
} tdm_rnn_desc;

/* Data of one node, all in the compute type, contiguous as ONNX lays it out. Optional
 * pointers are NULL when absent (bias, h0, c0, peep; y, yh, yc when not requested). */
typedef struct tdm_rnn_io {
    const void *x, *w, *r, *bias, *h0, *c0, *peep;
    void *y, *yh, *yc;
} tdm_rnn_io;

tdm_status *tdm_rnn_run_f32(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, const tdm_rnn_io *io);
tdm_status *tdm_rnn_run_f64(tdm_kernel_ctx *ctx, const tdm_rnn_desc *d, const tdm_rnn_io *io);

#endif
