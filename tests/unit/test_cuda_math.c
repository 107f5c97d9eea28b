/* The index math of the CUDA kernels (src/backends/cuda/kernels/cuda_math.h), run on the
 * CPU: the same inline functions the kernels call on the GPU. Broadcast and transpose walks
 * are compared with a naive index computation; Slice, Pad and Resize with reference values
 * generated once from onnx.reference 1.23 (Slice opset 13, Resize opset 19), numpy.pad and,
 * for tf_half_pixel_for_nn (which onnx.reference lacks), ONNX Runtime 1.32 (opset 11).
 * Needs no GPU and no CUDA toolkit: the header is plain C. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "backends/cuda/kernels/cuda_math.h"

/* ---- reference tables ---- */

/* Slice: dim, start, end, step, count, indices (onnx.reference, opset 13) */
static const struct { int64_t dim, start, end, step; int n; int64_t idx[16]; } slice_ref[] = {
    {10, 0, 10, 1, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
    {10, 2, 8, 2, 3, {2, 4, 6}},
    {10, -3, -1, 1, 2, {7, 8}},
    {10, -1, -11, -1, 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
    {10, 9, -100, -2, 5, {9, 7, 5, 3, 1}},
    {10, 5, 100, 3, 2, {5, 8}},
    {10, -100, 3, 1, 3, {0, 1, 2}},
    {10, 8, 2, 1, 0, {0}},
    {10, 0, INT64_MAX, 1, 10, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}},
    {10, -1, INT64_MIN, -1, 10, {9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
    {10, 100, -100, -3, 4, {9, 6, 3, 0}},
    {10, 3, 3, 1, 0, {0}},
    {1, 0, 1, 1, 1, {0}},
    {1, 0, -1, -1, 0, {0}},
    {7, 6, 0, -4, 2, {6, 2}},
    {7, -20, 20, 5, 2, {0, 5}},
    {5, -100, -1, -1, 0, {0}},
    {5, 4, -6, -2, 3, {4, 2, 0}},
};
/* Pad: mode, dim, before, after, result (numpy.pad of arange(dim)) */
static const struct { int mode; int64_t dim, before, after; int n; int64_t v[16]; } pad_ref[] = {
    {TCU_PAD_REFLECT, 5, 2, 3, 10, {2, 1, 0, 1, 2, 3, 4, 3, 2, 1}},
    {TCU_PAD_REFLECT, 4, 3, 3, 10, {3, 2, 1, 0, 1, 2, 3, 2, 1, 0}},
    {TCU_PAD_REFLECT, 3, 2, 2, 7, {2, 1, 0, 1, 2, 1, 0}},
    {TCU_PAD_REFLECT, 6, 0, 5, 11, {0, 1, 2, 3, 4, 5, 4, 3, 2, 1, 0}},
    {TCU_PAD_REFLECT, 2, 1, 1, 4, {1, 0, 1, 0}},
    {TCU_PAD_EDGE, 5, 2, 3, 10, {0, 0, 0, 1, 2, 3, 4, 4, 4, 4}},
    {TCU_PAD_EDGE, 4, 3, 3, 10, {0, 0, 0, 0, 1, 2, 3, 3, 3, 3}},
    {TCU_PAD_EDGE, 3, 2, 2, 7, {0, 0, 0, 1, 2, 2, 2}},
    {TCU_PAD_EDGE, 6, 0, 5, 11, {0, 1, 2, 3, 4, 5, 5, 5, 5, 5, 5}},
    {TCU_PAD_EDGE, 2, 1, 1, 4, {0, 0, 1, 1}},
    {TCU_PAD_WRAP, 5, 2, 3, 10, {3, 4, 0, 1, 2, 3, 4, 0, 1, 2}},
    {TCU_PAD_WRAP, 4, 3, 3, 10, {1, 2, 3, 0, 1, 2, 3, 0, 1, 2}},
    {TCU_PAD_WRAP, 3, 2, 2, 7, {1, 2, 0, 1, 2, 0, 1}},
    {TCU_PAD_WRAP, 6, 0, 5, 11, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4}},
    {TCU_PAD_WRAP, 2, 1, 1, 4, {1, 0, 1, 0}},
};
/* Resize 1-D of arange(in): linear, coordinate mode, nearest mode, in, scale, out values (onnx.reference, opset 19) */
static const struct { int linear, ct, nn; int64_t in; float scale; int n; float v[16]; } resize_ref[] = {
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 2.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_FLOOR, 5, 0.4f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 3.0f, 5.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL, TCU_NN_CEIL, 5, 0.4f, 2, {1.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 5, 0.4f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 2.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_FLOOR, 5, 0.4f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 2, 3.0f, 6, {0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ASYMMETRIC, TCU_NN_CEIL, 5, 0.4f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_CEIL, 5, 0.4f, 2, {0.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 4, 0.5f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 2.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_FLOOR, 5, 0.4f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 4, 0.5f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 5.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 2, 3.0f, 6, {0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_ALIGN_CORNERS, TCU_NN_CEIL, 5, 0.4f, 2, {0.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_CEIL, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 2.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_FLOOR, 5, 0.4f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 3.0f, 5.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_CEIL, 5, 0.4f, 2, {1.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 3.0f, 5.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_CEIL, 5, 0.4f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 1.0f, 3.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_FLOOR, 5, 0.4f, 2, {0.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 4.0f, 5.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {0, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_CEIL, 5, 0.4f, 2, {1.0f, 4.0f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.0f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.5f, 1.16666663f, 1.83333337f, 2.5f, 3.16666675f, 3.83333325f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.5f, 2.5f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.100000001f, 0.5f, 0.899999976f, 1.29999995f, 1.70000005f, 2.0f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.166666672f, 1.5f, 2.83333325f, 4.16666651f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.333333343f, 0.666666687f, 1.0f, 1.0f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {1, TCU_CT_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.75f, 3.25f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.666666687f, 1.33333337f, 2.0f, 2.66666675f, 3.33333325f, 4.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 2.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.400000006f, 0.800000012f, 1.20000005f, 1.60000002f, 2.0f, 2.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.33333337f, 2.66666675f, 4.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.333333343f, 0.666666687f, 1.0f, 1.0f, 1.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {1, TCU_CT_ASYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.0f, 2.5f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.428571433f, 0.857142866f, 1.28571427f, 1.71428573f, 2.14285707f, 2.57142854f, 3.0f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.615384638f, 1.23076928f, 1.84615386f, 2.46153855f, 3.07692313f, 3.69230771f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.0f, 3.0f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.307692319f, 0.615384638f, 0.923076928f, 1.23076928f, 1.53846157f, 1.84615386f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.0f, 1.42857146f, 2.85714293f, 4.28571415f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.200000003f, 0.400000006f, 0.600000024f, 0.800000012f, 1.0f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {1, TCU_CT_ALIGN_CORNERS, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.0f, 4.0f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.0f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.5f, 1.16666663f, 1.83333337f, 2.5f, 3.16666675f, 3.83333325f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.5f, 2.5f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.100000001f, 0.5f, 0.899999976f, 1.29999995f, 1.70000005f, 2.0f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.166666672f, 1.5f, 2.83333325f, 4.16666651f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.333333343f, 0.666666687f, 1.0f, 1.0f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {1, TCU_CT_PYTORCH_HALF_PIXEL, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.75f, 3.25f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 0.25f, 0.75f, 1.25f, 1.75f, 2.25f, 2.75f, 3.0f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 0.666666687f, 1.33333337f, 2.0f, 2.66666675f, 3.33333325f, 4.0f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {0.5f, 2.5f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 0.200000003f, 0.600000024f, 1.0f, 1.39999998f, 1.79999995f, 2.0f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {0.5f, 1.83333337f, 3.16666675f, 4.5f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.333333343f, 0.666666687f, 1.0f, 1.0f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 1, 3.0f, 3, {0.0f, 0.0f, 0.0f}},
    {1, TCU_CT_HALF_PIXEL_SYMMETRIC, TCU_NN_ROUND_PREFER_FLOOR, 5, 0.4f, 2, {0.75f, 3.25f}},
};
/* Resize nearest, tf_half_pixel_for_nn (opset 11; onnx.reference lacks it: ONNX Runtime): nearest mode, in, scale, out values */
static const struct { int nn; int64_t in; float scale; int n; float v[16]; } resize_tfnn_ref[] = {
    {TCU_NN_ROUND_PREFER_FLOOR, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {TCU_NN_ROUND_PREFER_FLOOR, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {TCU_NN_ROUND_PREFER_FLOOR, 4, 0.5f, 2, {1.0f, 3.0f}},
    {TCU_NN_ROUND_PREFER_FLOOR, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {TCU_NN_ROUND_PREFER_FLOOR, 6, 0.75f, 4, {1.0f, 2.0f, 3.0f, 5.0f}},
    {TCU_NN_ROUND_PREFER_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 4, 2.0f, 8, {0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 5, 1.5f, 7, {0.0f, 1.0f, 2.0f, 2.0f, 3.0f, 4.0f, 4.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 3, 2.5f, 7, {0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 3.0f, 5.0f}},
    {TCU_NN_ROUND_PREFER_CEIL, 2, 3.0f, 6, {0.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
    {TCU_NN_FLOOR, 4, 2.0f, 8, {0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f}},
    {TCU_NN_FLOOR, 5, 1.5f, 7, {0.0f, 1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f}},
    {TCU_NN_FLOOR, 4, 0.5f, 2, {1.0f, 3.0f}},
    {TCU_NN_FLOOR, 3, 2.5f, 7, {0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 2.0f}},
    {TCU_NN_FLOOR, 6, 0.75f, 4, {0.0f, 2.0f, 3.0f, 4.0f}},
    {TCU_NN_FLOOR, 2, 3.0f, 6, {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}},
    {TCU_NN_CEIL, 4, 2.0f, 8, {1.0f, 1.0f, 2.0f, 2.0f, 3.0f, 3.0f, 3.0f, 3.0f}},
    {TCU_NN_CEIL, 5, 1.5f, 7, {1.0f, 1.0f, 2.0f, 3.0f, 3.0f, 4.0f, 4.0f}},
    {TCU_NN_CEIL, 4, 0.5f, 2, {1.0f, 3.0f}},
    {TCU_NN_CEIL, 3, 2.5f, 7, {1.0f, 1.0f, 1.0f, 2.0f, 2.0f, 2.0f, 2.0f}},
    {TCU_NN_CEIL, 6, 0.75f, 4, {1.0f, 2.0f, 4.0f, 5.0f}},
    {TCU_NN_CEIL, 2, 3.0f, 6, {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f}},
};

/* ---- broadcast ---- */

/* Offset in an input of shape (rank, dims) of output element i (out_rank, out_dims), numpy
 * broadcasting, computed the slow way. */
static int64_t naive_bcast_offset(int rank, const int64_t *dims, int out_rank,
                                  const int64_t *out_dims, int64_t i) {
    int64_t idx[TCU_MAX_RANK];
    for (int d = out_rank - 1; d >= 0; d--) {
        idx[d] = i % out_dims[d];
        i /= out_dims[d];
    }
    int64_t off = 0;
    for (int d = 0; d < rank; d++) {
        int od = d + out_rank - rank;
        off = off * dims[d] + (dims[d] == 1 ? 0 : idx[od]);
    }
    return off;
}

typedef struct bcase {
    int n, out_rank;
    int ranks[3];
    int64_t dims[3][TCU_MAX_RANK];
    int64_t out[TCU_MAX_RANK];
} bcase;

static void test_bcast_plan(void **state) {
    (void)state;
    static const bcase cases[] = {
        {2, 3, {3, 2}, {{2, 3, 4}, {3, 1}}, {2, 3, 4}},
        {2, 3, {3, 1}, {{2, 3, 4}, {4}}, {2, 3, 4}},
        {2, 4, {4, 4}, {{2, 1, 5, 1}, {1, 3, 1, 6}}, {2, 3, 5, 6}},
        {2, 2, {0, 2}, {{0}, {3, 4}}, {3, 4}},
        {3, 4, {4, 2, 3}, {{1, 3, 1, 5}, {4, 5}, {3, 1, 1}}, {2, 3, 4, 5}},
        {2, 3, {3, 3}, {{1, 1, 1}, {2, 1, 3}}, {2, 1, 3}},
        {2, 5, {5, 1}, {{2, 2, 2, 2, 2}, {2}}, {2, 2, 2, 2, 2}},
        {1, 3, {2}, {{4, 1}}, {3, 4, 5}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const bcase *b = &cases[c];
        const int64_t *dims[3] = {b->dims[0], b->dims[1], b->dims[2]};
        tcu_shape s;
        assert_int_equal(tcu_bcast_plan(b->n, b->ranks, dims, b->out_rank, b->out, &s), 0);
        int64_t count = 1;
        for (int d = 0; d < b->out_rank; d++) count *= b->out[d];
        assert_int_equal(s.count, count);
        for (int64_t i = 0; i < count; i++)
            for (int k = 0; k < b->n; k++)
                assert_int_equal(tcu_offset(&s, k, i),
                                 naive_bcast_offset(b->ranks[k], b->dims[k], b->out_rank, b->out, i));
    }
    /* merging: same shapes collapse to one dim, a row vector over a matrix to two */
    const int64_t m[2] = {6, 7}, row[1] = {7};
    const int64_t *same[2] = {m, m}, *mr[2] = {m, row};
    int r22[2] = {2, 2}, r21[2] = {2, 1};
    tcu_shape s;
    assert_int_equal(tcu_bcast_plan(2, r22, same, 2, m, &s), 0);
    assert_int_equal(s.rank, 1);
    assert_int_equal(tcu_bcast_plan(2, r21, mr, 2, m, &s), 0);
    assert_int_equal(s.rank, 2);
    /* rejected: a dim that is neither 1 nor the output's, a rank above the output's */
    const int64_t bad[1] = {5};
    const int64_t *mb[2] = {m, bad};
    assert_int_not_equal(tcu_bcast_plan(2, r21, mb, 2, m, &s), 0);
    int r32[2] = {3, 2};
    assert_int_not_equal(tcu_bcast_plan(2, r32, same, 2, m, &s), 0);
}

/* ---- transpose ---- */

static void test_transpose_plan(void **state) {
    (void)state;
    static const struct { int rank; int64_t dims[6]; int64_t perm[6]; } cases[] = {
        {2, {4, 5}, {1, 0}},
        {3, {2, 3, 4}, {0, 2, 1}},
        {3, {2, 3, 4}, {2, 0, 1}},
        {4, {2, 3, 1, 5}, {3, 1, 0, 2}},
        {4, {2, 3, 4, 5}, {0, 2, 1, 3}},
        {5, {2, 1, 3, 2, 2}, {4, 3, 2, 1, 0}},
        {6, {2, 2, 2, 2, 2, 2}, {5, 0, 4, 1, 3, 2}},
        {3, {2, 3, 4}, {0, 1, 2}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int r = cases[c].rank;
        const int64_t *dims = cases[c].dims, *perm = cases[c].perm;
        tcu_shape s;
        assert_int_equal(tcu_transpose_plan(r, dims, perm, &s), 0);
        int64_t xs[6], acc = 1, odims[6];
        for (int d = r - 1; d >= 0; d--) {
            xs[d] = acc;
            acc *= dims[d];
        }
        for (int d = 0; d < r; d++) odims[d] = dims[perm[d]];
        assert_int_equal(s.count, acc);
        for (int64_t i = 0; i < acc; i++) {
            int64_t t = i, off = 0;
            for (int d = r - 1; d >= 0; d--) {
                off += (t % odims[d]) * xs[perm[d]];
                t /= odims[d];
            }
            assert_int_equal(tcu_offset(&s, 0, i), off);
        }
    }
    /* the shapes the kernel table sends to the tiled 2-D kernel */
    tcu_shape s;
    const int64_t d2[2] = {4, 5}, p2[2] = {1, 0};
    assert_int_equal(tcu_transpose_plan(2, d2, p2, &s), 0);
    assert_int_equal(s.rank, 2);
    assert_true(s.strides[0][0] == 1 && s.strides[0][1] == s.dims[0]);
    const int64_t d3[3] = {3, 4, 5}, p3[3] = {0, 2, 1};
    assert_int_equal(tcu_transpose_plan(3, d3, p3, &s), 0);
    assert_int_equal(s.rank, 3);
    assert_true(s.strides[0][1] == 1 && s.strides[0][2] == s.dims[1] &&
                s.strides[0][0] == s.dims[1] * s.dims[2]);
    /* bad permutations */
    const int64_t rep[3] = {0, 0, 1}, out[3] = {0, 1, 3};
    assert_int_not_equal(tcu_transpose_plan(3, d3, rep, &s), 0);
    assert_int_not_equal(tcu_transpose_plan(3, d3, out, &s), 0);
}

/* ---- reductions ---- */

static void test_reduce_plan(void **state) {
    (void)state;
    const int64_t dims[4] = {2, 3, 1, 4};
    static const int masks[][4] = {{0, 1, 0, 0}, {1, 0, 1, 1}, {1, 1, 1, 1}, {0, 0, 0, 0},
                                   {1, 0, 0, 1}};
    for (size_t c = 0; c < sizeof masks / sizeof masks[0]; c++) {
        tcu_shape keep, red;
        assert_int_equal(tcu_reduce_plan(4, dims, masks[c], &keep, &red), 0);
        assert_int_equal(keep.count * red.count, 24);
        /* every input element is visited exactly once, kept index order is row-major */
        int seen[24] = {0};
        int64_t prev = -1;
        for (int64_t o = 0; o < keep.count; o++) {
            int64_t base = tcu_offset(&keep, 0, o);
            assert_true(base > prev || keep.count == 1);
            prev = base;
            for (int64_t r = 0; r < red.count; r++) {
                int64_t off = base + tcu_offset(&red, 0, r);
                assert_true(off >= 0 && off < 24);
                seen[off]++;
                /* the element's kept coordinates must be those of o */
                int64_t t = off, ko = 0;
                int64_t idx[4];
                for (int d = 3; d >= 0; d--) {
                    idx[d] = t % dims[d];
                    t /= dims[d];
                }
                for (int d = 0; d < 4; d++)
                    if (!masks[c][d]) ko = ko * dims[d] + idx[d];
                assert_int_equal(ko, o);
            }
        }
        for (int i = 0; i < 24; i++) assert_int_equal(seen[i], 1);
    }
}

/* ---- Slice ---- */

static void test_slice(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof slice_ref / sizeof slice_ref[0]; c++) {
        int64_t first = -7, len = -7;
        assert_int_equal(tcu_slice_axis(slice_ref[c].dim, slice_ref[c].start, slice_ref[c].end,
                                        slice_ref[c].step, &first, &len),
                         0);
        assert_int_equal(len, slice_ref[c].n);
        for (int k = 0; k < slice_ref[c].n; k++)
            assert_int_equal(first + k * slice_ref[c].step, slice_ref[c].idx[k]);
    }
    /* a start before the beginning with a negative step: the spec (and ONNX Runtime 1.32)
     * clamp it to 0, where numpy-based onnx.reference gives nothing */
    static const int64_t ort[][4] = {{5, -100, -200, -1}, {5, -100, -6, -1}, {5, -6, -7, -2}};
    int64_t first, len;
    for (size_t c = 0; c < sizeof ort / sizeof ort[0]; c++) {
        assert_int_equal(tcu_slice_axis(ort[c][0], ort[c][1], ort[c][2], ort[c][3], &first, &len), 0);
        assert_int_equal(len, 1);
        assert_int_equal(first, 0);
    }
    assert_int_not_equal(tcu_slice_axis(5, 0, 5, 0, &first, &len), 0);
    assert_int_equal(tcu_slice_axis(0, 0, 5, 1, &first, &len), 0);
    assert_int_equal(len, 0);
    assert_int_equal(tcu_slice_axis(5, 4, 0, INT64_MIN, &first, &len), 0);
    assert_int_equal(len, 1);
    assert_int_equal(first, 4);
}

/* ---- Pad ---- */

static void test_pad(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof pad_ref / sizeof pad_ref[0]; c++) {
        assert_int_equal(pad_ref[c].n, pad_ref[c].dim + pad_ref[c].before + pad_ref[c].after);
        for (int o = 0; o < pad_ref[c].n; o++)
            assert_int_equal(tcu_pad_src(pad_ref[c].mode, o, pad_ref[c].before, pad_ref[c].dim),
                             pad_ref[c].v[o]);
    }
    /* constant: -1 outside the input; negative pads crop */
    assert_int_equal(tcu_pad_src(TCU_PAD_CONSTANT, 0, 2, 5), -1);
    assert_int_equal(tcu_pad_src(TCU_PAD_CONSTANT, 2, 2, 5), 0);
    assert_int_equal(tcu_pad_src(TCU_PAD_CONSTANT, 7, 2, 5), -1);
    assert_int_equal(tcu_pad_src(TCU_PAD_CONSTANT, 0, -2, 5), 2);
    assert_int_equal(tcu_pad_src(TCU_PAD_EDGE, 0, 3, 0), -1); /* empty input: no source */
}

/* ---- Resize ---- */

static void test_resize(void **state) {
    (void)state;
    for (size_t c = 0; c < sizeof resize_ref / sizeof resize_ref[0]; c++) {
        const int64_t in = resize_ref[c].in;
        const double scale = resize_ref[c].scale, out_len = scale * (double)in;
        for (int o = 0; o < resize_ref[c].n; o++) {
            double x = tcu_resize_coord(resize_ref[c].ct, o, scale, in, out_len, resize_ref[c].n,
                                        0.0, 1.0);
            float got;
            if (resize_ref[c].linear) {
                int64_t i0, i1;
                float w;
                tcu_resize_linear(x, in, &i0, &i1, &w);
                assert_true(i0 >= 0 && i1 < in && i0 <= i1);
                got = (float)i0 + w * (float)(i1 - i0); /* the input is arange(in) */
            } else {
                got = (float)tcu_resize_nearest(resize_ref[c].nn, x, in);
            }
            if (!(got >= resize_ref[c].v[o] - 1e-5f && got <= resize_ref[c].v[o] + 1e-5f))
                fail_msg("case %zu (linear %d, mode %d, nearest %d, in %lld, scale %g): output %d "
                         "is %g, reference %g", c, resize_ref[c].linear, resize_ref[c].ct,
                         resize_ref[c].nn, (long long)in, scale, o, got, resize_ref[c].v[o]);
        }
    }
    for (size_t c = 0; c < sizeof resize_tfnn_ref / sizeof resize_tfnn_ref[0]; c++) {
        const int64_t in = resize_tfnn_ref[c].in;
        const double scale = resize_tfnn_ref[c].scale;
        for (int o = 0; o < resize_tfnn_ref[c].n; o++) {
            double x = tcu_resize_coord(TCU_CT_TF_HALF_PIXEL_FOR_NN, o, scale, in, scale * (double)in,
                                        resize_tfnn_ref[c].n, 0.0, 1.0);
            assert_int_equal(tcu_resize_nearest(resize_tfnn_ref[c].nn, x, in),
                             (int64_t)resize_tfnn_ref[c].v[o]);
        }
    }
    /* coordinates far outside or NaN clamp to the input */
    assert_int_equal(tcu_resize_nearest(TCU_NN_CEIL, 1e30, 4), 3);
    assert_int_equal(tcu_resize_nearest(TCU_NN_FLOOR, -1e30, 4), 0);
    assert_int_equal(tcu_resize_nearest(TCU_NN_FLOOR, 0.0 / 0.0, 4), 0);
    int64_t i0, i1;
    float w;
    tcu_resize_linear(1e30, 4, &i0, &i1, &w);
    assert_true(i0 == 3 && i1 == 3);
    tcu_resize_linear(-5.0, 1, &i0, &i1, &w);
    assert_true(i0 == 0 && i1 == 0 && w == 0.0f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bcast_plan),   cmocka_unit_test(test_transpose_plan),
        cmocka_unit_test(test_reduce_plan),  cmocka_unit_test(test_slice),
        cmocka_unit_test(test_pad),          cmocka_unit_test(test_resize),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
