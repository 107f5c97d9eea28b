/* OpenCL kernels: GEMM family (MatMul with numpy batch broadcasting, Gemm).
 *
 * Two GEMM kernels compute the same thing (see ocl_gemm in ocl.h):
 *  - gemm_tiled (GPUs): 16x16 work-groups, 64x64 output tiles staged through local memory
 *    in steps of 16 along K, 4x4 outputs per work-item; any operand strides.
 *  - gemm_panels (CPU devices such as PoCL): A and B are first copied into panels (6 rows
 *    of A, 16 columns of B, k-major, zero-padded), so that each work-item streams two
 *    contiguous panels; it computes a 6x16 block with float8 accumulators. The copies also
 *    take care of transposes and strides, and avoid the cache-set conflicts of reading a
 *    row-major B with a power-of-two row length.
 * Both accumulate in float32 with fma, in K order. */
#include <math.h>
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/checked.h"
#include "ops/fused.h"
#include "ops/op.h"

const char ocl_src_gemm[] = OCL_COMMON_SRC OCL_SRC(
float epilogue(float acc, int m, int n, __global const float *bias, long sbm, long sbn,
               int has_bias, float alpha, float beta, __global const float *z, long zi,
               int has_z, int act, float p, float q) {
    float v = alpha * acc;
    if (has_bias) v += beta * bias[m * sbm + n * sbn];
    if (has_z) v += z[zi];
    return act_apply(v, act, p, q);
}

__kernel __attribute__((reqd_work_group_size(16, 16, 1)))
void gemm_tiled(int M, int N, int K,
                __global const float *A, long a_off, long sam, long sak,
                __global const float *B, long b_off, long sbk, long sbn,
                __global float *C, long c_off,
                __global const float *bias, long bias_off, long sbm, long sbn2, int has_bias,
                float alpha, float beta,
                __global const float *Z, long z_off, int has_z,
                int nbd, long8 bdims, long8 bsa, long8 bsb, long8 bsbias,
                int act, float p, float q) {
    __local float As[16][65];
    __local float Bs[16][65];
    int tx = get_local_id(0), ty = get_local_id(1);
    int n_base = get_group_id(0) * 64, m_base = get_group_id(1) * 64;
    long bt = get_global_id(2);
    long oa, ob, obias;
    UNPACK8(bdims, bd);
    UNPACK8(bsa, ba);
    UNPACK8(bsb, bb);
    UNPACK8(bsbias, bc);
    batch_offsets(bt, nbd, bd, ba, bb, bc, &oa, &ob, &obias);
    A += a_off + oa;
    B += b_off + ob;
    bias += bias_off + obias;
    C += c_off + bt * (long)M * N;
    Z += z_off + bt * (long)M * N;
    float acc[4][4];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    int tid = ty * 16 + tx;
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int l = 0; l < 4; l++) {
            int e = tid + l * 256;
            int ka = e % 16, ma = e / 16;
            int gm = m_base + ma, gk = k0 + ka;
            As[ka][ma] = gm < M && gk < K ? A[gm * sam + gk * sak] : 0.0f;
            int nb = e % 64, kb = e / 64;
            int gn = n_base + nb, gk2 = k0 + kb;
            Bs[kb][nb] = gn < N && gk2 < K ? B[gk2 * sbk + gn * sbn] : 0.0f;
        }
        barrier(CLK_LOCAL_MEM_FENCE);
        for (int k = 0; k < 16; k++) {
            float a[4], b[4];
            for (int i = 0; i < 4; i++) a[i] = As[k][ty + 16 * i];
            for (int j = 0; j < 4; j++) b[j] = Bs[k][tx + 16 * j];
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 4; j++) acc[i][j] = fma(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    for (int i = 0; i < 4; i++) {
        int m = m_base + ty + 16 * i;
        if (m >= M) continue;
        for (int j = 0; j < 4; j++) {
            int n = n_base + tx + 16 * j;
            if (n < N)
                C[(long)m * N + n] = epilogue(acc[i][j], m, n, bias, sbm, sbn2, has_bias, alpha,
                                              beta, Z, (long)m * N + n, has_z, act, p, q);
        }
    }
}

/* Panels for gemm_panels (CPU devices): A as [batch][M/6 blocks][K][6] and B as
 * [batch][N/16 blocks][K][16], zero-padded past M and N. One work-item per panel. */
__kernel void gemm_pack_a(__global const float *src, long off, long sam, long sak, int M,
                          int K, __global float *dst, int nbd, long8 bdims, long8 bsa) {
    int mb = get_global_id(0);
    long bt = get_global_id(1);
    int mblocks = (M + 5) / 6;
    if (mb >= mblocks) return;
    UNPACK8(bdims, bd);
    UNPACK8(bsa, bs);
    long oa, o1, o2;
    batch_offsets(bt, nbd, bd, bs, bs, bs, &oa, &o1, &o2);
    src += off + oa;
    __global float *d = dst + (bt * mblocks + mb) * (long)K * 6;
    int m0 = mb * 6, mr = min(6, M - m0);
    for (int k = 0; k < K; k++, d += 6)
        for (int i = 0; i < 6; i++) d[i] = i < mr ? src[(m0 + i) * sam + k * sak] : 0.0f;
}

__kernel void gemm_pack_b(__global const float *src, long off, long sbk, long sbn, int K, int N,
                          __global float *dst, int nbd, long8 bdims, long8 bsb) {
    int nb = get_global_id(0);
    long bt = get_global_id(1);
    int nblocks = (N + 15) / 16;
    if (nb >= nblocks) return;
    UNPACK8(bdims, bd);
    UNPACK8(bsb, bs);
    long ob, o1, o2;
    batch_offsets(bt, nbd, bd, bs, bs, bs, &ob, &o1, &o2);
    src += off + ob;
    __global float *d = dst + (bt * nblocks + nb) * (long)K * 16;
    int n0 = nb * 16, nr = min(16, N - n0);
    if (nr == 16 && sbn == 1) {
        for (int k = 0; k < K; k++, d += 16) {
            __global const float *r = src + k * sbk + n0;
            vstore8(vload8(0, r), 0, d);
            vstore8(vload8(1, r), 1, d);
        }
        return;
    }
    for (int k = 0; k < K; k++, d += 16)
        for (int j = 0; j < 16; j++) d[j] = j < nr ? src[k * sbk + (n0 + j) * sbn] : 0.0f;
}

/* A 6x16 block of C per work-item from packed panels, float8 accumulators. */
__kernel void gemm_panels(int M, int N, int K, __global const float *Ap,
                          __global const float *Bp, __global float *C, long c_off,
                          __global const float *bias, long bias_off, long sbm, long sbn2,
                          int has_bias, float alpha, float beta,
                          __global const float *Z, long z_off, int has_z,
                          int nbd, long8 bdims, long8 bsbias, int act, float p, float q) {
    int nb = get_global_id(0), mb = get_global_id(1);
    long bt = get_global_id(2);
    int n0 = nb * 16, m0 = mb * 6;
    if (n0 >= N || m0 >= M) return;
    int mblocks = (M + 5) / 6, nblocks = (N + 15) / 16;
    UNPACK8(bdims, bd);
    UNPACK8(bsbias, bc);
    long obias, o1, o2;
    batch_offsets(bt, nbd, bd, bc, bc, bc, &obias, &o1, &o2);
    bias += bias_off + obias;
    C += c_off + bt * (long)M * N;
    Z += z_off + bt * (long)M * N;
    __global const float *ap = Ap + (bt * mblocks + mb) * (long)K * 6;
    __global const float *bp = Bp + (bt * nblocks + nb) * (long)K * 16;
    float8 c00 = 0.0f, c01 = 0.0f, c10 = 0.0f, c11 = 0.0f, c20 = 0.0f, c21 = 0.0f;
    float8 c30 = 0.0f, c31 = 0.0f, c40 = 0.0f, c41 = 0.0f, c50 = 0.0f, c51 = 0.0f;
    for (int k = 0; k < K; k++, ap += 6, bp += 16) {
        float8 b0 = vload8(0, bp), b1 = vload8(1, bp);
        float8 x = (float8)(ap[0]);
        c00 = fma(x, b0, c00);
        c01 = fma(x, b1, c01);
        x = (float8)(ap[1]);
        c10 = fma(x, b0, c10);
        c11 = fma(x, b1, c11);
        x = (float8)(ap[2]);
        c20 = fma(x, b0, c20);
        c21 = fma(x, b1, c21);
        x = (float8)(ap[3]);
        c30 = fma(x, b0, c30);
        c31 = fma(x, b1, c31);
        x = (float8)(ap[4]);
        c40 = fma(x, b0, c40);
        c41 = fma(x, b1, c41);
        x = (float8)(ap[5]);
        c50 = fma(x, b0, c50);
        c51 = fma(x, b1, c51);
    }
    float r[6][16];
    vstore8(c00, 0, r[0]);
    vstore8(c01, 1, r[0]);
    vstore8(c10, 0, r[1]);
    vstore8(c11, 1, r[1]);
    vstore8(c20, 0, r[2]);
    vstore8(c21, 1, r[2]);
    vstore8(c30, 0, r[3]);
    vstore8(c31, 1, r[3]);
    vstore8(c40, 0, r[4]);
    vstore8(c41, 1, r[4]);
    vstore8(c50, 0, r[5]);
    vstore8(c51, 1, r[5]);
    int mr = min(6, M - m0), nr = min(16, N - n0);
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            long o = (long)(m0 + i) * N + n0 + j;
            C[o] = epilogue(r[i][j], m0 + i, n0 + j, bias, sbm, sbn2, has_bias, alpha, beta, Z, o,
                            has_z, act, p, q);
        }
}
);

