/* CPU kernels: control family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_control[] = {
    {0},
};
const int tdm_cpu_kernels_control_count = 0;
