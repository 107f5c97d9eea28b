/* The CPU device's context: what the CPU backend and its kernels share about the device
 * (private to src/backends/cpu).
 *
 * The instruction-set level: `isa` is the level own SIMD kernels choose their variant from
 * (the machine's best, or lower under a cap: tdm_env_options.cpu_isa / TANDEM_CPU_ISA, given
 * to the device as configure("cpu_isa", name) when the environment is created). oneDNN's
 * ISA is process-wide and fixed at its first use (dnnl_set_max_cpu_isa works only before):
 * the first CPU device that applies a cap sets it; a later environment that asks for another
 * level logs a warning and its device records what oneDNN really runs (`dnnl_isa`), which
 * the description shows ("..., avx2 (oneDNN avx512_core)"). Device profiles are keyed by the
 * description, so by both levels.
 *
 * The precision (configure("precision", ...), from tdm_session_options.precision): "bf16"
 * switches the dnnl family's convolutions and matmuls to bf16 inputs with f32 accumulation
 * and is refused with an error on a CPU (or under a cap) without AVX512_BF16 / AMX, never
 * emulated; fp32 turns it off; tf32 and fp16 are accelerators' and leave the CPU in fp32.
 * Like the accelerators' setting it belongs to the device, which the environment's sessions
 * share. The blocked-layout pass works as in fp32: f32 channel-blocked tensors between
 * convolutions, each converted to bf16 in the same layout at the primitive's input; with
 * AMX, whose convolutions take channels-last only, a large enough convolution reorders its
 * input into channels-last bf16 and its output back, and the small ones stay f32
 * (k_dnnl_conv.c, CONV_AMX_MIN_K).
 *
 * The channel block (tdm_device_iface.channel_block): the block of the activation layout
 * oneDNN's convolution takes on this CPU when left free (format_tag any), found once with a
 * probe primitive after the ISA is settled. */
#ifndef TDM_CPU_DEVICE_H
#define TDM_CPU_DEVICE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "backends/backend.h"
#include "backends/cpu/cpu_isa.h"
#include "backends/cpu/cpu_simd.h"

typedef struct tdm_cpu_dev {
    const tdm_allocator *alloc;
    tdm_logger log;           /* the environment's logger */
    tdm_cpu_isa isa;          /* own kernels' level (capped) */
    tdm_cpu_simd simd;        /* own kernels' variants at that level */
    tdm_cpu_isa dnnl_isa;     /* what oneDNN dispatches to (process-wide) */
    pthread_mutex_t mu;       /* guards the probe below */
    int64_t block;            /* channel block of oneDNN's convolutions (0: plain layouts) */
    bool cl;                  /* ... which prefer channels-last (brgemm kernels) */
    bool block_known;
    int layout;               /* configure "cpu_layout" as a tdm_channels_last (ops/fused.h) */
    _Atomic bool bf16;        /* precision bf16 (configure "precision"): the dnnl family's
                                 convolutions and matmuls take bf16 sources and weights with
                                 f32 accumulation and f32 results; set only where oneDNN
                                 dispatches to avx512_core_bf16 or AMX */
} tdm_cpu_dev;

/* The CPU context of dev, or NULL when dev is not a CPU device (e.g. the test device, which
 * runs CPU kernels too). */
tdm_cpu_dev *tdm_cpu_dev_of(const tdm_device *dev);

/* ---- cpu_dnnl_isa.c: oneDNN's side ---- */

/* Caps oneDNN's dispatch at `want` (when `cap` is true; else leaves oneDNN's default, which
 * ONEDNN_MAX_CPU_ISA may set) and returns the level oneDNN dispatches to from now on. False
 * in *applied when the cap could not be set (oneDNN was used before in this process). */
tdm_cpu_isa tdm_cpu_dnnl_isa_apply(bool cap, tdm_cpu_isa want, bool *applied);
/* Channel block of the source layout oneDNN's float32 convolution picks on this CPU with
 * format_tag any (16: nChw16c, 8: nChw8c), or where it picks channels-last, the widest block
 * that has a JIT kernel, with *channels_last true; 0: plain layouts, or no oneDNN. */
int64_t tdm_cpu_dnnl_probe_block(bool *channels_last);

#endif
