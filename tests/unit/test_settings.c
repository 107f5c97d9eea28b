/* Settings as options, the environment as their defaults (src/api/settings.c):
 *  - a field of tdm_env_options that is set wins over its TANDEM_* variable;
 *  - a variable fills the fields left unset, the built-in defaults the rest;
 *  - negative numbers mean "none", TDM_SETTING_OFF turns a switch off that the variable
 *    turned on;
 *  - a malformed variable or field fails tdm_env_create with TDM_ERR_INVALID_ARGUMENT naming
 *    it, and *out stays untouched; a malformed variable whose field is set is never read;
 *  - the environment is read once, at tdm_env_create: a variable changed afterwards changes
 *    nothing (lazy backends discovered later included);
 *  - the README's table lists every variable, and no source file of the library outside
 *    src/api/settings.c (and the command line, src/cli) calls getenv.
 * Every TANDEM_* variable is cleared first, so settings of the calling shell do not count. */
#define _XOPEN_SOURCE 700 /* nftw */
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/api_impl.h"
#include "api/settings.h"
#include "tandem/tandem.h"

#include "test_ok.h"

/* Every variable the library knows (the README's table). */
static const char *const vars[] = {
    "TANDEM_CACHE_DIR",           "TANDEM_PLUGIN_DIR",
    "TANDEM_SPIN_US",             "TANDEM_SYNC_COPIES",
    "TANDEM_LOOP_MAX_ITERATIONS", "TANDEM_LOOP_TIMEOUT_MS",
    "TANDEM_CUDA_DISABLE",        "TANDEM_CUDA_PRECISION",
    "TANDEM_CUDA_MEM_LIMIT_MB",   "TANDEM_CUDA_GRAPHS",
    "TANDEM_CUDA_GRAPHS_LOG",     "TANDEM_OPENCL_DISABLE",
    "TANDEM_OPENCL_KERNELS",      "TANDEM_TEST_DEVICES",
    "TANDEM_TEST_DEVICE_DELAY_US", "TANDEM_TEST_DEVICE_OPS",
    "TANDEM_TEST_DEVICE_FAIL_EVERY",
};

static int clear_all(void **state) {
    (void)state;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
    return 0;
}

static tdm_env_options opts(void) {
    tdm_env_options o;
    memset(&o, 0, sizeof o);
    o.api_version = TDM_API_VERSION;
    o.threads = 1;
    return o;
}

static int count_prefix(const tdm_env *env, const char *prefix) {
    int n = 0;
    for (size_t i = 0; i < tdm_env_device_count(env); i++)
        n += strncmp(tdm_env_device_name(env, i), prefix, strlen(prefix)) == 0;
    return n;
}

/* The reason CUDA is unavailable, or "" (a machine where it is available). */
static const char *cuda_reason(const tdm_env *env) {
    for (size_t i = 0; i < tdm_env_unavailable_count(env); i++)
        if (!strncmp(tdm_env_unavailable_reason(env, i), "cuda:", 5))
            return tdm_env_unavailable_reason(env, i);
    return "";
}

/* Expects tdm_env_create(o) to fail with INVALID_ARGUMENT and a message holding `needle`. */
static void expect_refused(const tdm_env_options *o, const char *needle) {
    tdm_env *env = (tdm_env *)(uintptr_t)0x1; /* must stay untouched */
    tdm_status *st = tdm_env_create(o, &env);
    if (!st) fail_msg("tdm_env_create accepted what should name '%s'", needle);
    if (tdm_status_code(st) != TDM_ERR_INVALID_ARGUMENT || !strstr(tdm_status_message(st), needle))
        fail_msg("expected INVALID_ARGUMENT naming '%s', got [%s] %s", needle,
                 tdm_code_name(tdm_status_code(st)), tdm_status_message(st));
    assert_true(env == (tdm_env *)(uintptr_t)0x1);
    tdm_status_free(st);
}

