/* cuBLASLt matrix products: MatMul (batched, numpy broadcast of batch dims), Gemm
 * (transA/B, alpha/beta, C broadcast) and tandem's FusedMatMul (bias + Relu / Gelu epilogue).
 *
 * Row-major Y[M,N] = A[M,K] B[K,N] is computed as the column-major product Y^T = B^T A^T:
 * cuBLASLt's first operand is B, its second A, and its output N x M with leading dimension
 * N, so a bias over N is cuBLASLt's bias vector (one value per output row). The algorithm
 * of each shape is asked of cuBLASLt's heuristic once and kept in the node's state.
 *
 * Precision (float32 tensors): FP32 computes in float32 exactly (CUBLAS_COMPUTE_32F),
 * TF32/FP16/BF16 let cuBLASLt convert the operands (CUBLAS_COMPUTE_32F_FAST_*), always
 * accumulating in float32. float16 / bfloat16 tensors compute with float32 accumulation. */
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels/cuda_ops.h"
#include "core/alloc.h"
#include "ops/fused.h"
#include "ops/op.h"

#define MM_CACHE 4

typedef struct mm_key {
    int dtype, prec, ta, tb, epi, has_c;
    uint32_t align[4]; /* byte alignment of cuBLASLt's A (our B), B (our A), C, D */
    int64_t M, N, K, batch, sA, sB;
} mm_key;

tdm_status *cuda_lt_preference(const uint32_t align[4], cublasLtMatmulPreference_t *pref) {
    static const cublasLtMatmulPreferenceAttributes_t which[4] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    size_t ws_max = (size_t)32 << 20;
    TDM_TRY(cuda_blas_check(cublasLtMatmulPreferenceCreate(pref), "matmul preference"));
    cublasLtMatmulPreferenceSetAttribute(*pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_max,
                                         sizeof ws_max);
    for (int i = 0; i < 4; i++)
        cublasLtMatmulPreferenceSetAttribute(*pref, which[i], &align[i], sizeof align[i]);
    return NULL;
}

/* Per-node state: the algorithms found for the last shapes (used under the device lock). */
typedef struct mm_state {
    int n, next;
    mm_key key[MM_CACHE];
    cublasLtMatmulHeuristicResult_t algo[MM_CACHE];
    cublasComputeType_t ct[MM_CACHE]; /* the compute type the algorithm was found for */
} mm_state;

typedef struct mm_args {
    tdm_dtype dtype;
    bool ta, tb;
    int64_t M, N, K;
    const void *A, *B;
    void *Y;
    const void *C;            /* Gemm's C (same layout as Y, scaled by beta), or NULL */
    int64_t batch, sA, sB, sY; /* batch count and element strides (0 = shared operand) */
    float alpha, beta;
    const void *bias;          /* [N], or NULL */
    cuda_act act;              /* NONE, RELU, GELU_TANH (fused by cuBLASLt) */
} mm_args;

static tdm_status *mm_prepare(const tdm_node *node, int opset, int n_in,
                              const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    mm_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing a matrix product");
    *state = s;
    return NULL;
}

static void mm_release(void *state, const tdm_allocator *a) { tdm_free(a, state); }

static cudaDataType_t data_type(tdm_dtype t) {
    return t == TDM_FLOAT16 ? CUDA_R_16F : t == TDM_BFLOAT16 ? CUDA_R_16BF : CUDA_R_32F;
}

static cublasComputeType_t compute_type(tdm_dtype t, cuda_precision p) {
    if (t != TDM_FLOAT) return CUBLAS_COMPUTE_32F;
    switch (p) {
    case CUDA_PREC_TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case CUDA_PREC_FP16: return CUBLAS_COMPUTE_32F_FAST_16F;
    case CUDA_PREC_BF16: return CUBLAS_COMPUTE_32F_FAST_16BF;
    default: return CUBLAS_COMPUTE_32F;
    }
}

static tdm_status *layout(cublasLtMatrixLayout_t *l, cudaDataType_t t, int64_t rows, int64_t cols,
                          int64_t ld, int64_t batch, int64_t stride) {
    TDM_TRY(cuda_blas_check(cublasLtMatrixLayoutCreate(l, t, (uint64_t)rows, (uint64_t)cols, ld),
                            "matrix layout"));
    if (batch > 1) {
        int32_t b = (int32_t)batch;
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &b, sizeof b);
        cublasLtMatrixLayoutSetAttribute(*l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                         sizeof stride);
    }
    return NULL;
}

