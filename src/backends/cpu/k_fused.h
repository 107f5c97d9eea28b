/* CPU kernels of the fused family: what k_fused*.c share. Private to the family. */
#ifndef TDM_CPU_K_FUSED_H
#define TDM_CPU_K_FUSED_H

#include "backends/cpu/cpu_kernels.h"

typedef enum tdm_fused_act_kind {
    TDM_FUSED_NONE,
    TDM_FUSED_RELU,
    TDM_FUSED_LEAKY,    /* p0 = alpha */
    TDM_FUSED_CLIP,     /* p0 = min, p1 = max */
    TDM_FUSED_SIGMOID,
    TDM_FUSED_TANH,
    TDM_FUSED_HSIGMOID, /* p0 = alpha, p1 = beta */
    TDM_FUSED_HSWISH,
    TDM_FUSED_GELU,     /* erf form */
    TDM_FUSED_GELU_TANH,
    TDM_FUSED_SWISH,    /* x * sigmoid(x) (SiLU) */
} tdm_fused_act_kind;

typedef struct tdm_fused_act {
    tdm_fused_act_kind kind;
    float p0, p1;
    bool affine;        /* then y = scale * act(y) + shift (FusedConv's activation_affine) */
    float scale, shift;
} tdm_fused_act;

/* Reads the node's "activation" / "activation_params" attributes (ops/fused.h). */
tdm_status *tdm_fused_parse_act(const tdm_node *node, tdm_fused_act *act);
/* y[i] = act(y[i]) for n values. */
void tdm_fused_apply_act(const tdm_fused_act *act, float *y, int64_t n);

/* k_fused_attn.c */
tdm_status *tdm_fused_run_attention(tdm_kernel_ctx *ctx);

#endif
