/* Mapped residency (issue 21, tdm_session_options.residency "mapped"): a model whose weights
 * are external data (a 32 MiB embedding table read by Gather, a 256 KiB MatMul weight, one at
 * an unaligned offset that falls back to reading) gives the same outputs mapped and read, and
 * the process's anonymous memory (RssAnon, /proc/self/status) grows by the table when it is
 * read but not when it is mapped: only the pages the kernels touch come in, as file pages.
 * The figures are printed (memory, not timing); the explanation names each weight's
 * residency. */
#include <jansson.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "model_builder.h"
#include "tandem/tandem.h"

#define ROWS 32768
#define DIM 256
#define TABLE_BYTES ((size_t)ROWS * DIM * 4)
#define W_OFFSET TABLE_BYTES
#define W_BYTES ((size_t)DIM * DIM * 4)
#define B_OFFSET (W_OFFSET + W_BYTES + 4) /* unaligned: read, not mapped */
#define B_BYTES ((size_t)DIM * 4)

static char dir[64];

static void external(mb_model *m, Onnx__TensorProto *t, size_t offset, size_t length) {
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    t->n_external_data = 3;
    t->external_data = mb_alloc(m, 3 * sizeof *t->external_data);
    const char *keys[3] = {"location", "offset", "length"};
    char vals[3][32];
    snprintf(vals[0], sizeof vals[0], "weights.bin");
    snprintf(vals[1], sizeof vals[1], "%zu", offset);
    snprintf(vals[2], sizeof vals[2], "%zu", length);
    for (int k = 0; k < 3; k++) {
        Onnx__StringStringEntryProto *e = mb_alloc(m, sizeof *e);
        onnx__string_string_entry_proto__init(e);
        e->key = mb_str(m, keys[k]);
        e->value = mb_str(m, vals[k]);
        t->external_data[k] = e;
    }
}

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/tandem_mappedXXXXXX");
    if (!mkdtemp(dir)) return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    float *row = malloc(DIM * sizeof *row);
    for (size_t r = 0; r < ROWS; r++) { /* table */
        for (int c = 0; c < DIM; c++) row[c] = (float)((r * 31 + (size_t)c * 7) % 101) * 0.01f - 0.5f;
        fwrite(row, sizeof *row, DIM, f);
    }
    for (int r = 0; r < DIM; r++) { /* w */
        for (int c = 0; c < DIM; c++) row[c] = (float)((r * 13 + c * 5) % 17) * 0.01f - 0.08f;
        fwrite(row, sizeof *row, DIM, f);
    }
    fputc(0, f); /* four bytes, then b at an offset that is not a multiple of 64 */
    fputc(0, f);
    fputc(0, f);
    fputc(0, f);
    for (int c = 0; c < DIM; c++) row[c] = (float)c * 0.001f;
    fwrite(row, sizeof *row, DIM, f);
    free(row);
    fclose(f);
    mb_model m;
    mb_init(&m, 17);
    int64_t td[2] = {ROWS, DIM}, wd[2] = {DIM, DIM}, bd[1] = {DIM}, idx[1] = {4}, xd[2] = {4, DIM};
    mb_input_t(&m, "idx", MB_I64, 1, idx);
    mb_input(&m, "x", 2, xd);
    external(&m, mb_tensor(&m, "embed.table", MB_F32, 2, td), 0, TABLE_BYTES);
    external(&m, mb_tensor(&m, "layers.0.w", MB_F32, 2, wd), W_OFFSET, W_BYTES);
    external(&m, mb_tensor(&m, "layers.0.b", MB_F32, 1, bd), B_OFFSET, B_BYTES);
    mb_node(&m, "Gather:embed.table,idx->g");
    mb_node(&m, "MatMul:x,layers.0.w->mm");
    mb_node(&m, "Add:mm,layers.0.b->y");
    mb_node(&m, "Add:g,y->out");
    mb_output(&m, "out");
    size_t size;
    void *bytes = mb_pack(&m, &size);
    mb_free(&m);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    f = fopen(path, "wb");
    if (!f) return -1;
    fwrite(bytes, 1, size, f);
    fclose(f);
    free(bytes);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/weights.bin", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    unlink(path);
    rmdir(dir);
    return 0;
}

/* kB of a /proc/self/status field ("RssAnon:", "RssFile:") */
static long status_kb(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, field, strlen(field))) kb = strtol(line + strlen(field), NULL, 10);
    fclose(f);
    return kb;
}

typedef struct result {
    tdm_tensor *out;
    long anon_kb, file_kb; /* growth while the session lives */
    char table_res[16], w_res[16], b_res[16];
} result;

