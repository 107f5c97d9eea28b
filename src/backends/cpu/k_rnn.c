/* CPU kernels: rnn family. */
#include "backends/cpu/cpu_kernels.h"

const tdm_kernel_def tdm_cpu_kernels_rnn[] = {
    {0},
};
const int tdm_cpu_kernels_rnn_count = 0;
