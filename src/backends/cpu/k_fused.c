/* CPU kernels: fused family — reference kernels for tandem's fused operators (ops/fused.h).
 * FusedConv runs the generic convolution then one pass for Z and the activation;
 * FusedMatMul runs tdm_sgemm (one GEMM when B is a plain matrix) then one pass for bias and
 * activation; Attention is in k_fused_attn.c. float32 only (the passes fuse float32 only;
 * oneDNN kernels in k_dnnl*.c take precedence where they exist). */
#include <math.h>
#include <string.h>

#include "backends/cpu/cpu_simd.h"
#include "backends/cpu/k_fused.h"
#include "backends/cpu/k_nn.h"
#include "ops/fused.h"

tdm_status *tdm_fused_parse_act(const tdm_node *node, tdm_fused_act *act) {
    static const struct {
        const char *name;
        tdm_fused_act_kind kind;
        int params;
    } table[] = {
        {"", TDM_FUSED_NONE, 0},          {"Relu", TDM_FUSED_RELU, 0},
        {"LeakyRelu", TDM_FUSED_LEAKY, 1}, {"Clip", TDM_FUSED_CLIP, 2},
        {"Sigmoid", TDM_FUSED_SIGMOID, 0}, {"Tanh", TDM_FUSED_TANH, 0},
        {"HardSigmoid", TDM_FUSED_HSIGMOID, 2}, {"HardSwish", TDM_FUSED_HSWISH, 0},
        {"Gelu", TDM_FUSED_GELU, 0},      {"GeluTanh", TDM_FUSED_GELU_TANH, 0},
        {"Swish", TDM_FUSED_SWISH, 0},
    };
    const char *name = tdm_attr_string(node, "activation", "");
    size_t np;
    const float *p = tdm_attr_floats(node, "activation_params", &np);
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strcmp(name, table[i].name)) continue;
        if ((int)np < table[i].params)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT,
                                  "activation %s needs %d activation_params", name, table[i].params);
        act->kind = table[i].kind;
        act->p0 = table[i].params > 0 ? p[0] : 0.0f;
        act->p1 = table[i].params > 1 ? p[1] : 0.0f;
        size_t na;
        const float *af = tdm_attr_floats(node, "activation_affine", &na);
        if (af && na != 2)
            return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "activation_affine needs 2 values");
        act->affine = af != NULL;
        act->scale = af ? af[0] : 1.0f;
        act->shift = af ? af[1] : 0.0f;
        return NULL;
    }
    return tdm_node_error(node, TDM_ERR_INVALID_ARGUMENT, "unknown activation '%s'", name);
}

void tdm_fused_apply_act(const tdm_fused_act *act, float *y, int64_t n) {
    float a = act->p0, b = act->p1;
    switch (act->kind) {
    case TDM_FUSED_NONE: break;
    case TDM_FUSED_RELU:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
        break;
    case TDM_FUSED_LEAKY:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] >= 0.0f ? y[i] : a * y[i];
        break;
    case TDM_FUSED_CLIP:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] < a ? a : y[i] > b ? b : y[i];
        break;
    case TDM_FUSED_SIGMOID:
        for (int64_t i = 0; i < n; i++) y[i] = 1.0f / (1.0f + expf(-y[i]));
        break;
    case TDM_FUSED_TANH:
        for (int64_t i = 0; i < n; i++) y[i] = tanhf(y[i]);
        break;
    case TDM_FUSED_HSIGMOID:
        for (int64_t i = 0; i < n; i++) {
            float v = a * y[i] + b;
            y[i] = v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        }
        break;
    case TDM_FUSED_HSWISH:
        for (int64_t i = 0; i < n; i++) {
            float v = y[i] / 6.0f + 0.5f;
            y[i] *= v < 0.0f ? 0.0f : v > 1.0f ? 1.0f : v;
        }
        break;
    case TDM_FUSED_GELU:
        for (int64_t i = 0; i < n; i++) y[i] = 0.5f * y[i] * (1.0f + erff(y[i] * 0.70710678118654752f));
        break;
    case TDM_FUSED_SWISH:
        for (int64_t i = 0; i < n; i++) y[i] = y[i] / (1.0f + expf(-y[i]));
        break;
    case TDM_FUSED_GELU_TANH:
        for (int64_t i = 0; i < n; i++) {
            float x = y[i];
            y[i] = 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
        }
        break;
    }
    if (act->affine)
        for (int64_t i = 0; i < n; i++) y[i] = act->scale * y[i] + act->shift;
}