void ocl_gemm_init(ocl_gemm *g) {
    memset(g, 0, sizeof *g);
    g->batch = 1;
    g->alpha = 1.0f;
    g->beta = 1.0f;
}

bool ocl_gemm_panel_bytes(const ocl_device *d, int64_t M, int64_t N, int64_t K, int64_t batch,
                          size_t *a_bytes, size_t *b_bytes) {
    *a_bytes = *b_bytes = 0;
    if (d->gpu_style || M <= 0 || N <= 0 || K < 0 || batch <= 0) return true;
    /* batch * ceil(M/6)*6 * K floats and batch * ceil(N/16)*16 * K floats */
    size_t rows = ((size_t)M + 5) / 6 * 6, cols = ((size_t)N + 15) / 16 * 16, per;
    return tdm_mul_size((size_t)batch, (size_t)K, &per) &&
           tdm_mul_size(per, sizeof(float), &per) && tdm_mul_size(per, rows, a_bytes) &&
           tdm_mul_size(per, cols, b_bytes);
}

/* A panel buffer of at least `bytes`: *kept when it is that big, else a new temporary
 * (then kept in *kept / *kept_bytes when these are given). */
static tdm_status *panel(ocl_scope *s, size_t bytes, cl_mem *kept, size_t *kept_bytes,
                         cl_mem *out) {
    if (kept && *kept && *kept_bytes >= bytes) {
        *out = *kept;
        return NULL;
    }
    TDM_TRY(ocl_temp(s, bytes, NULL, out));
    if (kept) {
        *kept = *out;
        *kept_bytes = bytes;
    }
    return NULL;
}

