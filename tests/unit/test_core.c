/* Core: status objects, checked shapes, tensors, float16/bfloat16, thread pool. */
#define _GNU_SOURCE
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/half.h"
#include "core/settings.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/threadpool.h"

static void test_status(void **state) {
    (void)state;
    assert_int_equal(tdm_status_code(NULL), TDM_OK);
    assert_string_equal(tdm_status_message(NULL), "ok");
    tdm_status *st = TDM_ERR(TDM_ERR_INVALID_MODEL, "node '%s' is bad", "n1");
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_MODEL);
    assert_string_equal(tdm_status_message(st), "node 'n1' is bad");
    st = tdm_status_wrap(st, "loading '%s': ", "m.onnx");
    assert_string_equal(tdm_status_message(st), "loading 'm.onnx': node 'n1' is bad");
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_MODEL);
    tdm_status_free(st);
    tdm_status_free(NULL);
    assert_string_equal(tdm_code_name(TDM_ERR_LIMIT), "limit exceeded");
    assert_string_equal(tdm_code_name((tdm_code)999), "unknown");
    /* a status with code OK is never produced: it would read as success */
    st = tdm_status_new(TDM_OK, "x");
    assert_int_not_equal(tdm_status_code(st), TDM_OK);
    tdm_status_free(st);
}

static void test_shape_count(void **state) {
    (void)state;
    int64_t count;
    size_t bytes;
    int64_t ok[3] = {2, 3, 4};
    assert_null(tdm_shape_count(3, ok, TDM_FLOAT, "t", &count, &bytes));
    assert_int_equal(count, 24);
    assert_int_equal(bytes, 96);
    int64_t neg[2] = {2, -1};
    tdm_status *st = tdm_shape_count(2, neg, TDM_FLOAT, "t", &count, &bytes);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    int64_t big[3] = {INT64_C(1) << 40, INT64_C(1) << 40, 16};
    st = tdm_shape_count(3, big, TDM_FLOAT, "t", &count, &bytes);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_LIMIT);
    tdm_status_free(st);
    int64_t huge[1] = {INT64_C(1) << 39}; /* 2^39 floats = 2 TiB > limit */
    st = tdm_shape_count(1, huge, TDM_FLOAT, "t", &count, &bytes);
    assert_non_null(st);
    tdm_status_free(st);
    st = tdm_shape_count(TDM_MAX_RANK + 1, ok, TDM_FLOAT, "t", &count, &bytes);
    assert_non_null(st);
    tdm_status_free(st);
    int64_t zero[2] = {0, 5};
    assert_null(tdm_shape_count(2, zero, TDM_INT64, "t", &count, &bytes));
    assert_int_equal(count, 0);
}

static void test_tensor_clone_strings(void **state) {
    (void)state;
    int64_t dims[1] = {2};
    tdm_tensor *t = NULL, *c = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_STRING, 1, dims, &t));
    assert_null(tdm_tensor_set_string(t, 0, "hello", 5));
    assert_null(tdm_tensor_set_string(t, 1, "wor\0ld", 3));
    tdm_status *st = tdm_tensor_set_string(t, 2, "x", 1);
    assert_non_null(st);
    tdm_status_free(st);
    assert_null(tdm_tensor_clone(NULL, t, &c));
    assert_string_equal(((char **)c->data)[0], "hello");
    assert_string_equal(((char **)c->data)[1], "wor");
    assert_ptr_not_equal(((char **)c->data)[0], ((char **)t->data)[0]);
    tdm_tensor_destroy(t);
    tdm_tensor_destroy(c);
}

/* tdm_tensor_share: headers over one buffer (strings too: their pointers are freed once),
 * destroyed in any order, the data freed with the last (ASan reports a double free, a use
 * after free or a leak otherwise); a shared tensor is not movable (tdm_tensors_share_huge
 * leaves it), one already on huge pages stays reported as such; a pooled one is refused. */
static void test_tensor_share(void **state) {
    (void)state;
    int64_t n = 300000;
    tdm_tensor *t = NULL, *a = NULL, *b = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 1, &n, &t));
    ((float *)t->data)[n - 1] = 7.0f;
    assert_false(tdm_tensor_is_shared(t));
    assert_null(tdm_tensor_share(t, &a));
    assert_null(tdm_tensor_share(a, &b)); /* a share of a share: one count */
    assert_true(tdm_tensor_is_shared(t) && tdm_tensor_is_shared(a) && tdm_tensor_is_shared(b));
    assert_ptr_equal(a->data, t->data);
    assert_ptr_equal(b->data, t->data);
    assert_false(t->owns_data || a->owns_data);
    tdm_tensors_share_huge(&t, 1); /* not movable: the others hold the bytes too */
    assert_ptr_equal(a->data, t->data);
    tdm_tensor_destroy(t);
    assert_true(((float *)b->data)[n - 1] == 7.0f);
    tdm_tensor_destroy(b);
    assert_true(((float *)a->data)[n - 1] == 7.0f);
    tdm_tensor_destroy(a);

    int64_t two = 2;
    assert_null(tdm_tensor_new(NULL, TDM_STRING, 1, &two, &t));
    assert_null(tdm_tensor_set_string(t, 0, "kept", 4));
    assert_null(tdm_tensor_share(t, &a));
    tdm_tensor_destroy(a); /* the copy first this time */
    assert_false(t->owns_data); /* (shared once: still read-only) */
    assert_string_equal(((char **)t->data)[0], "kept");
    tdm_tensor_destroy(t);

