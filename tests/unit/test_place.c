/* Placement on synthetic device profiles: each case asserts the placement a careful engineer
 * would choose and the predicted times. Device 0 is the host CPU, device 1 an accelerator
 * with memory of its own. Node costs are given directly (as the cost model would). */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "graph/graph.h"
#include "sched/cost.h"
#include "sched/place.h"

/* A graph of float tensors of `elems` elements; nodes "Op:in,in->out" as in the loader. */
static tdm_graph *make_graph(const char *const *specs, int n, const char *const *inputs, int n_in,
                             const char *const *outputs, int n_out, int64_t elems) {
    tdm_graph *g = NULL;
    assert_null(tdm_graph_new(NULL, &g));
    g->opsets = calloc(1, sizeof *g->opsets);
    g->opsets[0].domain = strdup("");
    g->opsets[0].version = 17;
    g->n_opsets = 1;
    g->inputs = calloc((size_t)n_in + 1, sizeof(int));
    g->outputs = calloc((size_t)n_out + 1, sizeof(int));
    for (int i = 0; i < n_in; i++) {
        int v;
        assert_null(tdm_graph_add_value(g, inputs[i], &v));
        g->values[v].is_input = true;
        g->inputs[g->n_inputs++] = v;
    }
    for (int s = 0; s < n; s++) {
        char buf[256];
        snprintf(buf, sizeof buf, "%s", specs[s]);
        char *colon = strchr(buf, ':'), *arrow = strstr(buf, "->");
        *colon = 0;
        *arrow = 0;
        char *ins[8], *outs[8];
        int ni = 0, no = 0;
        for (char *t = strtok(colon + 1, ","); t; t = strtok(NULL, ",")) ins[ni++] = t;
        for (char *t = strtok(arrow + 2, ","); t; t = strtok(NULL, ",")) outs[no++] = t;
        char name[32];
        snprintf(name, sizeof name, "n%d", s);
        int idx;
        assert_null(tdm_graph_add_node(g, name, buf, "", ni, no, &idx));
        for (int k = 0; k < ni; k++) {
            int v = tdm_graph_find_value(g, ins[k]);
            if (v < 0) {
                assert_null(tdm_graph_add_value(g, ins[k], &v));
                /* names starting with W are weights: constants */
                if (ins[k][0] == 'W') {
                    int64_t d = elems;
                    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 1, &d, &g->values[v].data));
                }
            }
            g->nodes[idx].inputs[k] = v;
        }
        for (int k = 0; k < no; k++) {
            int v = tdm_graph_find_value(g, outs[k]);
            if (v < 0) assert_null(tdm_graph_add_value(g, outs[k], &v));
            g->nodes[idx].outputs[k] = v;
        }
    }
    for (int i = 0; i < n_out; i++) g->outputs[g->n_outputs++] = tdm_graph_find_value(g, outputs[i]);
    for (size_t v = 0; v < g->n_values; v++) {
        g->values[v].dtype = TDM_FLOAT;
        g->values[v].rank = 1;
        g->values[v].dims[0] = elems;
    }
    assert_null(tdm_graph_finalize(g));
    return g;
}

static void profiles(tdm_device_profile p[2], double link_gbps, double link_latency_us, int64_t accel_mem) {
    memset(p, 0, 2 * sizeof *p);
    snprintf(p[0].device, sizeof p[0].device, "cpu");
    snprintf(p[1].device, sizeof p[1].device, "accel");
    p[0].gemm_gflops = 100;
    p[1].gemm_gflops = 1000;
    p[1].h2d_gbps = p[1].d2h_gbps = link_gbps;
    p[1].link_latency_us = link_latency_us;
    p[1].memory_bytes = accel_mem;
}

typedef struct fixture {
    tdm_graph *g;
    bool supported[64];
    double ms[64];
} fixture;

static void set_cost(fixture *f, int node, double cpu_ms, double accel_ms) {
    f->supported[node * 2] = cpu_ms >= 0;
    f->supported[node * 2 + 1] = accel_ms >= 0;
    f->ms[node * 2] = cpu_ms < 0 ? INFINITY : cpu_ms;
    f->ms[node * 2 + 1] = accel_ms < 0 ? INFINITY : accel_ms;
}

static int node_index(const tdm_graph *g, const char *name) {
    for (size_t i = 0; i < g->n_nodes; i++)
        if (!strcmp(g->nodes[i].name, name)) return (int)i;
    fail_msg("no node %s", name);
    return -1;
}

static const bool host[2] = {true, false};

/* A fast accelerator behind a slow link: 4 MB in and out costs far more than the compute it
 * saves, so everything stays on the CPU. */