tdm_status *ocl_gemm_run(ocl_device *d, ocl_scope *s, const ocl_gemm *g) {
    return ocl_gemm_run_ws(d, s, g, NULL);
}

tdm_status *ocl_gemm_run_ws(ocl_device *d, ocl_scope *s, const ocl_gemm *g, ocl_gemm_ws *ws) {
    if (g->M <= 0 || g->N <= 0 || g->batch <= 0) return NULL;
    if (g->M > INT32_MAX || g->N > INT32_MAX || g->K > INT32_MAX)
        return TDM_ERR(TDM_ERR_UNSUPPORTED, "opencl: GEMM dimension too large");
    cl_int M = (cl_int)g->M, N = (cl_int)g->N, K = (cl_int)g->K;
    cl_mem bias = g->has_bias ? g->bias : d->dummy, z = g->has_z ? g->z : d->dummy;
    cl_long a_off = g->a_off, sam = g->sam, sak = g->sak, b_off = g->b_off, sbk = g->sbk;
    cl_long sbn = g->sbn, c_off = g->c_off, bias_off = g->bias_off, sbm = g->sbm;
    cl_long sbn2 = g->sbn2, z_off = g->z_off;
    cl_int has_bias = g->has_bias, nbd = g->nbd, act = g->act, has_z = g->has_z;
    cl_float alpha = g->alpha, beta = g->beta, p = g->act_p, q = g->act_q;
    int64_t bdims[8], bsa[8], bsb[8], bsbias[8];
    ocl_pack8(bdims, g->nbd, g->bdims, 1);
    ocl_pack8(bsa, g->nbd, g->bsa, 0);
    ocl_pack8(bsb, g->nbd, g->bsb, 0);
    ocl_pack8(bsbias, g->nbd, g->bsbias, 0);
    if (d->gpu_style) {
        ocl_arg args[] = {
            OCL_ARG(M), OCL_ARG(N), OCL_ARG(K),
            OCL_ARG(g->a), OCL_ARG(a_off), OCL_ARG(sam), OCL_ARG(sak),
            OCL_ARG(g->b), OCL_ARG(b_off), OCL_ARG(sbk), OCL_ARG(sbn),
            OCL_ARG(g->c), OCL_ARG(c_off),
            OCL_ARG(bias), OCL_ARG(bias_off), OCL_ARG(sbm), OCL_ARG(sbn2), OCL_ARG(has_bias),
            OCL_ARG(alpha), OCL_ARG(beta),
            OCL_ARG(z), OCL_ARG(z_off), OCL_ARG(has_z),
            OCL_ARG(nbd), OCL_ARG(bdims), OCL_ARG(bsa), OCL_ARG(bsb), OCL_ARG(bsbias),
            OCL_ARG(act), OCL_ARG(p), OCL_ARG(q),
        };
        size_t gws[3] = {(size_t)(N + 63) / 64 * 16, (size_t)(M + 63) / 64 * 16,
                         (size_t)g->batch};
        size_t lws[3] = {16, 16, 1};
        return ocl_launch(d, OCL_PROG_gemm, "gemm_tiled", 3, gws, lws,
                          (int)(sizeof args / sizeof args[0]), args);
    }
    /* CPU devices: pack both operands into panels, then 6x16 register blocks */
    size_t mblocks = (size_t)(M + 5) / 6, nblocks = (size_t)(N + 15) / 16;
    size_t batch = (size_t)g->batch, a_bytes, b_bytes;
    if (!ocl_gemm_panel_bytes(d, M, N, K, g->batch, &a_bytes, &b_bytes))
        return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "opencl: GEMM panels too large");
    cl_mem ap, bp;
    TDM_TRY(panel(s, a_bytes, ws ? &ws->ap : NULL, ws ? &ws->ap_bytes : NULL, &ap));
    TDM_TRY(panel(s, b_bytes, ws ? &ws->bp : NULL, ws ? &ws->bp_bytes : NULL, &bp));
    size_t one[3] = {1, 1, 1};
    {
        ocl_arg pa[] = {OCL_ARG(g->a), OCL_ARG(a_off), OCL_ARG(sam), OCL_ARG(sak),  OCL_ARG(M),
                        OCL_ARG(K),    OCL_ARG(ap),    OCL_ARG(nbd), OCL_ARG(bdims), OCL_ARG(bsa)};
        size_t gws[2] = {mblocks, batch};
        TDM_TRY(ocl_launch(d, OCL_PROG_gemm, "gemm_pack_a", 2, gws, one, 10, pa));
        ocl_arg pb[] = {OCL_ARG(g->b), OCL_ARG(b_off), OCL_ARG(sbk), OCL_ARG(sbn),  OCL_ARG(K),
                        OCL_ARG(N),    OCL_ARG(bp),    OCL_ARG(nbd), OCL_ARG(bdims), OCL_ARG(bsb)};
        size_t gws_b[2] = {nblocks, batch};
        TDM_TRY(ocl_launch(d, OCL_PROG_gemm, "gemm_pack_b", 2, gws_b, one, 10, pb));
    }
    ocl_arg args[] = {
        OCL_ARG(M), OCL_ARG(N), OCL_ARG(K), OCL_ARG(ap), OCL_ARG(bp),
        OCL_ARG(g->c), OCL_ARG(c_off),
        OCL_ARG(bias), OCL_ARG(bias_off), OCL_ARG(sbm), OCL_ARG(sbn2), OCL_ARG(has_bias),
        OCL_ARG(alpha), OCL_ARG(beta),
        OCL_ARG(z), OCL_ARG(z_off), OCL_ARG(has_z),
        OCL_ARG(nbd), OCL_ARG(bdims), OCL_ARG(bsbias),
        OCL_ARG(act), OCL_ARG(p), OCL_ARG(q),
    };
    size_t gws[3] = {nblocks, mblocks, batch}, lws[3] = {8, 8, 1};
    return ocl_launch(d, OCL_PROG_gemm, "gemm_panels", 3, gws, lws,
                      (int)(sizeof args / sizeof args[0]), args);
}

