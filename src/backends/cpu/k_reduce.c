/* CPU kernels: reduce family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_reduce[] = {
    {0},
};
const int tdm_cpu_kernels_reduce_count = 0;
