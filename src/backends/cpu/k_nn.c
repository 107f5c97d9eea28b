/* CPU kernels: nn family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_nn[] = {
    {0},
};
const int tdm_cpu_kernels_nn_count = 0;