static tdm_status *make_op(cublasLtMatmulDesc_t *op, cublasComputeType_t ct, const mm_args *m,
                           cublasLtEpilogue_t epi) {
    TDM_TRY(cuda_blas_check(cublasLtMatmulDescCreate(op, ct, CUDA_R_32F), "matmul descriptor"));
    cublasOperation_t opa = m->tb ? CUBLAS_OP_T : CUBLAS_OP_N; /* Lt's A is our B */
    cublasOperation_t opb = m->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
    if (m->bias)
        cublasLtMatmulDescSetAttribute(*op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &m->bias,
                                       sizeof m->bias);
    return NULL;
}

/* One cuBLASLt call (batch <= INT32_MAX). */
static tdm_status *lt_matmul(cuda_device *d, mm_state *cache, const mm_args *m) {
    cuda_precision prec = cuda_precision_of(d);
    cudaDataType_t t = data_type(m->dtype);
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    if (m->act == CUDA_ACT_RELU) epi = m->bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else if (m->act == CUDA_ACT_GELU_TANH)
        epi = m->bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
    else if (m->bias) epi = CUBLASLT_EPILOGUE_BIAS;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    cublasComputeType_t ct = compute_type(m->dtype, prec);
    tdm_status *st = make_op(&op, ct, m, epi);
    /* stored (column-major) shapes: B is N x K (ld N) or, transposed, K x N (ld K) */
    if (!st)
        st = layout(&la, t, m->tb ? m->K : m->N, m->tb ? m->N : m->K, m->tb ? m->K : m->N,
                    m->batch, m->sB);
    if (!st)
        st = layout(&lb, t, m->ta ? m->M : m->K, m->ta ? m->K : m->M, m->ta ? m->M : m->K,
                    m->batch, m->sA);
    if (!st) st = layout(&lc, t, m->N, m->M, m->N, m->batch, m->sY);
    mm_key key = {(int)m->dtype, (int)prec, m->ta, m->tb, (int)epi, m->C != NULL,
                  {cuda_align_of(m->B), cuda_align_of(m->A), cuda_align_of(m->C ? m->C : m->Y),
                   cuda_align_of(m->Y)},
                  m->M, m->N, m->K, m->batch, m->sA, m->sB};
    cublasLtMatmulHeuristicResult_t res;
    int found = -1;
    if (!st && cache)
        for (int i = 0; i < cache->n; i++)
            if (memcmp(&cache->key[i], &key, sizeof key) == 0) found = i;
    if (!st && found >= 0) {
        res = cache->algo[found];
        if (cache->ct[found] != ct) { /* found with the float32 fallback */
            cublasLtMatmulDescDestroy(op);
            op = NULL;
            st = make_op(&op, cache->ct[found], m, epi);
        }
    } else if (!st) {
        st = cuda_lt_preference(key.align, &pref);
        int n_res = 0;
        cublasStatus_t hs = CUBLAS_STATUS_SUCCESS;
        if (!st) hs = cublasLtMatmulAlgoGetHeuristic(d->lt, op, la, lb, lc, lc, pref, 1, &res, &n_res);
        if (!st && (hs != CUBLAS_STATUS_SUCCESS || n_res < 1) && ct != CUBLAS_COMPUTE_32F) {
            /* no kernel converts the operands for this case: float32 arithmetic instead */
            cublasLtMatmulDescDestroy(op);
            op = NULL;
            st = make_op(&op, CUBLAS_COMPUTE_32F, m, epi);
            if (!st) hs = cublasLtMatmulAlgoGetHeuristic(d->lt, op, la, lb, lc, lc, pref, 1, &res, &n_res);
            ct = CUBLAS_COMPUTE_32F;
        }
        if (!st) st = cuda_blas_check(hs, "choosing an algorithm");
        if (!st && n_res < 1)
            st = TDM_ERR(TDM_ERR_UNSUPPORTED, "cublasLt: no algorithm for this matrix product");
        if (!st && cache) {
            int slot = cache->n < MM_CACHE ? cache->n++ : cache->next++ % MM_CACHE;
            cache->key[slot] = key;
            cache->algo[slot] = res;
            cache->ct[slot] = ct;
        }
    }
    void *ws = NULL;
    if (!st && res.workspaceSize) st = cuda_workspace(d, res.workspaceSize, &ws);
    if (!st) {
        float alpha = m->alpha, beta = m->C ? m->beta : 0.0f;
        st = cuda_blas_check(cublasLtMatmul(d->lt, op, &alpha, m->B, la, m->A, lb, &beta,
                                            m->C ? m->C : m->Y, lc, m->Y, lc, &res.algo, ws,
                                            res.workspaceSize, d->stream), "matrix product");
    }
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (lc) cublasLtMatrixLayoutDestroy(lc);
    if (lb) cublasLtMatrixLayoutDestroy(lb);
    if (la) cublasLtMatrixLayoutDestroy(la);
    if (op) cublasLtMatmulDescDestroy(op);
    return st;
}

