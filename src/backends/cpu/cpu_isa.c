#include "backends/cpu/cpu_isa.h"

#include <stddef.h>
#include <stdint.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>

/* XCR0: which register states the OS saves (and so lets programs use). */
static uint64_t xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}

static bool bit(uint32_t r, int b) { return (r >> b) & 1u; }

#ifdef __linux__
#include <sys/syscall.h>
#include <unistd.h>
/* Linux (5.16 on) gives a process AMX's tile data only after it asks (arch_prctl
 * ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); a tile instruction before that faults. The
 * permission is the process's and asking again is harmless: oneDNN asks too. */
static bool tiles_permitted(void) {
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                   18 /* XFEATURE_XTILEDATA */) == 0;
}
#else
static bool tiles_permitted(void) { return true; } /* XCR0 is the OS's word */
#endif

tdm_cpu_isa tdm_cpu_isa_detect(void) {
    uint32_t a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return TDM_ISA_PORTABLE;
    const bool sse41 = bit(c, 19), fma = bit(c, 12), osxsave = bit(c, 27), avx = bit(c, 28),
               f16c = bit(c, 29);
    if (!sse41) return TDM_ISA_PORTABLE;
    if (!(osxsave && avx)) return TDM_ISA_SSE41;
    const uint64_t x = xcr0();
    if ((x & 0x6) != 0x6) return TDM_ISA_SSE41; /* XMM and YMM state */
    uint32_t max_leaf = __get_cpuid_max(0, NULL);
    if (max_leaf < 7) return TDM_ISA_SSE41;
    __cpuid_count(7, 0, a, b, c, d);
    const uint32_t b7 = b, c7 = c, d7 = d, max_sub = a;
    if (!(bit(b7, 5) && fma && f16c)) return TDM_ISA_SSE41; /* x86-64-v3: AVX2, FMA, F16C */
    /* AVX-512 F, DQ, CD, BW, VL and the opmask/ZMM states */
    if (!(bit(b7, 16) && bit(b7, 17) && bit(b7, 28) && bit(b7, 30) && bit(b7, 31)) ||
        (x & 0xe0) != 0xe0)
        return TDM_ISA_AVX2;
    if (!bit(c7, 11)) return TDM_ISA_AVX512_CORE; /* VNNI */
    uint32_t a71 = 0;
    if (max_sub >= 1) {
        __cpuid_count(7, 1, a, b, c, d);
        a71 = a;
    }
    if (!bit(a71, 5)) return TDM_ISA_AVX512_CORE_VNNI; /* AVX512_BF16 */
    /* AMX: TILE, INT8, BF16 and the tile states (XTILECFG, XTILEDATA) */
    if (!(bit(d7, 24) && bit(d7, 25) && bit(d7, 22)) || (x & 0x60000) != 0x60000 ||
        !tiles_permitted())
        return TDM_ISA_AVX512_CORE_BF16;
    return TDM_ISA_AVX512_CORE_AMX;
}
#else
tdm_cpu_isa tdm_cpu_isa_detect(void) { return TDM_ISA_PORTABLE; }
#endif

static const char *const isa_names[] = {
#define TDM_ISA_NAME(e, name) name,
    TDM_CPU_ISA_LIST(TDM_ISA_NAME)
#undef TDM_ISA_NAME
};
_Static_assert(sizeof isa_names / sizeof isa_names[0] == TDM_ISA_COUNT, "one name per level");

const char *tdm_cpu_isa_name(tdm_cpu_isa isa) {
    return (unsigned)isa < TDM_ISA_COUNT ? isa_names[isa] : "?";
}

bool tdm_cpu_isa_parse(const char *name, tdm_cpu_isa *out) {
    if (!name) return false;
    if (!strcasecmp(name, "all") || !strcasecmp(name, "default")) {
        *out = (tdm_cpu_isa)(TDM_ISA_COUNT - 1);
        return true;
    }
    for (int i = 0; i < TDM_ISA_COUNT; i++)
        if (!strcasecmp(name, isa_names[i])) {
            *out = (tdm_cpu_isa)i;
            return true;
        }
    return false;
}
