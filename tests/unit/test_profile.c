/* Device profiles and the cost model: profiling the CPU gives positive numbers and is cached
 * (read back exactly, measured again on request, corrupt files replaced, an unwritable cache
 * is no error); a device with memory of its own gets link numbers; predicted node times grow
 * with the work and copies between host-memory devices are free. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <ftw.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/settings.h"
#include "core/tensor.h"
#include "graph/graph.h"
#include "sched/cost.h"
#include "sched/profile.h"
#include "tandem/tandem.h"

typedef struct fixture {
    char dir[256];
} fixture;

static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/tandem_profile_XXXXXX");
    if (!mkdtemp(f->dir)) return -1;
    setenv("TANDEM_CACHE_DIR", f->dir, 1);
    *state = f;
    return 0;
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state) {
    fixture *f = *state;
    nftw(f->dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    unsetenv("TANDEM_CACHE_DIR");
    unsetenv("TANDEM_TEST_DEVICES");
    free(f);
    return 0;
}

static tdm_env *new_env(void) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.threads = 2;
    tdm_env *env = NULL;
    assert_null(tdm_env_create(&o, &env));
    return env;
}

static size_t device_index(tdm_env *env, const char *name) {
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        if (!strcmp(tdm_env_device_name(env, i), name)) return i;
    fail_msg("device %s not found", name);
    return 0;
}

static void assert_same_numbers(const tdm_device_info *a, const tdm_device_info *b) {
    assert_true(a->gemm_gflops == b->gemm_gflops);
    assert_true(a->conv_gflops == b->conv_gflops);
    assert_true(a->mem_gbps == b->mem_gbps);
    assert_true(a->launch_us == b->launch_us);
    assert_true(a->h2d_gbps == b->h2d_gbps);
    assert_true(a->d2h_gbps == b->d2h_gbps);
    assert_true(a->link_latency_us == b->link_latency_us);
    assert_true(a->memory_bytes == b->memory_bytes);
    assert_int_equal(a->threads, b->threads);
}

/* Path of the one cached file whose name starts with `prefix`. */
static void cache_file(const fixture *f, const char *prefix, char *path, size_t size) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/profiles", f->dir);
    DIR *d = opendir(dir);
    assert_non_null(d);
    int found = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (!strncmp(e->d_name, prefix, strlen(prefix)) && strstr(e->d_name, ".txt")) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    assert_int_equal(found, 1);
}

static void test_cpu_profile_cached(void **state) {
    (void)state;
    tdm_env *env = new_env();
    size_t cpu = device_index(env, "cpu");
    tdm_device_info a, b, c;
    assert_null(tdm_env_device_profile(env, cpu, false, &a));
    assert_false(a.from_cache);
    assert_true(a.host_memory);
    assert_string_equal(a.name, "cpu");
    assert_int_equal(a.threads, 2);
    assert_true(a.gemm_gflops > 0);
    assert_true(a.conv_gflops > 0);
    assert_true(a.mem_gbps > 0);
    assert_true(a.launch_us > 0);
    assert_true(a.memory_bytes > 0);
    /* host memory: no copies */
    assert_true(a.h2d_gbps == 0 && a.d2h_gbps == 0 && a.link_latency_us == 0);

    assert_null(tdm_env_device_profile(env, cpu, false, &b));
    assert_true(b.from_cache);
    assert_same_numbers(&a, &b);

    assert_null(tdm_env_device_profile(env, cpu, true, &c));
    assert_false(c.from_cache);
    assert_true(c.gemm_gflops > 0);

    tdm_status *st = tdm_env_device_profile(env, 99, false, &c);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_env_free(env);
}

