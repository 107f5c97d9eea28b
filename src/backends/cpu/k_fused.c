/* CPU kernels: fused family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_fused[] = {
    {0},
};
const int tdm_cpu_kernels_fused_count = 0;
