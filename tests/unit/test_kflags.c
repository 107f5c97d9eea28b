/* The kernel table's flags column (tdm_kernel_def.flags, backends/kernel.h) on the CPU.
 *
 * test_table_column: every entry of every CPU family has exactly the promises listed in
 * `promised` below and no other entry promises anything; a promise lost or added fails here
 * first (a new kernel for an op inherits nothing from another kernel of that op).
 *
 * test_promises_kept: whether the kernels keep them. Models (tests/models at opt levels 0 and
 * 1, where the graph passes make the fused and blocked ops, and small built models for the
 * rest) are planned for the CPU and run node by node. Each node first runs as the executor
 * runs it without promises (outputs zeroed), which gives the reference. A node whose kernel
 * promises WRITES_ALL runs again with every output byte pre-set to a NaN pattern: the
 * outputs must equal the reference bit for bit (a byte the kernel did not write keeps the
 * pattern). A node whose kernel promises INPLACE(i) runs once more with output 0 in input
 * i's memory (as the executor gives it): output 0 must equal the reference, bit for bit, or
 * for float32 within 1e-6 + 1e-5 |reference| (in place, oneDNN adds Z with a sum post-op
 * instead of a binary add: another rounding).
 * Every promised entry must have been checked at least once (and in place, for INPLACE). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_kernels.h"
#include "onnx/loader.h"
#include "ops/fused.h"
#include "sched/executor_internal.h"
#include "sched/plan.h"
#include "model_builder.h"

#include "test_ok.h"

#define WA TDM_KF_WRITES_ALL

/* The promises of the CPU kernel table: family, domain, op, flags. */
typedef struct promise {
    const char *family, *domain, *op;
    unsigned flags;
} promise;

static const promise promised[] = {
    {"dnnl", "", "Conv", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "FusedConv", WA | TDM_KF_INPLACE(3)},
    {"dnnl", "", "MatMul", WA},
    {"dnnl", "", "Gemm", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "FusedMatMul", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "BlockedConv", WA | TDM_KF_INPLACE(3)},
    {"dnnl", TDM_FUSED_DOMAIN, "ToBlocked", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "FromBlocked", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "BlockedConcat", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "ConvNwc1d", WA},
    {"binary", "", "Add", WA},
    {"binary", "", "Sub", WA},
    {"binary", "", "Mul", WA},
    {"binary", "", "Div", WA},
    {"shape", "", "Reshape", WA | TDM_KF_INPLACE(0)},
    {"shape", "", "Flatten", WA | TDM_KF_INPLACE(0)},
    {"shape", "", "Squeeze", WA | TDM_KF_INPLACE(0)},
    {"shape", "", "Unsqueeze", WA | TDM_KF_INPLACE(0)},
    {"shape", "", "Identity", WA | TDM_KF_INPLACE(0)},
    {"shape", "", "Transpose", WA},
    {"shape", "", "Concat", WA},
    {"shape", "", "Split", WA},
    {"shape", "", "Gather", WA},
    {"reduce", "", "Softmax", WA},
    {"reduce", "", "LayerNormalization", WA},
    {"fused", TDM_FUSED_DOMAIN, "Attention", WA},
    {"nbits", "com.microsoft", "MatMulNBits", WA},
    {"nbits", "com.microsoft", "GatherBlockQuantized", WA},
    {"nbits", TDM_FUSED_DOMAIN, "MatMulNBitsPacked", WA},
    {"llm", "", "SimplifiedLayerNormalization", WA},
    {"llm", "com.microsoft", "SkipSimplifiedLayerNormalization", WA},
    {"dnnl", "", "QLinearConv", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "QConv", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "QConvTranspose", WA},
    {"dnnl", "", "QLinearMatMul", WA},
    {"dnnl", TDM_FUSED_DOMAIN, "QMatMul", WA},
    {"dnnl", "", "MatMulInteger", WA},
    {"dnnl", "", "ConvInteger", WA},
};
#define N_PROMISED (sizeof promised / sizeof promised[0])