/* ---- MatMul, FusedMatMul ---- */

static tdm_status *matmul(tdm_kernel_ctx *ctx, bool fused) {
    ocl_device *d = ocl_ctx_device(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1];
    tdm_tensor *Y = ctx->out[0];
    if (A->rank < 1 || B->rank < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "MatMul inputs must have rank >= 1");
    ocl_scope s;
    ocl_scope_begin(&s, d);
    ocl_gemm g;
    ocl_gemm_init(&g);
    tdm_status *st = ocl_in(&s, ctx, 0, &g.a);
    if (!st) st = ocl_in(&s, ctx, 1, &g.b);
    if (!st) st = ocl_out(ctx, 0, &g.c);
    if (st) goto done;
    int ra = A->rank, rb = B->rank;
    g.M = ra >= 2 ? A->dims[ra - 2] : 1;
    g.K = A->dims[ra - 1];
    g.N = rb >= 2 ? B->dims[rb - 1] : 1;
    int64_t kb = rb >= 2 ? B->dims[rb - 2] : B->dims[0];
    if (kb != g.K) {
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inner dimensions differ");
        goto done;
    }
    g.sam = g.K;
    g.sak = 1;
    g.sbk = g.N;
    g.sbn = 1;
    /* batch dims: broadcast of A[:-2] and B[:-2], size-1 dims dropped */
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    int nb = ba > bb ? ba : bb;
    int64_t sa = g.M * g.K, sb = g.K * g.N;
    int64_t dims[TDM_MAX_RANK], str_a[TDM_MAX_RANK], str_b[TDM_MAX_RANK];
    for (int i = nb - 1; i >= 0; i--) {
        int ia = i - (nb - ba), ib = i - (nb - bb);
        int64_t da = ia >= 0 ? A->dims[ia] : 1, db = ib >= 0 ? B->dims[ib] : 1;
        dims[i] = da > db ? da : db;
        str_a[i] = da == 1 ? 0 : sa;
        str_b[i] = db == 1 ? 0 : sb;
        sa *= da;
        sb *= db;
    }
    g.nbd = 0;
    for (int i = 0; i < nb; i++) {
        if (dims[i] == 1) continue;
        g.bdims[g.nbd] = dims[i];
        g.bsa[g.nbd] = str_a[i];
        g.bsb[g.nbd] = str_b[i];
        g.nbd++;
        g.batch *= dims[i];
    }
    if (g.batch * g.M * g.N != Y->count) {
        st = tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "MatMul output size mismatch");
        goto done;
    }
    if (fused) {
        const tdm_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
        st = ocl_fused_activation(ctx->node, &g.act, &g.act_p, &g.act_q);
        if (!st && bias) {
            if (bias->count != g.N) {
                st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bias must have N values");
                goto done;
            }
            st = ocl_in(&s, ctx, 2, &g.bias);
            g.has_bias = true;
            g.sbm = 0;
            g.sbn2 = 1;
        }
        if (st) goto done;
    }
    st = ocl_gemm_run(d, &s, &g);
