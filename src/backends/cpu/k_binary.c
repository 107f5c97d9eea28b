/* CPU kernels: binary family — elementwise ops with numpy broadcasting. The kernels here
 * check dtypes, pick the inner loop for the dtype and hand it to the broadcast engine
 * (k_binary_bcast.c); the loops live in k_binary_arith.c and k_binary_logic.c. */
#include <string.h>

#include "backends/cpu/k_binary_impl.h"
#include "core/alloc.h"

static tdm_status *unsupported(tdm_kernel_ctx *ctx, tdm_dtype dt) {
    return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "no CPU kernel for %s inputs",
                          tdm_dtype_name(dt));
}

/* Inputs [from, to) are present and share one dtype. */
static tdm_status *check_inputs(tdm_kernel_ctx *ctx, int from, int to) {
    for (int i = from; i < to; i++) {
        if (i >= ctx->n_in || !ctx->in[i])
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "input %d is missing", i);
        if (ctx->in[i]->dtype != ctx->in[from]->dtype)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                                  "input %d is %s but input %d is %s", i,
                                  tdm_dtype_name(ctx->in[i]->dtype), from,
                                  tdm_dtype_name(ctx->in[from]->dtype));
    }
    return NULL;
}

/* B as an operand; before opset 7 with broadcast=1, B's dims placed at `axis` of A's rank. */
static tdm_status *operand_b(tdm_kernel_ctx *ctx, int64_t *dims, tdm_kb_operand *b) {
    const tdm_tensor *ta = ctx->in[0], *tb = ctx->in[1];
    *b = tdm_kb_operand_of(tb);
    if (ctx->opset >= 7 || tdm_attr_int(ctx->node, "broadcast", 0) == 0) return NULL;
    int64_t axis = tdm_attr_int(ctx->node, "axis", ta->rank - tb->rank);
    if (axis < 0) axis += ta->rank;
    if (axis < 0 || tb->rank > ta->rank || axis + tb->rank > ta->rank)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                              "legacy broadcast: B of rank %d does not fit A of rank %d", tb->rank,
                              ta->rank);
    for (int d = 0; d < ta->rank; d++)
        dims[d] = (d >= axis && d < axis + tb->rank) ? tb->dims[d - axis] : 1;
    b->rank = ta->rank;
    b->dims = dims;
    return NULL;
}

/* out = fn(in[0], in[1]) with broadcasting. */
static tdm_status *run2(tdm_kernel_ctx *ctx, tdm_kb_fn2 fn, int64_t grain) {
    int64_t bdims[TDM_MAX_RANK];
    tdm_kb_operand in[2];
    in[0] = tdm_kb_operand_of(ctx->in[0]);
    TDM_TRY(operand_b(ctx, bdims, &in[1]));
    tdm_kb_out out = tdm_kb_out_of(ctx->out[0]);
    return tdm_kb_run(ctx, 2, in, fn, NULL, &out, grain);
}

static tdm_status *arith(tdm_kernel_ctx *ctx, tdm_kb_arith op, int64_t grain) {
    TDM_TRY(check_inputs(ctx, 0, 2));
    tdm_kb_fn2 fn = tdm_kb_arith_fn(op, ctx->in[0]->dtype);
    if (!fn) return unsupported(ctx, ctx->in[0]->dtype);
    return run2(ctx, fn, grain);
}

static tdm_status *logic(tdm_kernel_ctx *ctx, tdm_kb_logic op, int64_t grain) {
    TDM_TRY(check_inputs(ctx, 0, 2));
    tdm_kb_fn2 fn = tdm_kb_logic_fn(op, ctx->in[0]->dtype);
    if (!fn) return unsupported(ctx, ctx->in[0]->dtype);
    return run2(ctx, fn, grain);
}

#define KB_ARITH_RUN(name, op)                                                             \
    static tdm_status *name(tdm_kernel_ctx *ctx) { return arith(ctx, op, TDM_KB_GRAIN_CHEAP); }
KB_ARITH_RUN(run_add, TDM_KB_ADD)
KB_ARITH_RUN(run_sub, TDM_KB_SUB)
KB_ARITH_RUN(run_mul, TDM_KB_MUL)

static tdm_status *run_div(tdm_kernel_ctx *ctx) {
    bool flt = ctx->n_in > 0 && ctx->in[0] && tdm_dtype_is_float(ctx->in[0]->dtype);
    return arith(ctx, TDM_KB_DIV, flt ? TDM_KB_GRAIN_CHEAP : TDM_KB_GRAIN_COSTLY);
}

