/* The cost model: a roofline per node from its static shapes and the device profile.
 *
 *   ms = launch_us / 1000 + max(flops / GFLOP/s, bytes / GB/s)
 *
 * FLOPs come from the op's kind (table below): 2 * multiply-adds for convolutions and matrix
 * products, elements times a per-op constant for element-wise ops, reductions and
 * normalisations, 0 for pure data movement. Convolutions use the profile's conv_gflops
 * (depthwise ones dwconv_gflops, 1x1 ones conv1x1_gflops, where measured), all
 * other ops gemm_gflops (element-wise ops are bound by bytes on every device we know, so the
 * choice hardly matters there). A throughput of 0 ("not measured") falls back to the other
 * one, then to 1 GFLOP/s or 1 GB/s, so a predicted time is always finite.
 * Attention over a KV cache (GroupQueryAttention, PagedAttention) does work that the lengths
 * the run gives set, not the shapes (a shared-buffer cache is max_length rows at every step):
 * a profiled run counts its FLOPs and bytes from those values (tdm_node_run_cost), the static
 * model bounds them from the shapes.
 *
 * Copies: a profile whose h2d_gbps and d2h_gbps are both 0 (or a NULL profile) is a device
 * that works on host memory. Between two such devices a copy costs nothing; host -> device
 * costs the destination's latency + bytes / h2d, device -> host the source's latency +
 * bytes / d2h, and device -> other device both (it goes through the host). A device whose
 * copies the executor stages through its host_alloc memory (profile staged_copies, see
 * sched/xfer.h) is read with the pinned figures and the latency of each direction. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sched/cost.h"

typedef enum cost_kind {
    CK_ELEM,      /* per_elem * elements of the largest output */
    CK_INPUT,     /* per_elem * elements of input 0 (reductions, normalisations) */
    CK_MOVE,      /* no arithmetic */
    CK_CONV,      /* Conv, FusedConv, ConvInteger, QLinearConv (W at input w) */
    CK_CONV_T,    /* ConvTranspose */
    CK_MATMUL,    /* numpy batching; A at input a, B at input w */
    CK_GEMM,
    CK_ATTENTION, /* tandem's fused Attention */
    CK_POOL,      /* per output element times the window */
    CK_RNN,       /* RNN, GRU, LSTM */
    CK_EINSUM,
    CK_NBITS,     /* MatMulNBits (and its packed form): A [..., K] times the N x K weights of
                     the attributes K and N */
    CK_KV_ATTN,   /* GroupQueryAttention, PagedAttention: the rows each query row sees come
                     from lengths the run gives (tdm_node_run_cost); from shapes, a bound */
} cost_kind;

typedef enum read_kind {
    RD_ALL,    /* every input is read whole */
    RD_LIKE_OUT, /* input 0 is read only where the output comes from (Gather, Slice) */
    RD_NONE0,  /* input 0 is not read, only its shape (Shape, Size) */
} read_kind;

typedef struct op_cost {
    const char *op;
    cost_kind kind;
    double per_elem;  /* CK_ELEM / CK_INPUT: FLOPs per element; others: extra per output */
    int a, w;         /* inputs holding the data and the weights / B operand */
    read_kind reads;
} op_cost;

