/* CUDA kernel table "ops_quant": 8-bit quantization (issue 20's CUDA half) on
 * kernels/cuda_quant.cu and cuBLASLt.
 *
 *   QuantizeLinear / DequantizeLinear   per tensor or per axis (no blocked scales), float32
 *                                       scales, u8 / s8 (and int32 for DequantizeLinear)
 *   QLinearMatMul, QMatMul (fused)      A [..., M, K] u8/s8, B [K, N] u8/s8, or B [..., K, N]
 *                                       with A's leading dims (a batch of 2-D products)
 *   QLinearConv, QConv (fused)          1-D and 2-D windows, groups, pads, strides, dilations
 *
 * The integer products run on s8 operands (u8 data shifted by -128) as cuBLASLt's s8 x s8 ->
 * s32 product (CUBLAS_COMPUTE_32I, "TN": both operands rows of K) where its shape rules hold
 * (m, k and the leading dimensions multiples of 4), else as tandem's own tiled kernel; the
 * zero points' terms and the bias are added back by the requantisation (tcu_q8_requant),
 * which rounds as the CPU kernel does, so both devices give the same bytes.
 *
 * The product is ordered so that its int32 result G is laid out as the output: QMatMul takes
 * cuBLASLt's first operand from the transposed weights (one row per output column) and its
 * second from the activation rows; QConv takes the im2col rows of an image first and the
 * weight rows [M, C/group * kh * kw] (ONNX's layout as it is) second, one call per group.
 * Not yet: weights repacked once (they are transposed / shifted per run), int8 cuDNN
 * convolutions, 3-D windows, per-row scales of QConv (ONNX has none). */
#include <string.h>

#include "backends/cuda/kernels/k_ops.h"
#include "ops/fused.h"
#include "ops/nn_geom.h"

#define T_Q8 (TDM_T(TDM_UINT8) | TDM_T(TDM_INT8))

static bool is_q8(tdm_dtype t) { return t == TDM_UINT8 || t == TDM_INT8; }
static bool present(const tdm_node *node, int n_in, int i) {
    return i < n_in && i < node->n_inputs && node->inputs[i] >= 0;
}

/* Scratch of the product (freed in order on the compute stream). */
typedef struct q8_scratch {
    void *p[6];
    int n;
} q8_scratch;

static tdm_status *q8_alloc(cuda_device *d, q8_scratch *s, size_t bytes, void **p) {
    TDM_TRY(cuda_scratch(d, bytes ? bytes : 1, p));
    s->p[s->n++] = *p;
    return NULL;
}

static void q8_free(cuda_device *d, q8_scratch *s) {
    for (int i = 0; i < s->n; i++) cuda_scratch_free(d, s->p[i]);
    s->n = 0;
}

/* ---- QuantizeLinear / DequantizeLinear ---- */

/* L and post of the per-axis form (L = 1: one scale); errors name the node. */
static tdm_status *q_axis(const tdm_kernel_ctx *ctx, const tdm_tensor *x, const tdm_tensor *scale,
                          const tdm_tensor *zp, int64_t *L, int64_t *post) {
    *L = 1;
    *post = 1;
    if (zp && zp->count != scale->count)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "zero point and scale must have the same shape");
    if (scale->count == 1) return NULL;
    if (x->rank == 0 || ctx->opset < 13)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "per-axis scale needs opset 13 and a tensor input");
    int axis;
    TDM_TRY(tdm_norm_axis(ctx->node, tdm_attr_int(ctx->node, "axis", 1), x->rank, &axis));
    if (scale->rank != 1 || scale->count != x->dims[axis])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "per-axis scale must be 1-D with %lld values",
                              (long long)x->dims[axis]);
    *L = x->dims[axis];
    for (int i = axis + 1; i < x->rank; i++) *post *= x->dims[i];
    return NULL;
}

/* Device pointers of x, the scale, the zero point (NULL when omitted) and y, and the per-axis
 * form (Quantize / DequantizeLinear). */