static tdm_status *run_mod(tdm_kernel_ctx *ctx) {
    int64_t f = tdm_attr_int(ctx->node, "fmod", 0);
    if (f != 0 && f != 1)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "fmod must be 0 or 1");
    return arith(ctx, f ? TDM_KB_FMOD : TDM_KB_MOD, TDM_KB_GRAIN_COSTLY);
}

static tdm_status *run_prelu(tdm_kernel_ctx *ctx) {
    TDM_TRY(check_inputs(ctx, 0, 2));
    const tdm_tensor *x = ctx->in[0], *s = ctx->in[1];
    tdm_kb_fn2 fn = tdm_kb_arith_fn(TDM_KB_PRELU, x->dtype);
    if (!fn) return unsupported(ctx, x->dtype);
    tdm_kb_operand in[2] = {tdm_kb_operand_of(x), tdm_kb_operand_of(s)};
    int64_t sdims[TDM_MAX_RANK];
    bool ok = s->rank <= x->rank;
    for (int d = 0; ok && d < s->rank; d++) {
        int64_t sd = s->dims[d];
        if (sd != 1 && sd != x->dims[x->rank - s->rank + d]) ok = false;
    }
    if (!ok && ctx->opset < 7 && s->rank == 1 && x->rank >= 2 && s->dims[0] == x->dims[1]) {
        /* Legacy per-channel slope: [C] applies along dim 1. */
        sdims[0] = s->dims[0];
        for (int d = 1; d < x->rank - 1; d++) sdims[d] = 1;
        in[1].rank = x->rank - 1;
        in[1].dims = sdims;
    }
    tdm_kb_out out = tdm_kb_out_of(ctx->out[0]);
    return tdm_kb_run(ctx, 2, in, fn, NULL, &out, TDM_KB_GRAIN_CHEAP);
}

/* Pow: the exponent may have another dtype than the base. float/float and double/double run
 * directly; otherwise the exponent is first converted to int64 (integer base and exponent)
 * or double. */
static tdm_status *run_pow(tdm_kernel_ctx *ctx) {
    if (ctx->n_in < 2 || !ctx->in[0] || !ctx->in[1])
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "Pow needs two inputs");
    const tdm_tensor *a = ctx->in[0], *b = ctx->in[1];
    tdm_dtype bt = a->dtype, et = b->dtype;
    if ((unsigned)et >= 32 || !(TDM_T(et) & TDM_T_NUMERIC))
        return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "exponent of type %s",
                              tdm_dtype_name(et));
    bool direct = (bt == TDM_FLOAT && et == TDM_FLOAT) || (bt == TDM_DOUBLE && et == TDM_DOUBLE);
    bool int_exp = !tdm_dtype_is_float(bt) && !tdm_dtype_is_float(et);
    tdm_dtype want = direct ? et : int_exp ? TDM_INT64 : TDM_DOUBLE;
    tdm_kb_fn2 fn = tdm_kb_pow_fn(bt, want);
    if (!fn) return unsupported(ctx, bt);

    void *conv = NULL;
    int64_t bdims[TDM_MAX_RANK];
    tdm_kb_operand in[2];
    in[0] = tdm_kb_operand_of(a);
    TDM_TRY(operand_b(ctx, bdims, &in[1]));
    if (want != et) {
        conv = tdm_kscratch(ctx, (size_t)(b->count > 0 ? b->count : 1) * 8);
        if (!conv) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory converting the exponent");
        if (want == TDM_INT64) {
            int64_t *p = conv;
            for (int64_t i = 0; i < b->count; i++) p[i] = tdm_tensor_get_i64(b, i);
        } else {
            double *p = conv;
            for (int64_t i = 0; i < b->count; i++) p[i] = tdm_tensor_get_f64(b, i);
        }
        in[1].data = conv;
        in[1].esize = 8;
    }
    tdm_kb_out out = tdm_kb_out_of(ctx->out[0]);
    tdm_status *st = tdm_kb_run(ctx, 2, in, fn, NULL, &out, TDM_KB_GRAIN_COSTLY);
    tdm_free(ctx->alloc, conv);
    return st;
}

