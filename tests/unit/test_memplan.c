/* Memory planning: offsets never overlap for values alive at the same time; repeated runs with
 * the same shapes take intermediates from the arena (far fewer allocations, same results);
 * changing shapes and concurrent runs stay correct. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sched/memplan.h"
#include "tandem/tandem.h"

static void test_offsets_disjoint(void **state) {
    (void)state;
    enum { N = 200 };
    size_t size[N];
    int first[N], last[N];
    unsigned seed = 7;
    size_t sum = 0;
    for (int v = 0; v < N; v++) {
        seed = seed * 1103515245u + 12345u;
        size[v] = (v % 7 == 0) ? 0 : 1 + (seed >> 8) % 100000;
        first[v] = (int)((seed >> 4) % 100);
        last[v] = first[v] + (int)((seed >> 12) % 20);
        sum += size[v];
    }
    tdm_memplan *mp = NULL;
    assert_null(tdm_memplan_build(NULL, N, size, first, last, NULL, 42, &mp));
    assert_true(mp->arena_bytes > 0);
    assert_true(mp->arena_bytes < sum); /* reuse happened */
    for (int a = 0; a < N; a++) {
        if (!size[a]) {
            assert_int_equal(mp->offset[a], -1);
            continue;
        }
        assert_true(mp->offset[a] % 64 == 0);
        assert_true((size_t)mp->offset[a] + size[a] <= mp->arena_bytes);
        for (int b = a + 1; b < N; b++) {
            if (!size[b] || first[a] > last[b] || first[b] > last[a]) continue;
            bool apart = (size_t)mp->offset[a] + size[a] <= (size_t)mp->offset[b] ||
                         (size_t)mp->offset[b] + size[b] <= (size_t)mp->offset[a];
            if (!apart) fail_msg("values %d and %d overlap while both alive", a, b);
        }
    }
    /* figures for inspect --plan: the sum of all (64-byte rounded) sizes, and the largest
     * live set computed here by brute force, which bounds the arena from below */
    size_t total = 0, peak = 0;
    for (int v = 0; v < N; v++) total += (size[v] + 63) / 64 * 64 * (size[v] != 0);
    for (int t = 0; t < 130; t++) {
        size_t live = 0;
        for (int v = 0; v < N; v++)
            if (size[v] && first[v] <= t && t <= last[v]) live += (size[v] + 63) / 64 * 64;
        if (live > peak) peak = live;
    }
    assert_int_equal(mp->total_bytes, total);
    assert_int_equal(mp->peak_live_bytes, peak);
    assert_true(mp->peak_live_bytes <= mp->arena_bytes && mp->arena_bytes <= mp->total_bytes);
    tdm_memplan_free(NULL, mp);
}

/* In-place requests: granted only where the taker is made by the last reader of a value of
 * the same size; the pair shares one block, which no value alive over either interval
 * overlaps; chains share one block; a value is taken at most once. */
static void test_alias(void **state) {
    (void)state;
    enum { N = 9 };
    /*                    0    1    2    3    4    5    6    7    8 */
    size_t size[N] = {4096, 4096, 4096, 4096, 4096, 4096, 8192, 4096, 4096};
    int first[N] = {0, 1, 2, 3, 4, 5, 5, 6, 6};
    int last[N] = {2, 3, 4, 4, 6, 5, 7, 8, 8};
    int alias[N] = {-1, -1, 0, 1, 3, -1, 5, 4, 4};
    /* 2 takes 0 (last[0] = 2 = first[2]); 3 takes 1; 4 takes 3 (a chain 1 -> 3 -> 4);
     * 6 asks for 5 (sizes differ: refused); 7 takes 4; 8 asks for 4 too (taken: refused) */
    tdm_memplan *mp = NULL;
    assert_null(tdm_memplan_build(NULL, N, size, first, last, alias, 1, &mp));
    int want[N] = {-1, -1, 0, 1, 3, -1, -1, 4, -1};
    for (int v = 0; v < N; v++) assert_int_equal(mp->alias_of[v], want[v]);
    assert_int_equal(mp->n_inplace, 4);
    assert_int_equal(mp->offset[2], mp->offset[0]);
    assert_int_equal(mp->offset[3], mp->offset[1]);
    assert_int_equal(mp->offset[4], mp->offset[1]);
    assert_int_equal(mp->offset[7], mp->offset[1]);
    /* the groups' intervals: {0, 2} over nodes 0..4, {1, 3, 4, 7} over 1..8 */
    int gfirst[N], glast[N];
    for (int v = 0; v < N; v++) gfirst[v] = first[v], glast[v] = last[v];
    gfirst[2] = 0, glast[0] = glast[2] = 4;
    gfirst[3] = gfirst[4] = gfirst[7] = 1, glast[1] = glast[3] = glast[4] = glast[7] = 8;
    int grp[N] = {0, 1, 0, 1, 1, 5, 6, 1, 8};
    for (int a = 0; a < N; a++)
        for (int b = a + 1; b < N; b++) {
            if (grp[a] == grp[b]) continue; /* sharing on purpose (checked above) */
            if (gfirst[a] > glast[b] || gfirst[b] > glast[a]) continue;
            bool apart = (size_t)mp->offset[a] + size[a] <= (size_t)mp->offset[b] ||
                         (size_t)mp->offset[b] + size[b] <= (size_t)mp->offset[a];
            if (!apart) fail_msg("values %d and %d overlap while both alive", a, b);
        }
    tdm_memplan_free(NULL, mp);
    /* the same request where the taker is not made by the last reader: refused */
    int last2[N] = {3, 3, 4, 4, 6, 5, 7, 8, 8};
    assert_null(tdm_memplan_build(NULL, N, size, first, last2, alias, 1, &mp));
    assert_int_equal(mp->alias_of[2], -1);
    assert_true(mp->offset[2] != mp->offset[0]);
    tdm_memplan_free(NULL, mp);
}

