/* cuDNN kernels: Conv and tandem's FusedConv (bias, residual input and activation),
 * ConvTranspose, MaxPool / AveragePool / GlobalAveragePool / GlobalMaxPool and
 * BatchNormalization (inference), NCHW, through cuDNN's classic API.
 *
 * Convolution algorithms: cudnnFind (which times the candidates) runs once per input shape
 * and precision, its choice is kept in the node's state (a few shapes) and reused by every
 * later run. cuDNN pads symmetrically: asymmetric pads (auto_pad SAME_*, explicit) take the
 * smaller side in cuDNN and the difference by an explicit pad copy of the input (tcu_pad).
 * 1-D convolutions run as 2-D ones of height 1.
 *
 * Precision (float32 tensors): FP32 asks for FMA-only kernels (no TF32), TF32 allows tensor
 * cores, FP16 / BF16 allow cuDNN to convert the operands to half for tensor cores
 * (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: float16 in both cases), accumulating in float32. */
#include <string.h>

#include "backends/cuda/cuda_device.h"
#include "backends/cuda/kernels/cuda_ops.h"
#include "core/alloc.h"
#include "ops/fused.h"
#include "ops/nn_geom.h"

/* cuDNN 9 marks the classic API deprecated (it remains supported): this file uses it on
 * purpose */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#define CONV_CACHE 4
#define CONV_WS_MAX ((size_t)256 << 20)
#define DNN_MAX_DIMS 5 /* N, C and up to 3 spatial dims */

typedef struct conv_key {
    int prec;
    int rank;
    int64_t x[DNN_MAX_DIMS], w[DNN_MAX_DIMS];
} conv_key;

typedef struct conv_state {
    int n, next;
    conv_key key[CONV_CACHE];
    int algo[CONV_CACHE];
    size_t ws[CONV_CACHE];
    cudnnMathType_t math[CONV_CACHE];
} conv_state;

static tdm_status *conv_prepare(const tdm_node *node, int opset, int n_in,
                                const tdm_tensor *const *in, const tdm_allocator *a, void **state) {
    conv_state *s = tdm_calloc(a, 1, sizeof *s);
    if (!s) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory preparing a convolution");
    *state = s;
    return NULL;
}

static void conv_release(void *state, const tdm_allocator *a) { tdm_free(a, state); }

static cudnnDataType_t dnn_type(tdm_dtype t) {
    return t == TDM_FLOAT16 ? CUDNN_DATA_HALF : CUDNN_DATA_FLOAT;
}

static cudnnMathType_t math_type(tdm_dtype t, cuda_precision p) {
    if (t != TDM_FLOAT) return CUDNN_TENSOR_OP_MATH;
    switch (p) {
    case CUDA_PREC_TF32: return CUDNN_TENSOR_OP_MATH;
    case CUDA_PREC_FP16:
    case CUDA_PREC_BF16: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    default: return CUDNN_FMA_MATH;
    }
}

static tdm_status *dnn_error(const tdm_node *node, cudnnStatus_t s, const char *what) {
    tdm_status *st = cuda_dnn_check(s, what);
    return st ? tdm_status_wrap(st, "%s node '%s': ", node->op_type, node->name) : NULL;
}

static tdm_status *launch_result(const tdm_node *node, int e, const char *what) {
    if (!e) return NULL;
    return tdm_node_error(node, e == cudaErrorMemoryAllocation ? TDM_ERR_OUT_OF_MEMORY : TDM_ERR_DEVICE,
                          "cuda %s: %s", what, tcu_error_string(e));
}

/* A packed NCHW descriptor of dims (rank 3 becomes 4 with height 1). */
static cudnnStatus_t tensor_desc(cudnnTensorDescriptor_t t, cudnnDataType_t type, int rank,
                                 const int64_t *dims) {
    int d[DNN_MAX_DIMS], s[DNN_MAX_DIMS], n = 0;
    for (int i = 0; i < rank; i++) {
        if (rank == 3 && i == 2) d[n++] = 1;
        d[n++] = (int)dims[i];
    }
    if (n < 4) { /* [N, C] (BatchNormalization of a matrix) */
        while (n < 4) d[n++] = 1;
    }
    s[n - 1] = 1;
    for (int i = n - 2; i >= 0; i--) s[i] = s[i + 1] * (d[i + 1] > 0 ? d[i + 1] : 1);
    return cudnnSetTensorNdDescriptor(t, type, n, d, s);
}

