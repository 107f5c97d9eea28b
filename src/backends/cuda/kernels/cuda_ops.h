/* tandem's own CUDA kernels: a plain C ABI of launchers (implemented in kernels/cuda_*.cu,
 * called from the kernel table entries src/backends/cuda/k_ops*.c).
 *
 * Every launcher takes raw device pointers, sizes as int64, dtype codes equal to
 * tdm_dtype / ONNX TensorProto (TCU_F32 == TDM_FLOAT ...), and the stream as `void *`
 * (a cudaStream_t; NULL = the legacy default stream). It only enqueues work: it never
 * synchronizes, allocates or copies to the host. It returns 0 on success, a cudaError_t
 * value (> 0) when the launch failed, or a TCU_E_* code (< 0) for arguments it does not
 * take (the caller turns both into a tdm_status; see tcu_error_string).
 *
 * Floating-point kernels exist for float32, float16 and bfloat16 (16-bit types compute in
 * float32); integer variants where the function lists them. Element counts of 0 are no-ops.
 *
 * Usage:
 *     tcu_shape s;
 *     if (tcu_bcast_plan(2, ranks, dims, Y->rank, Y->dims, &s)) ...bad shapes...
 *     int e = tcu_binary(TCU_ADD, TCU_F32, a, b, y, &s, stream);
 *     if (e) return <status from tcu_error_string(e)>;
 */
#ifndef TDM_BACKENDS_CUDA_KERNELS_CUDA_OPS_H
#define TDM_BACKENDS_CUDA_KERNELS_CUDA_OPS_H

#include <stdint.h>

#include "backends/cuda/kernels/cuda_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* dtype codes (= tdm_dtype). */
enum {
    TCU_F32 = 1, TCU_U8 = 2, TCU_I8 = 3, TCU_I32 = 6, TCU_I64 = 7, TCU_BOOL = 9,
    TCU_F16 = 10, TCU_F64 = 11, TCU_BF16 = 16
};

/* Launcher errors of their own (negative; positive values are cudaError_t). */
enum {
    TCU_E_ARG = -1,         /* inconsistent arguments (shapes, ranks, sizes) */
    TCU_E_DTYPE = -2,       /* no kernel for this dtype / op combination */
    TCU_E_TOO_LARGE = -3    /* a size beyond what the kernel handles (e.g. attention rows) */
};

/* Message for a launcher result (cudaGetErrorString for cudaError_t values). */
const char *tcu_error_string(int err);

/* ---- element-wise (cuda_eltwise.cu) ---- */

/* Unary ops. p, q: LeakyRelu alpha; Elu alpha; Selu alpha, gamma; HardSigmoid alpha, beta;
 * Clip min, max; others ignore them. Float types: all ops. TCU_I32 / TCU_I64: ABS, NEG,
 * RELU, SIGN, CLIP (bounds cast from p, q), IDENTITY. TCU_BOOL: NOT, IDENTITY. */
enum {
    TCU_RELU, TCU_SIGMOID, TCU_TANH, TCU_EXP, TCU_LOG, TCU_SQRT, TCU_ABS, TCU_NEG, TCU_ERF,
    TCU_GELU, TCU_GELU_TANH, TCU_HARD_SWISH, TCU_HARD_SIGMOID, TCU_CLIP, TCU_LEAKY_RELU,
    TCU_ELU, TCU_SELU, TCU_SOFTPLUS, TCU_SOFTSIGN, TCU_RECIPROCAL, TCU_FLOOR, TCU_CEIL,
    TCU_ROUND, TCU_SIGN, TCU_SIN, TCU_COS, TCU_NOT, TCU_IDENTITY, TCU_UNARY_COUNT
};
int tcu_unary(int op, int dtype, const void *x, void *y, int64_t n, float p, float q,
              void *stream);

/* Clip with bounds in device memory (one element each of the same dtype as x, NULL =
 * unbounded). Float types, TCU_I32, TCU_I64. */
int tcu_clip(int dtype, const void *x, void *y, int64_t n, const void *lo, const void *hi,
             void *stream);

/* Cast between TCU_F32, TCU_F16, TCU_BF16, TCU_F64, TCU_I32, TCU_I64, TCU_I8, TCU_U8,
 * TCU_BOOL (float -> int truncates toward zero; -> bool is x != 0). */