static tdm_status *launch_result(const tdm_node *node, int e, const char *what) {
    if (!e) return NULL;
    return tdm_node_error(node, e == cudaErrorMemoryAllocation ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_DEVICE,
                          "cuda %s: %s", what, tcu_error_string(e));
}

/* Y = act(A B + bias) for MatMul / FusedMatMul with numpy batch broadcasting. gelu_erf: the
 * exact Gelu, applied after the product (cuBLASLt's Gelu is the tanh form). */
static tdm_status *matmul_nd(tdm_kernel_ctx *ctx, const void *bias, cuda_act act, bool gelu_erf) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1];
    tdm_tensor *Y = ctx->out[0];
    if (Y->count == 0) return NULL;
    int ra = A->rank, rb = B->rank;
    if (ra < 1 || rb < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MatMul of a scalar");
    int64_t M = ra == 1 ? 1 : A->dims[ra - 2], K = A->dims[ra - 1];
    int64_t N = rb == 1 ? 1 : B->dims[rb - 1];
    int64_t Kb = rb == 1 ? B->dims[0] : B->dims[rb - 2];
    if (K != Kb || M * N == 0)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MatMul inner dimensions differ");
    size_t es = tdm_dtype_elem_size(Y->dtype);
    if (K == 0) {
        TDM_TRY(cuda_check(cudaMemsetAsync(Y->data, 0, Y->nbytes, d->stream), "zeroing"));
        if (!bias && act == CUDA_ACT_NONE) return NULL;
    }
    /* batch dims, right-aligned to the output's */
    int nba = ra > 2 ? ra - 2 : 0, nbb = rb > 2 ? rb - 2 : 0;
    int nb = nba > nbb ? nba : nbb;
    int64_t bd[TDM_MAX_RANK], sa[TDM_MAX_RANK], sb[TDM_MAX_RANK];
    int64_t batch = 1, batch_a = 1, batch_b = 1;
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - nba), ib = i - (nb - nbb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        bd[i] = da > db ? da : db;
        batch *= bd[i];
        batch_a *= da;
        batch_b *= db;
    }
    int64_t ea = 1, eb = 1; /* strides of the batch dims, in matrices (0 = broadcast) */
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - nba), ib = i - (nb - nbb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        sa[i] = da == 1 ? 0 : ea;
        sb[i] = db == 1 ? 0 : eb;
        ea *= da;
        eb *= db;
    }
    mm_args m = {Y->dtype, false, false, M, N, K, A->data, B->data, Y->data, NULL, 1, 0, 0, 0,
                 1.0f, 0.0f, bias, act};
    tdm_status *st = NULL;
    if (K > 0) {
        if (batch_b == 1 && batch_a == batch) { /* B shared: A's batch stacks into rows */
            m.M = M * batch;
            st = lt_matmul(d, ctx->state, &m);
        } else if (batch <= INT32_MAX && (batch_a == 1 || batch_a == batch) &&
                   (batch_b == 1 || batch_b == batch)) { /* strided batch, one side shared */
            m.batch = batch;
            m.sA = batch_a == 1 ? 0 : M * K;
            m.sB = batch_b == 1 ? 0 : K * N;
            m.sY = M * N;
            st = lt_matmul(d, ctx->state, &m);
        } else { /* general broadcast: one product per output matrix */
            for (int64_t b = 0; b < batch && !st; b++) {
                int64_t r = b, oa = 0, ob = 0;
                for (int i = nb - 1; i >= 0; i--) {
                    int64_t c = r % bd[i];
                    r /= bd[i];
                    oa += c * sa[i];
                    ob += c * sb[i];
                }
                m.A = (const char *)A->data + (size_t)(oa * M * K) * es;
                m.B = (const char *)B->data + (size_t)(ob * K * N) * es;
                m.Y = (char *)Y->data + (size_t)(b * M * N) * es;
                st = lt_matmul(d, ctx->state, &m);
            }
        }
    } else if (bias || act != CUDA_ACT_NONE) {
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "FusedMatMul with K = 0");
    }
    if (st) return tdm_status_wrap(st, "%s node '%s': ", ctx->node->op_type, ctx->node->name);
    if (gelu_erf)
        return launch_result(ctx->node, tcu_unary(TCU_GELU, Y->dtype, Y->data, Y->data, Y->count,
                                                  0.0f, 0.0f, d->stream), "Gelu");
    return NULL;
}

static tdm_status *run_matmul(tdm_kernel_ctx *ctx) { return matmul_nd(ctx, NULL, CUDA_ACT_NONE, false); }