static bool dims_fit_int(const tdm_tensor *t) {
    if (t->rank < 2 || t->rank > DNN_MAX_DIMS || t->count > INT32_MAX) return false;
    for (int i = 0; i < t->rank; i++)
        if (t->dims[i] <= 0 || t->dims[i] > INT32_MAX) return false;
    return true;
}

/* ---- Conv / FusedConv ---- */

typedef enum { ACT_NONE, ACT_RELU, ACT_UNARY } act_kind;

typedef struct act_spec {
    act_kind kind;
    int unary; /* TCU_* for ACT_UNARY */
    float p, q;
} act_spec;

static bool parse_act(const tdm_node *node, act_spec *a) {
    const char *name = tdm_attr_string(node, "activation", "");
    size_t np = 0;
    const float *params = tdm_attr_floats(node, "activation_params", &np);
    memset(a, 0, sizeof *a);
    size_t naff;
    if (tdm_attr_floats(node, "activation_affine", &naff)) return false; /* (the CPU's) */
    if (!name[0]) return true;
    if (strcmp(name, "Relu") == 0) {
        a->kind = ACT_RELU;
        return true;
    }
    a->kind = ACT_UNARY;
    if (strcmp(name, "LeakyRelu") == 0) {
        a->unary = TCU_LEAKY_RELU;
        a->p = np > 0 ? params[0] : 0.01f;
    } else if (strcmp(name, "Clip") == 0) {
        a->unary = TCU_CLIP;
        a->p = np > 0 ? params[0] : -3.4028235e38f;
        a->q = np > 1 ? params[1] : 3.4028235e38f;
    } else if (strcmp(name, "Sigmoid") == 0) {
        a->unary = TCU_SIGMOID;
    } else if (strcmp(name, "Tanh") == 0) {
        a->unary = TCU_TANH;
    } else if (strcmp(name, "HardSigmoid") == 0) {
        a->unary = TCU_HARD_SIGMOID;
        a->p = np > 0 ? params[0] : 0.2f;
        a->q = np > 1 ? params[1] : 0.5f;
    } else if (strcmp(name, "HardSwish") == 0) {
        a->unary = TCU_HARD_SWISH;
    } else {
        return false;
    }
    return true;
}

static bool conv_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    act_spec a;
    return parse_act(node, &a);
}

typedef struct conv_descs {
    cudnnTensorDescriptor_t x, y, b;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnActivationDescriptor_t act;
} conv_descs;

static void descs_free(conv_descs *c) {
    if (c->x) cudnnDestroyTensorDescriptor(c->x);
    if (c->y) cudnnDestroyTensorDescriptor(c->y);
    if (c->b) cudnnDestroyTensorDescriptor(c->b);
    if (c->w) cudnnDestroyFilterDescriptor(c->w);
    if (c->conv) cudnnDestroyConvolutionDescriptor(c->conv);
    if (c->act) cudnnDestroyActivationDescriptor(c->act);
}

static cudnnStatus_t descs_create(conv_descs *c) {
    memset(c, 0, sizeof *c);
    cudnnStatus_t s = cudnnCreateTensorDescriptor(&c->x);
    if (!s) s = cudnnCreateTensorDescriptor(&c->y);
    if (!s) s = cudnnCreateTensorDescriptor(&c->b);
    if (!s) s = cudnnCreateFilterDescriptor(&c->w);
    if (!s) s = cudnnCreateConvolutionDescriptor(&c->conv);
    if (!s) s = cudnnCreateActivationDescriptor(&c->act);
    return s;
}

/* Window geometry in cuDNN's terms: nsp2 spatial dims (1-D as 2-D), symmetric pads and the
 * extra pads the input needs first. */
typedef struct conv_geom {
    int nsp2;
    int pad[3], stride[3], dil[3];
    int64_t extra_b[3], extra_e[3]; /* explicit input padding (asymmetric pads) */
    bool extra;
} conv_geom;

