/* Models shared by the fusion tests (test_fuse.c, test_fuse_reference.c). */
#ifndef TDM_TEST_FUSE_MODELS_H
#define TDM_TEST_FUSE_MODELS_H

#include "model_builder.h"

static inline void conv_model(mb_model *b, bool bias, const int64_t *x_decl, const int64_t *x_run) {
    int64_t wd[4] = {6, 4, 3, 3}, m = 6;
    mb_input_run(b, "x", 4, x_decl, x_run);
    mb_weight(b, "W", 4, wd, NULL, 0, 0.5f);
    if (bias) mb_weight(b, "B", 1, &m, NULL, 0, 0.5f);
    Onnx__NodeProto *c = mb_node(b, bias ? "Conv:x,W,B->y" : "Conv:x,W->y");
    int64_t pads[4] = {1, 1, 1, 1};
    mb_attr_ints(b, c, "pads", 4, pads);
}

static const int64_t x_shape[4] = {2, 4, 7, 7};

static inline void matmul_model(mb_model *b, int a_rank, bool batched_b) {
    int64_t all[4] = {2, 3, 5, 8}, ad[4] = {0}, wd[3] = {3, 8, 16}, n = 16;
    for (int i = 0; i < a_rank; i++) ad[i] = all[4 - a_rank + i];
    mb_input_run(b, "A", a_rank, ad, NULL);
    mb_weight(b, "W", batched_b ? 3 : 2, batched_b ? wd : wd + 1, NULL, 0, 0.5f);
    mb_weight(b, "bias", 1, &n, NULL, 0, 0.5f);
    mb_node(b, "MatMul:A,W->y");
}

#endif
