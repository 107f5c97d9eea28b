/* OpenCL kernels: convolution family. Conv and tandem's FusedConv (Conv + bias + optional
 * residual Z + activation, see ops/fused.h).
 *
 *  - depthwise (one input channel per group): a direct kernel, one work-item per output;
 *  - otherwise im2col + GEMM per image: the columns of all groups go to one temporary
 *    [C*kernel, out_spatial] and a GEMM batched over the groups multiplies W by them; a 1x1
 *    convolution with unit strides and no padding multiplies W by the images directly, in
 *    GEMMs batched over images x groups. All GEMMs of a node share one pair of panel
 *    buffers (ocl_gemm_ws): the temporaries of a node do not grow with the batch.
 * Bias, Z and the activation run in the GEMM epilogue. Up to 3 spatial dims (1-D and 2-D
 * run as 3-D with leading size-1 dims). */
#include <string.h>

#include "backends/opencl/ocl.h"
#include "core/checked.h"
#include "ops/fused.h"
#include "ops/nn_geom.h"
#include "ops/op.h"

/* Most bytes of GEMM panels for the images that one GEMM of a 1x1 convolution takes
 * (at least one image per GEMM whatever its size). */
#define OCL_CONV_PANEL_BUDGET ((size_t)16 << 20)

const char ocl_src_conv[] = OCL_COMMON_SRC OCL_SRC(
/* col[(c*KSZ + kk)*OSZ + o]: c over all input channels, kk over kernel taps (kd, kh, kw),
 * o over output positions; 0 where the tap falls into the padding. Sizes in int4 lanes
 * x, y, z = d, h, w. One item per output row (c, kk, od, oh). */
__kernel void im2col3d(__global const float *x, long xoff, __global float *col, long rows,
                       int4 in, int4 out, int4 ker, int4 str, int4 dil, int4 pb, long chunk) {
    x += xoff;
    int ksz = ker.x * ker.y * ker.z;
    FOR_ITEMS(r, rows) {
        int oh = r % out.y;
        long t = r / out.y;
        int od = t % out.x;
        t /= out.x;
        int kk = t % ksz;
        long c = t / ksz;
        int kw = kk % ker.z, kh = (kk / ker.z) % ker.y, kd = kk / (ker.z * ker.y);
        int id = od * str.x - pb.x + kd * dil.x;
        int ih = oh * str.y - pb.y + kh * dil.y;
        __global float *dst = col + r * out.z;
        if (id < 0 || id >= in.x || ih < 0 || ih >= in.y) {
            for (int ow = 0; ow < out.z; ow++) dst[ow] = 0.0f;
            continue;
        }
        __global const float *src = x + ((c * in.x + id) * in.y + ih) * (long)in.z;
        int w0 = kw * dil.z - pb.z;
        for (int ow = 0; ow < out.z; ow++) {
            int iw = ow * str.z + w0;
            dst[ow] = iw >= 0 && iw < in.z ? src[iw] : 0.0f;
        }
    }
}

/* Depthwise: output channel m reads input channel m / (M / C). One item per output row
 * (b, m, od, oh). */
__kernel void conv_depthwise(__global const float *x, __global const float *w,
                             __global const float *bias, int has_bias,
                             __global const float *z, int has_z, __global float *y, long rows,
                             int C, int M, int4 in, int4 out, int4 ker, int4 str, int4 dil,
                             int4 pb, int act, float p, float q, long chunk) {
    FOR_ITEMS(r, rows) {
        int oh = r % out.y;
        long t = r / out.y;
        int od = t % out.x;
        t /= out.x;
        int m = t % M;
        long b = t / M;
        int c = m / (M / C);
        __global const float *xp = x + (b * C + c) * (long)in.x * in.y * in.z;
        __global const float *wp = w + (long)m * ker.x * ker.y * ker.z;
        float bv = has_bias ? bias[m] : 0.0f;
        for (int ow = 0; ow < out.z; ow++) {
            float acc = 0.0f;
            for (int kd = 0; kd < ker.x; kd++) {
                int id = od * str.x - pb.x + kd * dil.x;
                if (id < 0 || id >= in.x) continue;
                for (int kh = 0; kh < ker.y; kh++) {
                    int ih = oh * str.y - pb.y + kh * dil.y;
                    if (ih < 0 || ih >= in.y) continue;
                    __global const float *row = xp + ((long)id * in.y + ih) * in.z;
                    __global const float *wr = wp + (kd * ker.y + kh) * ker.z;
                    for (int kw = 0; kw < ker.z; kw++) {
                        int iw = ow * str.z - pb.z + kw * dil.z;
                        if (iw >= 0 && iw < in.z) acc = fma(row[iw], wr[kw], acc);
                    }
                }
            }
            long i = r * out.z + ow;
            acc += bv;
            if (has_z) acc += z[i];
            y[i] = act_apply(acc, act, p, q);
        }
    }
}
);

