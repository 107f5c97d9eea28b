/* The CPU device's implementations and ISA (issue 16):
 *  - no node of the hard-swish / depthwise model (tests/models/hardswish_dw, PP-OCR-like) runs
 *    oneDNN's reference code: every convolution names a oneDNN implementation in the plan's
 *    explanation, none starting "ref" (before the fix, the first depthwise convolution ran
 *    "ref:any" on AVX-512); its output matches ONNX Runtime's;
 *  - the CPU device reports its ISA level (the cap from tdm_env_options.cpu_isa or
 *    TANDEM_CPU_ISA, never above the machine's), refuses unknown names, and the planner's
 *    channel block comes from oneDNN for that level.
 * ctest runs this file at the machine's best ISA and, as test_cpu_impl_isa_below, one level
 * below it (TANDEM_CPU_ISA). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>
#include <math.h>

#include "api/api_impl.h"
#include "backends/cpu/cpu_isa.h"
#include "log_box.h"
#include "tandem/tandem.h"
#include "test_ok.h"

#define MODEL_DIR TANDEM_SOURCE_DIR "/tests/models/hardswish_dw"

static size_t cpu_index(const tdm_env *env) {
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        if (!strcmp(tdm_env_device_name(env, i), "cpu")) return i;
    fail_msg("no cpu device");
    return 0;
}

/* The level the environment should report: TANDEM_CPU_ISA (if set) capped by the machine. */
static tdm_cpu_isa expected_isa(void) {
    tdm_cpu_isa have = tdm_cpu_isa_detect(), cap = have;
    const char *v = getenv("TANDEM_CPU_ISA");
    if (v && v[0]) assert_true(tdm_cpu_isa_parse(v, &cap));
    return tdm_cpu_isa_min(have, cap);
}

static void test_hardswish_dw_runs_no_reference_kernel(void **state) {
    (void)state;
    static log_box box = {PTHREAD_MUTEX_INITIALIZER, "", 0};
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.log = keep_log;
    eo.log_user = &box;
    eo.log_level = TDM_LOG_INFO;
    tdm_env *env = NULL;
    OK(tdm_env_create(&eo, &env));
    tdm_session *s = NULL;
    OK(tdm_session_create(env, MODEL_DIR "/model.onnx", NULL, &s));
    tdm_tensor *in = NULL, *want = NULL, *out = NULL;
    OK(tdm_tensor_load_onnx(env, MODEL_DIR "/test_data_set_0/input_0.pb", &in));
    OK(tdm_tensor_load_onnx(env, MODEL_DIR "/test_data_set_0/output_0.pb", &want));
    const char *in_name = "input", *out_name = "features";
    OK(tdm_session_run(s, 1, &in_name, (const tdm_tensor *const *)&in, 1, &out_name, &out));
    /* the answer is still ONNX Runtime's (the model tests' tolerance) */
    assert_int_equal(tdm_tensor_element_count(out), tdm_tensor_element_count(want));
    const float *g = tdm_tensor_data_const(out), *w = tdm_tensor_data_const(want);
    for (int64_t i = 0; i < tdm_tensor_element_count(out); i++)
        if (!(fabsf(g[i] - w[i]) <= 1e-4f + 1e-3f * fabsf(w[i])))
            fail_msg("element %lld: %g, ONNX Runtime %g", (long long)i, g[i], w[i]);

    char *text = NULL;
    OK(tdm_session_explain(s, TDM_EXPLAIN_JSON, &text));
    json_error_t err;
    json_t *root = json_loads(text, 0, &err);
    assert_non_null(root);
    json_t *nodes = json_object_get(root, "nodes");
    assert_true(json_is_array(nodes));
    int convs = 0;
    size_t i;
    json_t *n;
    json_array_foreach(nodes, i, n) {
        const char *op = json_string_value(json_object_get(n, "op"));
        const char *impl = json_string_value(json_object_get(n, "impl"));
        const char *name = json_string_value(json_object_get(n, "name"));
        assert_non_null(op);
        assert_non_null(impl);
        printf("  %-28s %-14s %s\n", name, op, impl);
        if (!strncmp(impl, "ref", 3)) fail_msg("node %s (%s) runs %s", name, op, impl);
        if (strstr(op, "Conv")) {
            convs++;
            /* a oneDNN implementation: not empty, not the generic kernel */
            assert_true(impl[0] && strncmp(impl, "tandem", 6) != 0);
        }
    }
    assert_int_equal(convs, 6);
    if (logged(&box, "reference")) printf("  refused reference implementations:\n%s", box.text);
    json_decref(root);
    tdm_string_free(text);
    tdm_tensor_free(in);
    tdm_tensor_free(want);
    tdm_tensor_free(out);
    tdm_session_free(s);
    tdm_env_free(env);
}