done:
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_matmul(tdm_kernel_ctx *ctx) { return matmul(ctx, false); }
static tdm_status *run_fused_matmul(tdm_kernel_ctx *ctx) { return matmul(ctx, true); }

/* ---- Attention (ops/fused.h): Y = Softmax(Q K^T scale + mask) V ---- */

/* Strides of the two batch dims of a rank-4 tensor t (dims right-aligned to 4; rank < 4 for
 * the mask) against output batch dims ob[2]; 0 where t broadcasts. Error when incompatible. */
static bool batch_strides(const tdm_tensor *t, const int64_t *ob, int64_t *st, int64_t *d4) {
    int64_t d[4] = {1, 1, 1, 1}, s4[4];
    for (int i = 0; i < t->rank; i++) d[4 - t->rank + i] = t->dims[i];
    int64_t acc = 1;
    for (int i = 3; i >= 0; i--) {
        s4[i] = d[i] == 1 ? 0 : acc;
        acc *= d[i];
    }
    for (int i = 0; i < 2; i++) {
        if (d[i] != 1 && d[i] != ob[i]) return false;
        st[i] = s4[i];
    }
    st[2] = s4[2];
    st[3] = s4[3];
    memcpy(d4, d, sizeof d);
    return true;
}

static tdm_status *run_attention(tdm_kernel_ctx *ctx) {
    const tdm_tensor *Q = ctx->in[0], *K = ctx->in[1], *V = ctx->in[2];
    const tdm_tensor *Mk = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if (Q->rank != 4 || K->rank != 4 || V->rank != 4 || Y->rank != 4 || (Mk && Mk->rank > 4))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Attention needs rank-4 inputs");
    int64_t S = Q->dims[2], D = Q->dims[3], T = K->dims[2], Dv = V->dims[3];
    int64_t ob[2] = {Y->dims[0], Y->dims[1]};
    int64_t sq[4], sk[4], sv[4], sm[4] = {0, 0, 0, 0}, dq[4], dk[4], dv[4], dm[4];
    if (!batch_strides(Q, ob, sq, dq) || !batch_strides(K, ob, sk, dk) ||
        !batch_strides(V, ob, sv, dv) || (Mk && !batch_strides(Mk, ob, sm, dm)) ||
        K->dims[3] != D || V->dims[2] != T || Y->dims[2] != S || Y->dims[3] != Dv ||
        (Mk && ((dm[2] != 1 && dm[2] != S) || (dm[3] != 1 && dm[3] != T))))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "opencl: Attention shapes outside Q[B,H,S,D] K[B,H,T,D] V[B,H,T,Dv]");
    const tdm_attr *sa = tdm_node_attr(ctx->node, "scale");
    float scale = sa ? sa->f : (D > 0 ? 1.0f / sqrtf((float)D) : 1.0f);
    int64_t batch = ob[0] * ob[1];
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem q, k, v, m = d->dummy, y, scores;
    tdm_status *st = ocl_in(&s, ctx, 0, &q);
    if (!st) st = ocl_in(&s, ctx, 1, &k);
    if (!st) st = ocl_in(&s, ctx, 2, &v);
    if (!st && Mk) st = ocl_in(&s, ctx, 3, &m);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (st || !Y->count) goto done;
    st = ocl_temp(&s, (size_t)batch * (size_t)S * (size_t)(T ? T : 1) * sizeof(float), NULL,
                  &scores);
    if (st) goto done;
    ocl_gemm g;
    ocl_gemm_init(&g);
    g.M = S;
    g.N = T;
    g.K = D;
    g.batch = batch;
    g.alpha = scale;
    g.a = q;
    g.sam = sq[2] ? D : 0;
    g.sak = 1;
    g.b = k;
    g.sbk = 1;
    g.sbn = D;
    g.c = scores;
    g.nbd = 2;
    for (int i = 0; i < 2; i++) {
        g.bdims[i] = ob[i];
        g.bsa[i] = sq[i];
        g.bsb[i] = sk[i];
        g.bsbias[i] = sm[i];
    }
    if (Mk) {
        g.has_bias = true;
        g.bias = m;
        g.sbm = sm[2];
        g.sbn2 = sm[3];
    }
    st = ocl_gemm_run(d, &s, &g);
    if (!st) st = ocl_softmax_rows(d, scores, scores, batch * S, T, false);
    if (st) goto done;
    ocl_gemm_init(&g);
    g.M = S;
    g.N = Dv;
    g.K = T;
    g.batch = batch;
    g.a = scores;
    g.sam = T;
    g.sak = 1;
    g.b = v;
    g.sbk = Dv;
    g.sbn = 1;
    g.c = y;
    g.nbd = 2;
    for (int i = 0; i < 2; i++) {
        g.bdims[i] = ob[i];
        g.bsa[i] = (i == 0 ? ob[1] : 1) * S * T;
        g.bsb[i] = sv[i];
    }
    st = ocl_gemm_run(d, &s, &g);