#ifdef __linux__
    int64_t big = 3 << 20;
    assert_null(tdm_tensor_new(NULL, TDM_UINT8, 1, &big, &t));
    tdm_tensors_share_huge(&t, 1);
    if (tdm_tensor_is_huge_shared(t)) { /* (the mapping may fail: a hint) */
        assert_null(tdm_tensor_share(t, &a));
        assert_true(tdm_tensor_is_huge_shared(t) && tdm_tensor_is_huge_shared(a));
        tdm_tensor_destroy(t);
        tdm_tensor_destroy(a);
    } else {
        tdm_tensor_destroy(t);
    }
#endif

    tdm_tensor pooled = {.dtype = TDM_FLOAT, .pooled = true};
    a = (tdm_tensor *)&pooled;
    tdm_status *st = tdm_tensor_share(&pooled, &a);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_ptr_equal(a, &pooled); /* untouched */
    tdm_status_free(st);
}

/* tdm_tensors_share_huge: the movable tensors' bytes unchanged in one mapping (64-byte
 * aligned, one after another), the others left alone, each freed on its own (the mapping with
 * the last: ASan reports a leak or a use after free otherwise); below a huge page nothing
 * moves. */
static void test_tensors_share_huge(void **state) {
    (void)state;
#ifndef __linux__
    skip(); /* transparent huge pages: Linux only; elsewhere nothing moves */
#endif
    enum { NT = 4 };
    int64_t sizes[NT] = {700001, 1 << 20, 3, 900000};
    tdm_tensor *t[NT + 1];
    for (int i = 0; i < NT; i++) {
        assert_null(tdm_tensor_new_uninit(NULL, TDM_UINT8, 1, &sizes[i], &t[i]));
        for (int64_t k = 0; k < sizes[i]; k++) ((uint8_t *)t[i]->data)[k] = (uint8_t)(k * 7 + i);
    }
    int64_t two = 2;
    assert_null(tdm_tensor_new(NULL, TDM_STRING, 1, &two, &t[NT])); /* holds pointers: stays */
    void *str_data = t[NT]->data;
    tdm_tensors_share_huge(t, NT + 1);
    for (int i = 0; i < NT; i++) {
        assert_true(tdm_tensor_is_huge_shared(t[i]));
        assert_int_equal((uintptr_t)t[i]->data % 64, 0);
        for (int64_t k = 0; k < sizes[i]; k++)
            if (((uint8_t *)t[i]->data)[k] != (uint8_t)(k * 7 + i)) fail_msg("tensor %d byte %lld", i, (long long)k);
        if (i) assert_true((uint8_t *)t[i]->data >= (uint8_t *)t[i - 1]->data + sizes[i - 1]);
    }
    assert_false(tdm_tensor_is_huge_shared(t[NT]));
    assert_ptr_equal(t[NT]->data, str_data);
    tdm_tensor_destroy(t[1]); /* any order; the mapping stays for the others */
    assert_int_equal(((uint8_t *)t[3]->data)[899999], (uint8_t)(899999 * 7 + 3));
    tdm_tensor_destroy(t[0]);
    tdm_tensor_destroy(t[3]);
    tdm_tensor_destroy(t[2]);
    tdm_tensor_destroy(t[NT]);
    /* too small to fill a huge page: left where it is */
    tdm_tensor *s = NULL;
    int64_t n = 1000;
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 1, &n, &s));
    void *d = s->data;
    tdm_tensors_share_huge(&s, 1);
    assert_false(tdm_tensor_is_huge_shared(s));
    assert_ptr_equal(s->data, d);
    tdm_tensor_destroy(s);
}

static void test_half(void **state) {
    (void)state;
    const float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.9604645e-08f, 0.1f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float back = tdm_f16_to_f32(tdm_f32_to_f16(vals[i]));
        float tol = vals[i] * (1.0f / 1024) + 1e-7f;
        if (tol < 0) tol = -tol;
        assert_true(back - vals[i] <= tol && vals[i] - back <= tol);
    }
    assert_int_equal(tdm_f32_to_f16(1e6f), 0x7c00);         /* overflow to inf */
    assert_int_equal(tdm_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(tdm_f32_to_f16(5.9604645e-08f), 0x0001); /* smallest subnormal */
    assert_int_equal(tdm_f32_to_f16(1.00048828125f), 0x3c00); /* tie rounds to even */
    assert_int_equal(tdm_f32_to_bf16(1.0f), 0x3f80);
    assert_true(tdm_bf16_to_f32(tdm_f32_to_bf16(3.140625f)) == 3.140625f);
}