static tdm_status *run_bitshift(tdm_kernel_ctx *ctx) {
    const char *dir = tdm_attr_string(ctx->node, "direction", "");
    if (strcmp(dir, "LEFT") == 0) return logic(ctx, TDM_KB_SHL, TDM_KB_GRAIN_CHEAP);
    if (strcmp(dir, "RIGHT") == 0) return logic(ctx, TDM_KB_SHR, TDM_KB_GRAIN_CHEAP);
    return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT,
                          "direction must be \"LEFT\" or \"RIGHT\"");
}

#define KB_LOGIC_RUN(name, op)                                                             \
    static tdm_status *name(tdm_kernel_ctx *ctx) { return logic(ctx, op, TDM_KB_GRAIN_CHEAP); }
KB_LOGIC_RUN(run_equal, TDM_KB_EQUAL)
KB_LOGIC_RUN(run_less, TDM_KB_LESS)
KB_LOGIC_RUN(run_less_equal, TDM_KB_LESS_EQUAL)
KB_LOGIC_RUN(run_greater, TDM_KB_GREATER)
KB_LOGIC_RUN(run_greater_equal, TDM_KB_GREATER_EQUAL)
KB_LOGIC_RUN(run_and, TDM_KB_AND)
KB_LOGIC_RUN(run_or, TDM_KB_OR)
KB_LOGIC_RUN(run_xor, TDM_KB_XOR)
KB_LOGIC_RUN(run_bit_and, TDM_KB_BIT_AND)
KB_LOGIC_RUN(run_bit_or, TDM_KB_BIT_OR)
KB_LOGIC_RUN(run_bit_xor, TDM_KB_BIT_XOR)

static tdm_status *run_where(tdm_kernel_ctx *ctx) {
    TDM_TRY(check_inputs(ctx, 1, 3));
    if (!ctx->in[0] || ctx->in[0]->dtype != TDM_BOOL)
        return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "condition must be bool");
    tdm_dtype dt = ctx->in[1]->dtype;
    tdm_kb_fn3 fn = tdm_kb_where_fn(dt);
    if (!fn) return unsupported(ctx, dt);
    tdm_kb_operand in[3];
    for (int i = 0; i < 3; i++) in[i] = tdm_kb_operand_of(ctx->in[i]);
    tdm_tensor *o = ctx->out[0];
    tdm_kb_out out = tdm_kb_out_of(o);
    TDM_TRY(tdm_kb_run(ctx, 3, in, NULL, fn, &out, TDM_KB_GRAIN_CHEAP));
    if (dt == TDM_STRING) { /* the output holds borrowed pointers: make them its own */
        char **s = o->data;
        for (int64_t i = 0; i < o->count; i++) {
            if (!s[i]) continue;
            char *d = tdm_strdup(o->alloc, s[i]);
            if (!d) {
                for (int64_t j = i; j < o->count; j++) s[j] = NULL;
                return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory copying strings");
            }
            s[i] = d;
        }
    }
    return NULL;
}

/* Sum, Mean, Max, Min: out = in0 op in1, then out op in2... (ping-pong through scratch,
 * as a loop never writes the buffer it reads). */
static tdm_status *variadic(tdm_kernel_ctx *ctx, tdm_kb_arith op, bool mean) {
    TDM_TRY(check_inputs(ctx, 0, ctx->n_in));
    int n = ctx->n_in;
    tdm_tensor *o = ctx->out[0];
    tdm_dtype dt = ctx->in[0]->dtype;
    tdm_kb_fn2 fn = tdm_kb_arith_fn(op, dt);
    if (!fn) return unsupported(ctx, dt);
    if (n == 1) {
        if (ctx->in[0]->count != o->count)
            return tdm_node_error(ctx->node, TDM_ERR_INVALID_ARGUMENT, "output shape mismatch");
        if (o->nbytes) memcpy(o->data, ctx->in[0]->data, o->nbytes);
    } else {
        tdm_kb_out out = tdm_kb_out_of(o);
        tdm_kb_operand in[2] = {tdm_kb_operand_of(ctx->in[0]), tdm_kb_operand_of(ctx->in[1])};
        TDM_TRY(tdm_kb_run(ctx, 2, in, fn, NULL, &out, TDM_KB_GRAIN_CHEAP));
        if (n > 2) {
            void *scratch = tdm_kscratch(ctx, o->nbytes ? o->nbytes : 1);
            if (!scratch) return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory for scratch");
            void *cur = o->data;
            tdm_status *st = NULL;
            for (int k = 2; k < n && !st; k++) {
                tdm_kb_operand acc = {cur, out.esize, o->rank, o->dims};
                tdm_kb_operand pair[2] = {acc, tdm_kb_operand_of(ctx->in[k])};
                tdm_kb_out dst = out;
                dst.data = cur == o->data ? scratch : o->data;
                st = tdm_kb_run(ctx, 2, pair, fn, NULL, &dst, TDM_KB_GRAIN_CHEAP);
                cur = dst.data;
            }
            if (!st && cur != o->data && o->nbytes) memcpy(o->data, cur, o->nbytes);
            tdm_free(ctx->alloc, scratch);
            TDM_TRY(st);
        }
    }
    if (mean) tdm_kb_scale_div(dt, o->data, o->count, n);
    return NULL;
}