static void set4(cl_int4 *v, const int64_t *vals, int nsp, int64_t fill) {
    for (int i = 0; i < 4; i++) {
        int j = i - (3 - nsp);
        v->s[i] = (cl_int)(i < 3 && j >= 0 ? vals[j] : fill);
    }
}

/* FusedConv's activation attributes -> epilogue code and parameters. */
static tdm_status *fused_activation(const tdm_node *node, int *act, float *p, float *q) {
    const char *a = tdm_attr_string(node, "activation", "");
    size_t np = 0, naff;
    if (tdm_attr_floats(node, "activation_affine", &naff)) /* (not in the epilogue: the CPU's) */
        return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "opencl: activation_affine");
    const float *pp = tdm_attr_floats(node, "activation_params", &np);
    static const struct {
        const char *name;
        int code;
        int n_params;
        float p, q;
    } acts[] = {
        {"", OCL_ACT_NONE, 0, 0, 0},
        {"Relu", OCL_ACT_RELU, 0, 0, 0},
        {"LeakyRelu", OCL_ACT_LEAKY, 1, 0.01f, 0},
        {"Clip", OCL_ACT_CLIP, 2, -3.402823466e+38f, 3.402823466e+38f},
        {"Sigmoid", OCL_ACT_SIGMOID, 0, 0, 0},
        {"Tanh", OCL_ACT_TANH, 0, 0, 0},
        {"HardSigmoid", OCL_ACT_HSIGMOID, 2, 0.2f, 0.5f},
        {"HardSwish", OCL_ACT_HSWISH, 0, 0, 0},
        {"Gelu", OCL_ACT_GELU, 0, 0, 0},
        {"GeluTanh", OCL_ACT_GELU_TANH, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        if (strcmp(acts[i].name, a) != 0) continue;
        *act = acts[i].code;
        *p = acts[i].n_params > 0 && np > 0 ? pp[0] : acts[i].p;
        *q = acts[i].n_params > 1 && np > 1 ? pp[1] : acts[i].q;
        return NULL;
    }
    return tdm_node_error(node, TDM_ERR_UNSUPPORTED, "opencl: activation '%s'", a);
}

tdm_status *ocl_fused_activation(const tdm_node *node, int *act, float *p, float *q) {
    return fused_activation(node, act, p, q);
}

bool ocl_fused_activation_known(const tdm_node *node) {
    int act;
    float p, q;
    tdm_status *st = fused_activation(node, &act, &p, &q);
    bool ok = st == NULL;
    tdm_status_free(st);
    return ok;
}