static tdm_status *q_io(const tdm_kernel_ctx *ctx, const void **x, const void **s,
                        const void **z, void **y, int64_t *L, int64_t *post) {
    TDM_TRY(kops_in(ctx, 0, x));
    TDM_TRY(kops_in(ctx, 1, s));
    TDM_TRY(kops_in(ctx, 2, z));
    TDM_TRY(kops_out(ctx, 0, y));
    return q_axis(ctx, ctx->in[0], ctx->in[1], ctx->n_in > 2 ? ctx->in[2] : NULL, L, post);
}

static tdm_status *run_quantize(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *Z = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *Y = ctx->out[0];
    const void *x, *s, *z;
    void *y;
    int64_t L, post;
    TDM_TRY(q_io(ctx, &x, &s, &z, &y, &L, &post));
    if (Z && Z->dtype != Y->dtype)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "the zero point's type is not the output's");
    return kops_status(ctx, tcu_quantize((int)X->dtype, x, s, (int)Y->dtype, z, y, Y->count, L,
                                         post, kops_stream(ctx)),
                       "QuantizeLinear");
}

static tdm_status *run_dequantize(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    const void *x, *s, *z;
    void *y;
    int64_t L, post;
    TDM_TRY(q_io(ctx, &x, &s, &z, &y, &L, &post));
    return kops_status(ctx, tcu_dequantize((int)X->dtype, x, s, z, (int)Y->dtype, y, Y->count, L,
                                           post, kops_stream(ctx)),
                       "DequantizeLinear");
}

/* float32 scales, the zero point of x's (Dequantize) or the output's type, no blocked
 * scales (opset 21's block_size), an output type of u8 / s8 (Quantize). */
static bool quantize_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    if (n_in < 2 || in_types[1] != TDM_FLOAT || tdm_attr_int(node, "block_size", 0) != 0)
        return false;
    int64_t od = tdm_attr_int(node, "output_dtype", 0);
    if (present(node, n_in, 2)) return is_q8(in_types[2]) && (od == 0 || od == in_types[2]);
    return od == 0 || is_q8((tdm_dtype)od);
}

static bool dequantize_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    if (n_in < 2 || in_types[1] != TDM_FLOAT || tdm_attr_int(node, "block_size", 0) != 0)
        return false;
    return !present(node, n_in, 2) || in_types[2] == in_types[0];
}

/* ---- the s8 product ---- */

/* C[j * ldc + i] = sum_q A[i * lda + q] B[j * ldb + q]: cuBLASLt when it takes the shape
 * (s8 "TN" rules: m, k and every leading dimension a multiple of 4, 4-byte aligned
 * operands) and has an algorithm for it, else tcu_q8_gemm. */
