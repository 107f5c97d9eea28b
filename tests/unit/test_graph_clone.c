/* graph/clone.h: a copy of a loaded graph (with a Loop whose body holds an initializer) equals
 * the original field by field, owns all of its memory (no pointer shared with the original),
 * finds values by name, leaves out the data a mask says, and fails cleanly (out of memory, no
 * leak) at every allocation it makes. A pipeline stage's graph (sched/pipeline_mode_cut.h)
 * copies only the weights its own nodes read. A sharing copy (tdm_graph_clone_sharing) holds
 * the same constant bytes, allocates none of them again, and either graph may be freed first. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "graph/clone.h"
#include "loop_model.h"
#include "onnx/loader.h"
#include "sched/pipeline_mode_cut.h"
#include "tandem/tandem.h"

/* An allocator that fails once `budget` (>= 0) allocations were made; counts live blocks. */
typedef struct budget {
    long live;
    size_t bytes; /* allocated so far */
    long budget; /* < 0: unlimited */
} budget;

static void *b_alloc(void *user, size_t size, size_t align) {
    budget *b = user;
    if (b->budget == 0) return NULL;
    if (b->budget > 0) b->budget--;
    if (align < sizeof(void *)) align = sizeof(void *);
    void *p = NULL;
    if (posix_memalign(&p, align, size ? size : 1) != 0) return NULL;
    b->live++;
    b->bytes += size;
    return p;
}

static void b_free(void *user, void *p) {
    budget *b = user;
    if (!p) return;
    b->live--;
    free(p);
}

static tdm_onnx_model *load_loop(const tdm_allocator *a) {
    size_t size;
    void *buf = loop_model(&size);
    tdm_onnx_model *m = NULL;
    tdm_status *st = tdm_onnx_load_buffer(buf, size, NULL, a, &m);
    free(buf);
    if (st) fail_msg("load: %s", tdm_status_message(st));
    return m;
}

static void same_str(const char *a, const char *b) {
    if (!a || !b) {
        assert_true(a == b);
        return;
    }
    assert_string_equal(a, b);
    assert_true(a != b); /* a copy, not the original's memory */
}

/* The copy under test shares its constants' bytes with the original (tdm_graph_clone_sharing). */
static bool sharing;

static void same_tensor(const tdm_tensor *a, const tdm_tensor *b) {
    if (!a || !b) {
        assert_true(a == b);
        return;
    }
    assert_true(a != b && (sharing ? a->data == b->data : a->data != b->data));
    assert_true(!sharing || (tdm_tensor_is_shared(a) && tdm_tensor_is_shared(b)));
    assert_int_equal(a->dtype, b->dtype);
    assert_int_equal(a->rank, b->rank);
    assert_memory_equal(a->dims, b->dims, sizeof a->dims);
    assert_int_equal(a->nbytes, b->nbytes);
    if (a->nbytes) assert_memory_equal(a->data, b->data, a->nbytes);
}

static void same_graph(const tdm_graph *a, const tdm_graph *b, const tdm_graph *b_parent);

static void same_attr(const tdm_attr *a, const tdm_attr *b, const tdm_graph *b_owner) {
    same_str(a->name, b->name);
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->i, b->i);
    assert_true(a->f == b->f);
    assert_int_equal(a->n, b->n);
    same_str(a->s, b->s);
    same_tensor(a->t, b->t);
    if (a->g || b->g) {
        assert_non_null(a->g);
        assert_non_null(b->g);
        assert_true(a->g != b->g);
        same_graph(a->g, b->g, b_owner);
    }
    if (a->ints) assert_memory_equal(a->ints, b->ints, a->n * sizeof *a->ints);
    if (a->floats) assert_memory_equal(a->floats, b->floats, a->n * sizeof *a->floats);
}