typedef struct family {
    const char *name;
    const tdm_kernel_def *table;
    const int *count;
} family;

static const family families[] = {
#define TDM_X_(fam) {#fam, tdm_cpu_kernels_##fam, &tdm_cpu_kernels_##fam##_count},
    TDM_CPU_FAMILIES(TDM_X_)
#undef TDM_X_
};
#define N_FAMILIES (sizeof families / sizeof families[0])

/* The promise listed for entry k of family f, or -1. */
static int promise_of(const family *f, const tdm_kernel_def *k) {
    for (size_t p = 0; p < N_PROMISED; p++)
        if (strcmp(promised[p].family, f->name) == 0 && strcmp(promised[p].domain, k->domain) == 0 &&
            strcmp(promised[p].op, k->op) == 0)
            return (int)p;
    return -1;
}

/* The promise of a kernel the plan chose, or -1 (not a table entry with a promise). */
static int promise_of_kernel(const tdm_kernel_def *k) {
    for (size_t f = 0; f < N_FAMILIES; f++)
        if (k >= families[f].table && k < families[f].table + *families[f].count)
            return promise_of(&families[f], k);
    return -1;
}

static void test_table_column(void **state) {
    (void)state;
    int seen[N_PROMISED] = {0};
    for (size_t f = 0; f < N_FAMILIES; f++)
        for (int i = 0; i < *families[f].count; i++) {
            const tdm_kernel_def *k = &families[f].table[i];
            int p = promise_of(&families[f], k);
            unsigned want = p >= 0 ? promised[p].flags : 0;
            if (k->flags != want)
                fail_msg("%s kernel %s%s%s (entry %d): flags 0x%x, listed 0x%x", families[f].name,
                         k->domain, k->domain[0] ? "." : "", k->op, i, k->flags, want);
            if (p >= 0) seen[p]++;
        }
    for (size_t p = 0; p < N_PROMISED; p++)
        if (seen[p] != 1)
            fail_msg("%s %s: %d table entries (want 1)", promised[p].family, promised[p].op, seen[p]);
}

/* ---- running the kernels ---- */

static int g_checked[N_PROMISED], g_checked_inplace[N_PROMISED];

#define PATTERN 0xffa5a5a5u /* a signalling NaN: no arithmetic on finite values yields it */

static void fill_pattern(tdm_tensor *t) {
    unsigned char *p = t->data;
    uint32_t w = PATTERN;
    for (size_t i = 0; i < t->nbytes; i++) p[i] = ((const unsigned char *)&w)[i % 4];
}

static tdm_status *no_alloc_output(tdm_kernel_ctx *ctx, int i, tdm_dtype dtype, int rank,
                                   const int64_t *dims) {
    (void)dtype;
    (void)rank;
    (void)dims;
    return TDM_ERR(TDM_ERR_INTERNAL, "%s: a kernel that writes all of its outputs allocated "
                   "output %d", ctx->node->op_type, i);
}