static tdm_status *conv(tdm_kernel_ctx *ctx, bool fused) {
    const tdm_tensor *X = ctx->in[0], *W = ctx->in[1];
    const tdm_tensor *B = ctx->n_in > 2 ? ctx->in[2] : NULL;
    const tdm_tensor *Z = fused && ctx->n_in > 3 ? ctx->in[3] : NULL;
    tdm_tensor *Y = ctx->out[0];
    int act = OCL_ACT_NONE;
    float ap = 0, aq = 0;
    if (fused) TDM_TRY(fused_activation(ctx->node, &act, &ap, &aq));
    if (X->rank != W->rank || X->rank < 3)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input and weight ranks differ");
    tdm_nn_geom g;
    TDM_TRY(tdm_nn_geom_init(ctx->node, ctx->opset, TDM_NN_CONV, X->rank, X->dims, W->dims, &g));
    if (g.nsp > 3)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED,
                              "opencl: convolution over more than 3 spatial dims");
    int64_t group = tdm_attr_int(ctx->node, "group", 1);
    int64_t N = X->dims[0], C = X->dims[1], M = W->dims[0];
    if (group < 1 || C % group || M % group || W->dims[1] != C / group)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "channels do not match the groups");
    if (B && B->count != M)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "bias must have M values");
    if (Z && Z->count != Y->count)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Z must have Y's shape");
    int64_t isz = 1, osz = 1, ksz = 1;
    for (int i = 0; i < g.nsp; i++) {
        if (g.out[i] != Y->dims[2 + i])
            return tdm_node_error(ctx->node, TDM_ERR_INTERNAL, "output shape mismatch");
        if (g.in[i] > INT32_MAX || g.out[i] > INT32_MAX || g.kernel[i] > INT32_MAX ||
            g.stride[i] > INT32_MAX || g.dil[i] > INT32_MAX || g.pad_b[i] > INT32_MAX ||
            g.out[i] * g.stride[i] + g.kernel[i] * g.dil[i] > INT32_MAX)
            return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "opencl: window too large");
        isz *= g.in[i];
        osz *= g.out[i];
        ksz *= g.kernel[i];
    }
    if (C > INT32_MAX || M > INT32_MAX)
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "opencl: too many channels");
    ocl_device *d = ocl_ctx_device(ctx);
    ocl_scope s;
    ocl_scope_begin(&s, d);
    cl_mem x, w, b = d->dummy, z = d->dummy, y;
    tdm_status *st = ocl_in(&s, ctx, 0, &x);
    if (!st) st = ocl_in(&s, ctx, 1, &w);
    if (!st && B) st = ocl_in(&s, ctx, 2, &b);
    if (!st && Z) st = ocl_in(&s, ctx, 3, &z);
    if (!st) st = ocl_out(ctx, 0, &y);
    if (st || !Y->count) goto done;
    cl_int4 in, out, ker, str, dil, pb;
    set4(&in, g.in, g.nsp, 1);
    set4(&out, g.out, g.nsp, 1);
    set4(&ker, g.kernel, g.nsp, 1);
    set4(&str, g.stride, g.nsp, 1);
    set4(&dil, g.dil, g.nsp, 1);
    set4(&pb, g.pad_b, g.nsp, 0);
    if (C / group == 1) {
        cl_int has_b = B != NULL, has_z = Z != NULL, cc = (cl_int)C, mm = (cl_int)M, a = act;
        cl_long n = Y->count / out.s[2]; /* rows */
        cl_float p = ap, q = aq;
        ocl_arg args[] = {OCL_ARG(x),   OCL_ARG(w),   OCL_ARG(b),     OCL_ARG(has_b),
                          OCL_ARG(z),   OCL_ARG(has_z), OCL_ARG(y),   OCL_ARG(n),
                          OCL_ARG(cc),  OCL_ARG(mm),  OCL_ARG(in),    OCL_ARG(out),
                          OCL_ARG(ker), OCL_ARG(str), OCL_ARG(dil),   OCL_ARG(pb),
                          OCL_ARG(a),   OCL_ARG(p),   OCL_ARG(q)};
        st = ocl_launchn(d, OCL_PROG_conv, "conv_depthwise", n, out.s[2] * ksz, 19, args);
        goto done;
    }
    bool direct = ksz == 1;
    for (int i = 0; i < g.nsp; i++)
        if (g.stride[i] != 1 || g.pad_b[i] != 0 || g.pad_e[i] != 0) direct = false;
    int64_t Mg = M / group, Kg = C / group * ksz;
    cl_mem col = x;
    int64_t per = 1; /* images per GEMM */
    if (!direct) {
        size_t bytes;
        if (!tdm_mul_size((size_t)C * (size_t)ksz, (size_t)osz, &bytes) ||
            !tdm_mul_size(bytes, sizeof(float), &bytes)) {
            st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY,
                                "opencl: im2col buffer too large");
            goto done;
        }
        st = ocl_temp(&s, bytes, NULL, &col);
        if (st) goto done;
    } else {
        /* the GEMM reads the input as it is: several images per GEMM (batch dims image x
         * group), as many as keep its panels within OCL_CONV_PANEL_BUDGET */
        size_t a1, b1, one;
        if (!ocl_gemm_panel_bytes(d, Mg, osz, Kg, group, &a1, &b1) ||
            !tdm_add_size(a1, b1, &one)) {
            st = tdm_node_error(ctx->node, TDM_ERR_OUT_OF_MEMORY,
                                "opencl: GEMM panels too large");
            goto done;
        }
        per = one ? (int64_t)(OCL_CONV_PANEL_BUDGET / one) : N;
        if (per < 1) per = 1;
        if (per > N) per = N;
    }
    /* one pair of panel buffers for every GEMM of this node (ocl_gemm_ws) */
    ocl_gemm_ws ws = {0};
    for (int64_t img = 0; img < N && !st; img += per) {
        int64_t cnt = N - img < per ? N - img : per;
        int64_t b_off = direct ? img * C * isz : 0;
        if (!direct) {
            cl_long n = C * ksz * osz / out.s[2], xoff = img * C * isz; /* rows */
            ocl_arg args[] = {OCL_ARG(x),   OCL_ARG(xoff), OCL_ARG(col), OCL_ARG(n),
                              OCL_ARG(in),  OCL_ARG(out),  OCL_ARG(ker), OCL_ARG(str),
                              OCL_ARG(dil), OCL_ARG(pb)};
            st = ocl_launchn(d, OCL_PROG_conv, "im2col3d", n, out.s[2], 10, args);
            if (st) break;
        }
        ocl_gemm gm;
        ocl_gemm_init(&gm);
        gm.M = Mg;
        gm.N = osz;
        gm.K = Kg;
        gm.a = w;
        gm.sam = Kg;
        gm.sak = 1;
        gm.b = col;
        gm.b_off = b_off;
        gm.sbk = osz;
        gm.sbn = 1;
        gm.c = y;
        gm.c_off = img * M * osz;
        gm.has_bias = B != NULL;
        gm.bias = b;
        gm.sbm = 1;
        gm.sbn2 = 0;
        gm.has_z = Z != NULL;
        gm.z = z;
        gm.z_off = img * M * osz;
        gm.act = act;
        gm.act_p = ap;
        gm.act_q = aq;
        /* batch index = image * group + g: C (and z) of image i, group g start at
         * (i * group + g) * Mg * osz, as the GEMM lays its batches out */
        gm.batch = cnt * group;
        if (cnt > 1) {
            gm.bdims[gm.nbd] = cnt;
            gm.bsa[gm.nbd] = 0;
            gm.bsb[gm.nbd] = C * isz;
            gm.bsbias[gm.nbd] = 0;
            gm.nbd++;
        }
        if (group > 1) {
            gm.bdims[gm.nbd] = group;
            gm.bsa[gm.nbd] = Mg * Kg;
            gm.bsb[gm.nbd] = Kg * osz;
            gm.bsbias[gm.nbd] = Mg;
            gm.nbd++;
        }
        st = ocl_gemm_run_ws(d, &s, &gm, &ws);
    }