static void same_graph(const tdm_graph *a, const tdm_graph *b, const tdm_graph *b_parent) {
    assert_true(b->parent == b_parent);
    assert_int_equal(a->depth, b->depth);
    same_str(a->name, b->name);
    assert_int_equal(a->n_values, b->n_values);
    for (size_t v = 0; v < a->n_values; v++) {
        const tdm_value *x = &a->values[v], *y = &b->values[v];
        same_str(x->name, y->name);
        assert_int_equal(tdm_graph_find_value(b, y->name), (int)v);
        assert_int_equal(x->dtype, y->dtype);
        assert_int_equal(x->rank, y->rank);
        assert_memory_equal(x->dims, y->dims, sizeof x->dims);
        for (int d = 0; d < TDM_MAX_RANK; d++) same_str(x->dim_params[d], y->dim_params[d]);
        same_tensor(x->data, y->data);
        assert_int_equal(x->producer, y->producer);
        assert_int_equal(x->n_consumers, y->n_consumers);
        assert_int_equal(x->is_input, y->is_input);
        assert_int_equal(x->is_output, y->is_output);
        assert_int_equal(x->is_initializer, y->is_initializer);
        assert_int_equal(x->is_outer, y->is_outer);
    }
    assert_int_equal(a->n_nodes, b->n_nodes);
    for (size_t i = 0; i < a->n_nodes; i++) {
        const tdm_node *x = &a->nodes[i], *y = &b->nodes[i];
        same_str(x->name, y->name);
        same_str(x->op_type, y->op_type);
        same_str(x->domain, y->domain);
        assert_int_equal(x->opset, y->opset);
        assert_true(x->schema == y->schema);
        assert_int_equal(x->n_inputs, y->n_inputs);
        assert_int_equal(x->n_outputs, y->n_outputs);
        assert_memory_equal(x->inputs, y->inputs, (size_t)x->n_inputs * sizeof *x->inputs);
        assert_memory_equal(x->outputs, y->outputs, (size_t)x->n_outputs * sizeof *x->outputs);
        assert_int_equal(x->n_implicit, y->n_implicit);
        if (x->n_implicit) assert_memory_equal(x->implicit, y->implicit, (size_t)x->n_implicit * sizeof *x->implicit);
        assert_int_equal(x->n_attrs, y->n_attrs);
        for (int k = 0; k < x->n_attrs; k++) same_attr(&x->attrs[k], &y->attrs[k], b);
    }
    assert_int_equal(a->n_inputs, b->n_inputs);
    assert_memory_equal(a->inputs, b->inputs, a->n_inputs * sizeof *a->inputs);
    assert_int_equal(a->n_outputs, b->n_outputs);
    assert_memory_equal(a->outputs, b->outputs, a->n_outputs * sizeof *a->outputs);
    assert_int_equal(a->n_opsets, b->n_opsets);
    for (size_t i = 0; i < a->n_opsets; i++) {
        same_str(a->opsets[i].domain, b->opsets[i].domain);
        assert_int_equal(a->opsets[i].version, b->opsets[i].version);
    }
}

static void test_clone_equals(void **state) {
    (void)state;
    budget b = {0, 0, -1};
    tdm_allocator a = {b_alloc, b_free, &b};
    tdm_onnx_model *m = load_loop(&a);
    tdm_graph *c = NULL;
    tdm_status *st = tdm_graph_clone(m->graph, NULL, &c);
    if (st) fail_msg("clone: %s", tdm_status_message(st));
    assert_true(c->alloc == m->graph->alloc);
    same_graph(m->graph, c, NULL);
    /* the Loop's body (with its initializer "one") was copied, parent = the copy */
    const tdm_attr *body = tdm_node_attr(&c->nodes[0], "body");
    assert_non_null(body);
    assert_true(body->g->parent == c);
    assert_true(tdm_graph_find_value(body->g, "one") >= 0);
    tdm_onnx_model_free(m); /* the copy stands alone */
    assert_int_equal(c->n_nodes, 1);
    tdm_graph_free(c);
    assert_int_equal(b.live, 0);
}

static void test_clone_keep_data(void **state) {
    (void)state;
    budget b = {0, 0, -1};
    tdm_allocator a = {b_alloc, b_free, &b};
    tdm_onnx_model *m = load_loop(&a);
    /* the body's initializer lives in the subgraph; give the main graph a constant of its own */
    tdm_graph *g = m->graph;
    int v = tdm_graph_find_value(g, "x");
    int64_t one = 1;
    assert_null(tdm_tensor_new(&a, TDM_FLOAT, 1, &one, &g->values[v].data));
    ((float *)g->values[v].data->data)[0] = 2.5f;
    bool *keep = calloc(g->n_values, sizeof *keep);
    tdm_graph *none = NULL, *some = NULL;
    assert_null(tdm_graph_clone(g, keep, &none));
    assert_null(none->values[v].data);
    keep[v] = true;
    assert_null(tdm_graph_clone(g, keep, &some));
    same_tensor(g->values[v].data, some->values[v].data);
    assert_true(((float *)some->values[v].data->data)[0] == 2.5f);
    free(keep);
    tdm_graph_free(none);
    tdm_graph_free(some);
    tdm_onnx_model_free(m);
    assert_int_equal(b.live, 0);
}