/* Nothing set anywhere: the built-in defaults. */
static void test_builtin_defaults(void **state) {
    (void)state;
    tdm_settings s;
    memset(&s, 0x5a, sizeof s);
    OK(tdm_settings_read(NULL, &s));
    assert_int_equal(s.spin_us, 200);
    assert_int_equal(s.loop_max_iterations, 10000000);
    assert_int_equal(s.loop_timeout_ms, 0);
    assert_false(s.sync_copies);
    assert_false(s.cuda_disable);
    assert_false(s.cuda_graphs);
    assert_false(s.opencl_disable);
    assert_string_equal(s.cuda_precision, "fp32");
    assert_int_equal(s.cuda_mem_limit_mb, 0);
    assert_string_equal(s.plugin_dir, "");
    assert_string_equal(s.cuda_graphs_log, "");
    assert_string_equal(s.opencl_kernels, "");
    assert_int_equal(s.test_devices, 0);
    assert_int_equal(s.test_device_delay_us, 0);
    assert_string_equal(s.test_device_ops, "");
    assert_int_equal(s.test_device_fail_every, 0);
    /* the cache folder: $XDG_CACHE_HOME/tandem (absolute only), else ~/.cache/tandem */
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char want[TDM_SETTINGS_PATH] = "";
    if (xdg && xdg[0] == '/') snprintf(want, sizeof want, "%s/tandem", xdg);
    else if (home && home[0]) snprintf(want, sizeof want, "%s/.cache/tandem", home);
    assert_string_equal(s.cache_dir, want);
}

/* The variables fill the fields left unset (zeroed options, and NULL options alike). */
static void test_environment_fills_unset(void **state) {
    (void)state;
    setenv("TANDEM_CACHE_DIR", "/tmp/tandem-settings-env", 1);
    setenv("TANDEM_SPIN_US", "0", 1); /* 0 = never spin */
    setenv("TANDEM_SYNC_COPIES", "yes", 1);
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "0", 1); /* 0 = no bound */
    setenv("TANDEM_LOOP_TIMEOUT_MS", "1234", 1);
    setenv("TANDEM_CUDA_PRECISION", "fp16", 1);
    setenv("TANDEM_CUDA_MEM_LIMIT_MB", "512", 1);
    setenv("TANDEM_CUDA_GRAPHS", "ON", 1);
    setenv("TANDEM_OPENCL_KERNELS", "cpu", 1);
    setenv("TANDEM_TEST_DEVICES", "2", 1);
    setenv("TANDEM_TEST_DEVICE_OPS", "Relu,Add", 1);
    setenv("TANDEM_TEST_DEVICE_FAIL_EVERY", "9", 1);
    tdm_env_options o = opts();
    tdm_env *env = NULL;
    OK(tdm_env_create(&o, &env));
    const tdm_settings *s = &env->settings;
    assert_string_equal(s->cache_dir, "/tmp/tandem-settings-env");
    assert_int_equal(s->spin_us, 0);
    assert_true(s->sync_copies);
    assert_int_equal(s->loop_max_iterations, 0);
    assert_int_equal(s->loop_timeout_ms, 1234);
    assert_string_equal(s->cuda_precision, "fp16");
    assert_int_equal(s->cuda_mem_limit_mb, 512);
    assert_true(s->cuda_graphs);
    assert_string_equal(s->opencl_kernels, "cpu");
    assert_int_equal(s->test_device_fail_every, 9);
    assert_string_equal(s->test_device_ops, "Relu,Add");
    assert_int_equal(count_prefix(env, "test:"), 2); /* the devices follow the setting */
    tdm_env_free(env);
    tdm_settings from_null;
    OK(tdm_settings_read(NULL, &from_null));
    assert_int_equal(from_null.loop_timeout_ms, 1234);
    assert_int_equal(from_null.test_devices, 2);
    clear_all(NULL);
}