static tdm_status *conv_geometry(const tdm_kernel_ctx *ctx, tdm_nn_kind kind, const tdm_tensor *X,
                                 const tdm_tensor *W, conv_geom *g) {
    tdm_nn_geom ng;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, kind, X->rank, X->dims, W->dims, &ng));
    memset(g, 0, sizeof *g);
    int off = ng.nsp == 1 ? 1 : 0;
    g->nsp2 = ng.nsp + off;
    if (off) {
        g->stride[0] = g->dil[0] = 1;
    }
    for (int i = 0; i < ng.nsp; i++) {
        int64_t lo = ng.pad_b[i] < ng.pad_e[i] ? ng.pad_b[i] : ng.pad_e[i];
        if (ng.stride[i] > INT32_MAX || ng.dil[i] > INT32_MAX || lo > INT32_MAX || lo < 0)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "window too large for cuDNN");
        g->pad[i + off] = (int)lo;
        g->stride[i + off] = (int)ng.stride[i];
        g->dil[i + off] = (int)ng.dil[i];
        g->extra_b[i] = ng.pad_b[i] - lo;
        g->extra_e[i] = ng.pad_e[i] - lo;
        if (g->extra_b[i] || g->extra_e[i]) g->extra = true;
    }
    return NULL;
}

static tdm_status *find_fwd_algo(cuda_device *d, conv_state *cs, const conv_key *key,
                                 conv_descs *c, const void *x, const void *w, void *y, int *algo,
                                 size_t *ws, cudnnMathType_t *math) {
    if (cs)
        for (int i = 0; i < cs->n; i++)
            if (memcmp(&cs->key[i], key, sizeof *key) == 0) {
                *algo = cs->algo[i];
                *ws = cs->ws[i];
                *math = cs->math[i];
                return NULL;
            }
    void *space = NULL;
    size_t budget = CONV_WS_MAX;
    tdm_status *st = cuda_workspace(d, budget, &space);
    if (st) { /* tight memory: look only at algorithms that need no workspace */
        tdm_status_free(st);
        budget = 0;
        space = NULL;
    }
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    TDM_TRY(cuda_dnn_check(cudnnFindConvolutionForwardAlgorithmEx(
                               d->cudnn, c->x, x, c->w, w, c->conv, c->y, y,
                               CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf, space, budget),
                           "choosing a convolution algorithm"));
    int pick = -1;
    for (int i = 0; i < n && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= budget) pick = i;
    if (pick < 0) return TDM_ERR(TDM_ERR_UNSUPPORTED, "cudnn: no convolution algorithm fits");
    *algo = (int)perf[pick].algo;
    *ws = perf[pick].memory;
    *math = perf[pick].mathType;
    if (cs) {
        int slot = cs->n < CONV_CACHE ? cs->n++ : cs->next++ % CONV_CACHE;
        cs->key[slot] = *key;
        cs->algo[slot] = *algo;
        cs->ws[slot] = *ws;
        cs->math[slot] = *math;
    }
    return NULL;
}

/* X padded by the extra (asymmetric) pads into scratch *out (freed by the caller). */
static tdm_status *pad_input(cuda_device *d, const tdm_kernel_ctx *ctx, const tdm_tensor *X,
                             const conv_geom *g, int64_t *pdims, void **out) {
    tcu_pad_desc pd;
    memset(&pd, 0, sizeof pd);
    pd.rank = X->rank;
    pd.mode = TCU_PAD_CONSTANT;
    int64_t count = 1;
    for (int i = 0; i < X->rank; i++) {
        int64_t b = i >= 2 ? g->extra_b[i - 2] : 0, e = i >= 2 ? g->extra_e[i - 2] : 0;
        pd.in_dims[i] = X->dims[i];
        pd.out_dims[i] = X->dims[i] + b + e;
        pd.before[i] = b;
        pdims[i] = pd.out_dims[i];
        count *= pd.out_dims[i];
    }
    size_t es = tdm_dtype_elem_size(X->dtype);
    TDM_TRY(cuda_scratch(d, (size_t)count * es, out));
    int e = tcu_pad((int)es, X->data, *out, &pd, d->stream);
    if (e) {
        cuda_scratch_free(d, *out);
        *out = NULL;
        return launch_result(ctx->node, e, "Pad");
    }
    return NULL;
}