/* A copy of every value's data (tdm_graph_clone with no mask). */
static tdm_status *clone_all(tdm_graph *g, tdm_graph **out) { return tdm_graph_clone(g, NULL, out); }

/* Every allocation of a copy (`make`) fails once: an out-of-memory status, *out untouched,
 * nothing left allocated (a sharing copy: a tensor's share block, once made, stays with the
 * original and goes with it, so the count after the model's free finds a header a failure
 * leaked), the original whole. */
static void clone_oom_sweep(tdm_status *(*make)(tdm_graph *, tdm_graph **), bool shares) {
    budget b = {0, 0, -1};
    tdm_allocator a = {b_alloc, b_free, &b};
    tdm_onnx_model *m = load_loop(&a);
    long base = b.live;
    bool done = false;
    for (long n = 0; n < 1000 && !done; n++) {
        tdm_graph *c = (tdm_graph *)&done; /* a marker: untouched on failure */
        b.budget = n;
        tdm_status *st = make(m->graph, &c);
        b.budget = -1;
        if (st) {
            assert_int_equal(tdm_status_code(st), TDM_ERR_OUT_OF_MEMORY);
            assert_true(c == (tdm_graph *)&done);
            tdm_status_free(st);
            assert_true(shares ? b.live >= base : b.live == base);
            continue;
        }
        assert_true(n > 10); /* a copy of this graph makes many allocations */
        sharing = shares;
        same_graph(m->graph, c, NULL);
        sharing = false;
        tdm_graph_free(c);
        done = true;
    }
    assert_true(done);
    tdm_onnx_model_free(m);
    assert_int_equal(b.live, 0);
}

static void test_clone_out_of_memory(void **state) {
    (void)state;
    clone_oom_sweep(clone_all, false);
}

/* x -> Add(x, w_small) -> h -> Mul(h, w_big) -> y, w_big 1 MiB: stage 0 (the Add) must not
 * copy w_big, stage 1 (the Mul) must. */
static void test_stage_copies_own_weights(void **state) {
    (void)state;
    enum { BIG = 1 << 18 };
    static float big[BIG];
    int64_t small_dims[] = {1}, big_dims[] = {BIG};
    float small[1] = {1};
    mb_model mm;
    mb_init(&mm, 17);
    mb_input(&mm, "x", 1, small_dims);
    mb_init_f32(&mm, "w_small", 1, small_dims, 1, small);
    mb_init_raw(&mm, "w_big", MB_F32, 1, big_dims, big, sizeof big);
    mb_node(&mm, "Add:x,w_small->h");
    mb_node(&mm, "Mul:h,w_big->y");
    mb_output(&mm, "y");
    size_t size;
    void *buf = mb_pack(&mm, &size);
    mb_free(&mm);
    budget b = {0, 0, -1};
    tdm_allocator a = {b_alloc, b_free, &b};
    tdm_onnx_model *m = NULL;
    tdm_status *st = tdm_onnx_load_buffer(buf, size, NULL, &a, &m);
    free(buf);
    if (st) fail_msg("load: %s", tdm_status_message(st));
    for (int k = 0; k < 2; k++) {
        char **drop = NULL;
        size_t n_drop = 0;
        tdm_graph *sg = NULL;
        size_t before = b.bytes;
        st = tdm_pm_stage_graph(m->graph, k, k + 1, &drop, &n_drop, &a, &sg);
        if (st) fail_msg("stage %d: %s", k, tdm_status_message(st));
        size_t made = b.bytes - before;
        if (k == 0) assert_true(made < sizeof big);  /* w_big was not copied */
        else assert_true(made >= sizeof big);        /* the Mul's stage holds it */
        assert_int_equal(sg->n_nodes, 1);
        assert_string_equal(sg->nodes[0].op_type, k == 0 ? "Add" : "Mul");
        int w = tdm_graph_find_value(sg, k == 0 ? "w_small" : "w_big");
        assert_true(w >= 0);
        assert_non_null(sg->values[w].data);
        for (size_t d = 0; d < n_drop; d++) tdm_free(&a, drop[d]);
        tdm_free(&a, drop);
        tdm_graph_free(sg);
    }
    tdm_onnx_model_free(m);
    assert_int_equal(b.live, 0);
}

