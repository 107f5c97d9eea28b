/* Fuzz target: model bytes -> tdm_model_load_from_buffer -> tdm_session_create_from_buffer
 * -> two runs (the second reuses the memory plan of the first) with small random inputs.
 *
 * Inputs are made from the model's declared inputs: unknown dims become 0..3, an unknown
 * rank becomes 0..3, and a model whose inputs would need more than FZ_MAX_INPUT_ELEMS
 * elements is loaded but not run. The values are random (seeded by the input bytes):
 * small numbers, with the extremes of each type now and then, so that index inputs are
 * often negative or out of range.
 *
 * A protobuf-aware mutator (onnx_mutator.h) changes attributes, initializer values, dims,
 * op types, node inputs and opsets of models that parse, half of the time; the other half
 * libFuzzer's byte mutations run, which exercise the wire format and the loader. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_impl.h"
#include "core/half.h"
#include "fuzz_common.h"
#include "onnx_mutator.h"
#include "tandem/tandem.h"

#define FZ_MAX_INPUT_ELEMS 4096
#define FZ_MAX_INPUTS 64

static bool tdm_dtype_is_float_api(tdm_dtype t) {
    return t == TDM_FLOAT || t == TDM_DOUBLE || t == TDM_FLOAT16 || t == TDM_BFLOAT16;
}

static fz_alloc g_alloc;
static tdm_env *g_env;
static long g_env_blocks; /* live blocks of the environment itself */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    /* Loops whose trip count comes from computed values (Range/Ceil of the inputs) still run
     * long; the documented limits bound them to well under libFuzzer's timeout. An input that
     * reaches a limit gets TDM_ERR_LIMIT, which is a clean answer. */
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "20000", 0);
    setenv("TANDEM_LOOP_TIMEOUT_MS", "2000", 0);
    g_env = fz_env(&g_alloc);
    g_env_blocks = atomic_load(&g_alloc.live_blocks);
    return 0;
}

/* Scalars are mostly counts and limits (Loop trip counts, Range bounds): extremes there only
 * make the run long, so they stay small; extremes go to tensors of rank >= 1. */
static void fill(tdm_tensor *t, fz_rng *r) {
    int64_t n = tdm_tensor_element_count(t);
    void *p = tdm_tensor_data(t);
    bool scalar = tdm_tensor_rank(t) == 0;
    for (int64_t i = 0; i < n; i++) {
        uint64_t x = fz_next(r);
        bool special = (x & 15) == 0;
        if (scalar && !tdm_dtype_is_float_api(tdm_tensor_dtype(t))) special = false;
        uint64_t pick = (x >> 4) % 8;
        double f = ((double)((x >> 8) % 6001) - 3000.0) / 1000.0; /* [-3, 3] */
        static const double fs[8] = {0.0, -0.0, 1.0 / 0.0, -1.0 / 0.0, 0.0 / 0.0, 1e30, -1e30, 65504};
        if (special) f = fs[pick];
        int64_t v = (int64_t)((x >> 8) % 13) - 4; /* [-4, 8] */
        static const int64_t is[8] = {INT64_MIN, INT64_MAX, INT32_MIN, INT32_MAX, -1, 0, 255, 1000};
        if (special) v = is[pick];
        switch (tdm_tensor_dtype(t)) {
        case TDM_FLOAT: ((float *)p)[i] = (float)f; break;
        case TDM_DOUBLE: ((double *)p)[i] = f; break;
        case TDM_FLOAT16: ((uint16_t *)p)[i] = tdm_f32_to_f16((float)f); break;
        case TDM_BFLOAT16: ((uint16_t *)p)[i] = tdm_f32_to_bf16((float)f); break;
        case TDM_INT64: ((int64_t *)p)[i] = v; break;
        case TDM_UINT64: ((uint64_t *)p)[i] = (uint64_t)v; break;
        case TDM_INT32: ((int32_t *)p)[i] = (int32_t)v; break;
        case TDM_UINT32: ((uint32_t *)p)[i] = (uint32_t)v; break;
        case TDM_INT16: ((int16_t *)p)[i] = (int16_t)v; break;
        case TDM_UINT16: ((uint16_t *)p)[i] = (uint16_t)v; break;
        case TDM_INT8: ((int8_t *)p)[i] = (int8_t)v; break;
        case TDM_UINT8: ((uint8_t *)p)[i] = (uint8_t)v; break;
        case TDM_BOOL: ((uint8_t *)p)[i] = (uint8_t)(x >> 9 & 1); break;
        case TDM_STRING: {
            static const char *const strs[6] = {"", "a", "tandem", "A b c", "\xc3\xa9t\xc3\xa9", "0"};
            const char *s = strs[pick % 6];
            tdm_status *st = tdm_tensor_set_string(t, i, s, strlen(s));
            if (st) {
                tdm_status_free(st);
                return;
            }
            break;
        }
        default: break; /* complex: zeros */
        }
    }
}