/* Y = act(conv(X, W) + B + Z). */
static tdm_status *conv_forward(tdm_kernel_ctx *ctx, const act_spec *act, const tdm_tensor *Z) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *X = ctx->in[0], *W = ctx->in[1];
    const tdm_tensor *B = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if (Y->count == 0) return NULL;
    if (!dims_fit_int(X) || !dims_fit_int(W) || !dims_fit_int(Y) || X->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "shape not handled by cuDNN");
    conv_geom g;
    TDM_TRY(conv_geometry(ctx, TDM_NN_CONV, X, W, &g));
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    if (group < 1 || group > INT32_MAX)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad group");
    cudnnDataType_t t = dnn_type(X->dtype);
    conv_descs c;
    void *xpad = NULL;
    const void *xdata = X->data;
    int64_t xdims[DNN_MAX_DIMS];
    memcpy(xdims, X->dims, sizeof(int64_t) * (size_t)X->rank);
    tdm_status *st = dnn_error(ctx->node, descs_create(&c), "descriptors");
    if (!st && g.extra) {
        st = pad_input(d, ctx, X, &g, xdims, &xpad);
        xdata = xpad;
    }
    int wd[DNN_MAX_DIMS], nw = 0;
    for (int i = 0; i < W->rank; i++) {
        if (W->rank == 3 && i == 2) wd[nw++] = 1;
        wd[nw++] = (int)W->dims[i];
    }
    cuda_precision prec = cuda_precision_of(d);
    if (!st) st = dnn_error(ctx->node, tensor_desc(c.x, t, X->rank, xdims), "input descriptor");
    if (!st) st = dnn_error(ctx->node, tensor_desc(c.y, t, Y->rank, Y->dims), "output descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetFilterNdDescriptor(c.w, t, CUDNN_TENSOR_NCHW, nw, wd),
                       "filter descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetConvolutionNdDescriptor(c.conv, g.nsp2, g.pad, g.stride,
                                                                  g.dil, CUDNN_CROSS_CORRELATION,
                                                                  CUDNN_DATA_FLOAT),
                       "convolution descriptor");
    if (!st) st = dnn_error(ctx->node, cudnnSetConvolutionGroupCount(c.conv, (int)group), "groups");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetConvolutionMathType(c.conv, math_type(X->dtype, prec)),
                       "math type");
    conv_key key;
    memset(&key, 0, sizeof key);
    key.prec = (int)prec;
    key.rank = X->rank;
    memcpy(key.x, xdims, sizeof(int64_t) * (size_t)X->rank);
    memcpy(key.w, W->dims, sizeof(int64_t) * (size_t)W->rank);
    int algo = 0;
    size_t ws_size = 0;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
    if (!st)
        st = find_fwd_algo(d, ctx->state, &key, &c, xdata, W->data, Y->data, &algo, &ws_size, &math);
    /* the math type the chosen algorithm was timed with, except that strict float32 stays
     * FMA-only (a reported default math type would allow TF32 on Ampere and later) */
    if (!st && math_type(X->dtype, prec) != CUDNN_FMA_MATH)
        st = dnn_error(ctx->node, cudnnSetConvolutionMathType(c.conv, math), "math type");
    void *ws = NULL;
    if (!st && ws_size) st = cuda_workspace(d, ws_size, &ws);
    float one = 1.0f, zero = 0.0f;
    bool fused = !st && act->kind == ACT_RELU && B;
    if (fused) { /* one cuDNN call: relu(conv + Z + bias) */
        float alpha2 = Z ? 1.0f : 0.0f;
        /* without Z, Y stands in for it scaled by 0: zeroed first, as fresh memory may hold
         * NaN patterns (0 * NaN is NaN) */
        if (!Z) st = cuda_check(cudaMemsetAsync(Y->data, 0, Y->nbytes, d->stream), "zeroing");
        int bd[DNN_MAX_DIMS + 1] = {1, (int)Y->dims[1], 1, 1, 1, 1};
        int n = Y->rank == 3 ? 4 : Y->rank, bs[DNN_MAX_DIMS + 1];
        bs[n - 1] = 1;
        for (int i = n - 2; i >= 0; i--) bs[i] = bs[i + 1] * bd[i + 1];
        if (!st)
            st = dnn_error(ctx->node, cudnnSetTensorNdDescriptor(c.b, t, n, bd, bs),
                           "bias descriptor");
        if (!st)
            st = dnn_error(ctx->node, cudnnSetActivationDescriptor(c.act, CUDNN_ACTIVATION_RELU,
                                                                   CUDNN_NOT_PROPAGATE_NAN, 0.0),
                           "activation descriptor");
        if (!st)
            st = dnn_error(ctx->node, cudnnConvolutionBiasActivationForward(
                                          d->cudnn, &one, c.x, xdata, c.w, W->data, c.conv,
                                          (cudnnConvolutionFwdAlgo_t)algo, ws, ws_size, &alpha2,
                                          c.y, Z ? Z->data : Y->data, c.b, B->data, c.act, c.y,
                                          Y->data),
                           "convolution");
        if (st && tdm_status_code(st) == TDM_ERR_UNSUPPORTED) { /* not fused for this case */
            tdm_status_free(st);
            st = NULL;
            fused = false;
        }
    }
    if (!fused && !st) {
        st = dnn_error(ctx->node, cudnnConvolutionForward(d->cudnn, &one, c.x, xdata, c.w, W->data,
                                                          c.conv, (cudnnConvolutionFwdAlgo_t)algo,
                                                          ws, ws_size, &zero, c.y, Y->data),
                       "convolution");
        if (!st && B) {
            int bd[DNN_MAX_DIMS + 1] = {1, (int)Y->dims[1], 1, 1, 1, 1};
            int n = Y->rank == 3 ? 4 : Y->rank, bs[DNN_MAX_DIMS + 1];
            bs[n - 1] = 1;
            for (int i = n - 2; i >= 0; i--) bs[i] = bs[i + 1] * bd[i + 1];
            st = dnn_error(ctx->node, cudnnSetTensorNdDescriptor(c.b, t, n, bd, bs), "bias descriptor");
            if (!st)
                st = dnn_error(ctx->node, cudnnAddTensor(d->cudnn, &one, c.b, B->data, &one, c.y,
                                                         Y->data), "bias");
        }
        if (!st && Z)
            st = dnn_error(ctx->node, cudnnAddTensor(d->cudnn, &one, c.y, Z->data, &one, c.y, Y->data),
                           "residual input");
        if (!st && act->kind == ACT_RELU)
            st = launch_result(ctx->node, tcu_unary(TCU_RELU, Y->dtype, Y->data, Y->data, Y->count,
                                                    0.0f, 0.0f, d->stream), "Relu");
        if (!st && act->kind == ACT_UNARY)
            st = launch_result(ctx->node, tcu_unary(act->unary, Y->dtype, Y->data, Y->data,
                                                    Y->count, act->p, act->q, d->stream),
                               "activation");
    }
    if (xpad) cuda_scratch_free(d, xpad);
    descs_free(&c);
    return st;
}