/* A model of x -> Mul(x, w_big) -> y, w_big 1 MiB of a pattern. */
enum { SHARE_BIG = 1 << 18 };
static tdm_onnx_model *load_big(const tdm_allocator *a) {
    static float big[SHARE_BIG];
    for (int k = 0; k < SHARE_BIG; k++) big[k] = (float)(k % 977);
    int64_t dims[] = {SHARE_BIG};
    mb_model mm;
    mb_init(&mm, 17);
    mb_input(&mm, "x", 1, dims);
    mb_init_raw(&mm, "w_big", MB_F32, 1, dims, big, sizeof big);
    mb_node(&mm, "Mul:x,w_big->y");
    mb_output(&mm, "y");
    size_t size;
    void *buf = mb_pack(&mm, &size);
    mb_free(&mm);
    tdm_onnx_model *m = NULL;
    tdm_status *st = tdm_onnx_load_buffer(buf, size, NULL, a, &m);
    free(buf);
    if (st) fail_msg("load: %s", tdm_status_message(st));
    return m;
}

static void check_big(const tdm_graph *g) {
    const tdm_tensor *t = g->values[tdm_graph_find_value(g, "w_big")].data;
    assert_non_null(t);
    const float *d = t->data;
    for (int k = 0; k < SHARE_BIG; k += 4099) assert_true(d[k] == (float)(k % 977));
}

/* The sharing copy equals the original (the Loop body's initializer shared too), allocates
 * no weight bytes, and outlives the original or dies first: under ASan a read after the
 * free or a second free fails the test, the allocator's count a leak. */
static void test_clone_sharing(void **state) {
    (void)state;
    budget b = {0, 0, -1};
    tdm_allocator a = {b_alloc, b_free, &b};
    tdm_onnx_model *m = load_loop(&a);
    tdm_graph *c = NULL;
    assert_null(tdm_graph_clone_sharing(m->graph, &c));
    sharing = true;
    same_graph(m->graph, c, NULL);
    sharing = false;
    tdm_onnx_model_free(m);
    const tdm_attr *body = tdm_node_attr(&c->nodes[0], "body");
    int one = tdm_graph_find_value(body->g, "one");
    assert_true(one >= 0 && body->g->values[one].data);
    assert_true(tdm_tensor_get_f64(body->g->values[one].data, 0) == 1.0);
    tdm_graph_free(c);
    assert_int_equal(b.live, 0);
    for (int copy_first = 0; copy_first < 2; copy_first++) {
        m = load_big(&a);
        size_t before = b.bytes;
        assert_null(tdm_graph_clone_sharing(m->graph, &c));
        assert_true(b.bytes - before < SHARE_BIG * sizeof(float) / 8);
        int w = tdm_graph_find_value(m->graph, "w_big");
        assert_true(c->values[w].data->data == m->graph->values[w].data->data);
        tdm_graph *second = NULL; /* a copy of the copy shares the same bytes */
        assert_null(tdm_graph_clone_sharing(c, &second));
        assert_true(second->values[w].data->data == m->graph->values[w].data->data);
        if (copy_first) {
            tdm_graph_free(c);
            check_big(second);
            tdm_graph_free(second);
            check_big(m->graph);
            tdm_onnx_model_free(m);
        } else {
            tdm_onnx_model_free(m);
            check_big(c);
            tdm_graph_free(c);
            check_big(second);
            tdm_graph_free(second);
        }
        assert_int_equal(b.live, 0);
    }
}

static void test_clone_sharing_out_of_memory(void **state) {
    (void)state;
    clone_oom_sweep(tdm_graph_clone_sharing, true);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clone_equals),
        cmocka_unit_test(test_clone_keep_data),
        cmocka_unit_test(test_clone_out_of_memory),
        cmocka_unit_test(test_stage_copies_own_weights),
        cmocka_unit_test(test_clone_sharing),
        cmocka_unit_test(test_clone_sharing_out_of_memory),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