static result run_model(tdm_env *env, const char *residency) {
    result r;
    memset(&r, 0, sizeof r);
    long anon0 = status_kb("RssAnon:"), file0 = status_kb("RssFile:");
    char path[128];
    snprintf(path, sizeof path, "%s/model.onnx", dir);
    tdm_session_options so = {TDM_API_VERSION, "cpu", 1, 1, false};
    so.residency = residency;
    tdm_session *s = NULL;
    tdm_status *st = tdm_session_create(env, path, &so, &s);
    if (st) fail_msg("%s", tdm_status_message(st));
    int64_t id[1] = {4}, xd[2] = {4, DIM};
    tdm_tensor *idx = NULL, *x = NULL;
    assert_null(tdm_tensor_create(env, TDM_INT64, 1, id, &idx));
    assert_null(tdm_tensor_create(env, TDM_FLOAT, 2, xd, &x));
    int64_t *ip = tdm_tensor_data(idx);
    ip[0] = 3;
    ip[1] = ROWS - 1;
    ip[2] = ROWS / 2;
    ip[3] = 3;
    float *xp = tdm_tensor_data(x);
    for (int i = 0; i < 4 * DIM; i++) xp[i] = (float)(i % 9) * 0.1f - 0.4f;
    const char *names[2] = {"idx", "x"};
    const tdm_tensor *ins[2] = {idx, x};
    if ((st = tdm_session_run(s, 2, names, ins, 1, NULL, &r.out))) fail_msg("%s", tdm_status_message(st));
    r.anon_kb = status_kb("RssAnon:") - anon0;
    r.file_kb = status_kb("RssFile:") - file0;
    char *text = NULL;
    assert_null(tdm_session_explain(s, TDM_EXPLAIN_JSON, &text));
    json_t *j = json_loads(text, 0, NULL);
    assert_non_null(j);
    size_t i;
    json_t *w;
    json_array_foreach(json_object_get(j, "weights"), i, w) {
        const char *name = json_string_value(json_object_get(w, "name"));
        const char *res = json_string_value(json_object_get(w, "residency"));
        char *dst = !strcmp(name, "embed.table") ? r.table_res : !strcmp(name, "layers.0.w") ? r.w_res
                    : !strcmp(name, "layers.0.b") ? r.b_res : NULL;
        if (dst) snprintf(dst, 16, "%s", res);
    }
    json_decref(j);
    tdm_string_free(text);
    tdm_tensor_free(idx);
    tdm_tensor_free(x);
    tdm_session_free(s);
    return r;
}

static void test_mapped(void **state) {
    (void)state;
    setenv("TANDEM_CACHE_DIR", "/tmp", 1);
    tdm_env *env = NULL;
    assert_null(tdm_env_create(NULL, &env));
    result read = run_model(env, NULL);
    result mapped = run_model(env, "mapped");
    print_message("  external data %.1f MiB; read: RssAnon +%.1f MiB, RssFile +%.1f MiB; mapped: "
                  "RssAnon +%.1f MiB, RssFile +%.1f MiB\n", (double)(TABLE_BYTES + W_BYTES) / 1048576,
                  read.anon_kb / 1024.0, read.file_kb / 1024.0, mapped.anon_kb / 1024.0,
                  mapped.file_kb / 1024.0);
    print_message("  residency read: %s %s %s; mapped: table %s, w %s, b (unaligned) %s\n",
                  read.table_res, read.w_res, read.b_res, mapped.table_res, mapped.w_res, mapped.b_res);
    assert_string_equal(read.table_res, "resident");
    assert_string_equal(mapped.table_res, "mapped");
    assert_string_equal(mapped.w_res, "mapped");
    assert_string_equal(mapped.b_res, "resident");
    size_t n = tdm_tensor_byte_size(read.out);
    assert_int_equal(n, tdm_tensor_byte_size(mapped.out));
    assert_memory_equal(tdm_tensor_data(read.out), tdm_tensor_data(mapped.out), n);
    /* memory, not time: the read table is in anonymous memory, the mapped one is not */
    assert_true(read.anon_kb > (long)(TABLE_BYTES / 1024) * 3 / 4);
    assert_true(mapped.anon_kb < (long)(TABLE_BYTES / 1024) / 4);
    assert_true(mapped.file_kb < (long)(TABLE_BYTES / 1024) / 4);
    tdm_tensor_free(read.out);
    tdm_tensor_free(mapped.out);
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_mapped)};
    return cmocka_run_group_tests(tests, setup, teardown);
}