static void test_corrupt_cache_replaced(void **state) {
    fixture *f = *state;
    tdm_env *env = new_env();
    size_t cpu = device_index(env, "cpu");
    tdm_device_info a, b;
    assert_null(tdm_env_device_profile(env, cpu, false, &a));
    char path[600];
    cache_file(f, "cpu-", path, sizeof path);
    const char *garbage[] = {
        "garbage\x01\x02 no equals sign\n",
        "format=1\ndevice=cpu\ngemm_gflops=nan\n",
        "", /* empty */
    };
    for (size_t i = 0; i < sizeof garbage / sizeof garbage[0]; i++) {
        FILE *fp = fopen(path, "w");
        assert_non_null(fp);
        fputs(garbage[i], fp);
        fclose(fp);
        assert_null(tdm_env_device_profile(env, cpu, false, &b));
        assert_false(b.from_cache);
        assert_true(b.gemm_gflops > 0);
        assert_null(tdm_env_device_profile(env, cpu, false, &b)); /* replaced: good again */
        assert_true(b.from_cache);
    }
    /* a file with every key but one number edited to nonsense */
    FILE *fp = fopen(path, "r");
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = 0;
    char *m = strstr(text, "mem_gbps=");
    assert_non_null(m);
    m[strlen("mem_gbps=")] = 'x';
    fp = fopen(path, "w");
    fputs(text, fp);
    fclose(fp);
    assert_null(tdm_env_device_profile(env, cpu, false, &b));
    assert_false(b.from_cache);
    tdm_env_free(env);
}

static void test_unwritable_cache(void **state) {
    fixture *f = *state;
    /* a cache directory below a regular file cannot be created, even by root */
    char file[300], bad[400];
    snprintf(file, sizeof file, "%s/file", f->dir);
    FILE *fp = fopen(file, "w");
    assert_non_null(fp);
    fclose(fp);
    snprintf(bad, sizeof bad, "%s/sub/dir", file);
    setenv("TANDEM_CACHE_DIR", bad, 1);
    tdm_env *env = new_env();
    size_t cpu = device_index(env, "cpu");
    tdm_device_info a;
    assert_null(tdm_env_device_profile(env, cpu, false, &a));
    assert_false(a.from_cache);
    assert_true(a.gemm_gflops > 0);
    assert_null(tdm_env_device_profile(env, cpu, false, &a));
    assert_false(a.from_cache); /* nothing was kept, so measured again */
    tdm_env_free(env);
}

/* The cache folder as an environment resolves it (api/settings.c): TANDEM_CACHE_DIR, else
 * $XDG_CACHE_HOME/tandem; tdm_cache_dir hands it out. */
static void test_cache_dir(void **state) {
    fixture *f = *state;
    char buf[512];
    tdm_settings set;
    assert_null(tdm_settings_read(NULL, &set));
    assert_string_equal(tdm_cache_dir(&set, buf, sizeof buf), f->dir);
    unsetenv("TANDEM_CACHE_DIR");
    const char *xdg = getenv("XDG_CACHE_HOME");
    char *saved = xdg ? strdup(xdg) : NULL;
    setenv("XDG_CACHE_HOME", "/x/cache", 1);
    assert_null(tdm_settings_read(NULL, &set));
    assert_string_equal(tdm_cache_dir(&set, buf, sizeof buf), "/x/cache/tandem");
    assert_null(tdm_cache_dir(&set, buf, 4)); /* does not fit */
    if (saved) setenv("XDG_CACHE_HOME", saved, 1);
    else unsetenv("XDG_CACHE_HOME");
    free(saved);
}

static void test_device_with_own_memory(void **state) {
    (void)state;
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    tdm_env *env = new_env();
    size_t td = device_index(env, "test:0");
    tdm_device_info a, b;
    assert_null(tdm_env_device_profile(env, td, false, &a));
    assert_false(a.host_memory);
    assert_true(a.h2d_gbps > 0);
    assert_true(a.d2h_gbps > 0);
    assert_true(a.link_latency_us > 0);
    assert_true(a.gemm_gflops > 0);
    assert_true(a.launch_us > 0);
    assert_int_equal(a.memory_bytes, 0); /* unknown */
    assert_null(tdm_env_device_profile(env, td, false, &b));
    assert_true(b.from_cache);
    assert_same_numbers(&a, &b);
    tdm_env_free(env);
}

/* ---- cost model on hand-built graphs ---- */

static int add_value(tdm_graph *g, const char *name, int rank, const int64_t *dims) {
    int v = -1;
    assert_null(tdm_graph_add_value(g, name, &v));
    g->values[v].dtype = TDM_FLOAT;
    g->values[v].rank = rank;
    for (int i = 0; i < rank; i++) g->values[v].dims[i] = dims[i];
    return v;
}

/* Returns the node's index (pointers into g->nodes move as nodes are added). */
static int add_node(tdm_graph *g, const char *op, int a, int b, int y) {
    int n = -1;
    assert_null(tdm_graph_add_node(g, op, op, "", 2, 1, &n));
    g->nodes[n].inputs[0] = a;
    g->nodes[n].inputs[1] = b;
    g->nodes[n].outputs[0] = y;
    g->nodes[n].opset = 17;
    return n;
}