/* A random 1-D tensor of 0..3 elements of type dt */
static tdm_status *small_tensor(fz_rng *r, tdm_dtype dt, tdm_tensor **out) {
    int64_t n = (int64_t)fz_below(r, 4);
    TDM_TRY(tdm_tensor_create(g_env, dt, 1, &n, out));
    fill(*out, r);
    return NULL;
}

/* A sequence (0..3 items of one type), map (int64 or string keys to float or int64 values)
 * or optional (none, or a tensor) input, made by its constructor with random items */
static tdm_status *make_container(fz_rng *r, tdm_dtype kind, tdm_tensor **out) {
    tdm_tensor *items[3] = {0};
    tdm_status *st = NULL;
    size_t n = kind == TDM_SEQUENCE ? fz_below(r, 4) : kind == TDM_MAP ? 2 : fz_below(r, 2);
    static const tdm_dtype types[4] = {TDM_FLOAT, TDM_INT64, TDM_INT32, TDM_STRING};
    tdm_dtype item_t = types[fz_below(r, 4)];
    for (size_t i = 0; i < n && !st; i++) {
        if (kind == TDM_MAP) item_t = i ? (fz_below(r, 2) ? TDM_FLOAT : TDM_INT64)
                                        : (fz_below(r, 2) ? TDM_INT64 : TDM_STRING);
        st = small_tensor(r, item_t, &items[i]);
    }
    if (!st && kind == TDM_SEQUENCE) st = tdm_sequence_create(g_env, n, items, out);
    else if (!st && kind == TDM_MAP) st = tdm_map_create(g_env, items[0], items[1], out);
    else if (!st) st = tdm_optional_create(g_env, items[0], out);
    if (st) /* the constructors take the items only when they succeed */
        for (size_t i = 0; i < n; i++) tdm_tensor_free(items[i]);
    return st;
}

/* Makes one tensor per declared input. Returns 0 when the model can be run. */
static int make_inputs(const tdm_model *m, fz_rng *r, size_t *n, const char **names,
                       tdm_tensor **ins) {
    size_t count = tdm_model_input_count(m);
    if (count > FZ_MAX_INPUTS) return -1;
    int64_t total = 0;
    for (size_t i = 0; i < count; i++) {
        tdm_value_desc d;
        tdm_status *st = tdm_model_input(m, i, &d);
        if (st) {
            fz_check_status(st);
            return -1;
        }
        tdm_dtype dt = d.dtype == TDM_UNDEFINED ? TDM_FLOAT : d.dtype;
        if (tdm_dtype_is_container(dt)) {
            total += 6;
            st = make_container(r, dt, &ins[*n]);
            if (st) {
                fz_check_status(st);
                return -1;
            }
            names[*n] = d.name;
            (*n)++;
            continue;
        }
        int rank = d.rank >= 0 ? d.rank : (int)fz_below(r, 4);
        int64_t dims[TDM_MAX_RANK], elems = 1;
        for (int k = 0; k < rank; k++) {
            dims[k] = d.rank >= 0 && d.dims[k] >= 0 ? d.dims[k] : (int64_t)fz_below(r, 4);
            if (dims[k] > FZ_MAX_INPUT_ELEMS) return -1;
            elems *= dims[k];
            if (elems > FZ_MAX_INPUT_ELEMS) return -1;
        }
        total += elems;
        if (total > FZ_MAX_INPUT_ELEMS) return -1;
        tdm_tensor *t = NULL;
        st = tdm_tensor_create(g_env, dt, rank, dims, &t);
        if (st) {
            fz_check_status(st);
            return -1;
        }
        fill(t, r);
        names[*n] = d.name;
        ins[(*n)++] = t;
    }
    return 0;
}

/* TDM_FUZZ_SKIP_ARITY=1: skip models with a node whose input or output count is outside its
 * schema's range or whose required input is omitted. When fuzzing began tandem did not check
 * this and nearly every dropped input crashed in some infer function; tdm_graph_finalize
 * checks it now (bind_schema, src/graph/graph.c: counts, required inputs and outputs), so
 * run.sh leaves the skip off and such models must fail to load with an error. */