done:
    ocl_scope_end(&s);
    return st;
}

/* ---- Gemm ---- */

static tdm_status *run_gemm(tdm_kernel_ctx *ctx) {
    ocl_device *d = ocl_ctx_device(ctx);
    const tdm_tensor *A = ctx->in[0], *B = ctx->in[1];
    const tdm_tensor *C = ctx->n_in > 2 ? ctx->in[2] : NULL;
    if (A->rank != 2 || B->rank != 2)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Gemm inputs must be 2-D");
    bool ta = tdm_attr_int(ctx->node, "transA", 0) != 0;
    bool tb = tdm_attr_int(ctx->node, "transB", 0) != 0;
    ocl_scope s;
    ocl_scope_begin(&s, d);
    ocl_gemm g;
    ocl_gemm_init(&g);
    g.alpha = tdm_attr_float(ctx->node, "alpha", 1.0f);
    g.beta = tdm_attr_float(ctx->node, "beta", 1.0f);
    tdm_status *st = ocl_in(&s, ctx, 0, &g.a);
    if (!st) st = ocl_in(&s, ctx, 1, &g.b);
    if (!st) st = ocl_out(ctx, 0, &g.c);
    if (!st && C) st = ocl_in(&s, ctx, 2, &g.bias);
    if (st) goto done;
    g.M = ta ? A->dims[1] : A->dims[0];
    g.K = ta ? A->dims[0] : A->dims[1];
    g.N = tb ? B->dims[0] : B->dims[1];
    if ((tb ? B->dims[1] : B->dims[0]) != g.K) {
        st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inner dimensions differ");
        goto done;
    }
    g.sam = ta ? 1 : A->dims[1];
    g.sak = ta ? A->dims[1] : 1;
    g.sbk = tb ? 1 : B->dims[1];
    g.sbn = tb ? B->dims[1] : 1;
    if (C && g.beta != 0.0f) {
        g.has_bias = true;
        int64_t cm = C->rank >= 2 ? C->dims[C->rank - 2] : 1;
        int64_t cn = C->rank >= 1 ? C->dims[C->rank - 1] : 1;
        if (C->rank > 2 || (cm != 1 && cm != g.M) || (cn != 1 && cn != g.N)) {
            st = tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                "C cannot be broadcast to [%lld, %lld]", (long long)g.M,
                                (long long)g.N);
            goto done;
        }
        g.sbm = cm == 1 ? 0 : cn;
        g.sbn2 = cn == 1 ? 0 : 1;
    }
    st = ocl_gemm_run(d, &s, &g);
done:
    ocl_scope_end(&s);
    return st;
}

#define F32 TDM_T(TDM_FLOAT)

const ocl_kernel_entry ocl_kernels_gemm[] = {
    {{"", "MatMul", 1, 0, 0, F32, run_matmul, NULL, NULL}, 0},
    {{"", "Gemm", 1, 0, 0, F32, run_gemm, NULL, NULL}, 0},
    {{TDM_FUSED_DOMAIN, "FusedMatMul", 1, 0, 0, F32, run_fused_matmul, NULL, NULL}, 0,
     ocl_fused_activation_known},
    {{TDM_FUSED_DOMAIN, "Attention", 1, 0, 0, F32, run_attention, NULL, NULL}, 0},
};
const int ocl_kernels_gemm_count = (int)(sizeof ocl_kernels_gemm / sizeof ocl_kernels_gemm[0]);