done:
    ocl_scope_end(&s);
    return st;
}

static tdm_status *run_conv(tdm_kernel_ctx *ctx) { return conv(ctx, false); }
static tdm_status *run_fused_conv(tdm_kernel_ctx *ctx) { return conv(ctx, true); }

#define F32 TDM_T(TDM_FLOAT)

bool ocl_window_attrs_ok(const tdm_node *node) {
    static const struct {
        const char *name;
        size_t max;
    } limits[] = {{"kernel_shape", 3}, {"strides", 3}, {"dilations", 3}, {"pads", 6},
                  {"output_shape", 3}, {"output_padding", 3}};
    for (size_t i = 0; i < sizeof limits / sizeof limits[0]; i++) {
        size_t n = 0;
        if (tdm_attr_ints(node, limits[i].name, &n) && n > limits[i].max) return false;
    }
    return true;
}

static bool fused_conv_ok(const tdm_node *node) {
    return ocl_window_attrs_ok(node) && ocl_fused_activation_known(node);
}

const ocl_kernel_entry ocl_kernels_conv[] = {
    {{"", "Conv", 1, 0, 0, F32, run_conv, NULL, NULL}, 0, ocl_window_attrs_ok},
    {{TDM_FUSED_DOMAIN, "FusedConv", 1, 0, 0, F32, run_fused_conv, NULL, NULL}, 0,
     fused_conv_ok},
};
const int ocl_kernels_conv_count = (int)(sizeof ocl_kernels_conv / sizeof ocl_kernels_conv[0]);