/* One table for every op the model knows; ops not in it count one FLOP per output element. */
static const op_cost op_costs[] = {
    /* convolutions and matrix products */
    {"Conv", CK_CONV, 0, 0, 1, RD_ALL},
    {"FusedConv", CK_CONV, 1, 0, 1, RD_ALL},
    {"BlockedConv", CK_CONV, 1, 0, 1, RD_ALL}, /* tandem: blocked layout (fuse_blocked.c) */
    {"ConvInteger", CK_CONV, 0, 0, 1, RD_ALL},
    {"QLinearConv", CK_CONV, 2, 0, 3, RD_ALL},
    {"ConvTranspose", CK_CONV_T, 0, 0, 1, RD_ALL},
    {"MatMul", CK_MATMUL, 0, 0, 1, RD_ALL},
    {"FusedMatMul", CK_MATMUL, 1, 0, 1, RD_ALL},
    {"MatMulInteger", CK_MATMUL, 0, 0, 1, RD_ALL},
    {"QLinearMatMul", CK_MATMUL, 2, 0, 3, RD_ALL},
    {"Gemm", CK_GEMM, 1, 0, 1, RD_ALL},
    {"Attention", CK_ATTENTION, 0, 0, 1, RD_ALL},
    {"GroupQueryAttention", CK_KV_ATTN, 0, 0, 3, RD_ALL}, /* w: past_key */
    {"PagedAttention", CK_KV_ATTN, 0, 0, 3, RD_ALL},      /* w: key_cache */
    {"MatMulNBits", CK_NBITS, 0, 0, 1, RD_ALL},
    {"MatMulNBitsPacked", CK_NBITS, 0, 0, 1, RD_ALL}, /* tandem: graph/fuse_nbits.c */
    {"Einsum", CK_EINSUM, 0, 0, 1, RD_ALL},
    {"RNN", CK_RNN, 2, 0, 1, RD_ALL},
    {"GRU", CK_RNN, 10, 0, 1, RD_ALL},
    {"LSTM", CK_RNN, 12, 0, 1, RD_ALL},
    /* pooling */
    {"MaxPool", CK_POOL, 1, 0, 0, RD_ALL},
    {"BlockedPool", CK_POOL, 1, 0, 0, RD_ALL},
    {"ToBlocked", CK_MOVE, 0, 0, 0, RD_ALL},
    {"FromBlocked", CK_MOVE, 0, 0, 0, RD_ALL},
    {"BlockedConcat", CK_MOVE, 0, 0, 0, RD_ALL},
    {"AveragePool", CK_POOL, 1, 0, 0, RD_ALL},
    {"LpPool", CK_POOL, 3, 0, 0, RD_ALL},
    {"MaxUnpool", CK_ELEM, 1, 0, 0, RD_ALL},
    {"GlobalAveragePool", CK_INPUT, 1, 0, 0, RD_ALL},
    {"GlobalMaxPool", CK_INPUT, 1, 0, 0, RD_ALL},
    {"GlobalLpPool", CK_INPUT, 3, 0, 0, RD_ALL},
    /* normalisations and softmax (per input element) */
    {"Softmax", CK_INPUT, 5, 0, 0, RD_ALL},
    {"LogSoftmax", CK_INPUT, 5, 0, 0, RD_ALL},
    {"Hardmax", CK_INPUT, 2, 0, 0, RD_ALL},
    {"LayerNormalization", CK_INPUT, 8, 0, 0, RD_ALL},
    {"SkipLayerNormalization", CK_INPUT, 9, 0, 0, RD_ALL},
    {"BatchNormalization", CK_INPUT, 2, 0, 0, RD_ALL},
    {"InstanceNormalization", CK_INPUT, 6, 0, 0, RD_ALL},
    {"GroupNormalization", CK_INPUT, 6, 0, 0, RD_ALL},
    {"LpNormalization", CK_INPUT, 3, 0, 0, RD_ALL},
    {"MeanVarianceNormalization", CK_INPUT, 6, 0, 0, RD_ALL},
    {"LRN", CK_INPUT, 10, 0, 0, RD_ALL},
    /* reductions (per input element) */
    {"ReduceSum", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceMean", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceMax", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceMin", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceProd", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceL1", CK_INPUT, 2, 0, 0, RD_ALL},
    {"ReduceL2", CK_INPUT, 2, 0, 0, RD_ALL},
    {"ReduceSumSquare", CK_INPUT, 2, 0, 0, RD_ALL},
    {"ReduceLogSum", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ReduceLogSumExp", CK_INPUT, 8, 0, 0, RD_ALL},
    {"ArgMax", CK_INPUT, 1, 0, 0, RD_ALL},
    {"ArgMin", CK_INPUT, 1, 0, 0, RD_ALL},
    {"TopK", CK_INPUT, 4, 0, 0, RD_ALL},
    {"CumSum", CK_INPUT, 1, 0, 0, RD_ALL},
    /* element-wise with transcendental functions (per output element) */
    {"Exp", CK_ELEM, 8, 0, 0, RD_ALL},
    {"Log", CK_ELEM, 8, 0, 0, RD_ALL},
    {"Pow", CK_ELEM, 16, 0, 0, RD_ALL},
    {"Sqrt", CK_ELEM, 2, 0, 0, RD_ALL},
    {"Sigmoid", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Tanh", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Erf", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Gelu", CK_ELEM, 14, 0, 0, RD_ALL},
    {"Softplus", CK_ELEM, 16, 0, 0, RD_ALL},
    {"Softsign", CK_ELEM, 3, 0, 0, RD_ALL},
    {"Elu", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Selu", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Celu", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Mish", CK_ELEM, 24, 0, 0, RD_ALL},
    {"HardSigmoid", CK_ELEM, 3, 0, 0, RD_ALL},
    {"HardSwish", CK_ELEM, 4, 0, 0, RD_ALL},
    {"Sin", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Cos", CK_ELEM, 10, 0, 0, RD_ALL},
    {"Tan", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Asin", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Acos", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Atan", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Sinh", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Cosh", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Asinh", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Acosh", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Atanh", CK_ELEM, 12, 0, 0, RD_ALL},
    {"Resize", CK_ELEM, 4, 0, 0, RD_ALL},
    {"Upsample", CK_ELEM, 4, 0, 0, RD_ALL},
    {"GridSample", CK_ELEM, 12, 0, 0, RD_ALL},
    {"DequantizeLinear", CK_ELEM, 2, 0, 0, RD_ALL},
    {"QuantizeLinear", CK_ELEM, 3, 0, 0, RD_ALL},
    {"DynamicQuantizeLinear", CK_ELEM, 5, 0, 0, RD_ALL},
    /* pure data movement */
    {"Gather", CK_MOVE, 0, 0, 0, RD_LIKE_OUT},
    {"GatherElements", CK_MOVE, 0, 0, 0, RD_LIKE_OUT},
    {"GatherND", CK_MOVE, 0, 0, 0, RD_LIKE_OUT},
    {"Slice", CK_MOVE, 0, 0, 0, RD_LIKE_OUT},
    {"Shape", CK_MOVE, 0, 0, 0, RD_NONE0},
    {"Size", CK_MOVE, 0, 0, 0, RD_NONE0},
    {"Concat", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Split", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Transpose", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Reshape", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Flatten", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Squeeze", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Unsqueeze", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Identity", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Dropout", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Expand", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Tile", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Pad", CK_MOVE, 0, 0, 0, RD_ALL},
    {"DepthToSpace", CK_MOVE, 0, 0, 0, RD_ALL},
    {"SpaceToDepth", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Constant", CK_MOVE, 0, 0, 0, RD_ALL},
    {"ConstantOfShape", CK_MOVE, 0, 0, 0, RD_ALL},
    {"ScatterND", CK_MOVE, 0, 0, 0, RD_ALL},
    {"ScatterElements", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Scatter", CK_MOVE, 0, 0, 0, RD_ALL},
    {"ReverseSequence", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Trilu", CK_MOVE, 0, 0, 0, RD_ALL},
    {"EyeLike", CK_MOVE, 0, 0, 0, RD_ALL},
    {"OneHot", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Range", CK_MOVE, 0, 0, 0, RD_ALL},
    {"Compress", CK_MOVE, 0, 0, 0, RD_ALL},
    {"NonZero", CK_MOVE, 0, 0, 0, RD_ALL},
};
#define N_OP_COSTS (sizeof op_costs / sizeof op_costs[0])

static const op_cost default_cost = {"", CK_ELEM, 1, 0, 0, RD_ALL};

/* The table by name, sorted once: a profiled run asks for every node's cost after each run
 * (two lookups a node), which a linear search of ~130 names made a visible part of a
 * profiled decode step. */
static const op_cost *by_name[N_OP_COSTS];
static pthread_once_t by_name_once = PTHREAD_ONCE_INIT;

static int cmp_cost(const void *a, const void *b) {
    return strcmp((*(const op_cost *const *)a)->op, (*(const op_cost *const *)b)->op);
}

static void sort_costs(void) {
    for (size_t i = 0; i < N_OP_COSTS; i++) by_name[i] = &op_costs[i];
    qsort(by_name, N_OP_COSTS, sizeof by_name[0], cmp_cost);
}

static const op_cost *find_cost(const tdm_node *n) {
    pthread_once(&by_name_once, sort_costs);
    size_t lo = 0, hi = N_OP_COSTS;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(by_name[mid]->op, n->op_type);
        if (c == 0) return by_name[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return &default_cost;
}

/* (the table's RD_NONE0 ops; a name test, not the table search: executors ask for every
 * input of every node of a run) */
bool tdm_node_reads_shape_only(const tdm_node *n, int k) {
    return n && k == 0 && n->op_type[0] == 'S' && !n->domain[0] &&
           (!strcmp(n->op_type, "Shape") || !strcmp(n->op_type, "Size"));
}

/* ---- shapes (unknown dims and unknown ranks count as 1) ---- */

static double dim(const tdm_value *v, int i) {
    if (!v || v->rank < 0 || i < 0 || i >= v->rank || v->dims[i] < 0) return 1;
    return (double)v->dims[i];
}

static double elems(const tdm_value *v) {
    if (!v || v->rank < 0) return 1;
    double c = 1;
    for (int i = 0; i < v->rank; i++) c *= v->dims[i] >= 0 ? (double)v->dims[i] : 1;
    return c;
}

double tdm_value_bytes(const tdm_value *v) {
    if (!v) return 0;
    size_t es = v->dtype == TDM_UNDEFINED ? 4 : tdm_dtype_elem_size(v->dtype);
    return elems(v) * (double)(es ? es : 4);
}

static const tdm_value *input(const tdm_graph *g, const tdm_node *n, int i) {
    if (i < 0 || i >= n->n_inputs || n->inputs[i] < 0 || (size_t)n->inputs[i] >= g->n_values)
        return NULL;
    return &g->values[n->inputs[i]];
}

static const tdm_value *output(const tdm_graph *g, const tdm_node *n, int i) {
    if (i < 0 || i >= n->n_outputs || n->outputs[i] < 0 || (size_t)n->outputs[i] >= g->n_values)
        return NULL;
    return &g->values[n->outputs[i]];
}

static double largest_output(const tdm_graph *g, const tdm_node *n) {
    double m = 0;
    for (int i = 0; i < n->n_outputs; i++) {
        const tdm_value *v = output(g, n, i);
        if (v && elems(v) > m) m = elems(v);
    }
    return m;
}

/* ---- FLOPs per kind ---- */

static double conv_flops(const tdm_graph *g, const tdm_node *n, const op_cost *c) {
    const tdm_value *x = input(g, n, c->a), *w = input(g, n, c->w), *y = output(g, n, 0);
    int64_t group = tdm_attr_int(n, "group", 1);
    if (group < 1) group = 1;
    double window = 1;
    if (w && w->rank >= 3) {
        for (int i = 2; i < w->rank; i++) window *= dim(w, i);
    } else {
        size_t nk = 0;
        const int64_t *k = tdm_attr_ints(n, "kernel_shape", &nk);
        for (size_t i = 0; i < nk; i++) window *= k[i] > 0 ? (double)k[i] : 1;
    }
    double cin_per_group = w && w->rank >= 2 && w->dims[1] >= 0 ? dim(w, 1) : dim(x, 1) / (double)group;
    double out;
    if (y && y->rank >= 0) {
        out = elems(y);
    } else { /* output shape unknown: input spatial size over the strides */
        size_t ns = 0;
        const int64_t *s = tdm_attr_ints(n, "strides", &ns);
        out = dim(x, 0) * (w && w->rank >= 1 ? dim(w, 0) : dim(x, 1));
        for (int i = 2; x && i < x->rank; i++) {
            double st = (size_t)(i - 2) < ns && s[i - 2] > 0 ? (double)s[i - 2] : 1;
            out *= dim(x, i) / st;
        }
    }
    return 2 * out * cin_per_group * window + c->per_elem * out + (input(g, n, 2) ? out : 0);
}

static double conv_t_flops(const tdm_graph *g, const tdm_node *n) {
    const tdm_value *x = input(g, n, 0), *w = input(g, n, 1);
    double window = 1;
    for (int i = 2; w && i < w->rank; i++) window *= dim(w, i);
    /* every input element meets (M / group) * window weights */
    return 2 * elems(x) * dim(w, 1) * window + (input(g, n, 2) ? largest_output(g, n) : 0);
}

static double matmul_flops(const tdm_graph *g, const tdm_node *n, const op_cost *c) {
    const tdm_value *a = input(g, n, c->a), *b = input(g, n, c->w);
    int ra = a && a->rank > 0 ? a->rank : 1, rb = b && b->rank > 0 ? b->rank : 1;
    double k = dim(a, ra - 1);
    double m = ra >= 2 ? dim(a, ra - 2) : 1;
    double nn = rb >= 2 ? dim(b, rb - 1) : 1;
    /* broadcast batch dims: aligned from the right, the larger of each pair */
    int ba = ra > 2 ? ra - 2 : 0, bb = rb > 2 ? rb - 2 : 0;
    int nb = ba > bb ? ba : bb;
    double batch = 1;
    for (int i = 0; i < nb; i++) {
        double da = i < ba ? dim(a, ba - 1 - i) : 1, db = i < bb ? dim(b, bb - 1 - i) : 1;
        batch *= da > db ? da : db;
    }
    double out = batch * m * nn;
    double extra = c->per_elem * out;
    if (!strcmp(n->op_type, "FusedMatMul") && input(g, n, 2)) extra += out;
    return 2 * out * k + extra;
}

static double gemm_flops(const tdm_graph *g, const tdm_node *n) {
    const tdm_value *a = input(g, n, 0), *b = input(g, n, 1);
    bool ta = tdm_attr_int(n, "transA", 0) != 0, tb = tdm_attr_int(n, "transB", 0) != 0;
    double m = dim(a, ta ? 1 : 0), k = dim(a, ta ? 0 : 1), nn = dim(b, tb ? 0 : 1);
    return 2 * m * nn * k + (input(g, n, 2) ? 2 : 1) * m * nn;
}

/* 2 M N K with M the rows of A (its elements / K); the attributes as the kernels read them */
static double nbits_flops(const tdm_graph *g, const tdm_node *n) {
    double K = (double)tdm_attr_int(n, "K", 0), N = (double)tdm_attr_int(n, "N", 0);
    if (K <= 0 || N <= 0) return 0;
    double m = elems(input(g, n, 0)) / K;
    return 2 * m * N * K;
}

/* A score's FLOPs: its q.k (2 d), its share of p.V (2 dv), scale, mask and softmax (6). */
static double score_flops(double scores, double d, double dv) {
    return scores * (2 * d + 2 * dv + 6);
}

static double attention_flops(const tdm_graph *g, const tdm_node *n) {
    const tdm_value *q = input(g, n, 0), *k = input(g, n, 1), *v = input(g, n, 2);
    if (!q || q->rank != 4) return largest_output(g, n);
    double bh = dim(q, 0) * dim(q, 1), s = dim(q, 2), d = dim(q, 3);
    double t = k && k->rank == 4 ? dim(k, 2) : s;
    double dv = v && v->rank == 4 ? dim(v, 3) : d;
    return score_flops(bh * s * t, d, dv);
}

/* ---- attention over a KV cache (GroupQueryAttention, PagedAttention) ----
 * FLOPs = score_flops of heads x (cache rows the query rows see, summed). */
static double kv_attn_work(double heads, double rows_seen, double d) {
    return score_flops(heads * rows_seen, d, d);
}

/* Rows seen by query rows 0..S-1 whose first sits at position `past` of a sequence `total`
 * rows long (causal: row s sees past + s + 1 of them, at most total; else all total), each
 * at most `win` (local_window_size, when > 0). In closed form: the shapes may declare any S. */
static double rows_seen(int64_t past, int64_t S, int64_t total, bool causal, int64_t win) {
    if (S <= 0) return 0;
    double cap = (double)(win > 0 && win < total ? win : total), s = (double)S;
    if (cap < 0) cap = 0;
    if (!causal) return s * cap;
    double a = (double)(past > 0 ? past : 0) + 1; /* row 0's count before the cap */
    double k = cap - a; /* rows below the cap: a, a + 1, ..., a + k - 1 */
    k = k < 0 ? 0 : k > s ? s : k;
    return k * a + k * (k - 1) / 2 + (s - k) * cap;
}

/* The head size and query heads from the query's last dim (packed QKV when key is absent). */
static double kv_attn_head_size(const tdm_node *n, double last, bool packed, double *heads) {
    int64_t h = tdm_attr_int(n, "num_heads", 0), kvh = tdm_attr_int(n, "kv_num_heads", 0);
    *heads = h > 0 ? (double)h : 1;
    double parts = packed ? (double)h + 2 * (double)(kvh > 0 ? kvh : 0) : (double)h;
    return parts > 0 ? last / parts : last;
}

static bool paged(const tdm_node *n) { return !strcmp(n->op_type, "PagedAttention"); }

static bool kv_attn_causal(const tdm_node *n) {
    return tdm_attr_int(n, paged(n) ? "is_causal" : "causal", 1) != 0;
}

/* From shapes alone the lengths are not known: GroupQueryAttention counts S query rows after
 * past_key's P rows (exact for caches of the past's length; with a shared buffer P is the
 * buffer's length, so an upper bound), PagedAttention one prompt of its T tokens with no
 * past (a lower bound). tdm_node_run_cost counts what a run did. */
static double kv_attn_flops(const tdm_graph *g, const tdm_node *n) {
    const tdm_value *q = input(g, n, 0);
    if (!q || q->rank < 2) return largest_output(g, n);
    bool causal = kv_attn_causal(n);
    int64_t win = tdm_attr_int(n, "local_window_size", -1);
    double heads, d = kv_attn_head_size(n, dim(q, q->rank - 1), !input(g, n, 1), &heads);
    double s = dim(q, q->rank - 2);
    if (paged(n)) return kv_attn_work(heads, rows_seen(0, (int64_t)s, (int64_t)s, causal, win), d);
    const tdm_value *pk = input(g, n, 3);
    double p = pk && pk->rank == 4 ? dim(pk, 2) : 0;
    double b = q->rank == 3 ? dim(q, 0) : 1;
    return b * kv_attn_work(heads, rows_seen((int64_t)p, (int64_t)s, (int64_t)(p + s), causal, win), d);
}

/* An int32 tensor of at least `count` elements in host memory. */
static const int32_t *host_i32(const tdm_tensor *t, int64_t count) {
    return t && !t->device && t->data && t->dtype == TDM_INT32 && t->count >= count
               ? (const int32_t *)t->data
               : NULL;
}

static double nbytes(const tdm_tensor *t) { return t ? (double)t->nbytes : 0; }

/* The cache rows one kv head of a sequence reads for query rows 0..S-1 (rows_seen's ranges,
 * read once for all of them: from the first row's first to the last row's end). */
static double rows_read(int64_t past, int64_t S, int64_t total, bool causal, int64_t win) {
    if (S <= 0) return 0;
    int64_t end = total, first = causal && past + 1 < total ? past + 1 : total;
    int64_t lo = win > 0 && first > win ? first - win : 0;
    return end > lo ? (double)(end - lo) : 0;
}

bool tdm_node_run_cost(const tdm_node *n, int n_in, const tdm_tensor *const *in, int n_out,
                       tdm_tensor *const *out, double *flops, double *bytes) {
    if (!n || !in || n_in < 7 || find_cost(n)->kind != CK_KV_ATTN) return false;
    const tdm_tensor *q = in[0], *kc = in[3];
    if (!q || q->rank < 2) return false;
    bool causal = kv_attn_causal(n);
    int64_t win = tdm_attr_int(n, "local_window_size", -1);
    double heads, d = kv_attn_head_size(n, (double)q->dims[q->rank - 1], !in[1], &heads);
    int64_t kvh = tdm_attr_int(n, "kv_num_heads", 0);
    double seen = 0, read = 0, rows_new = (double)q->dims[q->rank - 2]; /* rows of one kv head */
    double row_bytes;                                                      /* all kv heads' */
    if (paged(n)) { /* cumulative_sequence_length [B + 1], past_seqlens [B] */
        int64_t B = in[6] && in[6]->rank == 1 ? in[6]->dims[0] : -1;
        const int32_t *cu = B >= 0 ? host_i32(in[5], B + 1) : NULL, *past = host_i32(in[6], B);
        if (!cu || !past || !kc || kc->rank < 3) return false;
        for (int64_t b = 0; b < B; b++) {
            int64_t nb = (int64_t)cu[b + 1] - cu[b], tot = (int64_t)past[b] + nb;
            seen += rows_seen(past[b], nb, tot, causal, win);
            read += rows_read(past[b], nb, tot, causal, win);
        }
        /* a slot (one position, every kv head): [NB, BS, ..] or BHSD [NB, KVH, BS, row] */
        bool bhsd = !strcmp(tdm_attr_string(n, "tandem_kv_layout", "BSHD"), "BHSD");
        double slots = (double)kc->dims[0] * (double)kc->dims[bhsd && kc->rank == 4 ? 2 : 1];
        row_bytes = slots > 0 ? nbytes(kc) / slots : 0;
        *bytes = nbytes(in[7]); /* block_table */
    } else { /* seqlens_k [B] (total length - 1), total_sequence_length */
        if (q->rank != 3) return false;
        int64_t B = q->dims[0], S = q->dims[1];
        const int32_t *sl = host_i32(in[5], B), *tl = host_i32(in[6], 1);
        if (!sl || !tl) return false;
        bool first = S == (int64_t)tl[0];
        for (int64_t b = 0; b < B; b++) {
            int64_t t = (int64_t)sl[b] + 1, p = first ? 0 : t - S;
            seen += rows_seen(p, S, t, causal, win);
            read += rows_read(p, S, t, causal, win);
        }
        rows_new *= (double)B;
        /* past (or, without one, present) [B, KVH, L, row]: a row of every kv head */
        const tdm_tensor *c = kc ? kc : n_out > 1 && out ? out[1] : NULL;
        row_bytes = c && c->rank == 4 && c->dims[0] * c->dims[2] > 0
                        ? nbytes(c) / ((double)c->dims[0] * (double)c->dims[2])
                        : (double)(kvh > 0 ? kvh : 1) * d * 4;
        *bytes = 0;
    }
    *flops = kv_attn_work(heads, seen, d);
    /* query / key / value read, the output written (heads x D floats a row), the lengths;
     * the cache rows read (K and V) and the new ones written; cos / sin rows at the positions */
    *bytes += nbytes(q) + nbytes(in[1]) + nbytes(in[2]) + nbytes(in[5]) + nbytes(in[6]);
    *bytes += rows_new * heads * d * 4;
    *bytes += 2 * (read + rows_new) * row_bytes;
    int cs = paged(n) ? 8 : 7;
    for (int k = cs; k < cs + 2 && k < n_in; k++)
        if (in[k] && in[k]->rank == 2) *bytes += rows_new * (double)in[k]->dims[1] * 4;
    /* present caches that are not the past's memory: the whole cache copied (read, written) */
    for (int k = 1; k <= 2 && k < n_out; k++)
        if (out && out[k] && in[2 + k] && out[k]->data != in[2 + k]->data) *bytes += 2 * nbytes(out[k]);
    return true;
}

static double pool_flops(const tdm_graph *g, const tdm_node *n, const op_cost *c) {
    size_t nk = 0;
    const int64_t *k = tdm_attr_ints(n, "kernel_shape", &nk);
    double window = 1;
    for (size_t i = 0; i < nk; i++) window *= k[i] > 0 ? (double)k[i] : 1;
    const tdm_value *y = output(g, n, 0);
    return c->per_elem * elems(y) * window;
}

static double rnn_flops(const tdm_graph *g, const tdm_node *n, const op_cost *c) {
    const tdm_value *x = input(g, n, 0), *w = input(g, n, 1), *r = input(g, n, 2);
    double steps = dim(x, 0) * dim(x, 1); /* seq * batch either layout */
    double dirs = dim(w, 0), gates_h = dim(w, 1), in = dim(w, 2);
    double h = r && r->rank == 3 ? dim(r, 2) : 1;
    return dirs * steps * (2 * gates_h * (in + h) + c->per_elem * h);
}

/* 2 * product of the sizes of every distinct index in the equation (no ellipsis); else one
 * FLOP per output element. */
static double einsum_flops(const tdm_graph *g, const tdm_node *n) {
    const char *eq = tdm_attr_string(n, "equation", NULL);
    double fallback = largest_output(g, n);
    if (!eq || strstr(eq, "...")) return fallback;
    double size[128] = {0};
    int in = 0, axis = 0;
    for (const char *p = eq; *p && *p != '-'; p++) {
        unsigned char ch = (unsigned char)*p;
        if (ch == ',') {
            in++;
            axis = 0;
        } else if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z')) {
            double d = dim(input(g, n, in), axis++);
            if (d > size[ch]) size[ch] = d;
        }
    }
    double f = 2;
    for (int i = 0; i < 128; i++)
        if (size[i] > 0) f *= size[i];
    return f;
}

double tdm_node_flops(const tdm_graph *g, const tdm_node *n) {
    if (!g || !n) return 0;
    const op_cost *c = find_cost(n);
    switch (c->kind) {
    case CK_ELEM: return c->per_elem * largest_output(g, n);
    case CK_INPUT: return c->per_elem * elems(input(g, n, 0));
    case CK_MOVE: return 0;
    case CK_CONV: return conv_flops(g, n, c);
    case CK_CONV_T: return conv_t_flops(g, n);
    case CK_MATMUL: return matmul_flops(g, n, c);
    case CK_GEMM: return gemm_flops(g, n);
    case CK_ATTENTION: return attention_flops(g, n);
    case CK_POOL: return pool_flops(g, n, c);
    case CK_RNN: return rnn_flops(g, n, c);
    case CK_EINSUM: return einsum_flops(g, n);
    case CK_NBITS: return nbits_flops(g, n);
    case CK_KV_ATTN: return kv_attn_flops(g, n);
    }
    return 0;
}

double tdm_node_bytes(const tdm_graph *g, const tdm_node *n) {
    if (!g || !n) return 0;
    const op_cost *c = find_cost(n);
    double out = 0, first_out = 0;
    for (int i = 0; i < n->n_outputs; i++) {
        double b = tdm_value_bytes(output(g, n, i));
        if (i == 0) first_out = b;
        out += b;
    }
    double in = 0;
    for (int i = 0; i < n->n_inputs; i++) {
        const tdm_value *v = input(g, n, i);
        if (!v) continue;
        if (i == 0 && c->reads == RD_NONE0) continue;
        if (i == 0 && c->reads == RD_LIKE_OUT) {
            double b = tdm_value_bytes(v);
            in += b < first_out ? b : first_out;
            continue;
        }
        in += tdm_value_bytes(v);
    }
    return in + out;
}

static bool conv_like(const tdm_node *n) {
    return find_cost(n)->kind == CK_CONV || find_cost(n)->kind == CK_CONV_T;
}

/* The profile's throughput for a convolution of this kind: depthwise (one input channel per
 * group, group > 1) and pointwise (a 1x1 window) have their own benchmarks; others, and a
 * kind the profile has not measured, use conv_gflops. */
static double conv_rate(const tdm_graph *g, const tdm_node *n, const tdm_device_profile *p) {
    const op_cost *c = find_cost(n);
    const tdm_value *w = c->kind == CK_CONV ? input(g, n, c->w) : NULL;
    if (!w || w->rank < 3) return p->conv_gflops;
    int64_t group = tdm_attr_int(n, "group", 1);
    double window = 1;
    for (int i = 2; i < w->rank; i++) window *= dim(w, i);
    if (group > 1 && w->dims[1] == 1 && p->dwconv_gflops > 0) return p->dwconv_gflops;
    if (window == 1 && group == 1 && p->conv1x1_gflops > 0) return p->conv1x1_gflops;
    return p->conv_gflops;
}

double tdm_cost_node_ms(const tdm_graph *g, const tdm_node *n, const tdm_device_profile *p) {
    if (!g || !n || !p) return 0;
    double gf = conv_like(n) ? conv_rate(g, n, p) : p->gemm_gflops;
    double other = conv_like(n) ? p->gemm_gflops : p->conv_gflops;
    if (!(gf > 0)) gf = other > 0 ? other : 1;
    double bw = p->mem_gbps > 0 ? p->mem_gbps : 1;
    double launch = p->launch_us > 0 ? p->launch_us : 0;
    double compute = tdm_node_flops(g, n) / (gf * 1e6), memory = tdm_node_bytes(g, n) / (bw * 1e6);
    return launch / 1000 + (compute > memory ? compute : memory);
}

static bool host_side(const tdm_device_profile *p) {
    return !p || (!(p->h2d_gbps > 0) && !(p->d2h_gbps > 0));
}

static double link_ms(double bytes, double latency_us, double gbps, double other_gbps) {
    double bw = gbps > 0 ? gbps : other_gbps > 0 ? other_gbps : 1;
    return (latency_us > 0 ? latency_us : 0) / 1000 + (bytes > 0 ? bytes : 0) / (bw * 1e6);
}

double tdm_cost_copy_ms(double bytes, const tdm_device_profile *from, const tdm_device_profile *to) {
    bool hf = host_side(from), ht = host_side(to);
    if (hf && ht) return 0;
    if (from && to && (from == to || (from->device[0] && !strcmp(from->device, to->device))))
        return 0; /* the same device */
    double ms = 0;
    if (!hf && from->staged_copies && from->d2h_pinned_gbps > 0)
        ms += link_ms(bytes, from->d2h_pinned_latency_us, from->d2h_pinned_gbps, from->h2d_pinned_gbps);
    else if (!hf)
        ms += link_ms(bytes, from->link_latency_us, from->d2h_gbps, from->h2d_gbps);
    if (!ht && to->staged_copies && to->h2d_pinned_gbps > 0)
        ms += link_ms(bytes, to->h2d_pinned_latency_us, to->h2d_pinned_gbps, to->d2h_pinned_gbps);
    else if (!ht)
        ms += link_ms(bytes, to->link_latency_us, to->h2d_gbps, to->d2h_gbps);
    return ms;
}
