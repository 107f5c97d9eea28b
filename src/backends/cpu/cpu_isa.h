/* The CPU's instruction sets, as the CPU *and* the operating system allow them (cpuid plus
 * the XSAVE state the OS enables: a kernel that hides AVX-512 state makes AVX-512 code fault
 * even on a CPU that has it).
 *
 * Levels are ordered: each includes the ones below it. Own SIMD kernels pick their variant
 * from a level at start-up (never from the build machine), and a cap (`TANDEM_CPU_ISA` /
 * the environment option) lowers the level for testing and for comparison. The names are
 * oneDNN's ISA names (ONEDNN_MAX_CPU_ISA), so one string caps both.
 *
 *   tdm_cpu_isa have = tdm_cpu_isa_detect();
 *   tdm_cpu_isa cap;
 *   if (tdm_cpu_isa_parse("avx2", &cap)) have = tdm_cpu_isa_min(have, cap);
 *   if (have >= TDM_ISA_AVX512_CORE) ... the AVX-512 variant ...
 */
#ifndef TDM_CPU_ISA_H
#define TDM_CPU_ISA_H

#include <stdbool.h>

/* X-macro: level, oneDNN-style name. In increasing order. */
#define TDM_CPU_ISA_LIST(X)                                                                   \
    X(TDM_ISA_PORTABLE, "portable")         /* plain C, any CPU */                            \
    X(TDM_ISA_SSE41, "sse41")                                                                 \
    X(TDM_ISA_AVX2, "avx2")                 /* AVX2 + FMA + F16C (x86-64-v3) */               \
    X(TDM_ISA_AVX512_CORE, "avx512_core")   /* F, CD, BW, DQ, VL (x86-64-v4) */               \
    X(TDM_ISA_AVX512_CORE_VNNI, "avx512_core_vnni")                                           \
    X(TDM_ISA_AVX512_CORE_BF16, "avx512_core_bf16")                                           \
    X(TDM_ISA_AVX512_CORE_AMX, "avx512_core_amx") /* AMX tiles, int8 and bf16 */

typedef enum tdm_cpu_isa {
#define TDM_ISA_ENUM(e, name) e,
    TDM_CPU_ISA_LIST(TDM_ISA_ENUM)
#undef TDM_ISA_ENUM
    TDM_ISA_COUNT
} tdm_cpu_isa;

/* The best level this CPU and OS support (TDM_ISA_PORTABLE on other architectures).
 * Reads cpuid/xgetbv each call (cheap; call it once at start-up); on a CPU with AMX it also
 * asks Linux for the process's tile permission (AMX only when granted; asking again is
 * harmless). */
tdm_cpu_isa tdm_cpu_isa_detect(void);
/* "avx2" etc.; "?" for an out-of-range value. */
const char *tdm_cpu_isa_name(tdm_cpu_isa isa);
/* Parses a name (case-insensitive; also "all" = the highest level, "default" = same);
 * false for an unknown name (*out untouched). */
bool tdm_cpu_isa_parse(const char *name, tdm_cpu_isa *out);
static inline tdm_cpu_isa tdm_cpu_isa_min(tdm_cpu_isa a, tdm_cpu_isa b) { return a < b ? a : b; }

#endif
