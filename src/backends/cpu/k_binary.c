/* CPU kernels: binary family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_binary[] = {
    {0},
};
const int tdm_cpu_kernels_binary_count = 0;
