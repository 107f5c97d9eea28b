/* Small AVX2 steps shared by the int8 kernels (x86 files that already target AVX2). */
#ifndef TDM_CPU_AVX2_H
#define TDM_CPU_AVX2_H

#include "backends/cpu/cpu_simd.h"

#ifdef TDM_SIMD_X86
#include <immintrin.h>

/* Four vectors of int32 codes in [-128, 127] (32 codes in order) as 32 int8 codes in order:
 * the packs leave each lane's dwords interleaved, the dword permute puts them back. */
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline __m256i
tdm_avx2_pack_codes(__m256i c0, __m256i c1, __m256i c2, __m256i c3) {
    __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(c0, c1), _mm256_packs_epi32(c2, c3));
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* *acc += x (int16 / int32 lanes) in acc's own register. GCC 12 adds into another register and
 * copies the sum back: six copies a pass of the attention's p.V over three heads, and in the
 * 4-bit product's loop of 4 rows the copies pushed its int16 sums out to the stack. */
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline void tdm_avx2_add16_acc(__m256i *acc,
                                                                                    __m256i x) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpaddw %1, %0, %0" : "+x"(*acc) : "x"(x));
#else
    *acc = _mm256_add_epi16(*acc, x);
#endif
}
__attribute__((always_inline)) TDM_TARGET_AVX2 static inline void tdm_avx2_add32_acc(__m256i *acc,
                                                                                    __m256i x) {
#if defined(__GNUC__) && !defined(__clang__)
    __asm__("vpaddd %1, %0, %0" : "+x"(*acc) : "x"(x));
#else
    *acc = _mm256_add_epi32(*acc, x);
#endif
}
#endif

#endif