typedef struct counting {
    long calls;
    size_t big; /* allocations of 4 KiB or more */
    pthread_mutex_t mu;
} counting;

static void *c_alloc(void *user, size_t size, size_t align) {
    counting *c = user;
    pthread_mutex_lock(&c->mu);
    c->calls++;
    if (size >= 4096) c->big++;
    pthread_mutex_unlock(&c->mu);
    return aligned_alloc(align, (size + align - 1) / align * align);
}
static void c_free(void *user, void *p) {
    (void)user;
    free(p);
}

#define MODEL TANDEM_SOURCE_DIR "/tests/models/resnet_blocks/model.onnx"

static tdm_tensor *run_once(tdm_session *s, tdm_env *env, int64_t batch, float fill) {
    int64_t dims[4] = {batch, 3, 64, 64};
    tdm_tensor *x = NULL, *y = NULL;
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 4, dims, &x));
    float *d = tdm_tensor_data(x);
    for (int64_t i = 0; i < tdm_tensor_element_count(x); i++) d[i] = fill * (float)((i % 97) - 48) / 48.0f;
    tdm_value_desc in, out;
    assert_null(tdm_model_input(tdm_session_model(s), 0, &in));
    assert_null(tdm_model_output(tdm_session_model(s), 0, &out));
    tdm_status *st = tdm_session_run(s, 1, &in.name, (const tdm_tensor *const *)&x, 1, &out.name, &y);
    if (st) fail_msg("%s", tdm_status_message(st));
    tdm_tensor_free(x);
    return y;
}

static bool same(const tdm_tensor *a, const tdm_tensor *b) {
    return tdm_tensor_byte_size(a) == tdm_tensor_byte_size(b) &&
           memcmp(tdm_tensor_data_const(a), tdm_tensor_data_const(b), tdm_tensor_byte_size(a)) == 0;
}

static void test_arena_reuse(void **state) {
    (void)state;
    counting c = {0, 0, PTHREAD_MUTEX_INITIALIZER};
    tdm_env_options o = {TDM_API_VERSION, NULL, NULL, TDM_LOG_ERROR, {c_alloc, c_free, &c}, 1};
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    assert_null(tdm_env_create(&o, &env));
    tdm_status *st = tdm_session_create(env, MODEL, NULL, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    long c0 = c.calls;
    size_t b0 = c.big;
    tdm_tensor *y1 = run_once(s, env, 1, 1.0f); /* records sizes, plans */
    long first_calls = c.calls - c0;
    size_t first_big = c.big - b0;
    c0 = c.calls;
    b0 = c.big;
    tdm_tensor *y2 = run_once(s, env, 1, 1.0f); /* uses the arena */
    long second_calls = c.calls - c0;
    size_t second_big = c.big - b0;
    assert_true(same(y1, y2));
    /* the residual convolutions write over their Z input (a sum in place), on the first run
     * (Z copied into Y) and on later runs (Y planned in Z's memory) alike: bit for bit the
     * same outputs (above) */
    char *js = NULL;
    assert_null(tdm_session_explain(s, TDM_EXPLAIN_JSON, &js));
    const char *ip = strstr(js, "\"inplace_values\":");
    assert_non_null(ip);
    assert_true(atoi(ip + strlen("\"inplace_values\":")) >= 3); /* resnet_blocks: 3 residuals */
    tdm_string_free(js);
    /* the first run allocates every activation; later runs only the input and headers */
    assert_true(second_calls < first_calls);
    assert_true(second_big + 4 < first_big);
    tdm_tensor_free(y2);
    /* other shapes get their own plan, and the old one still gives the same answer */
    tdm_tensor *z = run_once(s, env, 1, 0.5f);
    assert_false(same(y1, z));
    tdm_tensor_free(z);
    tdm_tensor *y3 = run_once(s, env, 1, 1.0f);
    assert_true(same(y1, y3));
    tdm_tensor_free(y3);
    tdm_tensor_free(y1);
    tdm_session_free(s);
    tdm_env_free(env);
}

typedef struct worker_arg {
    tdm_session *s;
    tdm_env *env;
    const tdm_tensor *want;
    int bad;
} worker_arg;

static void *worker(void *p) {
    worker_arg *w = p;
    for (int i = 0; i < 6; i++) {
        tdm_tensor *y = run_once(w->s, w->env, 1, 1.0f);
        if (!same(y, w->want)) w->bad++;
        tdm_tensor_free(y);
    }
    return NULL;
}

static void test_concurrent_runs(void **state) {
    (void)state;
    tdm_env *env = NULL;
    tdm_session *s = NULL;
    assert_null(tdm_env_create(NULL, &env));
    tdm_session_options so = {TDM_API_VERSION, "cpu", 1, 1, false};
    assert_null(tdm_session_create(env, MODEL, &so, &s));
    tdm_tensor *want = run_once(s, env, 1, 1.0f);
    pthread_t th[3];
    worker_arg w[3];
    for (int i = 0; i < 3; i++) {
        w[i] = (worker_arg){s, env, want, 0};
        pthread_create(&th[i], NULL, worker, &w[i]);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].bad, 0);
    }
    tdm_tensor_free(want);
    tdm_session_free(s);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_offsets_disjoint),
        cmocka_unit_test(test_alias),
        cmocka_unit_test(test_arena_reuse),
        cmocka_unit_test(test_concurrent_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
