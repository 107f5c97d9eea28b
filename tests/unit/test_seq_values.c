/* Sequences, maps and optionals through the public API: create, read, free (ownership as
 * documented in tandem.h), session inputs and outputs of these types, and the error paths
 * (the caller keeps what a failed constructor was given). A counting allocator checks that
 * every block comes back. Model: tests/models/seq_ops (tools/make_seq_models.py). */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "tandem/tandem.h"

#include "counting_alloc.h"
#include "test_ok.h"

#define SEQ_MODEL TANDEM_SOURCE_DIR "/tests/models/seq_ops/model.onnx"
#define SEQ_DATA TANDEM_SOURCE_DIR "/tests/models/seq_ops/test_data_set_0"

static tdm_env *env_with(counter *c) {
    tdm_env_options o = {0};
    o.api_version = TDM_API_VERSION;
    o.allocator.alloc = c_alloc;
    o.allocator.free = c_free;
    o.allocator.user = c;
    o.threads = 1;
    tdm_env *env = NULL;
    OK(tdm_env_create(&o, &env));
    return env;
}

static tdm_tensor *floats(tdm_env *env, int64_t n, float first) {
    tdm_tensor *t = NULL;
    OK(tdm_tensor_create(env, TDM_FLOAT, 1, &n, &t));
    float *p = tdm_tensor_data(t);
    for (int64_t i = 0; i < n; i++) p[i] = first + (float)i;
    return t;
}