static tdm_status *q8_gemm(const tdm_kernel_ctx *ctx, int64_t m, int64_t n, int64_t k,
                           const void *A, int64_t lda, const void *B, int64_t ldb, int32_t *C,
                           int64_t ldc) {
    cuda_device *d = cuda_ctx_device(ctx);
    if (m <= 0 || n <= 0) return NULL;
    bool lt = k > 0 && m % 4 == 0 && k % 4 == 0 && lda % 4 == 0 && ldb % 4 == 0 &&
              ldc % 4 == 0 && cuda_align_of(A) >= 4 && cuda_align_of(B) >= 4 &&
              cuda_align_of(C) >= 16 && m <= INT32_MAX && n <= INT32_MAX && k <= INT32_MAX;
    tdm_status *st = NULL;
    if (lt) {
        cublasLtMatmulDesc_t op = NULL;
        cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
        cublasLtMatmulPreference_t pref = NULL;
        cublasLtMatmulHeuristicResult_t res;
        int n_res = 0;
        bool ok = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32I, CUDA_R_32I) ==
                  CUBLAS_STATUS_SUCCESS;
        if (ok) {
            cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
            cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
            /* stored column-major: A is k x m (ld lda), B k x n (ld ldb), C m x n (ld ldc) */
            ok = cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, (uint64_t)k, (uint64_t)m, lda) ==
                     CUBLAS_STATUS_SUCCESS &&
                 cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, (uint64_t)k, (uint64_t)n, ldb) ==
                     CUBLAS_STATUS_SUCCESS &&
                 cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, (uint64_t)m, (uint64_t)n, ldc) ==
                     CUBLAS_STATUS_SUCCESS;
        }
        uint32_t al[4] = {cuda_align_of(A), cuda_align_of(B), cuda_align_of(C), cuda_align_of(C)};
        tdm_status *ps = ok ? cuda_lt_preference(al, &pref) : NULL;
        if (ps) { /* no preference: the own kernel */
            tdm_status_free(ps);
            ok = false;
        }
        if (ok)
            ok = cublasLtMatmulAlgoGetHeuristic(d->lt, op, la, lb, lc, lc, pref, 1, &res,
                                                &n_res) == CUBLAS_STATUS_SUCCESS &&
                 n_res > 0;
        void *ws = NULL;
        if (ok && res.workspaceSize) st = cuda_workspace(d, res.workspaceSize, &ws);
        if (ok && !st) {
            int32_t alpha = 1, beta = 0;
            cublasStatus_t cs = cublasLtMatmul(d->lt, op, &alpha, A, la, B, lb, &beta, C, lc, C,
                                               lc, &res.algo, ws, res.workspaceSize, d->stream);
            if (cs != CUBLAS_STATUS_NOT_SUPPORTED) st = cuda_blas_check(cs, "s8 matrix product");
            else ok = false;
        }
        if (pref) cublasLtMatmulPreferenceDestroy(pref);
        if (lc) cublasLtMatrixLayoutDestroy(lc);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (op) cublasLtMatmulDescDestroy(op);
        if (st || ok) return st;
    }
    return kops_status(ctx, tcu_q8_gemm(m, n, k, A, lda, B, ldb, C, ldc, kops_stream(ctx)),
                       "s8 matrix product");
}

/* The requantisation's fields common to both products: scales, zero points, bias, range. */
static tdm_status *q8_requant_init(const tdm_kernel_ctx *ctx, tcu_q8_requant_desc *r) {
    const tdm_tensor *const *in = ctx->in;
    tdm_tensor *Y = ctx->out[0];
    memset(r, 0, sizeof *r);
    const void *p;
    TDM_TRY(kops_in(ctx, 1, &p));
    r->xs = p;
    TDM_TRY(kops_in(ctx, 2, &r->xzp));
    TDM_TRY(kops_in(ctx, 4, &p));
    r->ws = p;
    TDM_TRY(kops_in(ctx, 5, &r->wzp));
    TDM_TRY(kops_in(ctx, 6, &p));
    r->ys = p;
    TDM_TRY(kops_in(ctx, 7, &r->yzp));
    if (ctx->n_in > 8) {
        TDM_TRY(kops_in(ctx, 8, &p));
        r->bias = p;
    }
    r->x_u8 = in[0]->dtype == TDM_UINT8;
    r->w_u8 = in[3]->dtype == TDM_UINT8;
    r->y_type = (int)Y->dtype;
    r->xs_count = in[1]->count;
    r->ws_count = in[4]->count;
    r->wzp_count = in[5] ? in[5]->count : 1;
    r->ys_count = in[6]->count;
    if ((in[2] && in[2]->count != 1) || (in[7] && in[7]->count != in[6]->count) ||
        (in[5] && in[5]->count != 1 && in[5]->count != in[4]->count))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "zero points must match their scales (x's: one value)");
    r->lo = Y->dtype == TDM_INT8 ? -128 : 0;
    r->hi = Y->dtype == TDM_INT8 ? 127 : 255;
    /* the fused forms' clamp (a Relu folded into the range) */
    const tdm_attr *a = tdm_node_attr(ctx->node, "qmin"), *b = tdm_node_attr(ctx->node, "qmax");
    if (a && a->type == TDM_ATTR_INT && (double)a->i > r->lo) r->lo = (double)a->i;
    if (b && b->type == TDM_ATTR_INT && (double)b->i < r->hi) r->hi = (double)b->i;
    return NULL;
}

