/* CPU kernels: dnnl family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_dnnl[] = {
    {0},
};
const int tdm_cpu_kernels_dnnl_count = 0;