static tdm_device_profile synthetic(const char *name, double gflops, double gbps, double launch_us,
                                    double link_gbps, double latency_us) {
    tdm_device_profile p;
    memset(&p, 0, sizeof p);
    snprintf(p.device, sizeof p.device, "%s", name);
    p.gemm_gflops = p.conv_gflops = gflops;
    p.mem_gbps = gbps;
    p.launch_us = launch_us;
    p.h2d_gbps = p.d2h_gbps = link_gbps;
    p.link_latency_us = latency_us;
    return p;
}

static void test_cost_matmul_scales(void **state) {
    (void)state;
    tdm_graph *g = NULL;
    assert_null(tdm_graph_new(NULL, &g));
    int64_t s64[2] = {64, 64}, s512[2] = {512, 512};
    int small = add_node(g, "MatMul", add_value(g, "a", 2, s64), add_value(g, "b", 2, s64),
                         add_value(g, "c", 2, s64));
    int big = add_node(g, "MatMul", add_value(g, "d", 2, s512), add_value(g, "e", 2, s512),
                       add_value(g, "f", 2, s512));
    /* batch broadcasting: [2,3,64,32] x [32,16] -> 6 * 64 * 16 * 32 multiply-adds */
    int64_t a4[4] = {2, 3, 64, 32}, b2[2] = {32, 16}, y4[4] = {2, 3, 64, 16};
    int bm = add_node(g, "MatMul", add_value(g, "g", 4, a4), add_value(g, "h", 2, b2),
                      add_value(g, "i", 4, y4));
    /* Conv 1x64x56x56, 3x3, 64->64 */
    int64_t xd[4] = {1, 64, 56, 56}, wd[4] = {64, 64, 3, 3};
    int cv = add_node(g, "Conv", add_value(g, "x", 4, xd), add_value(g, "w", 4, wd),
                      add_value(g, "y", 4, xd));
    int64_t big1[1] = {1 << 20};
    int add = add_node(g, "Add", add_value(g, "p", 1, big1), add_value(g, "q", 1, big1),
                       add_value(g, "r", 1, big1));
    const tdm_node *N = g->nodes;

    assert_true(tdm_node_flops(g, &N[small]) == 2.0 * 64 * 64 * 64);
    assert_true(tdm_node_flops(g, &N[big]) == 2.0 * 512 * 512 * 512);
    assert_true(tdm_node_bytes(g, &N[big]) == 3.0 * 512 * 512 * 4);
    assert_true(tdm_node_flops(g, &N[bm]) == 2.0 * 6 * 64 * 16 * 32);
    assert_true(tdm_node_flops(g, &N[cv]) == 2.0 * 64 * 56 * 56 * 64 * 9);
    /* MatMulNBits (and the packed form): A [1, 8, 576] times N = 1536 rows of K = 576 codes;
     * the weights input's shape (packed bytes) says nothing of N or K: the attributes do */
    int64_t an[3] = {1, 8, 576}, wn[3] = {1536, 18, 16}, yn[3] = {1, 8, 1536};
    int nbk[2];
    tdm_attr nba[2] = {{.name = "K", .type = TDM_ATTR_INT, .i = 576},
                       {.name = "N", .type = TDM_ATTR_INT, .i = 1536}};
    for (int k = 0; k < 2; k++) {
        nbk[k] = add_node(g, k ? "MatMulNBitsPacked" : "MatMulNBits",
                          add_value(g, k ? "an1" : "an0", 3, an), add_value(g, k ? "wn1" : "wn0", 3, wn),
                          add_value(g, k ? "yn1" : "yn0", 3, yn));
    }
    N = g->nodes;
    for (int k = 0; k < 2; k++) {
        g->nodes[nbk[k]].attrs = nba, g->nodes[nbk[k]].n_attrs = 2;
        assert_true(tdm_node_flops(g, &N[nbk[k]]) == 2.0 * 8 * 1536 * 576);
        g->nodes[nbk[k]].n_attrs = 1; /* no N: unknown, no FLOPs claimed */
        assert_true(tdm_node_flops(g, &N[nbk[k]]) == 0.0);
        g->nodes[nbk[k]].attrs = NULL, g->nodes[nbk[k]].n_attrs = 0; /* not the graph's to free */
    }

    tdm_device_profile p = synthetic("x", 100, 10, 5, 0, 0);
    double ts = tdm_cost_node_ms(g, &N[small], &p), tb = tdm_cost_node_ms(g, &N[big], &p);
    assert_true(ts > 0.005 - 1e-12);
    assert_true(tb > ts * 50);
    /* 268 MFLOP at 100 GFLOP/s = 2.68 ms, plus 5 us launch */
    assert_true(tb > 2.68 && tb < 2.69);

    /* an element-wise op is bound by bytes on this profile: 12 MiB at 10 GB/s */
    double ta = tdm_cost_node_ms(g, &N[add], &p);
    assert_true(ta > 12.0 * (1 << 20) / 10e6);

    /* zero throughputs do not give infinities */
    tdm_device_profile z;
    memset(&z, 0, sizeof z);
    double tz = tdm_cost_node_ms(g, &N[big], &z);
    assert_true(tz > 0 && tz < 1e9);
    tdm_graph_free(g);
}