static tdm_status *q8_launch_requant(const tdm_kernel_ctx *ctx, const tcu_q8_requant_desc *r, void *y) {
    return kops_status(ctx, tcu_q8_requant(r, y, kops_stream(ctx)), "requantisation");
}

/* ---- QLinearMatMul / QMatMul ---- */

static tdm_status *run_qmatmul(tdm_kernel_ctx *ctx) {
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[3], *bias = ctx->n_in > 8 ? ctx->in[8] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if (B->rank < 2 || A->rank < 1)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "cuda: integer products take a B of rank 2 or more");
    /* a batch of products (B of rank 3 or more: the node test test_qlinearmatmul_3D, the
     * products between activations of a quantized attention): B's leading dims are A's (no
     * broadcasting here), and each slice is the 2-D product below */
    int64_t batch = 1;
    if (B->rank > 2) {
        if (A->rank != B->rank)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                                  "cuda: a batched integer product needs A and B of one rank");
        for (int i = 0; i < B->rank - 2; i++) {
            if (A->dims[i] != B->dims[i])
                return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                                      "cuda: batched integer products do not broadcast");
            batch *= B->dims[i];
        }
    }
    int64_t K = B->dims[B->rank - 2], N = B->dims[B->rank - 1];
    if (A->dims[A->rank - 1] != K || Y->count != (K ? A->count / K : 0) * N)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "A's last dim is not B's first");
    int64_t rows = K ? A->count / K : 0, M = A->rank >= 2 ? A->dims[A->rank - 2] : 1;
    int64_t rb = batch > 0 ? rows / batch : 0; /* rows of one slice (M when batched) */
    tcu_q8_requant_desc r;
    TDM_TRY(q8_requant_init(ctx, &r));
    if ((r.xs_count != 1 && r.xs_count != M) || (r.ys_count != 1 && r.ys_count != M) ||
        (r.ws_count != 1 && r.ws_count != N) || (bias && bias->count != N))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "scales must be per-tensor, per-row (a, y) or per-column (b); "
                              "the bias has N values");
    if (Y->count == 0) return NULL;
    size_t ys = tdm_dtype_size(Y->dtype), bs = tdm_dtype_size(B->dtype);
    cuda_device *d = cuda_ctx_device(ctx);
    const void *a, *b;
    void *y, *ash = NULL, *wt = NULL, *sums = NULL, *g = NULL;
    TDM_TRY(kops_in(ctx, 0, &a));
    TDM_TRY(kops_in(ctx, 3, &b));
    TDM_TRY(kops_out(ctx, 0, &y));
    q8_scratch sc = {{0}, 0};
    tdm_status *st = q8_alloc(d, &sc, (size_t)N * (size_t)K, &wt);
    if (!st) st = q8_alloc(d, &sc, (size_t)(rb + N) * sizeof(int32_t), &sums);
    if (!st) st = q8_alloc(d, &sc, (size_t)rb * (size_t)N * sizeof(int32_t), &g);
    if (!st && r.x_u8) {
        st = q8_alloc(d, &sc, (size_t)A->count, &ash);
        if (!st) st = kops_status(ctx, tcu_q8_shift(a, ash, A->count, kops_stream(ctx)), "shift");
        a = ash;
    }
    int32_t *asum = sums, *wsum = (int32_t *)sums + rb;
    r.G = g; /* the same scratch and sizes for every slice */
    r.wsum = wsum;
    r.asum = asum;
    r.m = N;
    r.n = rb;
    r.k = K;
    r.chan_is_b = 0;
    r.chan_per_group = N;
    r.asum_group_stride = 0;
    r.row_mod = (r.xs_count != 1 || r.ys_count != 1) ? M : 0;
    for (int64_t s = 0; s < batch && !st; s++) {
        const char *as = (const char *)a + (size_t)(s * rb * K);
        const char *bsl = (const char *)b + (size_t)(s * K * N) * bs;
        char *yslice = (char *)y + (size_t)(s * rb * N) * ys;
        st = kops_status(ctx, tcu_q8_transpose(bsl, (int)B->dtype, wt, K, N, kops_stream(ctx)),
                         "weight transpose");
        if (!st) st = kops_status(ctx, tcu_q8_rowsum(as, rb, K, K, asum, kops_stream(ctx)), "row sums");
        if (!st) st = kops_status(ctx, tcu_q8_rowsum(wt, N, K, K, wsum, kops_stream(ctx)), "row sums");
        if (!st) st = q8_gemm(ctx, N, rb, K, wt, K, as, K, g, N);
        if (!st) st = q8_launch_requant(ctx, &r, yslice);
    }
    q8_free(d, &sc);
    return st;
}