static tdm_status *run_conv(tdm_kernel_ctx *ctx) {
    act_spec none = {ACT_NONE, 0, 0.0f, 0.0f};
    return conv_forward(ctx, &none, NULL);
}

static tdm_status *run_fused_conv(tdm_kernel_ctx *ctx) {
    act_spec act;
    if (!parse_act(ctx->node, &act))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "activation not supported");
    const tdm_tensor *Z = ctx->n_in > 3 ? ctx->in[3] : NULL;
    if (Z && (Z->count != ctx->out[0]->count || Z->rank != ctx->out[0]->rank))
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Z must have Y's shape");
    return conv_forward(ctx, &act, Z);
}

/* ---- ConvTranspose (cuDNN's backward data), symmetric pads only ---- */

static bool convt_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    const char *ap = tdm_attr_string(node, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) return false;
    if (tdm_node_attr(node, "output_shape")) return false;
    size_t np = 0;
    const int64_t *pads = tdm_attr_ints(node, "pads", &np);
    for (size_t i = 0; i < np / 2; i++)
        if (pads[i] != pads[i + np / 2]) return false;
    return true;
}

static tdm_status *run_conv_transpose(tdm_kernel_ctx *ctx) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *X = ctx->in[0], *W = ctx->in[1];
    const tdm_tensor *B = ctx->n_in > 2 ? ctx->in[2] : NULL;
    tdm_tensor *Y = ctx->out[0];
    if (Y->count == 0) return NULL;
    if (!dims_fit_int(X) || !dims_fit_int(W) || !dims_fit_int(Y) || X->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "shape not handled by cuDNN");
    conv_geom g;
    TDM_TRY(conv_geometry(ctx, TDM_NN_CONVT, X, W, &g));
    if (g.extra) return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "asymmetric pads");
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    if (group < 1 || group > INT32_MAX)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bad group");
    cudnnDataType_t t = dnn_type(X->dtype);
    conv_descs c;
    tdm_status *st = dnn_error(ctx->node, descs_create(&c), "descriptors");
    int wd[DNN_MAX_DIMS], nw = 0;
    for (int i = 0; i < W->rank; i++) {
        if (W->rank == 3 && i == 2) wd[nw++] = 1;
        wd[nw++] = (int)W->dims[i];
    }
    cuda_precision prec = cuda_precision_of(d);
    /* the forward convolution whose data gradient this is: its input is Y, its output X */
    if (!st) st = dnn_error(ctx->node, tensor_desc(c.x, t, X->rank, X->dims), "input descriptor");
    if (!st) st = dnn_error(ctx->node, tensor_desc(c.y, t, Y->rank, Y->dims), "output descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetFilterNdDescriptor(c.w, t, CUDNN_TENSOR_NCHW, nw, wd),
                       "filter descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetConvolutionNdDescriptor(c.conv, g.nsp2, g.pad, g.stride,
                                                                  g.dil, CUDNN_CROSS_CORRELATION,
                                                                  CUDNN_DATA_FLOAT),
                       "convolution descriptor");
    if (!st) st = dnn_error(ctx->node, cudnnSetConvolutionGroupCount(c.conv, (int)group), "groups");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetConvolutionMathType(c.conv, math_type(X->dtype, prec)),
                       "math type");
    cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    int n = 0, pick = -1;
    void *ws = NULL;
    size_t budget = CONV_WS_MAX;
    if (!st && cuda_workspace(d, budget, &ws) != NULL) budget = 0, ws = NULL;
    if (!st)
        st = dnn_error(ctx->node, cudnnFindConvolutionBackwardDataAlgorithmEx(
                                      d->cudnn, c.w, W->data, c.x, X->data, c.conv, c.y, Y->data,
                                      CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf, ws, budget),
                       "choosing an algorithm");
    for (int i = 0; !st && i < n && pick < 0; i++)
        if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= budget) pick = i;
    if (!st && pick < 0) st = tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "no cuDNN algorithm");
    float one = 1.0f, zero = 0.0f;
    if (!st && math_type(X->dtype, prec) != CUDNN_FMA_MATH)
        st = dnn_error(ctx->node, cudnnSetConvolutionMathType(c.conv, perf[pick].mathType),
                       "math type");
    if (!st)
        st = dnn_error(ctx->node, cudnnConvolutionBackwardData(d->cudnn, &one, c.w, W->data, c.x,
                                                               X->data, c.conv, perf[pick].algo, ws,
                                                               perf[pick].memory, &zero, c.y, Y->data),
                       "transposed convolution");
    if (!st && B) {
        int bd[DNN_MAX_DIMS + 1] = {1, (int)Y->dims[1], 1, 1, 1, 1};
        int nb = Y->rank == 3 ? 4 : Y->rank, bs[DNN_MAX_DIMS + 1];
        bs[nb - 1] = 1;
        for (int i = nb - 2; i >= 0; i--) bs[i] = bs[i + 1] * bd[i + 1];
        st = dnn_error(ctx->node, cudnnSetTensorNdDescriptor(c.b, t, nb, bd, bs), "bias descriptor");
        if (!st)
            st = dnn_error(ctx->node, cudnnAddTensor(d->cudnn, &one, c.b, B->data, &one, c.y, Y->data),
                           "bias");
    }
    descs_free(&c);
    return st;
}