/* ---- epilogue: y = act(y + bias (per column) + z), over rows of `cols` values ---- */

typedef struct epi_job {
    float *y;
    const float *z, *bias;
    int64_t cols;
    const tdm_fused_act *act;
} epi_job;

static void epi_rows(void *arg, int64_t r0, int64_t r1) {
    const epi_job *j = arg;
    float *y = j->y + r0 * j->cols;
    int64_t n = (r1 - r0) * j->cols;
    if (j->bias)
        for (int64_t r = r0; r < r1; r++) {
            float *row = j->y + r * j->cols;
            for (int64_t c = 0; c < j->cols; c++) row[c] += j->bias[c];
        }
    if (j->z) {
        const float *z = j->z + r0 * j->cols;
        for (int64_t i = 0; i < n; i++) y[i] += z[i];
    }
    tdm_fused_apply_act(j->act, y, n);
}

static void epilogue(tdm_threadpool *pool, float *y, int64_t count, const float *z,
                     const float *bias, int64_t cols, const tdm_fused_act *act) {
    if (count == 0 || (!z && !bias && act->kind == TDM_FUSED_NONE)) return;
    if (cols < 1) cols = 1;
    if (!bias && cols < 4096) { /* no per-column work: take coarser rows */
        cols = count;
        for (int64_t c = 4096; c >= 1; c /= 2)
            if (count % c == 0) {
                cols = c;
                break;
            }
    }
    epi_job j = {y, z, bias, cols, act};
    int64_t rows = count / cols;
    tdm_parallel_for(pool, rows, 16384 / cols + 1, epi_rows, &j);
}

/* ---- FusedConv ---- */

static tdm_status *run_fused_conv(tdm_kernel_ctx *ctx) {
    tdm_fused_act act;
    TDM_TRY(tdm_fused_parse_act(ctx->node, &act));
    const tdm_tensor *z = ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_kernel_ctx c = *ctx;
    c.n_in = ctx->n_in < 3 ? ctx->n_in : 3;
    c.opset = 11;
    TDM_TRY(tdm_nn_run_conv(&c));
    tdm_tensor *y = ctx->out[0];
    if (z) {
        bool same = z->dtype == TDM_FLOAT && z->rank == y->rank;
        for (int d = 0; same && d < y->rank; d++) same = z->dims[d] == y->dims[d];
        if (!same)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "Z must be float32 with the convolution's output shape");
    }
    epilogue(ctx->pool, y->data, y->count, z ? z->data : NULL, NULL, 1, &act);
    return NULL;
}

/* ---- FusedMatMul ---- */

typedef struct mm_job {
    const float *a, *b;
    float *y;
    int64_t M, N, K;
    int br;                       /* batch rank */
    int64_t bdims[TDM_MAX_RANK];  /* output batch dims */
    int64_t as[TDM_MAX_RANK], bs[TDM_MAX_RANK]; /* batch strides in elements (0: broadcast) */
    tdm_threadpool *pool;
    const tdm_cpu_simd *simd;
} mm_job;

static void mm_batches(void *arg, int64_t b0, int64_t b1) {
    const mm_job *j = arg;
    for (int64_t bi = b0; bi < b1; bi++) {
        int64_t aoff = 0, boff = 0, t = bi;
        for (int d = j->br - 1; d >= 0; d--) {
            int64_t idx = t % j->bdims[d];
            t /= j->bdims[d];
            aoff += idx * j->as[d];
            boff += idx * j->bs[d];
        }
        tdm_sgemm(j->simd, j->pool, false, false, j->M, j->N, j->K, 1.0f, j->a + aoff, j->K, j->b + boff,
                  j->N, 0.0f, j->y + bi * j->M * j->N, j->N);
    }
}