typedef struct sum_arg {
    int64_t *out;
} sum_arg;

static void square_range(void *arg, int64_t b, int64_t e) {
    sum_arg *s = arg;
    for (int64_t i = b; i < e; i++) s->out[i] = i * i;
}

static void test_threadpool(void **state) {
    (void)state;
    for (int threads = 1; threads <= 4; threads++) {
        tdm_threadpool *p = NULL;
        assert_null(tdm_threadpool_create(threads, TDM_SPIN_US_DEFAULT, &p));
        assert_int_equal(tdm_threadpool_size(p), threads);
        enum { N = 10007 };
        static int64_t out[N];
        memset(out, 0, sizeof out);
        sum_arg a = {out};
        for (int rep = 0; rep < 50; rep++) tdm_parallel_for(p, N, 7, square_range, &a);
        for (int64_t i = 0; i < N; i++) assert_int_equal(out[i], i * i);
        tdm_parallel_for(p, 0, 1, square_range, &a); /* empty range: no call */
        tdm_threadpool_free(p);
    }
    tdm_threadpool_free(NULL);
}

/* The chunks of a region: sizes differ by one at most (36 panels in 8 chunks: 4 and 5, not
 * seven of 5 and a last of 1) and none below the grain. */
typedef struct chunk_log {
    atomic_int n;
    int64_t size[64];
} chunk_log;

static void log_range(void *arg, int64_t b, int64_t e) {
    chunk_log *l = arg;
    int i = atomic_fetch_add(&l->n, 1);
    if (i < 64) l->size[i] = e - b;
}

static void test_threadpool_chunks(void **state) {
    (void)state;
    const int64_t cases[][3] = {{2, 36, 1}, {2, 60, 1}, {3, 10007, 7}, {4, 100, 30}, {2, 9, 4}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        tdm_threadpool *p = NULL;
        assert_null(tdm_threadpool_create((int)cases[c][0], TDM_SPIN_US_DEFAULT, &p));
        int64_t n = cases[c][1], grain = cases[c][2];
        chunk_log l;
        atomic_init(&l.n, 0);
        tdm_parallel_for(p, n, grain, log_range, &l);
        int k = atomic_load(&l.n);
        assert_true(k >= 1 && k <= 4 * cases[c][0]);
        int64_t total = 0, lo = n, hi = 0;
        for (int i = 0; i < k; i++) {
            total += l.size[i];
            lo = l.size[i] < lo ? l.size[i] : lo;
            hi = l.size[i] > hi ? l.size[i] : hi;
        }
        assert_int_equal(total, n);
        assert_true(hi - lo <= 1);
        assert_true(lo >= grain || k == 1);
        tdm_threadpool_free(p);
    }
}

/* Regions of few chunks then many, back to back, each job's state dead after its region: a
 * worker must never run a chunk of a finished region (it once could: all chunks of (g, k) taken,
 * the next job's larger count read, a claim on the old generation) nor see a dead job. A race:
 * the test finds it with some probability. */
typedef struct live_job {
    atomic_int live;
    atomic_int bad;
    int64_t n;
    atomic_int hits[1000];
} live_job;

static void check_live(void *arg, int64_t b, int64_t e) {
    live_job *j = arg;
    if (atomic_load(&j->live) != 1 || b < 0 || e > j->n || b >= e) {
        atomic_fetch_add(&j->bad, 1);
        return;
    }
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&j->hits[i], 1);
}

static void test_threadpool_stale_chunks(void **state) {
    (void)state;
    tdm_threadpool *p = NULL;
    assert_null(tdm_threadpool_create(3, TDM_SPIN_US_DEFAULT, &p));
    static live_job jobs[2];
    atomic_int bad;
    atomic_init(&bad, 0);
    for (int r = 0; r < 60000; r++) {
        live_job *j = &jobs[r & 1];
        j->n = (r & 1) ? 1000 : 2; /* 2 chunks, then 12 */
        atomic_init(&j->bad, 0);
        for (int64_t i = 0; i < j->n; i++) atomic_init(&j->hits[i], 0);
        atomic_store(&j->live, 1);
        tdm_parallel_for(p, j->n, 1, check_live, j);
        atomic_store(&j->live, 0);
        for (int64_t i = 0; i < j->n; i++) /* each item once: no chunk run twice or missed */
            if (atomic_load(&j->hits[i]) != 1) atomic_fetch_add(&j->bad, 1);
        atomic_fetch_add(&bad, atomic_load(&j->bad));
    }
    tdm_threadpool_free(p);
    assert_int_equal(atomic_load(&bad), 0);
}