/* ---- QLinearConv / QConv ---- */

static tdm_status *run_qconv(tdm_kernel_ctx *ctx) {
    const tdm_tensor *X = ctx->in[0], *W = ctx->in[3], *bias = ctx->n_in > 8 ? ctx->in[8] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if ((X->rank != 3 && X->rank != 4) || W->rank != X->rank || Y->rank != X->rank)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "cuda: integer convolutions take 1-D and 2-D windows");
    tdm_nn_geom ng;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, X->rank, X->dims, W->dims, &ng));
    tcu_q8_conv_desc c;
    c.C = X->dims[1];
    c.groups = tdm_attr_int(ctx->node, "group", 1);
    int two = X->rank == 4;
    c.H = two ? X->dims[2] : 1;
    c.W = X->dims[X->rank - 1];
    c.kh = two ? W->dims[2] : 1;
    c.kw = W->dims[W->rank - 1];
    c.sh = two ? ng.stride[0] : 1;
    c.dh = two ? ng.dil[0] : 1;
    c.pt = two ? ng.pad_b[0] : 0;
    c.OH = two ? ng.out[0] : 1;
    c.sw = ng.stride[ng.nsp - 1];
    c.dw = ng.dil[ng.nsp - 1];
    c.pl = ng.pad_b[ng.nsp - 1];
    c.OW = ng.out[ng.nsp - 1];
    int64_t N = X->dims[0], M = W->dims[0];
    if (c.groups < 1 || c.C % c.groups || M % c.groups || W->dims[1] != c.C / c.groups ||
        Y->dims[0] != N || Y->dims[1] != M || (two && Y->dims[2] != c.OH) ||
        Y->dims[Y->rank - 1] != c.OW)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "input, weight, group and output shapes do not agree");
    tcu_q8_requant_desc r;
    TDM_TRY(q8_requant_init(ctx, &r));
    if (r.xs_count != 1 || r.ys_count != 1 || (r.ws_count != 1 && r.ws_count != M) ||
        (bias && bias->count != M))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "x and y scales must be per-tensor, w's per-tensor or per output "
                              "channel; the bias has M values");
    if (Y->count == 0) return NULL;
    int64_t P = c.OH * c.OW, mg = M / c.groups, kcg = W->dims[1] * c.kh * c.kw;
    cuda_device *d = cuda_ctx_device(ctx);
    const void *x, *w;
    void *y, *col = NULL, *wsh = NULL, *sums = NULL, *g = NULL;
    TDM_TRY(kops_in(ctx, 0, &x));
    TDM_TRY(kops_in(ctx, 3, &w));
    TDM_TRY(kops_out(ctx, 0, &y));
    q8_scratch sc = {{0}, 0};
    tdm_status *st = q8_alloc(d, &sc, (size_t)(c.groups * P) * (size_t)kcg, &col);
    if (!st) st = q8_alloc(d, &sc, (size_t)(c.groups * P + M) * sizeof(int32_t), &sums);
    if (!st) st = q8_alloc(d, &sc, (size_t)(M * P) * sizeof(int32_t), &g);
    if (!st && r.w_u8) {
        st = q8_alloc(d, &sc, (size_t)W->count, &wsh);
        if (!st) st = kops_status(ctx, tcu_q8_shift(w, wsh, W->count, kops_stream(ctx)), "shift");
        w = wsh;
    }
    int32_t *asum = sums, *wsum = (int32_t *)sums + c.groups * P;
    if (!st) st = kops_status(ctx, tcu_q8_rowsum(w, M, kcg, kcg, wsum, kops_stream(ctx)), "row sums");
    size_t x_img = (size_t)(c.C * c.H * c.W) * tdm_dtype_elem_size(X->dtype);
    size_t y_img = (size_t)(M * P) * tdm_dtype_elem_size(Y->dtype);
    for (int64_t n = 0; n < N && !st; n++) {
        st = kops_status(ctx, tcu_q8_im2col(&c, (int)X->dtype, (const char *)x + n * x_img, r.xzp,
                                            col, kops_stream(ctx)),
                         "im2col");
        if (!st)
            st = kops_status(ctx, tcu_q8_rowsum(col, c.groups * P, kcg, kcg, asum,
                                                kops_stream(ctx)),
                             "row sums");
        for (int64_t gi = 0; gi < c.groups && !st; gi++)
            st = q8_gemm(ctx, P, mg, kcg, (const int8_t *)col + gi * P * kcg, kcg,
                         (const int8_t *)w + gi * mg * kcg, kcg, (int32_t *)g + gi * mg * P, P);
        if (!st) {
            r.G = g;
            r.wsum = wsum;
            r.asum = asum;
            r.m = P;
            r.n = M;
            r.k = kcg;
            r.chan_is_b = 1;
            r.chan_per_group = mg;
            r.asum_group_stride = P;
            r.row_mod = 0;
            st = q8_launch_requant(ctx, &r, (char *)y + n * y_img);
        }
    }
    q8_free(d, &sc);
    return st;
}