/* Runs kernel k of node n on `out` (made for the reference's shapes) and compares. */
static void run_and_compare(tdm_device *cpu, const tdm_node *n, const tdm_kernel_def *k,
                            void *kstate, const tdm_tensor *const *ins, tdm_tensor **out,
                            tdm_tensor *const *ref, int only_out0, const char *how) {
    tdm_kernel_ctx ctx = {.node = n, .opset = n->opset, .n_in = n->n_inputs, .in = ins,
                          .n_out = n->n_outputs, .out = out, .alloc = NULL, .state = kstate,
                          .alloc_output = no_alloc_output, .device = cpu};
    OK(tdm_device_execute(cpu, k, &ctx));
    for (int o = 0; o < n->n_outputs; o++) {
        if (!ref[o] || (only_out0 && o > 0)) continue;
        assert_non_null(out[o]);
        assert_int_equal(out[o]->nbytes, ref[o]->nbytes);
        if (memcmp(out[o]->data, ref[o]->data, ref[o]->nbytes) == 0) continue;
        if (only_out0 && ref[o]->dtype == TDM_FLOAT) {
            /* in place, a kernel may add an input by another route (oneDNN's sum post-op
             * instead of a binary add): float results agree to rounding */
            const float *a = out[o]->data, *b = ref[o]->data;
            int64_t bad = -1;
            for (int64_t i = 0; i < ref[o]->count && bad < 0; i++)
                if (!(fabsf(a[i] - b[i]) <= 1e-6f + 1e-5f * fabsf(b[i]))) bad = i;
            if (bad < 0) continue;
            fail_msg("%s node '%s' (%s): element %lld is %.9g, %.9g without in place "
                     "(tolerance 1e-6 + 1e-5 |want|)", n->op_type, n->name, how,
                     (long long)bad, (double)a[bad], (double)b[bad]);
        }
        size_t left = 0, first = SIZE_MAX;
        const unsigned char *a = out[o]->data, *b = ref[o]->data;
        for (size_t i = 0; i < ref[o]->nbytes; i++)
            if (a[i] != b[i] && first == SIZE_MAX) first = i;
        for (size_t i = 0; i + 4 <= ref[o]->nbytes; i += 4) {
            uint32_t w;
            memcpy(&w, a + i, 4);
            left += w == PATTERN;
        }
        fail_msg("%s node '%s' (%s), output %d: differs from the zeroed-output run from byte "
                 "%zu of %zu; %zu words still hold the pattern", n->op_type, n->name, how, o,
                 first, ref[o]->nbytes, left);
    }
}

/* The checks for node n whose reference outputs are `ref`. */
static void check_node(tdm_device *cpu, const tdm_node *n, const tdm_plan_node *pn,
                       const tdm_tensor *const *ins, tdm_tensor *const *ref) {
    const tdm_kernel_def *k = pn->kernel;
    int p = promise_of_kernel(k);
    unsigned want = p >= 0 ? tdm_kernel_flags(&(tdm_kernel_def){.flags = promised[p].flags}, n) : 0;
    if (pn->kflags != want)
        fail_msg("%s node '%s': the plan has flags 0x%x, the list 0x%x", n->op_type, n->name,
                 pn->kflags, want);
    if (!(pn->kflags & WA)) return;
    for (int o = 0; o < n->n_outputs; o++)
        if (ref[o] && ref[o]->dtype == TDM_STRING) return; /* no byte pattern for strings */
    tdm_tensor *out[16] = {0};
    assert_true(n->n_outputs <= 16 && n->n_inputs <= 16);
    for (int o = 0; o < n->n_outputs; o++) {
        if (!ref[o]) continue;
        OK(tdm_tensor_new(NULL, ref[o]->dtype, ref[o]->rank, ref[o]->dims, &out[o]));
        fill_pattern(out[o]);
    }
    run_and_compare(cpu, n, k, pn->state, ins, out, ref, 0, "outputs pre-set to a NaN pattern");
    g_checked[p]++;
    int ik = TDM_KF_INPLACE_INPUT(pn->kflags);
    const tdm_tensor *ins2[16];
    memcpy(ins2, ins, (size_t)n->n_inputs * sizeof *ins);
    if (ik >= 0 && ins[ik] && ref[0] && ins[ik]->dtype == ref[0]->dtype &&
        ins[ik]->nbytes == ref[0]->nbytes) {
        for (int o = 0; o < n->n_outputs; o++)
            if (out[o]) fill_pattern(out[o]);
        memcpy(out[0]->data, ins[ik]->data, ins[ik]->nbytes);
        ins2[ik] = out[0];
        run_and_compare(cpu, n, k, pn->state, ins2, out, ref, 1, "output 0 in the input's memory");
        g_checked_inplace[p]++;
    }
    for (int o = 0; o < n->n_outputs; o++) tdm_tensor_free(out[o]);
}

/* Plans g for the CPU at opt_level and runs it node by node with inputs `in` (one per graph
 * input without data, in order), checking every node. Takes g. */