/* ---- pooling ---- */

static bool pool_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    if (node->n_outputs > 1 && node->outputs[1] >= 0) return false; /* MaxPool's Indices */
    if (tdm_attr_int(node, "ceil_mode", 0)) return false;
    const char *ap = tdm_attr_string(node, "auto_pad", "NOTSET");
    if (strcmp(ap, "NOTSET") != 0 && strcmp(ap, "VALID") != 0) return false;
    size_t nd = 0;
    const int64_t *dil = tdm_attr_ints(node, "dilations", &nd);
    for (size_t i = 0; i < nd; i++)
        if (dil[i] != 1) return false;
    size_t np = 0;
    const int64_t *pads = tdm_attr_ints(node, "pads", &np);
    for (size_t i = 0; i < np / 2; i++)
        if (pads[i] != pads[i + np / 2]) return false;
    return true;
}

static tdm_status *pool_run(tdm_kernel_ctx *ctx, cudnnPoolingMode_t mode, bool global) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    if (Y->count == 0) return NULL;
    if (!dims_fit_int(X) || !dims_fit_int(Y) || X->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "shape not handled by cuDNN");
    int win[3], pad[3], stride[3], nsp2;
    int off = X->rank == 3 ? 1 : 0;
    nsp2 = X->rank - 2 + off;
    if (off) win[0] = stride[0] = 1, pad[0] = 0;
    if (global) {
        for (int i = 0; i < X->rank - 2; i++) {
            win[i + off] = (int)X->dims[i + 2];
            pad[i + off] = 0;
            stride[i + off] = 1;
        }
    } else {
        tdm_nn_geom ng;
        TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_POOL, X->rank, X->dims, NULL, &ng));
        for (int i = 0; i < ng.nsp; i++) {
            if (ng.pad_b[i] != ng.pad_e[i] || ng.kernel[i] > INT32_MAX || ng.stride[i] > INT32_MAX)
                return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "window not handled by cuDNN");
            win[i + off] = (int)ng.kernel[i];
            pad[i + off] = (int)ng.pad_b[i];
            stride[i + off] = (int)ng.stride[i];
        }
        if (mode != CUDNN_POOLING_MAX && tdm_attr_int(ctx->node, "count_include_pad", 0))
            mode = CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    }
    cudnnDataType_t t = dnn_type(X->dtype);
    cudnnTensorDescriptor_t xd = NULL, yd = NULL;
    cudnnPoolingDescriptor_t pd = NULL;
    tdm_status *st = dnn_error(ctx->node, cudnnCreateTensorDescriptor(&xd), "descriptor");
    if (!st) st = dnn_error(ctx->node, cudnnCreateTensorDescriptor(&yd), "descriptor");
    if (!st) st = dnn_error(ctx->node, cudnnCreatePoolingDescriptor(&pd), "descriptor");
    if (!st) st = dnn_error(ctx->node, tensor_desc(xd, t, X->rank, X->dims), "input descriptor");
    if (!st) st = dnn_error(ctx->node, tensor_desc(yd, t, Y->rank, Y->dims), "output descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnSetPoolingNdDescriptor(pd, mode, CUDNN_PROPAGATE_NAN, nsp2,
                                                              win, pad, stride), "pooling descriptor");
    float one = 1.0f, zero = 0.0f;
    if (!st)
        st = dnn_error(ctx->node, cudnnPoolingForward(d->cudnn, pd, &one, xd, X->data, &zero, yd,
                                                      Y->data), "pooling");
    if (pd) cudnnDestroyPoolingDescriptor(pd);
    if (yd) cudnnDestroyTensorDescriptor(yd);
    if (xd) cudnnDestroyTensorDescriptor(xd);
    return st;
}

