/* CPU kernels: unary family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_unary[] = {
    {0},
};
const int tdm_cpu_kernels_unary_count = 0;