static void test_sequence_create_read_free(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = env_with(&c);
    long live0 = atomic_load(&c.live);
    tdm_tensor *items[2] = {floats(env, 3, 1.0f), floats(env, 2, 10.0f)};
    tdm_tensor *seq = NULL;
    OK(tdm_sequence_create(env, 2, items, &seq)); /* takes both */
    assert_int_equal(tdm_tensor_dtype(seq), TDM_SEQUENCE);
    assert_int_equal(tdm_value_item_count(seq), 2);
    const tdm_tensor *b = tdm_value_item(seq, 1);
    assert_ptr_equal(b, items[1]);
    assert_int_equal(tdm_tensor_element_count(b), 2);
    assert_true(((const float *)tdm_tensor_data_const(b))[1] == 11.0f);
    assert_null(tdm_value_item(seq, 2));
    assert_int_equal(tdm_value_item_count(items[0]), 0); /* a tensor has no items */
    /* nested: an optional holding the sequence, freed as a whole */
    tdm_tensor *opt = NULL;
    OK(tdm_optional_create(env, seq, &opt));
    assert_int_equal(tdm_value_item_count(opt), 1);
    assert_ptr_equal(tdm_value_item(opt, 0), seq);
    tdm_tensor_free(opt);
    /* empty sequence and empty optional */
    OK(tdm_sequence_create(env, 0, NULL, &seq));
    assert_int_equal(tdm_value_item_count(seq), 0);
    tdm_tensor_free(seq);
    OK(tdm_optional_create(env, NULL, &opt));
    assert_int_equal(tdm_value_item_count(opt), 0);
    tdm_tensor_free(opt);
    assert_int_equal(atomic_load(&c.live), live0);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

static void test_map_create(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = env_with(&c);
    int64_t n = 3;
    tdm_tensor *keys = NULL;
    OK(tdm_tensor_create(env, TDM_STRING, 1, &n, &keys));
    const char *names[3] = {"a", "bb", "ccc"};
    for (int i = 0; i < 3; i++) OK(tdm_tensor_set_string(keys, i, names[i], strlen(names[i])));
    tdm_tensor *vals = floats(env, 3, 0.5f), *map = NULL;
    OK(tdm_map_create(env, keys, vals, &map));
    assert_int_equal(tdm_tensor_dtype(map), TDM_MAP);
    assert_int_equal(tdm_value_item_count(map), 2);
    assert_ptr_equal(tdm_value_item(map, 0), keys);
    assert_ptr_equal(tdm_value_item(map, 1), vals);
    tdm_tensor *seq = NULL;
    OK(tdm_sequence_create(env, 1, &map, &seq));
    tdm_tensor_free(seq); /* frees the map, its keys and values */
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

/* A failed constructor takes nothing: the caller frees what it passed (ASan: no double free,
 * the counter: no leak). */
static void test_failed_create_keeps_ownership(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = env_with(&c);
    tdm_tensor *f = floats(env, 2, 0.0f), *i = NULL, *out = NULL;
    int64_t two = 2;
    OK(tdm_tensor_create(env, TDM_INT64, 1, &two, &i));
    tdm_tensor *mixed[2] = {f, i};
    tdm_status *st = tdm_sequence_create(env, 2, mixed, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    assert_null(out);
    tdm_tensor *same[2] = {f, f};
    st = tdm_sequence_create(env, 2, same, &out);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    st = tdm_map_create(env, f, i, &out); /* float keys */
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_tensor *m = NULL;
    OK(tdm_map_create(env, i, f, &m));
    st = tdm_optional_create(env, m, &out); /* an optional of a map: not an ONNX type */
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    tdm_status_free(st);
    tdm_tensor_free(m);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

/* A session with a sequence input and sequence outputs, against ORT's outputs. */
static void test_session_sequences(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = env_with(&c);
    tdm_session *s = NULL;
    OK(tdm_session_create(env, SEQ_MODEL, NULL, &s));
    tdm_tensor *in_s = NULL, *in_x = NULL, *want_s2 = NULL, *want_e = NULL, *want_n = NULL;
    OK(tdm_value_load_onnx(env, SEQ_DATA "/input_0.pb", TDM_SEQUENCE, &in_s));
    OK(tdm_value_load_onnx(env, SEQ_DATA "/input_1.pb", TDM_FLOAT, &in_x));
    OK(tdm_value_load_onnx(env, SEQ_DATA "/output_0.pb", TDM_SEQUENCE, &want_s2));
    OK(tdm_value_load_onnx(env, SEQ_DATA "/output_1.pb", TDM_INT64, &want_n));
    OK(tdm_value_load_onnx(env, SEQ_DATA "/output_3.pb", TDM_SEQUENCE, &want_e));
    const char *in_names[2] = {"s", "x"};
    const tdm_tensor *ins[2] = {in_s, in_x};
    const char *out_names[3] = {"s2", "n", "e"};
    for (int run = 0; run < 2; run++) { /* twice: the second run reuses the plan's memory */
        tdm_tensor *outs[3] = {0};
        OK(tdm_session_run(s, 2, in_names, ins, 3, out_names, outs));
        assert_int_equal(tdm_tensor_dtype(outs[0]), TDM_SEQUENCE);
        assert_int_equal(tdm_value_item_count(outs[0]), tdm_value_item_count(want_s2));
        for (size_t k = 0; k < tdm_value_item_count(want_s2); k++) {
            const tdm_tensor *g = tdm_value_item(outs[0], k), *w = tdm_value_item(want_s2, k);
            assert_int_equal(tdm_tensor_byte_size(g), tdm_tensor_byte_size(w));
            assert_memory_equal(tdm_tensor_data_const(g), tdm_tensor_data_const(w),
                                tdm_tensor_byte_size(w));
        }
        assert_int_equal(*(const int64_t *)tdm_tensor_data_const(outs[1]), 3);
        assert_int_equal(tdm_value_item_count(outs[2]), tdm_value_item_count(want_e));
        for (int j = 0; j < 3; j++) tdm_tensor_free(outs[j]);
    }
    /* a tensor where a sequence is expected fails cleanly */
    const tdm_tensor *bad[2] = {in_x, in_x};
    tdm_tensor *outs[3] = {0};
    tdm_status *st = tdm_session_run(s, 2, in_names, bad, 3, out_names, outs);
    assert_non_null(st);
    tdm_status_free(st);
    for (int j = 0; j < 3; j++) tdm_tensor_free(outs[j]);
    tdm_tensor_free(in_s);
    tdm_tensor_free(in_x);
    tdm_tensor_free(want_s2);
    tdm_tensor_free(want_n);
    tdm_tensor_free(want_e);
    tdm_session_free(s);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

/* Malformed SequenceProto / MapProto bytes are refused without leaks; a ZipMap reference
 * (a sequence of maps) reads back with its keys and values. */
static void test_load_values(void **state) {
    (void)state;
    counter c = {0};
    tdm_env *env = env_with(&c);
    static const unsigned char bad[][6] = {
        {0x1a, 0x05, 0x08}, /* tensor_values: length past the end */
        {0xff, 0xff, 0xff}, /* a varint that never ends */
        {0x10, 0x08, 0x22, 0x01, 0x61}, /* map: key_type string, key "a", no values */
    };
    static const size_t bad_len[] = {3, 3, 5};
    char path[] = "/tmp/tdm_seqXXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    for (size_t i = 0; i < sizeof bad_len / sizeof bad_len[0]; i++) {
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        fwrite(bad[i], 1, bad_len[i], f);
        fclose(f);
        tdm_tensor *v = NULL;
        tdm_status *st = tdm_value_load_onnx(env, path, i == 2 ? TDM_MAP : TDM_SEQUENCE, &v);
        if (!st) fail_msg("malformed value %zu was accepted", i);
        tdm_status_free(st);
        assert_null(v);
    }
    unlink(path);
    tdm_tensor *seq = NULL;
    OK(tdm_value_load_onnx(env, TANDEM_SOURCE_DIR
                           "/tests/models_ml/ml_zipmap_logistic_strings/test_data_set_0/output_1.pb",
                           TDM_SEQUENCE, &seq));
    assert_int_equal(tdm_value_item_count(seq), 64);
    const tdm_tensor *m = tdm_value_item(seq, 0);
    assert_int_equal(tdm_tensor_dtype(m), TDM_MAP);
    const tdm_tensor *keys = tdm_value_item(m, 0), *vals = tdm_value_item(m, 1);
    assert_int_equal(tdm_tensor_dtype(keys), TDM_STRING);
    assert_string_equal(((char *const *)tdm_tensor_data_const(keys))[1], "yes");
    assert_int_equal(tdm_tensor_dtype(vals), TDM_FLOAT);
    const float *p = tdm_tensor_data_const(vals);
    assert_true(p[0] + p[1] > 0.999f && p[0] + p[1] < 1.001f);
    tdm_tensor_free(seq);
    tdm_env_free(env);
    assert_int_equal(atomic_load(&c.live), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sequence_create_read_free),
        cmocka_unit_test(test_map_create),
        cmocka_unit_test(test_failed_create_keeps_ownership),
        cmocka_unit_test(test_session_sequences),
        cmocka_unit_test(test_load_values),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