static tdm_status *run_maxpool(tdm_kernel_ctx *ctx) { return pool_run(ctx, CUDNN_POOLING_MAX, false); }
static tdm_status *run_avgpool(tdm_kernel_ctx *ctx) {
    return pool_run(ctx, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, false);
}
static tdm_status *run_global_avg(tdm_kernel_ctx *ctx) {
    return pool_run(ctx, CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING, true);
}
static tdm_status *run_global_max(tdm_kernel_ctx *ctx) { return pool_run(ctx, CUDNN_POOLING_MAX, true); }

/* ---- BatchNormalization (inference) ---- */

static bool bn_accept(const tdm_node *node, const tdm_dtype *in_types, int n_in) {
    if (tdm_attr_int(node, "training_mode", 0)) return false;
    for (int i = 1; i < node->n_outputs; i++)
        if (node->outputs[i] >= 0) return false;
    return tdm_attr_float(node, "epsilon", 1e-5f) >= CUDNN_BN_MIN_EPSILON;
}

static tdm_status *run_batchnorm(tdm_kernel_ctx *ctx) {
    cuda_device *d = cuda_ctx_device(ctx);
    const tdm_tensor *X = ctx->in[0];
    tdm_tensor *Y = ctx->out[0];
    if (Y->count == 0) return NULL;
    if (!dims_fit_int(X) || X->rank > DNN_MAX_DIMS)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "shape not handled by cuDNN");
    for (int i = 1; i < 5; i++)
        if (!ctx->in[i] || ctx->in[i]->count != X->dims[1])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d must have C values", i);
    double eps = tdm_attr_float(ctx->node, "epsilon", 1e-5f);
    cudnnDataType_t t = dnn_type(X->dtype);
    cudnnTensorDescriptor_t xd = NULL, bd = NULL;
    tdm_status *st = dnn_error(ctx->node, cudnnCreateTensorDescriptor(&xd), "descriptor");
    if (!st) st = dnn_error(ctx->node, cudnnCreateTensorDescriptor(&bd), "descriptor");
    if (!st) st = dnn_error(ctx->node, tensor_desc(xd, t, X->rank, X->dims), "input descriptor");
    if (!st)
        st = dnn_error(ctx->node, cudnnDeriveBNTensorDescriptor(bd, xd, CUDNN_BATCHNORM_SPATIAL),
                       "parameter descriptor");
    float one = 1.0f, zero = 0.0f;
    if (!st)
        st = dnn_error(ctx->node, cudnnBatchNormalizationForwardInference(
                                      d->cudnn, CUDNN_BATCHNORM_SPATIAL, &one, &zero, xd, X->data,
                                      xd, Y->data, bd, ctx->in[1]->data, ctx->in[2]->data,
                                      ctx->in[3]->data, ctx->in[4]->data, eps),
                       "batch normalization");
    if (bd) cudnnDestroyTensorDescriptor(bd);
    if (xd) cudnnDestroyTensorDescriptor(xd);
    return st;
}