/* The waiting paths of the pool: never spinning (spin_us 0: every wake-up goes through
 * the condition variables), spinning, and regions far enough apart that spinning workers fall
 * asleep in between; and two callers sharing one pool. Each region must see every item once. */
typedef struct count_arg {
    atomic_int *hits;
    int64_t n;
} count_arg;

static void count_range(void *arg, int64_t b, int64_t e) {
    count_arg *c = arg;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

typedef struct caller_arg {
    tdm_threadpool *pool;
    count_arg c;
    int regions;
} caller_arg;

static void *caller_main(void *vp) {
    caller_arg *ca = vp;
    for (int r = 0; r < ca->regions; r++) tdm_parallel_for(ca->pool, ca->c.n, 3, count_range, &ca->c);
    return NULL;
}

static void check_hits(atomic_int *hits, int64_t n, int expect) {
    for (int64_t i = 0; i < n; i++) assert_int_equal(atomic_load(&hits[i]), expect);
}

static void test_threadpool_waiting(void **state) {
    (void)state;
    enum { N = 257 };
    static atomic_int hits[N], hits2[N];
    const int64_t spins[] = {0, 200, 100000};
    for (size_t si = 0; si < sizeof spins / sizeof *spins; si++) {
        tdm_threadpool *p = NULL;
        assert_null(tdm_threadpool_create(3, spins[si], &p));
        for (int64_t i = 0; i < N; i++) atomic_store(&hits[i], 0), atomic_store(&hits2[i], 0);
        count_arg c = {hits, N};
        for (int r = 0; r < 20; r++) {
            tdm_parallel_for(p, N, 3, count_range, &c);
            if (r % 5 == 4) usleep(2000); /* longer than a 200 us spin: workers sleep */
        }
        check_hits(hits, N, 20);
        caller_arg a = {p, {hits, N}, 40}, b = {p, {hits2, N}, 40};
        pthread_t t1, t2;
        assert_int_equal(pthread_create(&t1, NULL, caller_main, &a), 0);
        assert_int_equal(pthread_create(&t2, NULL, caller_main, &b), 0);
        pthread_join(t1, NULL);
        pthread_join(t2, NULL);
        check_hits(hits, N, 60);
        check_hits(hits2, N, 40);
        if (spins[si] == 0) { /* every wait a sleep: a lost wake-up hangs here (the test's timeout) */
            for (int r = 0; r < 20000; r++) tdm_parallel_for(p, N, 3, count_range, &c);
            check_hits(hits, N, 20060);
        }
        tdm_threadpool_free(p);
    }
}

/* Consecutive regions of different chunk counts: each item of each region runs exactly once,
 * and none after its region returned. A worker that finished the last chunk of one region used
 * to read the next region's chunk count beside the old ticket, claim a chunk past the old
 * region's end and run the next region's chunk twice (~2% of the items below, more on a
 * loaded machine); the count now travels in the ticket. */
static void test_threadpool_generations(void **state) {
    (void)state;
    enum { N = 64, REGIONS = 50000 };
    static atomic_int hits[2][N];
    for (int threads = 2; threads <= 6; threads += 2) {
        tdm_threadpool *p = NULL;
        assert_null(tdm_threadpool_create(threads, TDM_SPIN_US_DEFAULT, &p));
        long doubled = 0, missed = 0;
        for (int r = 0; r < REGIONS; r++) {
            atomic_int *h = hits[r & 1];
            int64_t n = (r & 1) ? N : 2 + r % 7; /* few chunks, then many */
            for (int i = 0; i < N; i++) atomic_store(&h[i], 0);
            count_arg c = {h, n};
            tdm_parallel_for(p, n, 1, count_range, &c);
            for (int64_t i = 0; i < n; i++) {
                int k = atomic_load(&h[i]);
                doubled += k > 1;
                missed += k < 1;
            }
        }
        tdm_threadpool_free(p);
        if (doubled || missed) print_error("%d threads: %ld items ran twice, %ld never\n", threads, doubled, missed);
        assert_int_equal(doubled, 0);
        assert_int_equal(missed, 0);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_status),     cmocka_unit_test(test_shape_count),
        cmocka_unit_test(test_tensor_clone_strings), cmocka_unit_test(test_tensor_share),
        cmocka_unit_test(test_tensors_share_huge),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_threadpool_waiting), cmocka_unit_test(test_threadpool_generations),
        cmocka_unit_test(test_threadpool_chunks), cmocka_unit_test(test_threadpool_stale_chunks),
        cmocka_unit_test(test_threadpool),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