int tcu_cast(int from, int to, const void *x, void *y, int64_t n, void *stream);

/* Binary ops with numpy broadcast: y (contiguous, s->count elements) = op(a, b) with a
 * operand 0 and b operand 1 of s (tcu_bcast_plan). Arithmetic ops (ADD SUB MUL DIV POW
 * MAX MIN PRELU MOD_FMOD): y has a's dtype; float types all, TCU_I32 / TCU_I64 ADD SUB MUL
 * DIV (truncating) MAX MIN. Comparisons (EQUAL LESS GREATER LESS_EQ GREATER_EQ): y is bool;
 * float types, TCU_I32, TCU_I64, TCU_BOOL (EQUAL only). Logic (AND OR XOR): TCU_BOOL. */
enum {
    TCU_ADD, TCU_SUB, TCU_MUL, TCU_DIV, TCU_POW, TCU_MAX, TCU_MIN, TCU_PRELU, TCU_EQUAL,
    TCU_LESS, TCU_GREATER, TCU_LESS_EQ, TCU_GREATER_EQ, TCU_AND, TCU_OR, TCU_XOR,
    TCU_BINARY_COUNT
};
int tcu_binary(int op, int dtype, const void *a, const void *b, void *y, const tcu_shape *s,
               void *stream);

/* Where: y = c ? a : b over s (operands: 0 = c (bool), 1 = a, 2 = b); any element size
 * 1, 2, 4 or 8. */
int tcu_where(int elem_size, const void *c, const void *a, const void *b, void *y,
              const tcu_shape *s, void *stream);

/* y[i] = x[tcu_offset(s, 0, i)] for i < s->count: Expand, Transpose, Slice (any element
 * size 1, 2, 4, 8). */
int tcu_strided_copy(int elem_size, const void *x, void *y, const tcu_shape *s, void *stream);

/* ---- data movement (cuda_shape.cu) ---- */

/* Batched 2-D transpose: y[b][c][r] = x[b][r][c], x is batch x R x C (tiled). */
int tcu_transpose2d(int elem_size, const void *x, void *y, int64_t batch, int64_t R, int64_t C,
                    void *stream);

/* Row copy: dst[r * dst_pitch + dst_off + j] = src[r * src_pitch + src_off + j] for r < rows,
 * j < cols (pitches and offsets in elements): Concat / Split pieces. */
int tcu_copy_rows(int elem_size, const void *src, int64_t src_pitch, int64_t src_off, void *dst,
                  int64_t dst_pitch, int64_t dst_off, int64_t rows, int64_t cols, void *stream);

/* Gather along an axis: x viewed as [outer, A, inner], idx (nidx int32 or int64 values,
 * negative ones count from the end), y = [outer, nidx, inner]. An index outside [-A, A)
 * writes zeros to its row and sets *err_flag = 1 (err_flag: device int, may be NULL). */
int tcu_gather(int elem_size, const void *x, const void *idx, int idx_is_64, void *y,
               int64_t outer, int64_t A, int64_t nidx, int64_t inner, int *err_flag,
               void *stream);

/* Pad: y (out_dims) from x (in_dims); before[d] elements before axis d (negative crops).
 * mode TCU_PAD_*; constant mode fills with the value whose bytes are `value` (elem_size
 * bytes, little end of the 8). */
typedef struct tcu_pad_desc {
    int rank;
    int mode;
    int64_t in_dims[TCU_MAX_RANK], out_dims[TCU_MAX_RANK], before[TCU_MAX_RANK];
    uint64_t value;
} tcu_pad_desc;
int tcu_pad(int elem_size, const void *x, void *y, const tcu_pad_desc *d, void *stream);

/* Resize: nearest over any axes, or linear over the last two axes (every other axis must
 * keep its size with scale 1: the caller checks). Float types. */