static tdm_status *run_sum(tdm_kernel_ctx *ctx) { return variadic(ctx, TDM_KB_ADD, false); }
static tdm_status *run_mean(tdm_kernel_ctx *ctx) { return variadic(ctx, TDM_KB_ADD, true); }
static tdm_status *run_max(tdm_kernel_ctx *ctx) { return variadic(ctx, TDM_KB_MAX, false); }
static tdm_status *run_min(tdm_kernel_ctx *ctx) { return variadic(ctx, TDM_KB_MIN, false); }

#define CMP_TYPES (TDM_T_NUMERIC | TDM_T(TDM_BOOL))
#define WHERE_TYPES TDM_T_ALL

const tdm_kernel_def tdm_cpu_kernels_binary[] = {
    {"", "Add", 1, 0, 0, TDM_T_NUMERIC, run_add, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Sub", 1, 0, 0, TDM_T_NUMERIC, run_sub, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Mul", 1, 0, 0, TDM_T_NUMERIC, run_mul, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Div", 1, 0, 0, TDM_T_NUMERIC, run_div, NULL, NULL, TDM_KF_WRITES_ALL},
    {"", "Pow", 1, 0, 0, TDM_T_NUMERIC, run_pow, NULL, NULL},
    {"", "Mod", 10, 0, 0, TDM_T_NUMERIC, run_mod, NULL, NULL},
    {"", "BitShift", 11, 0, 0, TDM_T_UINTS, run_bitshift, NULL, NULL},
    {"", "And", 1, 0, 0, TDM_T(TDM_BOOL), run_and, NULL, NULL},
    {"", "Or", 1, 0, 0, TDM_T(TDM_BOOL), run_or, NULL, NULL},
    {"", "Xor", 1, 0, 0, TDM_T(TDM_BOOL), run_xor, NULL, NULL},
    {"", "BitwiseAnd", 18, 0, 0, TDM_T_INTS, run_bit_and, NULL, NULL},
    {"", "BitwiseOr", 18, 0, 0, TDM_T_INTS, run_bit_or, NULL, NULL},
    {"", "BitwiseXor", 18, 0, 0, TDM_T_INTS, run_bit_xor, NULL, NULL},
    {"", "Equal", 1, 0, 0, CMP_TYPES | TDM_T(TDM_STRING), run_equal, NULL, NULL},
    {"", "Less", 1, 0, 0, CMP_TYPES, run_less, NULL, NULL},
    {"", "LessOrEqual", 12, 0, 0, CMP_TYPES, run_less_equal, NULL, NULL},
    {"", "Greater", 1, 0, 0, CMP_TYPES, run_greater, NULL, NULL},
    {"", "GreaterOrEqual", 12, 0, 0, CMP_TYPES, run_greater_equal, NULL, NULL},
    {"", "Where", 9, 0, 1, WHERE_TYPES, run_where, NULL, NULL},
    {"", "Sum", 1, 0, 0, TDM_T_NUMERIC, run_sum, NULL, NULL},
    {"", "Mean", 1, 0, 0, TDM_T_FLOATS, run_mean, NULL, NULL},
    {"", "Max", 1, 0, 0, TDM_T_NUMERIC, run_max, NULL, NULL},
    {"", "Min", 1, 0, 0, TDM_T_NUMERIC, run_min, NULL, NULL},
    {"", "PRelu", 1, 0, 0, TDM_T_NUMERIC, run_prelu, NULL, NULL},
};
const int tdm_cpu_kernels_binary_count =
    (int)(sizeof tdm_cpu_kernels_binary / sizeof tdm_cpu_kernels_binary[0]);