/* Batch strides of operand x (rank r, matrix dims last two) against the output batch. */
static void batch_strides(const tdm_tensor *x, int br, int64_t *s) {
    int xr = x->rank >= 2 ? x->rank - 2 : 0;
    int64_t stride = x->rank >= 2 ? x->dims[x->rank - 2] * x->dims[x->rank - 1] : 0;
    for (int d = br - 1; d >= 0; d--) {
        int xd = d - (br - xr);
        if (xd < 0 || x->dims[xd] == 1) {
            s[d] = 0;
        } else {
            s[d] = stride;
        }
        if (xd >= 0) stride *= x->dims[xd];
    }
}

static tdm_status *run_fused_matmul(tdm_kernel_ctx *ctx) {
    tdm_fused_act act;
    TDM_TRY(tdm_fused_parse_act(ctx->node, &act));
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    const tdm_tensor *bias = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *y = ctx->out[0];
    if (a->dtype != TDM_FLOAT || b->dtype != TDM_FLOAT || (bias && bias->dtype != TDM_FLOAT))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inputs must be float32");
    if (a->rank < 1 || b->rank < 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "operands must have rank >= 1");
    int64_t M = a->rank >= 2 ? a->dims[a->rank - 2] : 1, K = a->dims[a->rank - 1];
    int64_t Kb = b->rank >= 2 ? b->dims[b->rank - 2] : b->dims[0];
    int64_t N = b->rank >= 2 ? b->dims[b->rank - 1] : 1;
    if (K != Kb)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "inner dimensions differ");
    int64_t cols = y->rank ? y->dims[y->rank - 1] : 1;
    if (bias && bias->count != cols)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "bias has %lld values for %lld columns", (long long)bias->count,
                              (long long)cols);
    if (y->count == 0) return NULL;
    if (K == 0) {
        memset(y->data, 0, y->nbytes);
    } else if (b->rank <= 2) {
        /* B is one matrix: all of A's rows in one GEMM */
        int64_t rows = a->count / K;
        tdm_sgemm(tdm_cpu_simd_of(ctx), ctx->pool, false, false, rows, N, K, 1.0f, a->data, K, b->data, N, 0.0f, y->data, N);
    } else {
        mm_job j = {a->data, b->data, y->data, M, N, K, 0, {0}, {0}, {0}, NULL,
                    tdm_cpu_simd_of(ctx)};
        int ar = a->rank >= 2 ? a->rank - 2 : 0, brk = b->rank - 2;
        j.br = ar > brk ? ar : brk;
        int64_t nb = 1;
        for (int d = 0; d < j.br; d++) {
            int ad = d - (j.br - ar), bd = d - (j.br - brk);
            int64_t x = ad >= 0 ? a->dims[ad] : 1, w = bd >= 0 ? b->dims[bd] : 1;
            if (x != w && x != 1 && w != 1)
                return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                      "batch dims %lld and %lld do not broadcast", (long long)x,
                                      (long long)w);
            j.bdims[d] = x == 1 ? w : x;
            nb *= j.bdims[d];
        }
        if (nb * M * N != y->count)
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape mismatch");
        batch_strides(a, j.br, j.as);
        batch_strides(b, j.br, j.bs);
        int threads = tdm_threadpool_size(ctx->pool);
        if (threads > 1 && nb >= threads && M * N * K < (1 << 20)) {
            tdm_parallel_for(ctx->pool, nb, 1, mm_batches, &j);
        } else {
            j.pool = ctx->pool;
            mm_batches(&j, 0, nb);
        }
    }
    epilogue(ctx->pool, y->data, y->count, NULL, bias ? bias->data : NULL, cols, &act);
    return NULL;
}

const tdm_kernel_def tdm_cpu_kernels_fused[] = {
    {TDM_FUSED_DOMAIN, "FusedConv", 1, 0, 0, TDM_T(TDM_FLOAT), run_fused_conv, NULL, NULL},
    {TDM_FUSED_DOMAIN, "FusedMatMul", 1, 0, 0, TDM_T(TDM_FLOAT), run_fused_matmul, NULL, NULL},
    {TDM_FUSED_DOMAIN, "Attention", 1, 0, 0, TDM_T(TDM_FLOAT), tdm_fused_run_attention, NULL, NULL,
     TDM_KF_WRITES_ALL},
};
const int tdm_cpu_kernels_fused_count =
    (int)(sizeof tdm_cpu_kernels_fused / sizeof tdm_cpu_kernels_fused[0]);