static void test_isa_reported_and_capped(void **state) {
    (void)state;
    tdm_env *env = NULL;
    OK(tdm_env_create(NULL, &env));
    size_t c = cpu_index(env);
    const char *isa = tdm_env_device_isa(env, c);
    assert_non_null(isa);
    tdm_cpu_isa got;
    assert_true(tdm_cpu_isa_parse(isa, &got));
    assert_int_equal(got, expected_isa());
    assert_non_null(strstr(tdm_env_device_description(env, c), isa)); /* profiles keyed by it */
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        if (i != c) assert_null(tdm_env_device_isa(env, i));
    /* an explicit option above the machine's level gives the machine's level */
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.cpu_isa = "avx512_core_amx";
    tdm_env *env2 = NULL;
    OK(tdm_env_create(&eo, &env2));
    assert_true(tdm_cpu_isa_parse(tdm_env_device_isa(env2, cpu_index(env2)), &got));
    assert_int_equal(got, tdm_cpu_isa_detect());
    tdm_env_free(env2);
    tdm_env_free(env);
}

static void test_unknown_isa_is_refused(void **state) {
    (void)state;
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.cpu_isa = "avx9000";
    tdm_env *env = (tdm_env *)0x1;
    tdm_status *st = tdm_env_create(&eo, &env);
    assert_non_null(st);
    assert_int_equal(tdm_status_code(st), TDM_ERR_INVALID_ARGUMENT);
    assert_non_null(strstr(tdm_status_message(st), "avx9000"));
    assert_ptr_equal(env, (tdm_env *)0x1); /* untouched */
    tdm_status_free(st);
}

/* The blocked-layout pass's block is oneDNN's for the level that runs: 16 where AVX-512
 * kernels run (jit:avx512_core on nChw16c), 8 on AVX2 and SSE4.1 (nChw8c). */
static void test_channel_block_follows_isa(void **state) {
    (void)state;
    tdm_env *env = NULL;
    OK(tdm_env_create(NULL, &env));
    tdm_device *cpu = tdm_env_find_device(env, "cpu");
    assert_non_null(cpu);
    int64_t block = tdm_device_channel_block(cpu);
    tdm_cpu_isa dnnl = TDM_ISA_PORTABLE;
    const char *d = strstr(tdm_env_device_description(env, cpu_index(env)), "oneDNN ");
    if (d) { /* oneDNN runs another level than the device (set earlier in this process) */
        char name[32];
        snprintf(name, sizeof name, "%.*s", (int)strcspn(d + 7, ")"), d + 7);
        assert_true(tdm_cpu_isa_parse(name, &dnnl));
    } else {
        assert_true(tdm_cpu_isa_parse(tdm_env_device_isa(env, cpu_index(env)), &dnnl));
    }
    printf("  oneDNN level %s: channel block %lld\n", tdm_cpu_isa_name(dnnl), (long long)block);
#if defined(__x86_64__)
    if (dnnl >= TDM_ISA_AVX512_CORE) assert_int_equal(block, 16);
    else if (dnnl >= TDM_ISA_SSE41) assert_int_equal(block, 8);
#endif
    tdm_env_free(env);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hardswish_dw_runs_no_reference_kernel),
        cmocka_unit_test(test_isa_reported_and_capped),
        cmocka_unit_test(test_unknown_isa_is_refused),
        cmocka_unit_test(test_channel_block_follows_isa),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