static void run_graph(tdm_device *cpu, tdm_graph *g, int opt_level, tdm_tensor *const *in,
                      size_t n_in) {
    tdm_plan_options po = {.opt_level = opt_level, .placement = "first"};
    tdm_plan *p = NULL;
    OK(tdm_plan_create(NULL, g, &cpu, 1, NULL, &po, &p));
    g = p->graph;
    const tdm_tensor **vals = calloc(g->n_values + 1, sizeof *vals);
    tdm_tensor **own = calloc(g->n_values + 1, sizeof *own);
    assert_non_null(vals);
    assert_non_null(own);
    for (size_t v = 0; v < g->n_values; v++) vals[v] = g->values[v].data;
    size_t next = 0;
    for (size_t i = 0; i < g->n_inputs; i++) {
        int v = g->inputs[i];
        if (vals[v]) continue;
        assert_true(next < n_in);
        vals[v] = in[next++];
    }
    assert_int_equal(next, n_in);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        assert_int_equal(n->n_implicit, 0); /* no subgraphs here */
        const tdm_tensor *ins[16] = {0};
        tdm_tensor *ref[16] = {0};
        assert_true(n->n_inputs <= 16 && n->n_outputs <= 16);
        for (int j = 0; j < n->n_inputs; j++) ins[j] = n->inputs[j] >= 0 ? vals[n->inputs[j]] : NULL;
        tdm_status *st = tdm_exec_run_node(cpu, p->nodes[i].kernel, p->nodes[i].state, NULL, NULL,
                                           n, ins, ref, NULL);
        if (st) fail_msg("%s node '%s': %s", n->op_type, n->name, tdm_status_message(st));
        check_node(cpu, n, &p->nodes[i], ins, ref);
        for (int o = 0; o < n->n_outputs; o++) {
            int v = n->outputs[o];
            if (v < 0) {
                tdm_tensor_free(ref[o]);
                continue;
            }
            vals[v] = own[v] = ref[o];
        }
    }
    for (size_t v = 0; v < g->n_values; v++) tdm_tensor_free(own[v]);
    free(own);
    free(vals);
    tdm_plan_free(p);
}

static tdm_device *open_cpu(void) {
    tdm_device *devs[1];
    int n = 0;
    char why[200] = "";
    OK(tdm_backend_cpu.discover(NULL, NULL, &tdm_settings_builtin, devs, 1, &n, why, sizeof why));
    assert_int_equal(n, 1);
    return devs[0];
}

/* tests/models/<name> with its test_data_set_0 inputs, at opt levels 0 and 1 */
/* A model folder (model.onnx, test_data_set_0/input_N.pb) at DIR, at opt levels 0 and 1. */
static void run_model_at(tdm_device *cpu, const char *dir) {
    char path[512];
    tdm_tensor *in[16] = {0};
    size_t n_in = 0;
    for (;; n_in++) {
        snprintf(path, sizeof path, "%s/test_data_set_0/input_%zu.pb", dir, n_in);
        FILE *f = fopen(path, "rb");
        if (!f) break;
        fclose(f);
        assert_true(n_in < 16);
        OK(tdm_onnx_load_tensor_file(path, NULL, &in[n_in]));
    }
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    for (int opt = 0; opt <= 1; opt++) {
        tdm_onnx_model *m = NULL;
        OK(tdm_onnx_load_file(path, NULL, &m));
        tdm_graph *g = m->graph;
        m->graph = NULL;
        tdm_onnx_model_free(m);
        run_graph(cpu, g, opt, in, n_in);
    }
    for (size_t i = 0; i < n_in; i++) tdm_tensor_free(in[i]);
}

/* A model folder under tests/models. */
static void run_model_dir(tdm_device *cpu, const char *name) {
    char dir[400];
    snprintf(dir, sizeof dir, "%s/tests/models/%s", TANDEM_SOURCE_DIR, name);
    run_model_at(cpu, dir);
}