/* GroupQueryAttention and PagedAttention: heads x the cache rows each query row sees x
 * (4 D + 6). From shapes (the past's length, a prompt for PagedAttention), and from a run's
 * length inputs (tdm_node_run_cost, with the bytes read and written), which a profile counts. */
static double kv_attn(double heads, double rows, double d) { return heads * rows * (4 * d + 6); }

static tdm_tensor *i32_tensor(int rank, const int64_t *dims, const int32_t *v) {
    tdm_tensor *t = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_INT32, rank, dims, &t));
    memcpy(t->data, v, (size_t)t->count * sizeof(int32_t));
    return t;
}

static void test_cost_kv_attention(void **state) {
    (void)state;
    tdm_graph *g = NULL;
    assert_null(tdm_graph_new(NULL, &g));
    /* 2 sequences, 4 new rows after a 100-row past; 9 heads of 64, 3 kv heads */
    int64_t qd[3] = {2, 4, 576}, kd[3] = {2, 4, 192}, pd[4] = {2, 3, 100, 64}, one[1] = {2};
    int n = -1;
    assert_null(tdm_graph_add_node(g, "gqa", "GroupQueryAttention", "com.microsoft", 7, 1, &n));
    int vq = add_value(g, "q", 3, qd), vk = add_value(g, "k", 3, kd), vv = add_value(g, "v", 3, kd);
    int vp = add_value(g, "pk", 4, pd), vpv = add_value(g, "pv", 4, pd);
    int vs = add_value(g, "sl", 1, one), vt = add_value(g, "tl", 0, NULL), vy = add_value(g, "y", 3, qd);
    int ins[7] = {vq, vk, vv, vp, vpv, vs, vt};
    for (int i = 0; i < 7; i++) g->nodes[n].inputs[i] = ins[i];
    g->nodes[n].outputs[0] = vy;
    tdm_attr at[3] = {{.name = "num_heads", .type = TDM_ATTR_INT, .i = 9},
                      {.name = "kv_num_heads", .type = TDM_ATTR_INT, .i = 3},
                      {.name = "local_window_size", .type = TDM_ATTR_INT, .i = 50}};
    tdm_node *N = &g->nodes[n];
    N->attrs = at, N->n_attrs = 2;
    /* causal: rows 101, 102, 103, 104 per sequence */
    assert_true(tdm_node_flops(g, N) == 2 * kv_attn(9, 410, 64));
    N->n_attrs = 3; /* a window of 50: 50 rows each */
    assert_true(tdm_node_flops(g, N) == 2 * kv_attn(9, 200, 64));
    N->n_attrs = 2;
    /* packed QKV (key and value omitted): the head size from (9 + 2 x 3) heads */
    g->values[vq].dims[2] = 960;
    N->inputs[1] = N->inputs[2] = -1;
    assert_true(tdm_node_flops(g, N) == 2 * kv_attn(9, 410, 64));
    g->values[vq].dims[2] = 576;
    N->inputs[1] = vk, N->inputs[2] = vv;
    /* a declared 2^40-row query: counted in closed form, not row by row (that would not end) */
    g->values[vq].dims[1] = (int64_t)1 << 40;
    double big = tdm_node_flops(g, N), r = (double)((int64_t)1 << 40);
    assert_true(big == 2 * kv_attn(9, r * 100 + r * (r + 1) / 2, 64));
    g->values[vq].dims[1] = 4;

    /* a run: decode (one new row) at positions 9 and 999 of an int4 cache of 1,000 rows, 36
     * bytes a row (the present caches are the past's memory) */
    int64_t q1[3] = {2, 1, 576}, k1[3] = {2, 1, 192}, sd[1] = {2}, cd[4] = {2, 3, 1000, 36};
    tdm_tensor *tq = NULL, *tk = NULL, *tc = NULL, *tc2 = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 3, q1, &tq));
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 3, k1, &tk));
    assert_null(tdm_tensor_new(NULL, TDM_UINT8, 4, cd, &tc));
    assert_null(tdm_tensor_new(NULL, TDM_UINT8, 4, cd, &tc2));
    int32_t slv[2] = {9, 999}, tlv[1] = {1000};
    tdm_tensor *ts = i32_tensor(1, sd, slv), *tt = i32_tensor(0, NULL, tlv);
    const tdm_tensor *in[7] = {tq, tk, tk, tc, tc, ts, tt};
    tdm_tensor *out[3] = {tq, tc, tc};
    double fl = 0, by = 0;
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by));
    assert_true(fl == kv_attn(9, 10 + 1000, 64));
    /* q, k, v, the lengths, the output; K and V rows: 10 + 1000 read, 2 written, 3 x 36 bytes */
    double small = 2 * 576 * 4 + 2 * 2 * 192 * 4 + 2 * 4 + 4 + 2 * 576 * 4;
    assert_true(by == small + 2 * (1010 + 2) * 3 * 36);
    /* present caches of their own: each copied whole, read and written */
    out[1] = out[2] = tc2;
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by));
    assert_true(by == small + 2 * (1010 + 2) * 3 * 36 + 2 * 2 * 2 * 3 * 1000 * 36.0);
    out[1] = out[2] = tc;
    /* a first prompt (S == total_sequence_length = 5), the second padded after 3 rows: rows
     * 1..5 and 1, 2, 3, 3, 3 */
    int64_t q5[3] = {2, 5, 576};
    tdm_tensor *tq5 = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 3, q5, &tq5));
    int32_t sl5[2] = {4, 2}, tl5[1] = {5};
    memcpy(ts->data, sl5, sizeof sl5);
    memcpy(tt->data, tl5, sizeof tl5);
    in[0] = tq5;
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by) && fl == kv_attn(9, 15 + 12, 64));
    N->n_attrs = 3; /* window 50 changes nothing here; causal=0 sees all 5 / 3 rows */
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by) && fl == kv_attn(9, 15 + 12, 64));
    tdm_attr nc[3] = {at[0], at[1], {.name = "causal", .type = TDM_ATTR_INT, .i = 0}};
    N->attrs = nc;
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by) && fl == kv_attn(9, 25 + 15, 64));
    N->attrs = at, N->n_attrs = 2;
    /* a window of 4 at decode after 999 rows: 4 rows seen and read */
    memcpy(ts->data, slv, sizeof slv);
    memcpy(tt->data, tlv, sizeof tlv);
    in[0] = tq;
    tdm_attr w4[3] = {at[0], at[1], {.name = "local_window_size", .type = TDM_ATTR_INT, .i = 4}};
    N->attrs = w4, N->n_attrs = 3;
    assert_true(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by) && fl == kv_attn(9, 8, 64));
    assert_true(by == small + 2 * (8 + 2) * 3 * 36);
    N->attrs = at, N->n_attrs = 2;
    /* lengths not readable here (a device's memory, another dtype) or absent: false */
    ts->device = (void *)ts;
    assert_false(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by));
    ts->device = NULL;
    in[6] = tq;
    assert_false(tdm_node_run_cost(N, 7, in, 3, out, &fl, &by));
    in[6] = tt;
    assert_false(tdm_node_run_cost(N, 6, in, 3, out, &fl, &by));
    /* other ops: false (their shapes tell) */
    assert_null(tdm_graph_add_node(g, "mm", "MatMul", "", 2, 1, &n));
    assert_false(tdm_node_run_cost(&g->nodes[n], 7, in, 3, out, &fl, &by));

    /* PagedAttention (BHSD int4 blocks of 16): packed tokens of 2 sequences, 1 new after 99
     * past rows and 4 new from none: rows 100 and 1 + 2 + 3 + 4 seen, 100 and 4 read */
    int p = -1;
    assert_null(tdm_graph_add_node(g, "paged", "PagedAttention", "com.microsoft", 8, 1, &p));
    tdm_node *P = &g->nodes[p];
    tdm_attr pa[3] = {at[0], at[1],
                      {.name = "tandem_kv_layout", .type = TDM_ATTR_STRING, .s = "BHSD"}};
    P->attrs = pa, P->n_attrs = 3;
    int64_t pq[2] = {5, 576}, pk[2] = {5, 192}, cud[1] = {3}, pcd[4] = {10, 3, 16, 36}, btd[2] = {2, 8};
    tdm_tensor *tpq = NULL, *tpk = NULL, *tpc = NULL;
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 2, pq, &tpq));
    assert_null(tdm_tensor_new(NULL, TDM_FLOAT, 2, pk, &tpk));
    assert_null(tdm_tensor_new(NULL, TDM_UINT8, 4, pcd, &tpc));
    int32_t cuv[3] = {0, 1, 5}, pastv[2] = {99, 0}, btv[16] = {0};
    tdm_tensor *tcu = i32_tensor(1, cud, cuv), *tpast = i32_tensor(1, sd, pastv);
    tdm_tensor *tbt = i32_tensor(2, btd, btv);
    const tdm_tensor *pin[8] = {tpq, tpk, tpk, tpc, tpc, tcu, tpast, tbt};
    tdm_tensor *pout[3] = {tpq, tpc, tpc};
    assert_true(tdm_node_run_cost(P, 8, pin, 3, pout, &fl, &by));
    assert_true(fl == kv_attn(9, 100 + 10, 64));
    double psmall = 5 * 576 * 4 + 2 * 5 * 192 * 4 + 3 * 4 + 2 * 4 + 16 * 4 + 5 * 576 * 4;
    assert_true(by == psmall + 2 * (104 + 5) * 3 * 36);
    /* from shapes: the 5 tokens as one prompt (1 + ... + 5 rows) */
    int vpq = add_value(g, "pq", 2, pq);
    P = &g->nodes[p];
    for (int i = 0; i < 8; i++) P->inputs[i] = -1;
    P->inputs[0] = P->inputs[1] = P->inputs[2] = vpq; /* key and value given: 9 heads of 64 */
    P->outputs[0] = vpq;
    assert_true(tdm_node_flops(g, P) == kv_attn(9, 15, 64));

    for (size_t i = 0; i < g->n_nodes; i++) g->nodes[i].attrs = NULL, g->nodes[i].n_attrs = 0;
    tdm_tensor *all[] = {tq, tk, tc, tc2, tq5, ts, tt, tpq, tpk, tpc, tcu, tpast, tbt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) tdm_tensor_destroy(all[i]);
    tdm_graph_free(g);
}