typedef struct tcu_resize_desc {
    int rank;
    int linear;         /* 0 nearest, 1 (bi)linear */
    int coord_mode;     /* TCU_CT_* */
    int nearest_mode;   /* TCU_NN_* */
    int64_t in_dims[TCU_MAX_RANK], out_dims[TCU_MAX_RANK];
    double scales[TCU_MAX_RANK];   /* per axis (1 for axes not resized) */
    double out_lens[TCU_MAX_RANK]; /* resized lengths for the transforms: scale * in when
                                      scales are given, the size otherwise */
    double roi_lo[TCU_MAX_RANK], roi_hi[TCU_MAX_RANK];
} tcu_resize_desc;
int tcu_resize(int dtype, const void *x, void *y, const tcu_resize_desc *d, void *stream);

/* ---- reductions and normalisations (cuda_reduce.cu) ---- */

/* Softmax (log_softmax: LogSoftmax) over the middle axis of x viewed as [outer, C, inner];
 * numerically stable (max subtracted). x may equal y. Float types. */
int tcu_softmax(int dtype, const void *x, void *y, int64_t outer, int64_t C, int64_t inner,
                int log_softmax, void *stream);

/* LayerNormalization over rows of `cols` contiguous values: y = (x - mean) * invstd *
 * scale + bias; scale (cols values, x's dtype) required, bias optional (NULL); mean and
 * invstd (float32, `rows` values each) optional outputs. Float types. */
int tcu_layernorm(int dtype, const void *x, const void *scale, const void *bias, void *y,
                  float *mean, float *invstd, int64_t rows, int64_t cols, float eps,
                  void *stream);

/* Reductions: y[o] = reduce over r < red->count of x[tcu_offset(keep, 0, o) +
 * tcu_offset(red, 0, r)], o < keep->count (keep and red are strided walks over the kept
 * and the reduced axes of x). Float types (float32 accumulation), TCU_I32 and TCU_I64
 * (SUM, MEAN, MAX, MIN, PROD, L1, SUMSQ; int64 accumulation). An empty reduction gives the
 * op's identity (0, 1, -inf for MAX / LOGSUMEXP / LOGSUM, +inf for MIN). */
enum {
    TCU_R_SUM, TCU_R_MEAN, TCU_R_MAX, TCU_R_MIN, TCU_R_PROD, TCU_R_L1, TCU_R_L2, TCU_R_SUMSQ,
    TCU_R_LOGSUM, TCU_R_LOGSUMEXP, TCU_R_COUNT
};
int tcu_reduce(int op, int dtype, const void *x, void *y, const tcu_shape *keep,
               const tcu_shape *red, void *stream);

/* ArgMax / ArgMin over the middle axis of [outer, C, inner]: y (int64, outer * inner) =
 * index of the first (last with select_last) extreme. Float types, TCU_I32, TCU_I64. */
int tcu_argminmax(int dtype, const void *x, int64_t *y, int64_t outer, int64_t C, int64_t inner,
                  int is_max, int select_last, void *stream);

/* ---- attention (cuda_attention.cu) ---- */

/* tandem's fused Attention (src/ops/fused.h): for every output pair p = (b, h) < B*H and
 * row s < So:  y[p][s][:] = softmax_t(scale * q_s . k_t + mask[b][h][s][t]) . v[t][:]
 * where q row s is Q's row (S == 1 ? 0 : s) and k row t is K's row (T == 1 ? 0 : t) (the
 * mask may widen the scores). Q [., ., S, D], K [., ., T, D], V [., ., To, Dv] are
 * contiguous within a head; q_stride[0..1] are the element strides of Q's batch / head
 * axes (0 broadcasts), the same for K, V; mask_stride over [B, H, So, To] (0 broadcasts),
 * mask NULL when absent. Float32 / float16 / bfloat16 with float32 accumulation (mask in
 * the same dtype). Needs To <= TCU_ATTN_MAX_T and D + To <= 12000 (the query row and the
 * scores live in shared memory; TCU_E_TOO_LARGE otherwise). */
#define TCU_ATTN_MAX_T 8192
typedef struct tcu_attn_desc {
    int64_t B, H, S, T, D, Dv, So, To;
    int64_t q_stride[2], k_stride[2], v_stride[2], mask_stride[4];
    float scale;
} tcu_attn_desc;
int tcu_attention(int dtype, const void *q, const void *k, const void *v, const void *mask,
                  void *y, const tcu_attn_desc *d, void *stream);