/* A built model with random float inputs in [0.5, 1.5) (divisors stay away from 0). */
static void run_built(tdm_device *cpu, mb_model *m, int opt_level) {
    size_t size = onnx__model_proto__get_packed_size(&m->model);
    void *buf = malloc(size);
    assert_non_null(buf);
    onnx__model_proto__pack(&m->model, buf);
    tdm_onnx_model *om = NULL;
    OK(tdm_onnx_load_buffer(buf, size, NULL, NULL, &om));
    free(buf);
    tdm_graph *g = om->graph;
    om->graph = NULL;
    tdm_onnx_model_free(om);
    tdm_tensor *in[16] = {0};
    uint32_t r = 12345;
    for (size_t i = 0; i < m->graph.n_input; i++) {
        OK(tdm_tensor_new(NULL, TDM_FLOAT, m->in_rank[i], m->in_dims[i], &in[i]));
        float *d = in[i]->data;
        for (int64_t k = 0; k < in[i]->count; k++) {
            r = r * 1664525u + 1013904223u;
            d[k] = 0.5f + (float)(r >> 8) / (float)(1u << 24);
        }
    }
    run_graph(cpu, g, opt_level, in, m->graph.n_input);
    for (size_t i = 0; i < m->graph.n_input; i++) tdm_tensor_free(in[i]);
    mb_free(m);
}

/* The ops of the list that the model tests do not reach, as written (opt level 0). */
static void built_plain_ops(tdm_device *cpu) {
    mb_model m;
    mb_init(&m, 17);
    IN(&m, "a", 2, 3, 5);
    IN(&m, "b", 2, 3, 5);
    IN(&m, "w", 5, 4);
    IN(&m, "c", 4);
    int64_t idx[3] = {2, 0, 1}, ax0[1] = {0}, shape[2] = {6, 5};
    mb_init_i64(&m, "idx", 3, idx);
    mb_init_i64(&m, "ax0", 1, ax0);
    mb_init_i64(&m, "shape", 2, shape);
    mb_node(&m, "Sub:a,b->s");
    mb_node(&m, "Div:s,b->d");
    mb_node(&m, "Mul:d,a->p");
    mb_node(&m, "Add:p,b->q");
    Onnx__NodeProto *n = mb_node(&m, "Transpose:q->t");
    int64_t perm[3] = {2, 0, 1};
    mb_attr_ints(&m, n, "perm", 3, perm);
    n = mb_node(&m, "Concat:a,q->cat");
    mb_attr_i(&m, n, "axis", 1);
    n = mb_node(&m, "Gather:cat,idx->g");
    mb_attr_i(&m, n, "axis", 1);
    mb_node(&m, "Unsqueeze:g,ax0->u");
    mb_node(&m, "Squeeze:u,ax0->sq");
    n = mb_node(&m, "Flatten:sq->f");
    mb_attr_i(&m, n, "axis", 2);
    mb_node(&m, "Identity:f->id");
    mb_node(&m, "Reshape:q,shape->r");
    n = mb_node(&m, "Softmax:r->sm");
    mb_attr_i(&m, n, "axis", 0);
    n = mb_node(&m, "LayerNormalization:q,c5,->ln");
    mb_attr_f(&m, n, "epsilon", 1e-3f);
    int64_t d5[1] = {5};
    float c5[5] = {0.5f, 1, 1.5f, 2, 2.5f};
    mb_init_f32(&m, "c5", 1, d5, 5, c5);
    mb_node(&m, "MatMul:r,w->mm");
    n = mb_node(&m, "Gemm:r,w,c->gm");
    mb_attr_f(&m, n, "beta", 0.5f);
    mb_output(&m, "t");
    mb_output(&m, "id");
    mb_output(&m, "sm");
    mb_output(&m, "ln");
    mb_output(&m, "mm");
    mb_output(&m, "gm");
    run_built(cpu, &m, 0);
}

/* Conv + residual Add + Relu, alone: one FusedConv with Z (the blocked pass leaves a lone
 * convolution as it is); MatMul + bias + Relu: FusedMatMul; Transpose(0, 2, 1, 3) -> Conv
 * along L, with B and pads and without either: ConvNwc1d. */