/* Depthwise and pointwise convolutions take their own measured throughput; a profile
 * without them (0: an older cache, a device without the benchmark) uses conv_gflops. */
static void test_cost_conv_kinds(void **state) {
    (void)state;
    tdm_graph *g = NULL;
    assert_null(tdm_graph_new(NULL, &g));
    int64_t x32[4] = {1, 32, 28, 28}, x64[4] = {1, 64, 28, 28};
    int64_t wdw[4] = {32, 1, 3, 3}, wpw[4] = {32, 64, 1, 1}, wd[4] = {32, 32, 3, 3}, wg[4] = {32, 16, 3, 3};
    int dw = add_node(g, "Conv", add_value(g, "a", 4, x32), add_value(g, "wa", 4, wdw),
                      add_value(g, "ya", 4, x32));
    int pw = add_node(g, "Conv", add_value(g, "b", 4, x64), add_value(g, "wb", 4, wpw),
                      add_value(g, "yb", 4, x32));
    int dense = add_node(g, "Conv", add_value(g, "c", 4, x32), add_value(g, "wc", 4, wd),
                         add_value(g, "yc", 4, x32));
    int grouped = add_node(g, "Conv", add_value(g, "d", 4, x32), add_value(g, "wd", 4, wg),
                           add_value(g, "yd", 4, x32));
    tdm_attr g32[1], g2[1];
    memset(g32, 0, sizeof g32);
    memset(g2, 0, sizeof g2);
    g32[0].name = (char *)"group";
    g32[0].type = TDM_ATTR_INT;
    g32[0].i = 32;
    g2[0] = g32[0];
    g2[0].i = 2;
    g->nodes[dw].attrs = g32;
    g->nodes[dw].n_attrs = 1;
    g->nodes[grouped].attrs = g2;
    g->nodes[grouped].n_attrs = 1;
    const tdm_node *N = g->nodes;
    double f_dw = 2.0 * 32 * 28 * 28 * 9, f_pw = 2.0 * 32 * 28 * 28 * 64;
    double f_dense = 2.0 * 32 * 28 * 28 * 32 * 9, f_grouped = 2.0 * 32 * 28 * 28 * 16 * 9;
    assert_true(tdm_node_flops(g, &N[dw]) == f_dw);
    assert_true(tdm_node_flops(g, &N[pw]) == f_pw);
    assert_true(tdm_node_flops(g, &N[grouped]) == f_grouped);

    tdm_device_profile p = synthetic("x", 100, 1e6, 0, 0, 0); /* compute-bound, no launch */
    p.conv1x1_gflops = 50;
    p.dwconv_gflops = 1;
    double eps = 1e-3;
    assert_true(fabs(tdm_cost_node_ms(g, &N[dw], &p) / (f_dw / 1e6) - 1) < eps);
    assert_true(fabs(tdm_cost_node_ms(g, &N[pw], &p) / (f_pw / 50e6) - 1) < eps);
    assert_true(fabs(tdm_cost_node_ms(g, &N[dense], &p) / (f_dense / 100e6) - 1) < eps);
    assert_true(fabs(tdm_cost_node_ms(g, &N[grouped], &p) / (f_grouped / 100e6) - 1) < eps);
    /* not measured: conv_gflops for every kind */
    p.conv1x1_gflops = p.dwconv_gflops = 0;
    assert_true(fabs(tdm_cost_node_ms(g, &N[dw], &p) / (f_dw / 100e6) - 1) < eps);
    assert_true(fabs(tdm_cost_node_ms(g, &N[pw], &p) / (f_pw / 100e6) - 1) < eps);
    g->nodes[dw].attrs = g->nodes[grouped].attrs = NULL; /* (stack attributes) */
    g->nodes[dw].n_attrs = g->nodes[grouped].n_attrs = 0;
    tdm_graph_free(g);
}

