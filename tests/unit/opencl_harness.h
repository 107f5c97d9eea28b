/* Test helper: what the OpenCL test programs share — the status check, one environment for
 * the whole group (the program binary cache goes to $TANDEM_CACHE_DIR, or
 * <build>/opencl-test-cache when that is not set), whether opencl:0 exists (without it every
 * test prints "skipped: no OpenCL device" and passes) and a small random number generator
 * (define OCL_HARNESS_SEED before including to change its seed). */
#ifndef TDM_TEST_OPENCL_HARNESS_H
#define TDM_TEST_OPENCL_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/settings.h"
#include "tandem/tandem.h"

#include "test_ok.h"

/* The settings an environment created now would get (the program cache folder above
 * included), for tests that open the OpenCL backend directly. Read once; static because
 * the devices keep the pointer. */
static inline const tdm_settings *ocl_test_settings(void) {
    static tdm_settings s;
    static bool have;
    if (!have) {
        tdm_status *st = tdm_settings_read(NULL, &s);
        if (st) s = tdm_settings_builtin;
        tdm_status_free(st);
        have = true;
    }
    return &s;
}

#ifndef OCL_HARNESS_NO_GROUP
static tdm_env *g_env;
static bool g_have;

static int group_setup(void **state) {
    (void)state;
    if (!getenv("TANDEM_CACHE_DIR")) setenv("TANDEM_CACHE_DIR", TANDEM_BINARY_DIR "/opencl-test-cache", 1);
    tdm_status *st = tdm_env_create(NULL, &g_env);
    if (st) {
        fprintf(stderr, "%s\n", tdm_status_message(st));
        tdm_status_free(st);
        return -1;
    }
    for (size_t i = 0; i < tdm_env_device_count(g_env); i++)
        if (strcmp(tdm_env_device_name(g_env, i), "opencl:0") == 0) {
            g_have = true;
            printf("opencl:0 = %s\n", tdm_env_device_description(g_env, i));
        }
    if (!g_have) {
        printf("skipped: no OpenCL device");
        for (size_t i = 0; i < tdm_env_unavailable_count(g_env); i++)
            printf(" (%s)", tdm_env_unavailable_reason(g_env, i));
        printf("\n");
    }
    return 0;
}

static int group_teardown(void **state) {
    (void)state;
    tdm_env_free(g_env);
    return 0;
}

#define NEED_DEVICE()                                                                    \
    do {                                                                                 \
        if (!g_have) {                                                                   \
            printf("skipped: no OpenCL device\n");                                       \
            return;                                                                      \
        }                                                                                \
    } while (0)

#ifndef OCL_HARNESS_SEED
#define OCL_HARNESS_SEED 0x9e3779b97f4a7c15ull
#endif
static uint64_t g_rng = OCL_HARNESS_SEED;
static float frand(void) {
    g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((g_rng >> 40) & 0xffffff) / (float)0x1000000; /* [0, 1) */
}
#endif

#endif