#define DNN_TYPES (TDM_T(TDM_FLOAT) | TDM_T(TDM_FLOAT16))

const cuda_kernel_entry cuda_kernels_dnn[] = {
    {{"", "Conv", 1, 0, 0, DNN_TYPES, run_conv, conv_prepare, conv_release}, 0, 0, 0, NULL},
    {{TDM_FUSED_DOMAIN, "FusedConv", 1, 0, 0, DNN_TYPES, run_fused_conv, conv_prepare, conv_release},
     0, 0, 0, conv_accept},
    {{"", "ConvTranspose", 1, 0, 0, DNN_TYPES, run_conv_transpose, NULL, NULL}, 0, 0, 0, convt_accept},
    {{"", "MaxPool", 1, 0, 0, DNN_TYPES, run_maxpool, NULL, NULL}, 0, 0, 0, pool_accept},
    {{"", "AveragePool", 1, 0, 0, DNN_TYPES, run_avgpool, NULL, NULL}, 0, 0, 0, pool_accept},
    {{"", "GlobalAveragePool", 1, 0, 0, DNN_TYPES, run_global_avg, NULL, NULL}, 0, 0, 0, NULL},
    {{"", "GlobalMaxPool", 1, 0, 0, DNN_TYPES, run_global_max, NULL, NULL}, 0, 0, 0, NULL},
    /* scale, bias, mean and var must be float32 (cuDNN's parameter type): float32 X only */
    {{"", "BatchNormalization", 1, 0, 0, TDM_T(TDM_FLOAT), run_batchnorm, NULL, NULL}, 0, 0, 0,
     bn_accept},
};
const int cuda_kernels_dnn_count = (int)(sizeof cuda_kernels_dnn / sizeof cuda_kernels_dnn[0]);