static tdm_status *run_fused_matmul(tdm_kernel_ctx *ctx) {
    const char *act = tdm_attr_string(ctx->node, "activation", "");
    cuda_act a = CUDA_ACT_NONE;
    bool gelu_erf = false;
    if (strcmp(act, "Relu") == 0) a = CUDA_ACT_RELU;
    else if (strcmp(act, "GeluTanh") == 0) a = CUDA_ACT_GELU_TANH;
    else if (strcmp(act, "Gelu") == 0) gelu_erf = true;
    else if (act[0])
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "activation '%s'", act);
    const tdm_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    int64_t N = ctx->in[1]->rank == 1 ? 1 : ctx->in[1]->dims[ctx->in[1]->rank - 1];
    if (bias && bias->count != N)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bias must have N values");
    return matmul_nd(ctx, bias ? bias->data : NULL, a, gelu_erf);
}

static bool fused_matmul_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    const char *act = tdm_attr_string(node, "activation", "");
    return !act[0] || strcmp(act, "Relu") == 0 || strcmp(act, "Gelu") == 0 ||
           strcmp(act, "GeluTanh") == 0;
}

/* Gemm: Y = alpha op(A) op(B) + beta C, C unidirectionally broadcast to [M, N]. */
static tdm_status *run_gemm(tdm_kernel_ctx *ctx) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1];
    const tdm_tensor *C = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if (A->rank != 2 || B->rank != 2 || Y->rank != 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Gemm takes matrices");
    bool ta = tdm_attr_int(ctx->node, "transA", 0) != 0, tb = tdm_attr_int(ctx->node, "transB", 0) != 0;
    float alpha = tdm_attr_float(ctx->node, "alpha", 1.0f), beta = tdm_attr_float(ctx->node, "beta", 1.0f);
    int64_t M = ta ? A->dims[1] : A->dims[0], K = ta ? A->dims[0] : A->dims[1];
    int64_t N = tb ? B->dims[0] : B->dims[1];
    if ((tb ? B->dims[1] : B->dims[0]) != K || Y->dims[0] != M || Y->dims[1] != N)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Gemm shapes do not match");
    if (Y->count == 0) return NULL;
    mm_args m = {Y->dtype, ta, tb, M, N, K, A->data, B->data, Y->data, NULL, 1, 0, 0, 0,
                 alpha, 0.0f, NULL, CUDA_ACT_NONE};
    if (C && beta != 0.0f && C->count > 0) {
        bool row = C->count == N && (C->rank == 1 || (C->rank == 2 && C->dims[0] == 1));
        if (row && beta == 1.0f && N > 1) {
            m.bias = C->data;
        } else if (C->count == M * N && C->rank == 2) {
            m.C = C->data;
            m.beta = beta;
        } else { /* broadcast C into Y, then Y = alpha AB + beta Y */
            tcu_shape s;
            int rank = C->rank;
            const int64_t *dims = C->dims;
            if (tcu_bcast_plan(1, &rank, &dims, 2, Y->dims, &s))
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "Gemm: C does not broadcast to [M, N]");
            TDM_TRY(launch_result(ctx->node, tcu_strided_copy((int)tdm_dtype_elem_size(Y->dtype),
                                                              C->data, Y->data, &s, d->stream),
                                  "broadcast of C"));
            m.C = Y->data;
            m.beta = beta;
        }
    }
    if (K == 0) { /* alpha A B vanishes */
        if (m.C || m.bias)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "Gemm with K = 0 and C");
        return cuda_check(cudaMemsetAsync(Y->data, 0, Y->nbytes, d->stream), "zeroing");
    }
    tdm_status *st = lt_matmul(d, ctx->state, &m);
    return st ? tdm_status_wrap(st, "Gemm node '%s': ", ctx->node->name) : NULL;
}

#define MM_TYPES (TDM_T(TDM_FLOAT) | TDM_T(TDM_FLOAT16) | TDM_T(TDM_BFLOAT16))

const cuda_kernel_entry cuda_kernels_blas[] = {
    {{"", "MatMul", 1, 0, 0, MM_TYPES, run_matmul, mm_prepare, mm_release}, 0, 0, 0, NULL},
    {{"", "Gemm", 7, 0, 0, MM_TYPES, run_gemm, mm_prepare, mm_release}, 0, 0, 0, NULL},
    {{TDM_FUSED_DOMAIN, "FusedMatMul", 1, 0, 0, MM_TYPES, run_fused_matmul, mm_prepare, mm_release},
     0, 0, 0, fused_matmul_accept},
};
const int cuda_kernels_blas_count = (int)(sizeof cuda_kernels_blas / sizeof cuda_kernels_blas[0]);