/* ---- 8-bit quantization (cuda_quant.cu) ---- */

/* QuantizeLinear: y = saturate(round_half_even(x / scale) + zp), x float32 / float16,
 * y TCU_U8 / TCU_I8 (zp of y's type, or NULL). Scale and zp hold L values (1: per tensor)
 * applied along an axis: element i takes index (i / post) % L. */
int tcu_quantize(int xtype, const void *x, const float *scale, int ytype, const void *zp,
                 void *y, int64_t n, int64_t L, int64_t post, void *stream);
/* DequantizeLinear: y = (x - zp) * scale, x TCU_U8 / TCU_I8 / TCU_I32 (zp of x's type, or
 * NULL), y float32 / float16; scale / zp indexing as tcu_quantize's. */
int tcu_dequantize(int xtype, const void *x, const float *scale, const void *zp, int ytype,
                   void *y, int64_t n, int64_t L, int64_t post, void *stream);

/* The integer products (QMatMul, QConv) run on s8 operands: u8 data is shifted by -128
 * (and its zero point with it), so that sum (x - zx)(w - zw) is the s8 product G of the
 * shifted operands less the zero points' terms, which tcu_q8_requant adds back. */
/* y[i] = x[i] - 128 (u8 -> s8) */
int tcu_q8_shift(const void *x, void *y, int64_t n, void *stream);
/* wt [cols, rows] = w [rows, cols] transposed, shifted when wtype is TCU_U8 */
int tcu_q8_transpose(const void *w, int wtype, void *wt, int64_t rows, int64_t cols,
                     void *stream);
/* One image's 2-D window geometry (1-D as H = 1). */
typedef struct tcu_q8_conv_desc {
    int64_t C, H, W, groups, kh, kw, sh, sw, dh, dw, pt, pl, OH, OW;
} tcu_q8_conv_desc;
/* col [groups][OH * OW][C / groups * kh * kw] (s8) of one image x [C, H, W]; positions
 * outside the input hold x's zero point (xzp: one value of xtype on the device, or NULL) */
int tcu_q8_im2col(const tcu_q8_conv_desc *c, int xtype, const void *x, const void *xzp, void *col,
                  void *stream);
/* out[r] = sum of s8 row r (k values, row stride ld), wrapping int32 */
int tcu_q8_rowsum(const void *a, int64_t rows, int64_t k, int64_t ld, int32_t *out,
                  void *stream);
/* C[j * ldc + i] = sum_q A[i * lda + q] B[j * ldb + q] for i < m, j < n (s8 rows, wrapping
 * int32): the fallback of cuBLASLt's s8 product (k_ops_quant.c) */
int tcu_q8_gemm(int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, const void *b,
                int64_t ldb, int32_t *c, int64_t ldc, void *stream);
/* y[e] (e = j * m + i, the output's own order) from G[e] = sum_q A'[i, q] B'[j, q]: the
 * channel is j when chan_is_b (QConv: A' = im2col rows, B' = weight rows), else i (QMatMul:
 * A' = transposed weights, B' = activation rows); pos is the other index.
 *   acc = G - zx * wsum[ch] - zw[ch] * asum[(ch / chan_per_group) * asum_group_stride + pos]
 *         + k * zx * zw[ch] + bias[ch]      (zx, zw shifted as the operands are)
 *   y = saturate_[lo, hi](rint((double)acc * (float)(xs * ws[ch] / ys) + yzp))
 * xs / ys / yzp: 1 value or per row (index pos % row_mod); ws / wzp: 1 value or per
 * channel. Every pointer is device memory; xzp / wzp / yzp / bias may be NULL. */
typedef struct tcu_q8_requant_desc {
    const int32_t *G, *wsum, *asum, *bias;
    int64_t m, n, k, chan_per_group, asum_group_stride, row_mod;
    int chan_is_b, x_u8, w_u8, y_type;
    const void *xzp, *wzp, *yzp;
    int64_t wzp_count, xs_count, ws_count, ys_count;
    const float *xs, *ws, *ys;
    double lo, hi;
} tcu_q8_requant_desc;
int tcu_q8_requant(const tcu_q8_requant_desc *r, void *y, void *stream);

#ifdef __cplusplus
}
#endif

#endif
