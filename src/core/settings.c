#include "core/settings.h"

const tdm_settings tdm_settings_builtin = {
    .spin_us = TDM_SPIN_US_DEFAULT,
    .loop_max_iterations = TDM_LOOP_MAX_ITERATIONS_DEFAULT,
    .cuda_precision = "fp32",
};
