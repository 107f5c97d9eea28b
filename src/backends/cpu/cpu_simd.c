/* The CPU kernels' SIMD variants, chosen once per device (cpu_simd.h). Each kernel has a
 * table of (level, variant) in increasing level; init takes the last entry at or below the
 * device's level. The variants live with their kernels (k_gemv.c, cpu_gemm_uk.c, cpu_dot.c,
 * k_softmax_row.c, k_unary_f32.c, cpu_lut.c, cpu_q8bin.c). */
#include "backends/cpu/cpu_simd.h"

#include <stddef.h>

typedef struct gemm_variant {
    tdm_simd_gemm_ukernel fn;
    int mr, nr;
} gemm_variant;

#define VARIANT(lvl, f) {lvl, (void (*)(void))(f)}
typedef struct simd_variant {
    tdm_cpu_isa level;
    void (*fn)(void); /* cast back to the kernel's type */
} simd_variant;

static const simd_variant gemv_panel_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_gemv_panel_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_gemv_panel_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_gemv_panel_avx512),
#endif
};
static const simd_variant softmax_row_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_softmax_row_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_softmax_row_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_softmax_row_avx512),
#endif
};
static const simd_variant exp_sum_row_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_exp_sum_row_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_exp_sum_row_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_exp_sum_row_avx512),
#endif
};
static const simd_variant unary_f32_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_unary_f32_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_unary_f32_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_unary_f32_avx512),
#endif
};
static const simd_variant gemm_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_gemm_uk_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_gemm_uk_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_gemm_uk_avx512),
#endif
};
static const simd_variant dot_f32_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_dot_f32_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_dot_f32_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_dot_f32_avx512),
#endif
};
static const simd_variant lut_u8_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_lut_u8_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_lut_u8_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_lut_u8_avx512),
#endif
};
static const simd_variant max_u8_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_max_u8_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_max_u8_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_max_u8_avx512),
#endif
};
static const simd_variant q8_bin_variants[] = {
    VARIANT(TDM_ISA_PORTABLE, tdm_q8_bin_portable),
#ifdef TDM_SIMD_X86
    VARIANT(TDM_ISA_AVX2, tdm_q8_bin_avx2),
    VARIANT(TDM_ISA_AVX512_CORE, tdm_q8_bin_avx512),
#endif
};
/* the GEMM micro-kernels' tiles, by the same index */
static const int gemm_tiles[][2] = {
    {4, 8},
#ifdef TDM_SIMD_X86
    {6, 16},
    {12, 32},
#endif
};
_Static_assert(sizeof gemm_tiles / sizeof gemm_tiles[0] ==
                   sizeof gemm_variants / sizeof gemm_variants[0],
               "one tile per GEMM micro-kernel");

/* The index of the best entry at or below level (entry 0 is portable, level 0). */
static size_t pick(const simd_variant *v, size_t n, tdm_cpu_isa level) {
    size_t best = 0;
    for (size_t i = 1; i < n; i++)
        if (v[i].level <= level) best = i;
    return best;
}

#define N_OF(a) (sizeof(a) / sizeof(a)[0])

void tdm_cpu_simd_init(tdm_cpu_simd *s, tdm_cpu_isa level) {
    size_t i;
    s->level = level;
    i = pick(gemv_panel_variants, N_OF(gemv_panel_variants), level);
    s->gemv_panel = (tdm_simd_gemv_panel)gemv_panel_variants[i].fn;
    s->gemv_panel_isa = gemv_panel_variants[i].level;
    i = pick(softmax_row_variants, N_OF(softmax_row_variants), level);
    s->softmax_row = (tdm_simd_softmax_row)softmax_row_variants[i].fn;
    s->softmax_row_isa = softmax_row_variants[i].level;
    i = pick(exp_sum_row_variants, N_OF(exp_sum_row_variants), level);
    s->exp_sum_row = (tdm_simd_exp_sum_row)exp_sum_row_variants[i].fn;
    s->exp_sum_row_isa = exp_sum_row_variants[i].level;
    i = pick(unary_f32_variants, N_OF(unary_f32_variants), level);
    s->unary_f32 = (tdm_simd_unary_f32)unary_f32_variants[i].fn;
    s->unary_f32_isa = unary_f32_variants[i].level;
    i = pick(gemm_variants, N_OF(gemm_variants), level);
    s->gemm = (tdm_simd_gemm_ukernel)gemm_variants[i].fn;
    s->gemm_isa = gemm_variants[i].level;
    s->gemm_mr = gemm_tiles[i][0];
    s->gemm_nr = gemm_tiles[i][1];
    i = pick(dot_f32_variants, N_OF(dot_f32_variants), level);
    s->dot_f32 = (tdm_simd_dot_f32)dot_f32_variants[i].fn;
    s->dot_f32_isa = dot_f32_variants[i].level;
    i = pick(lut_u8_variants, N_OF(lut_u8_variants), level);
    s->lut_u8 = (tdm_simd_lut_u8)lut_u8_variants[i].fn;
    s->lut_u8_isa = lut_u8_variants[i].level;
    i = pick(max_u8_variants, N_OF(max_u8_variants), level);
    s->max_u8 = (tdm_simd_max_u8)max_u8_variants[i].fn;
    s->max_u8_isa = max_u8_variants[i].level;
    i = pick(q8_bin_variants, N_OF(q8_bin_variants), level);
    s->q8_bin = (tdm_simd_q8_bin)q8_bin_variants[i].fn;
    s->q8_bin_isa = q8_bin_variants[i].level;
}

tdm_cpu_isa tdm_cpu_host_isa(void) {
    /* the machine's level: the CPU device starts from it and re-chooses under its cap
     * (configure "cpu_isa"); the test device applies the settings' cap itself */
    return tdm_cpu_isa_detect();
}

static const tdm_cpu_simd portable = {
    .level = TDM_ISA_PORTABLE,
    .gemv_panel = tdm_gemv_panel_portable,
    .softmax_row = tdm_softmax_row_portable,
    .exp_sum_row = tdm_exp_sum_row_portable,
    .unary_f32 = tdm_unary_f32_portable,
    .gemm = tdm_gemm_uk_portable,
    .gemm_mr = 4,
    .gemm_nr = 8,
    .dot_f32 = tdm_dot_f32_portable,
    .lut_u8 = tdm_lut_u8_portable,
    .max_u8 = tdm_max_u8_portable,
    .q8_bin = tdm_q8_bin_portable,
};

const tdm_cpu_simd *tdm_cpu_simd_portable(void) { return &portable; }

const tdm_cpu_simd *tdm_cpu_simd_of(const tdm_kernel_ctx *ctx) {
    return ctx && ctx->cpu_simd ? ctx->cpu_simd : &portable;
}

#ifdef TDM_SIMD_X86
#include <xmmintrin.h>

unsigned tdm_cpu_flush_subnormals(void) {
    unsigned state = _mm_getcsr();
    _mm_setcsr(state | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
    return state;
}

void tdm_cpu_subnormals_restore(unsigned state) { _mm_setcsr(state); }
#else
unsigned tdm_cpu_flush_subnormals(void) { return 0; }

void tdm_cpu_subnormals_restore(unsigned state) { (void)state; }
#endif
