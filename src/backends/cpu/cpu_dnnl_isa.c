/* oneDNN's side of the CPU's instruction-set level: the cap (dnnl_set_max_cpu_isa) and the
 * layout its convolutions choose for the level (cpu_device.h). */
#include <dnnl.h>
#include <string.h>

#include "backends/cpu/cpu_device.h"
#include "ops/fused.h"

static dnnl_cpu_isa_t to_dnnl(tdm_cpu_isa l) {
    switch (l) {
    case TDM_ISA_PORTABLE: /* oneDNN has nothing lower: its JIT kernels start at SSE4.1 */
    case TDM_ISA_SSE41: return dnnl_cpu_isa_sse41;
    case TDM_ISA_AVX2: return dnnl_cpu_isa_avx2;
    case TDM_ISA_AVX512_CORE: return dnnl_cpu_isa_avx512_core;
    case TDM_ISA_AVX512_CORE_VNNI: return dnnl_cpu_isa_avx512_core_vnni;
    case TDM_ISA_AVX512_CORE_BF16: return dnnl_cpu_isa_avx512_core_bf16;
    default: return dnnl_cpu_isa_avx512_core_amx;
    }
}

/* The highest level whose oneDNN ISA bits are all in `isa` (oneDNN's values are masks:
 * avx2_vnni includes avx2, avx includes sse41). */
static tdm_cpu_isa from_dnnl(dnnl_cpu_isa_t isa) {
    for (int l = TDM_ISA_COUNT - 1; l > TDM_ISA_SSE41; l--) {
        unsigned m = (unsigned)to_dnnl((tdm_cpu_isa)l);
        if (((unsigned)isa & m) == m) return (tdm_cpu_isa)l;
    }
    return ((unsigned)isa & (unsigned)dnnl_cpu_isa_sse41) ? TDM_ISA_SSE41 : TDM_ISA_PORTABLE;
}

tdm_cpu_isa tdm_cpu_dnnl_isa_apply(bool cap, tdm_cpu_isa want, bool *applied) {
    *applied = !cap || dnnl_set_max_cpu_isa(to_dnnl(want)) == dnnl_success;
    return from_dnnl(dnnl_get_effective_cpu_isa());
}

/* The implementation oneDNN picks for a 3x3 convolution of ResNet's second stage with
 * activations in layout `tag` (any: its own choice); the channel block of the source layout
 * it then takes in *block (TDM_BLOCK_CHANNELS_LAST for channels-last; 0: neither). False
 * when it offers only its reference code or nothing. */
static bool probe(dnnl_engine_t eng, dnnl_format_tag_t tag, int64_t *block) {
    dnnl_dims_t sd = {1, 64, 56, 56}, wd = {64, 64, 3, 3}, dd = {1, 64, 56, 56};
    dnnl_dims_t st = {1, 1}, pad = {1, 1};
    dnnl_memory_desc_t src, wei, dst;
    dnnl_convolution_desc_t cd;
    dnnl_primitive_desc_t pd = NULL;
    *block = 0;
    if (dnnl_memory_desc_init_by_tag(&src, 4, sd, dnnl_f32, tag) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&wei, 4, wd, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&dst, 4, dd, dnnl_f32, tag) != dnnl_success ||
        dnnl_convolution_forward_desc_init(&cd, dnnl_forward_inference, dnnl_convolution_direct,
                                           &src, &wei, NULL, &dst, st, pad, pad) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &cd, NULL, eng, NULL) != dnnl_success)
        return false;
    const char *impl = NULL;
    bool ok = dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, (void *)&impl) ==
                  dnnl_success && impl && strncmp(impl, "ref", 3) != 0;
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_src_md, 0);
    dnnl_memory_desc_t nhwc;
    if (md && md->format_kind == dnnl_blocked && md->format_desc.blocking.inner_nblks == 1 &&
        md->format_desc.blocking.inner_idxs[0] == 1)
        *block = md->format_desc.blocking.inner_blks[0];
    else if (md && dnnl_memory_desc_init_by_tag(&nhwc, 4, sd, dnnl_f32, dnnl_acdb) == dnnl_success &&
             dnnl_memory_desc_equal(md, &nhwc))
        *block = TDM_BLOCK_CHANNELS_LAST;
    dnnl_primitive_desc_destroy(pd);
    return ok;
}

int64_t tdm_cpu_dnnl_probe_block(bool *channels_last) {
    *channels_last = false;
    dnnl_engine_t eng;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success) return 0;
    int64_t block = 0;
    /* oneDNN's own choice when it is channel-blocked (nChw8c with AVX2 and SSE4.1 kernels,
     * nChw16c with jit:avx512_core); where it is channels-last (brgemm convolutions on
     * AVX-512 and AMX), noted, and like anything else: the widest channel block that has a
     * JIT kernel (the blocked-layout pass chooses between them per graph) */
    bool ok = probe(eng, dnnl_format_tag_any, &block);
    *channels_last = ok && block == TDM_BLOCK_CHANNELS_LAST;
    if (!ok || block <= 0) {
        static const dnnl_format_tag_t tags[] = {dnnl_aBcd16b, dnnl_aBcd8b};
        block = 0;
        for (size_t i = 0; i < sizeof tags / sizeof tags[0] && !block; i++) {
            int64_t b;
            if (probe(eng, tags[i], &b)) block = b;
        }
    }
    dnnl_engine_destroy(eng);
    return block;
}