/* x u8/s8 with its zero point's type, float32 scales, w u8/s8 (its zero point's type),
 * y's zero point u8/s8 (it gives the output type), an int32 bias. */
static bool qlinear_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    if (n_in < 8 || !is_q8(in_types[0]) || !is_q8(in_types[3]) || !present(node, n_in, 7) ||
        !is_q8(in_types[7]))
        return false;
    if (in_types[1] != TDM_FLOAT || in_types[4] != TDM_FLOAT || in_types[6] != TDM_FLOAT)
        return false;
    if (present(node, n_in, 2) && in_types[2] != in_types[0]) return false;
    if (present(node, n_in, 5) && in_types[5] != in_types[3]) return false;
    return !present(node, n_in, 8) || in_types[8] == TDM_INT32;
}

#define ANY_1_8 (0x1feu) /* inputs 1..8 are checked by the accept functions */

const cuda_kernel_entry cuda_kernels_ops_quant[] = {
    {{"", "QuantizeLinear", 10, 0, 0, TDM_T(TDM_FLOAT) | TDM_T(TDM_FLOAT16), run_quantize, NULL,
      NULL},
     0, 0, ANY_1_8, quantize_accept},
    {{"", "DequantizeLinear", 10, 0, 0, T_Q8 | TDM_T(TDM_INT32), run_dequantize, NULL, NULL},
     0, 0, ANY_1_8, dequantize_accept},
    {{"", "QLinearMatMul", 10, 0, 0, T_Q8, run_qmatmul, NULL, NULL}, 0, 0, ANY_1_8,
     qlinear_accept},
    {{TDM_FUSED_DOMAIN, "QMatMul", 1, 0, 0, T_Q8, run_qmatmul, NULL, NULL}, 0, 0, ANY_1_8,
     qlinear_accept},
    {{"", "QLinearConv", 10, 0, 0, T_Q8, run_qconv, NULL, NULL}, 0, 0, ANY_1_8, qlinear_accept},
    {{TDM_FUSED_DOMAIN, "QConv", 1, 0, 0, T_Q8, run_qconv, NULL, NULL}, 0, 0, ANY_1_8,
     qlinear_accept},
};
const int cuda_kernels_ops_quant_count =
    (int)(sizeof cuda_kernels_ops_quant / sizeof cuda_kernels_ops_quant[0]);