static void built_fused_ops(tdm_device *cpu) {
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 1, 4, 6, 6);
    IN(&m, "z", 1, 8, 6, 6);
    IN(&m, "a", 3, 16);
    float wv[8 * 4 * 9], bv[8], mv[16 * 8];
    for (int i = 0; i < 8 * 4 * 9; i++) wv[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8; i++) bv[i] = (float)i / 8.0f - 0.5f;
    for (int i = 0; i < 16 * 8; i++) mv[i] = (float)((i * 5) % 13) / 13.0f - 0.5f;
    int64_t wd[4] = {8, 4, 3, 3}, bd[1] = {8}, md[2] = {16, 8};
    mb_init_f32(&m, "w", 4, wd, 8 * 4 * 9, wv);
    mb_init_f32(&m, "b", 1, bd, 8, bv);
    mb_init_f32(&m, "mw", 2, md, 16 * 8, mv);
    Onnx__NodeProto *n = mb_node(&m, "Conv:x,w,b->c");
    int64_t pads[4] = {1, 1, 1, 1};
    mb_attr_ints(&m, n, "pads", 4, pads);
    mb_node(&m, "Add:c,z->s");
    mb_node(&m, "Relu:s->y");
    mb_node(&m, "MatMul:a,mw->t");
    mb_node(&m, "Add:t,b->u");
    mb_node(&m, "Relu:u->v");
    IN(&m, "sq", 2, 9, 4, 1);
    float nv[8 * 4 * 3];
    for (int i = 0; i < 8 * 4 * 3; i++) nv[i] = (float)((i * 5) % 7) / 7.0f - 0.5f;
    int64_t nd[4] = {8, 4, 3, 1}, perm[4] = {0, 2, 1, 3}, npads[4] = {1, 0, 1, 0};
    mb_init_f32(&m, "nw", 4, nd, 8 * 4 * 3, nv);
    mb_attr_ints(&m, mb_node(&m, "Transpose:sq->sqt"), "perm", 4, perm);
    n = mb_node(&m, "Conv:sqt,nw,b->nc");
    mb_attr_ints(&m, n, "pads", 4, npads);
    mb_output(&m, "y");
    mb_output(&m, "v");
    IN(&m, "sq2", 2, 9, 4, 1); /* without B: the first tap's product writes Y (beta 0) */
    mb_attr_ints(&m, mb_node(&m, "Transpose:sq2->sqt2"), "perm", 4, perm);
    mb_node(&m, "Conv:sqt2,nw->nc2");
    mb_output(&m, "nc");
    mb_output(&m, "nc2");
    run_built(cpu, &m, 1);
}

/* Two convolutions in a chain, the second with a residual graph input: the blocked-layout
 * pass makes BlockedConv nodes and a ToBlocked for the residual (Z), FromBlocked for Y. */
static void built_blocked_ops(tdm_device *cpu) {
    mb_model m;
    mb_init(&m, 13);
    IN(&m, "x", 1, 4, 6, 6);
    IN(&m, "z", 1, 8, 6, 6);
    float w1[8 * 4 * 9], w2[8 * 8 * 9];
    for (int i = 0; i < 8 * 4 * 9; i++) w1[i] = (float)((i * 7) % 11) / 11.0f - 0.5f;
    for (int i = 0; i < 8 * 8 * 9; i++) w2[i] = (float)((i * 3) % 17) / 17.0f - 0.5f;
    int64_t d1[4] = {8, 4, 3, 3}, d2[4] = {8, 8, 3, 3}, pads[4] = {1, 1, 1, 1};
    mb_init_f32(&m, "w1", 4, d1, 8 * 4 * 9, w1);
    mb_init_f32(&m, "w2", 4, d2, 8 * 8 * 9, w2);
    Onnx__NodeProto *n = mb_node(&m, "Conv:x,w1->c1");
    mb_attr_ints(&m, n, "pads", 4, pads);
    mb_node(&m, "Relu:c1->r1");
    n = mb_node(&m, "Conv:r1,w2->c2");
    mb_attr_ints(&m, n, "pads", 4, pads);
    mb_node(&m, "Add:c2,z->s");
    mb_node(&m, "Relu:s->y");
    mb_output(&m, "y");
    run_built(cpu, &m, 1);
}

