/* Logging through the environment's hook. */
#ifndef TDM_CORE_LOG_H
#define TDM_CORE_LOG_H

#include "core/status.h"
#include "tandem/tandem.h"

typedef struct tdm_logger {
    tdm_log_fn fn;
    void *user;
    tdm_log_level level;
} tdm_logger;

void tdm_log(const tdm_logger *lg, tdm_log_level level, const char *fmt, ...) TDM_PRINTF(3, 4);

#endif
