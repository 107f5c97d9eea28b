/* CPU kernels: text family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_text[] = {
    {0},
};
const int tdm_cpu_kernels_text_count = 0;