static void test_cost_copies(void **state) {
    (void)state;
    tdm_device_profile cpu = synthetic("cpu", 100, 10, 1, 0, 0);
    tdm_device_profile cpu2 = synthetic("other", 50, 10, 1, 0, 0);
    tdm_device_profile gpu = synthetic("gpu:0", 1000, 500, 5, 10, 10);
    tdm_device_profile gpu2 = synthetic("gpu:1", 1000, 500, 5, 20, 20);
    double mb = 1e6;
    assert_true(tdm_cost_copy_ms(mb, &cpu, &cpu2) == 0);
    assert_true(tdm_cost_copy_ms(mb, NULL, &cpu) == 0);
    assert_true(tdm_cost_copy_ms(mb, &gpu, &gpu) == 0);
    /* 1 MB at 10 GB/s = 0.1 ms, plus 10 us */
    double up = tdm_cost_copy_ms(mb, &cpu, &gpu);
    assert_true(up > 0.1099 && up < 0.1101);
    double down = tdm_cost_copy_ms(mb, &gpu, &cpu);
    assert_true(down > 0.1099 && down < 0.1101);
    double across = tdm_cost_copy_ms(mb, &gpu, &gpu2); /* through the host: both links */
    assert_true(across > 0.1099 + 0.0699 && across < 0.1101 + 0.0701);
    assert_true(tdm_cost_copy_ms(2 * mb, &cpu, &gpu) > up);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_cpu_profile_cached, setup, teardown),
        cmocka_unit_test_setup_teardown(test_corrupt_cache_replaced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unwritable_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_cache_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_device_with_own_memory, setup, teardown),
        cmocka_unit_test(test_cost_matmul_scales),
        cmocka_unit_test(test_cost_kv_attention),
        cmocka_unit_test(test_cost_conv_kinds),
        cmocka_unit_test(test_cost_copies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
