/* The Loop model of the tests of Loop limits and run cancellation, made with model_builder.h:
 * inputs M (int64 trip count), cond (bool) and x (float [1]); the body (i, c_in, x_in) ->
 * (c_out = Identity(c_in), x_out = x_in + 1) adds 1 to x each iteration and keeps the
 * condition; output y is the final x. loop_model returns the serialised bytes (free()).
 * Include after <cmocka.h>. */
#ifndef TDM_TESTS_LOOP_MODEL_H
#define TDM_TESTS_LOOP_MODEL_H

#include <stdint.h>
#include <stdlib.h>

#include "model_builder.h"

static void *loop_model(size_t *size) {
    int64_t one[1] = {1};
    float one_val[1] = {1.0f};
    mb_model body, m;
    mb_init(&body, 17);
    mb_input_t(&body, "i", MB_I64, 0, NULL);
    mb_input_t(&body, "c_in", MB_BOOL, 0, NULL);
    mb_input_t(&body, "x_in", MB_F32, 1, one);
    mb_init_f32(&body, "one", 1, one, 1, one_val);
    mb_node(&body, "Identity:c_in->c_out");
    mb_node(&body, "Add:x_in,one->x_out");
    mb_output_t(&body, "c_out", MB_BOOL, 0, NULL);
    mb_output_t(&body, "x_out", MB_F32, 1, one);

    mb_init(&m, 17);
    mb_input_t(&m, "M", MB_I64, 0, NULL);
    mb_input_t(&m, "cond", MB_BOOL, 0, NULL);
    mb_input_t(&m, "x", MB_F32, 1, one);
    Onnx__NodeProto *loop = mb_node(&m, "Loop:M,cond,x->y");
    mb_attr_graph(&m, loop, "body", &body.graph);
    mb_output_t(&m, "y", MB_F32, 1, one);
    void *buf = mb_pack(&m, size);
    mb_free(&m);
    mb_free(&body);
    return buf;
}

#endif