static void test_slow_link(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "Relu:a->b", "MatMul:b,W2->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 3, in, 1, out, 1, 1 << 20); /* 4 MB tensors */
    for (int i = 0; i < 3; i++) set_cost(&f, i, 1.0, 0.1);
    tdm_device_profile p[2];
    profiles(p, 0.1, 50, 0); /* 0.1 GB/s: 4 MB costs ~42 ms */
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    for (int i = 0; i < 3; i++) assert_int_equal(r.device[i], 0);
    assert_true(fabs(r.serial_ms - 3.0) < 1e-9);
    assert_true(r.single_ms[1] > 80); /* the accelerator alone pays ~84 ms of copies */
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* A fast link: the accelerator wins and takes the whole chain; one copy in, one out. */
static void test_fast_link(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "Relu:a->b", "MatMul:b,W2->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 3, in, 1, out, 1, 1 << 10); /* 4 KB tensors */
    for (int i = 0; i < 3; i++) set_cost(&f, i, 10.0, 1.0);
    tdm_device_profile p[2];
    profiles(p, 10, 10, 0); /* 4 KB: 10 us + 0.4 us */
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    for (int i = 0; i < 3; i++) assert_int_equal(r.device[i], 1);
    double copy = tdm_cost_copy_ms(4096, &p[0], &p[1]) + tdm_cost_copy_ms(4096, &p[1], &p[0]);
    assert_true(fabs(r.serial_ms - (3.0 + copy)) < 1e-6);
    assert_true(fabs(r.makespan_ms - (3.0 + copy)) < 1e-6);
    assert_true(fabs(r.single_ms[0] - 30.0) < 1e-9);
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* A fast link but little memory on the accelerator: the node with the big weights must stay
 * on the CPU even though the accelerator would be faster. */
static void test_small_memory(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "MatMul:a,Wbig->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 2, in, 1, out, 1, 1 << 16); /* weights 256 KB each */
    set_cost(&f, 0, 10.0, 1.0);
    set_cost(&f, 1, 10.0, 1.0);
    tdm_device_profile p[2];
    profiles(p, 100, 1, 300 * 1024); /* room for one 256 KB weight, not two */
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    int n0 = node_index(f.g, "n0"), n1 = node_index(f.g, "n1");
    assert_int_equal(r.device[n0], 1);
    assert_int_equal(r.device[n1], 0);
    assert_int_equal(r.reason[n1], TDM_PLACE_MEMORY);
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* An op the accelerator cannot run in the middle of a chain of heavy ops: the heavy ops stay
 * on the accelerator, the middle one goes to the CPU, two copies around it. */
static void test_unsupported_in_middle(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "Erf:a->b", "MatMul:b,W2->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 3, in, 1, out, 1, 1 << 10);
    set_cost(&f, 0, 50.0, 1.0);
    set_cost(&f, 1, 0.1, -1);
    set_cost(&f, 2, 50.0, 1.0);
    tdm_device_profile p[2];
    profiles(p, 10, 10, 0);
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    assert_int_equal(r.device[node_index(f.g, "n0")], 1);
    assert_int_equal(r.device[node_index(f.g, "n1")], 0);
    assert_int_equal(r.reason[node_index(f.g, "n1")], TDM_PLACE_ONLY_SUPPORTED);
    assert_int_equal(r.device[node_index(f.g, "n2")], 1);
    assert_true(r.copy_bytes == 4 * 4096.0); /* x in, a out, b in, y out */
    /* the accelerator "alone" is the accelerator with the CPU for Erf: this same placement */
    assert_true(isfinite(r.single_ms[1]) && r.single_ms[1] < r.single_ms[0]);
    assert_true(r.serial_ms < r.single_ms[0]);
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* Two independent heavy branches of equal cost on both devices: list scheduling puts one on
 * each device; the makespan is about half the serial time. */
static void test_independent_branches(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "MatMul:x,W2->b", "Add:a,b->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 3, in, 1, out, 1, 1 << 8);
    set_cost(&f, 0, 10.0, 10.0);
    set_cost(&f, 1, 10.0, 10.0);
    set_cost(&f, 2, 0.01, 0.01);
    tdm_device_profile p[2];
    profiles(p, 10, 5, 0);
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    assert_int_not_equal(r.device[node_index(f.g, "n0")], r.device[node_index(f.g, "n1")]);
    assert_true(r.makespan_ms < 10.5);
    assert_true(r.makespan_ms < r.single_ms[0] * 0.6);
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* The same branches when the accelerator computes on the host's own cores (it keeps half its
 * speed while the host is busy, like PoCL's CPU device): nothing overlaps, so no split for
 * speed: one device. */
static void test_shared_cores(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "MatMul:x,W2->b", "Add:a,b->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 3, in, 1, out, 1, 1 << 8);
    set_cost(&f, 0, 10.0, 10.0);
    set_cost(&f, 1, 10.0, 10.0);
    set_cost(&f, 2, 0.01, 0.01);
    tdm_device_profile p[2];
    profiles(p, 10, 5, 0);
    p[1].host_busy_speed = 0.5;
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    int d0 = r.device[0];
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r.device[i], d0);
        assert_int_equal(r.reason[i], TDM_PLACE_SINGLE_DEVICE);
    }
    assert_true(fabs(r.makespan_ms - r.single_ms[d0]) < 1e-9);
    assert_true(r.copy_bytes == 0);
    tdm_place_result_free(NULL, &r);
    /* a GPU-like device keeps its speed: the split stays */
    p[1].host_busy_speed = 0.95;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    assert_int_not_equal(r.device[0], r.device[1]);
    tdm_place_result_free(NULL, &r);
    tdm_graph_free(f.g);
}

/* Affinity forces a node; no-fallback refuses a node the first device cannot run. */
static void test_rules(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "Erf:a->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    fixture f = {0};
    f.g = make_graph(specs, 2, in, 1, out, 1, 1 << 8);
    set_cost(&f, 0, 10.0, 1.0);
    set_cost(&f, 1, 0.1, -1);
    tdm_device_profile p[2];
    profiles(p, 10, 5, 0);
    int forced[2] = {0, -1};
    tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, forced, false};
    tdm_place_result r;
    assert_null(tdm_place_heft(&pin, NULL, &r));
    assert_int_equal(r.device[0], 0);
    assert_int_equal(r.reason[0], TDM_PLACE_AFFINITY);
    tdm_place_result_free(NULL, &r);
    /* accelerator first, no fallback: Erf cannot run there */
    tdm_device_profile q[2] = {p[1], p[0]};
    bool host2[2] = {false, true};
    fixture g2 = f;
    for (int i = 0; i < 2; i++) {
        g2.supported[i * 2] = f.supported[i * 2 + 1];
        g2.supported[i * 2 + 1] = f.supported[i * 2];
        g2.ms[i * 2] = f.ms[i * 2 + 1];
        g2.ms[i * 2 + 1] = f.ms[i * 2];
    }
    tdm_place_input pin2 = {f.g, 2, q, host2, g2.supported, g2.ms, NULL, true};
    tdm_status *st = tdm_place_heft(&pin2, NULL, &r);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_UNSUPPORTED);
    tdm_status_free(st);
    tdm_graph_free(f.g);
}

/* A split must be predicted at least 5% faster than the best single device: the first
 * node is 5% cheaper on the accelerator, the second runs only on the CPU (one copy each
 * way on a fast link): the split saves ~4.5% and is dropped; at half the cost it is kept. */
static void test_split_margin(void **state) {
    (void)state;
    const char *specs[] = {"MatMul:x,W1->a", "Erf:a->y"};
    const char *in[] = {"x"}, *out[] = {"y"};
    for (int big = 0; big <= 1; big++) {
        fixture f = {0};
        f.g = make_graph(specs, 2, in, 1, out, 1, 1 << 8);
        set_cost(&f, 0, 10.0, big ? 5.0 : 9.5);
        set_cost(&f, 1, 1.0, -1);
        tdm_device_profile p[2];
        profiles(p, 10, 5, 0);
        tdm_place_input pin = {f.g, 2, p, host, f.supported, f.ms, NULL, false};
        tdm_place_result r;
        assert_null(tdm_place_heft(&pin, NULL, &r));
        assert_true(fabs(r.single_ms[0] - 11.0) < 1e-9);
        if (big) {
            assert_int_equal(r.device[0], 1);
            assert_int_equal(r.device[1], 0);
            assert_true(r.makespan_ms > 6.0 && r.makespan_ms < 6.1); /* 5 + 1 + two copies */
        } else {
            assert_int_equal(r.device[0], 0);
            assert_int_equal(r.device[1], 0);
            assert_int_equal(r.reason[0], TDM_PLACE_SINGLE_DEVICE);
            assert_true(fabs(r.makespan_ms - 11.0) < 1e-9);
        }
        tdm_place_result_free(NULL, &r);
        tdm_graph_free(f.g);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slow_link),         cmocka_unit_test(test_fast_link),
        cmocka_unit_test(test_small_memory),      cmocka_unit_test(test_unsupported_in_middle),
        cmocka_unit_test(test_independent_branches), cmocka_unit_test(test_rules),
        cmocka_unit_test(test_split_margin),
        cmocka_unit_test(test_shared_cores),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
