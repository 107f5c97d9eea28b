/* CPU kernels: shape family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_shape[] = {
    {0},
};
const int tdm_cpu_kernels_shape_count = 0;