/* A field that is set wins over its variable, whatever the variable says. */
static void test_option_overrides_environment(void **state) {
    (void)state;
    setenv("TANDEM_CACHE_DIR", "/tmp/tandem-settings-env", 1);
    setenv("TANDEM_SPIN_US", "50", 1);
    setenv("TANDEM_SYNC_COPIES", "1", 1);
    setenv("TANDEM_LOOP_MAX_ITERATIONS", "77", 1);
    setenv("TANDEM_CUDA_PRECISION", "fp16", 1);
    setenv("TANDEM_CUDA_MEM_LIMIT_MB", "512", 1);
    setenv("TANDEM_TEST_DEVICES", "3", 1);
    setenv("TANDEM_TEST_DEVICE_OPS", "Relu", 1);
    tdm_env_options o = opts();
    o.cache_dir = "/tmp/tandem-settings-option";
    o.spin_us = 7;
    o.sync_copies = TDM_SETTING_OFF;
    o.loop_max_iterations = -1;  /* none */
    o.cuda_precision = "bf16";
    o.cuda_mem_limit_mb = -5;    /* none */
    o.test_devices = 1;
    o.test_device_ops = "Add,Mul";
    tdm_env *env = NULL;
    OK(tdm_env_create(&o, &env));
    const tdm_settings *s = &env->settings;
    assert_string_equal(s->cache_dir, "/tmp/tandem-settings-option");
    assert_int_equal(s->spin_us, 7);
    assert_false(s->sync_copies);
    assert_int_equal(s->loop_max_iterations, 0);
    assert_string_equal(s->cuda_precision, "bf16");
    assert_int_equal(s->cuda_mem_limit_mb, 0);
    assert_string_equal(s->test_device_ops, "Add,Mul");
    assert_int_equal(count_prefix(env, "test:"), 1);
    tdm_env_free(env);
    /* "none" overrides a variable that asks for devices */
    o.test_devices = TDM_SETTING_OFF;
    OK(tdm_env_create(&o, &env));
    assert_int_equal(count_prefix(env, "test:"), 0);
    tdm_env_free(env);
    /* a malformed variable is not read when its field is set */
    setenv("TANDEM_SPIN_US", "abc", 1);
    OK(tdm_env_create(&o, &env));
    assert_int_equal(env->settings.spin_us, 7);
    tdm_env_free(env);
    clear_all(NULL);
}

/* Malformed variables and fields: a clear error at tdm_env_create, naming what is wrong. */
static void test_malformed(void **state) {
    (void)state;
    tdm_env_options o = opts();
    static const struct {
        const char *var, *value, *needle;
    } bad[] = {
        {"TANDEM_SPIN_US", "abc", "TANDEM_SPIN_US='abc'"},
        {"TANDEM_SPIN_US", "2000000", "0..1000000"},
        {"TANDEM_SPIN_US", "-3", "TANDEM_SPIN_US"},
        {"TANDEM_SPIN_US", "12us", "TANDEM_SPIN_US"},
        {"TANDEM_SYNC_COPIES", "maybe", "TANDEM_SYNC_COPIES='maybe' is not 1 or 0"},
        {"TANDEM_LOOP_TIMEOUT_MS", "99999999999999999999", "TANDEM_LOOP_TIMEOUT_MS"},
        {"TANDEM_CUDA_PRECISION", "fp64", "fp32|tf32|fp16|bf16"},
        {"TANDEM_OPENCL_KERNELS", "fpga", "TANDEM_OPENCL_KERNELS='fpga'"},
        {"TANDEM_TEST_DEVICES", "5", "TANDEM_TEST_DEVICES='5' is not an integer in 0..4"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].var, bad[i].value, 1);
        expect_refused(&o, bad[i].needle);
        expect_refused(NULL, bad[i].needle);
        unsetenv(bad[i].var);
    }
    char *longer = malloc(TDM_SETTINGS_PATH + 10);
    assert_non_null(longer);
    memset(longer, 'a', TDM_SETTINGS_PATH + 9);
    longer[0] = '/';
    longer[TDM_SETTINGS_PATH + 9] = 0;
    setenv("TANDEM_PLUGIN_DIR", longer, 1);
    expect_refused(&o, "TANDEM_PLUGIN_DIR is 4105 bytes long; at most 4095");
    unsetenv("TANDEM_PLUGIN_DIR");
    /* fields */
    o.spin_us = 1000001;
    expect_refused(&o, "tdm_env_options.spin_us is 1000001; at most 1000000");
    o = opts();
    o.cuda_precision = "fp8";
    expect_refused(&o, "tdm_env_options.cuda_precision='fp8' is not one of");
    o = opts();
    o.test_devices = 9;
    expect_refused(&o, "tdm_env_options.test_devices");
    o = opts();
    o.cache_dir = longer;
    expect_refused(&o, "tdm_env_options.cache_dir is 4105 bytes long");
    tdm_settings s;
    tdm_status *st = tdm_settings_read(&o, NULL); /* a status, not a crash */
    assert_non_null(st);
    tdm_status_free(st);
    free(longer);
    o = opts();
    OK(tdm_settings_read(&o, &s)); /* and a good one again */
}