static bool arity_ok(const tdm_graph *g, int depth) {
    if (depth > 40) return true;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *n = &g->nodes[i];
        const tdm_op_schema *s = n->schema;
        if (s) {
            if (n->n_inputs < s->min_inputs || n->n_inputs > s->max_inputs ||
                n->n_outputs < s->min_outputs || n->n_outputs > s->max_outputs)
                return false;
            for (int k = 0; k < s->min_inputs && k < n->n_inputs; k++)
                if (n->inputs[k] < 0) return false;
        }
        for (int k = 0; k < n->n_attrs; k++) {
            const tdm_attr *at = &n->attrs[k];
            if (at->type == TDM_ATTR_GRAPH && !arity_ok(at->g, depth + 1)) return false;
            if (at->type == TDM_ATTR_GRAPHS)
                for (size_t j = 0; j < at->n; j++)
                    if (!arity_ok(at->graphs[j], depth + 1)) return false;
        }
    }
    return true;
}

static void run_model(const uint8_t *data, size_t size) {
    fz_rng r = {fz_hash(data, size)};
    static int skip_arity = -1;
    if (skip_arity < 0) {
        const char *e = getenv("TDM_FUZZ_SKIP_ARITY");
        skip_arity = e && atoi(e);
    }
    if (skip_arity) { /* the loader alone: no shape inference yet */
        tdm_onnx_model *om = NULL;
        tdm_status *st = tdm_onnx_load_buffer(data, size, NULL, g_env->alloc, &om);
        if (st) {
            fz_check_status(st);
            return;
        }
        bool ok = arity_ok(om->graph, 0);
        tdm_onnx_model_free(om);
        if (!ok) return;
    }
    tdm_model *model = NULL;
    fz_dirty_stack();
    tdm_status *st = tdm_model_load_from_buffer(g_env, data, size, NULL, &model);
    if (st) {
        fz_check_status(st);
        return;
    }
    /* inspection calls on the loaded model */
    for (size_t i = 0; i < tdm_model_op_type_count(model); i++) {
        size_t nodes = 0;
        (void)tdm_model_op_type(model, i, &nodes);
        (void)tdm_model_op_type_supported(model, i, "cpu");
    }
    (void)tdm_model_parameter_count(model);
    tdm_model_free(model);

    tdm_session_options so = {TDM_API_VERSION, "cpu", 1, (int)fz_below(&r, 3), false};
    tdm_session *s = NULL;
    fz_dirty_stack();
    st = tdm_session_create_from_buffer(g_env, data, size, NULL, &so, &s);
    if (st) {
        fz_check_status(st);
        return;
    }
    const tdm_model *sm = tdm_session_model(s);
    size_t n_in = 0, n_out = tdm_model_output_count(sm);
    const char *names[FZ_MAX_INPUTS];
    tdm_tensor *ins[FZ_MAX_INPUTS];
    tdm_tensor **outs = calloc(n_out + 1, sizeof *outs);
    if (outs && make_inputs(sm, &r, &n_in, names, ins) == 0) {
        for (int rep = 0; rep < 2; rep++) {
            fz_dirty_stack();
            st = tdm_session_run(s, n_in, names, (const tdm_tensor *const *)ins, n_out, NULL, outs);
            if (st) {
                fz_check_status(st);
                break;
            }
            for (size_t i = 0; i < n_out; i++) {
                /* read every output byte: a kernel that left an output half-made shows up */
                const tdm_tensor *o = outs[i];
                if (!o) abort();
                volatile uint8_t sink = 0;
                const uint8_t *b = tdm_tensor_data_const(o);
                if (tdm_tensor_dtype(o) == TDM_STRING) {
                    const char *const *sv = tdm_tensor_data_const(o);
                    for (int64_t k = 0; k < tdm_tensor_element_count(o); k++)
                        sink ^= sv[k] ? (uint8_t)strlen(sv[k]) : 0;
                } else {
                    for (size_t k = 0; k < tdm_tensor_byte_size(o); k++) sink ^= b[k];
                }
                (void)sink;
                tdm_tensor_free(outs[i]);
                outs[i] = NULL;
            }
        }
    }
    for (size_t i = 0; i < n_in; i++) tdm_tensor_free(ins[i]);
    free(outs);
    tdm_session_free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    run_model(data, size);
    fz_check_leaks(&g_alloc, g_env_blocks);
    return 0;
}

size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    fz_rng r = {seed ^ fz_hash(data, size < 64 ? size : 64)};
    if (fz_below(&r, 2) == 0) {
        size_t n = onnx_mutate_model(data, size, max_size, &r);
        if (n) return n;
    }
    return LLVMFuzzerMutate(data, size, max_size);
}
