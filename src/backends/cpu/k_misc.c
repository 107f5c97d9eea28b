/* CPU kernels: misc family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_misc[] = {
    {0},
};
const int tdm_cpu_kernels_misc_count = 0;