/* Read once: a variable set or cleared after tdm_env_create changes nothing, also for a
 * backend discovered later (cuda is discovered when the device list is first read). */
static void test_read_once(void **state) {
    (void)state;
    tdm_env *on = NULL, *off = NULL;
    setenv("TANDEM_CUDA_DISABLE", "1", 1);
    setenv("TANDEM_TEST_DEVICES", "1", 1);
    OK(tdm_env_create(NULL, &on));
    unsetenv("TANDEM_CUDA_DISABLE");
    unsetenv("TANDEM_TEST_DEVICES");
    OK(tdm_env_create(NULL, &off));
    setenv("TANDEM_CUDA_DISABLE", "1", 1);
    setenv("TANDEM_TEST_DEVICES", "2", 1);
    assert_non_null(strstr(cuda_reason(on), "disabled"));
    assert_null(strstr(cuda_reason(off), "disabled"));
    assert_int_equal(count_prefix(on, "test:"), 1);
    assert_int_equal(count_prefix(off, "test:"), 0);
    assert_int_equal(count_prefix(on, "cuda"), 0);
    tdm_env_free(on);
    tdm_env_free(off);
    clear_all(NULL);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) n = 0;
        buf[n] = 0;
    }
    fclose(f);
    return buf;
}

static void test_readme_lists_every_setting(void **state) {
    (void)state;
    char *readme = read_text(TANDEM_SOURCE_DIR "/README.md");
    assert_non_null(readme);
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        char cell[80];
        snprintf(cell, sizeof cell, "| `%s` |", vars[i]);
        if (!strstr(readme, cell)) fail_msg("README.md's settings table has no row for %s", vars[i]);
    }
    free(readme);
}

static int n_getenv_files;

static int look_for_getenv(const char *path, const struct stat *sb, int type, struct FTW *ftw) {
    (void)sb;
    (void)ftw;
    size_t len = strlen(path);
    if (type != FTW_F || len < 2 || (strcmp(path + len - 2, ".c") && strcmp(path + len - 2, ".h")))
        return 0;
    if (strstr(path, "/src/cli/") || strstr(path, "/src/api/settings.c")) return 0;
    char *text = read_text(path);
    if (text && strstr(text, "getenv(")) {
        fprintf(stderr, "getenv outside the settings reader: %s\n", path);
        n_getenv_files++;
    }
    free(text);
    return 0;
}

static void test_one_reader(void **state) {
    (void)state;
    n_getenv_files = 0;
    assert_int_equal(nftw(TANDEM_SOURCE_DIR "/src", look_for_getenv, 16, FTW_PHYS), 0);
    assert_int_equal(n_getenv_files, 0);
    char *reader = read_text(TANDEM_SOURCE_DIR "/src/api/settings.c"); /* (the walk saw files) */
    assert_non_null(reader);
    assert_non_null(strstr(reader, "getenv("));
    free(reader);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_builtin_defaults, clear_all),
        cmocka_unit_test_setup(test_environment_fills_unset, clear_all),
        cmocka_unit_test_setup(test_option_overrides_environment, clear_all),
        cmocka_unit_test_setup(test_malformed, clear_all),
        cmocka_unit_test_setup(test_read_once, clear_all),
        cmocka_unit_test(test_readme_lists_every_setting),
        cmocka_unit_test(test_one_reader),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