static void test_promises_kept(void **state) {
    (void)state;
    tdm_device *cpu = open_cpu();
    static const char *const models[] = {"bert_layer", "dlrm_like", "mobilenet_block",
                                         "resnet_blocks", "yolo_like_head", "mlp_dynamic_batch"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) run_model_dir(cpu, models[i]);
    /* the LLM op models (tests/models_llm, models_llm_attn): decode, prefill and the int8 path,
     * a gather, the RMS normalisations */
    static const char *const llm_models[] = {
        "../models_llm/nbits_q4_zpu8_m1_acc0", "../models_llm/nbits_q8_m70_acc0",
        "../models_llm/nbits_q4_zpu8_kpad_m3_acc4", "../models_llm/nbits_gbq_q4_zp",
        /* the RMS normalisations: every output, the skip sum, an axis before the last */
        "../models_llm_attn/simplified_ln", "../models_llm_attn/simplified_ln_axis1",
        "../models_llm_attn/skip_simplified_ln", "../models_llm_attn/skip_simplified_ln_2d_all",
        "../models_llm_attn/skip_simplified_ln_bias_sum"};
    for (size_t i = 0; i < sizeof llm_models / sizeof llm_models[0]; i++)
        run_model_dir(cpu, llm_models[i]);
    /* the int8 models (tests/models_int8): QDQ (QConv, QMatMul, QConvTranspose after the QDQ
     * pass), QOperator (QLinearConv, QLinearMatMul) and dynamic (MatMulInteger, and ConvInteger
     * below) */
    static const char *const int8_models[] = {"../models_int8/cnn_qdq_u8", "../models_int8/cnn_qop",
                                              "../models_int8/mlp_qdq", "../models_int8/mlp_qop",
                                              "../models_int8/mlp_dyn", "../models_int8/qdq_deconv"};
    for (size_t i = 0; i < sizeof int8_models / sizeof int8_models[0]; i++)
        run_model_dir(cpu, int8_models[i]);
    /* ConvInteger: the ONNX node tests' models (libonnx-testdata, as the conformance tests) */
    static const char *const conv_integer[] = {"test_convinteger_with_padding", "test_convinteger_without_padding"};
    for (size_t i = 0; i < sizeof conv_integer / sizeof conv_integer[0]; i++) {
        char dir[400];
        snprintf(dir, sizeof dir, "/usr/share/libonnx-testdata/data/node/%s", conv_integer[i]);
        run_model_at(cpu, dir);
    }
    /* channel Concats of blocked maps whose counts are not multiples of the block, Splits of
     * blocked and plain tensors (tests/models_ocr) */
    static const char *const ocr_models[] = {"../models_ocr/blocked_concat_4x24", "../models_ocr/blocked_concat_two",
                                             "../models_ocr/blocked_concat_mixed_batch2",
                                             "../models_ocr/blocked_split_c2f_input",
                                             "../models_ocr/concat_split_large_batch2_w"};
    for (size_t i = 0; i < sizeof ocr_models / sizeof ocr_models[0]; i++)
        run_model_dir(cpu, ocr_models[i]);
    built_plain_ops(cpu);
    built_fused_ops(cpu);
    built_blocked_ops(cpu);
    tdm_device_close(cpu);
    int missing = 0;
    for (size_t p = 0; p < N_PROMISED; p++) {
        printf("%-7s %-20s checked %3d times, %2d in place\n", promised[p].family, promised[p].op,
               g_checked[p], g_checked_inplace[p]);
        bool need_inplace = TDM_KF_INPLACE_INPUT(promised[p].flags) >= 0;
        if (!g_checked[p] || (need_inplace && !g_checked_inplace[p])) {
            fprintf(stderr, "no case checks %s %s%s\n", promised[p].family, promised[p].op,
                    need_inplace && g_checked[p] ? " in place" : "");
            missing++;
        }
    }
    assert_int_equal(missing, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table_column),
        cmocka_unit_test(test_promises_kept),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
