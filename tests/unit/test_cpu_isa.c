/* The CPU ISA levels (src/backends/cpu/cpu_isa.c): detection agrees with what the compiler's
 * runtime (libgcc's cpu model, which also checks the OS's XSAVE state) reports, names
 * round-trip, unknown names are refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "backends/cpu/cpu_isa.h"

static void test_detect_matches_compiler_runtime(void **state) {
    (void)state;
    tdm_cpu_isa have = tdm_cpu_isa_detect();
    assert_true(have >= TDM_ISA_PORTABLE && have < TDM_ISA_COUNT);
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                  __builtin_cpu_supports("avx512cd");
    assert_int_equal(have >= TDM_ISA_SSE41, __builtin_cpu_supports("sse4.1") != 0);
    assert_int_equal(have >= TDM_ISA_AVX2, avx2);
    assert_int_equal(have >= TDM_ISA_AVX512_CORE, avx2 && avx512);
    if (have >= TDM_ISA_AVX512_CORE)
        assert_int_equal(have >= TDM_ISA_AVX512_CORE_VNNI,
                         __builtin_cpu_supports("avx512vnni") != 0);
#endif
}

static void test_names_round_trip(void **state) {
    (void)state;
    for (int i = 0; i < TDM_ISA_COUNT; i++) {
        tdm_cpu_isa back = TDM_ISA_COUNT;
        assert_true(tdm_cpu_isa_parse(tdm_cpu_isa_name((tdm_cpu_isa)i), &back));
        assert_int_equal(back, i);
    }
    tdm_cpu_isa x = TDM_ISA_AVX2;
    assert_true(tdm_cpu_isa_parse("AVX512_CORE", &x));
    assert_int_equal(x, TDM_ISA_AVX512_CORE);
    assert_true(tdm_cpu_isa_parse("all", &x));
    assert_int_equal(x, TDM_ISA_COUNT - 1);
    x = TDM_ISA_AVX2;
    assert_false(tdm_cpu_isa_parse("avx3", &x));
    assert_false(tdm_cpu_isa_parse("", &x));
    assert_false(tdm_cpu_isa_parse(NULL, &x));
    assert_int_equal(x, TDM_ISA_AVX2); /* untouched on failure */
    assert_string_equal(tdm_cpu_isa_name(TDM_ISA_COUNT), "?");
    assert_int_equal(tdm_cpu_isa_min(TDM_ISA_AVX2, TDM_ISA_AVX512_CORE), TDM_ISA_AVX2);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_detect_matches_compiler_runtime),
        cmocka_unit_test(test_names_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
