/* Fuzz target: TensorProto bytes (as in the ONNX test data's input_N.pb) -> a memfd ->
 * tdm_tensor_load_onnx through /proc/self/fd/N. The tensor's "folder" is /proc/self/fd, so
 * external data must still be refused or confined there; nothing outside may be read. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "tandem/tandem.h"

static fz_alloc g_alloc;
static tdm_env *g_env;
static long g_env_blocks;
static int g_fd = -1;
static char g_path[64];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_env = fz_env(&g_alloc);
    g_env_blocks = atomic_load(&g_alloc.live_blocks);
    g_fd = memfd_create("tdm_fuzz_tensor", MFD_CLOEXEC);
    if (g_fd < 0) {
        perror("memfd_create");
        abort();
    }
    snprintf(g_path, sizeof g_path, "/proc/self/fd/%d", g_fd);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data, size, 0) != (ssize_t)size) abort();
    tdm_tensor *t = NULL;
    tdm_status *st = tdm_tensor_load_onnx(g_env, g_path, &t);
    if (st) {
        fz_check_status(st);
    } else {
        /* the tensor must be self-consistent: read it all */
        int64_t n = tdm_tensor_element_count(t);
        size_t bytes = tdm_tensor_byte_size(t);
        if (tdm_tensor_dtype(t) != TDM_STRING && bytes != (size_t)n * tdm_dtype_size(tdm_tensor_dtype(t)))
            abort();
        volatile uint8_t sink = 0;
        if (tdm_tensor_dtype(t) == TDM_STRING) {
            const char *const *s = tdm_tensor_data_const(t);
            for (int64_t i = 0; i < n; i++) sink ^= s[i] ? (uint8_t)strlen(s[i]) : 0;
        } else {
            const uint8_t *b = tdm_tensor_data_const(t);
            for (size_t i = 0; i < bytes; i++) sink ^= b[i];
        }
        (void)sink;
        tdm_tensor_free(t);
    }
    fz_check_leaks(&g_alloc, g_env_blocks);
    return 0;
}
