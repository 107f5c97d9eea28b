/* The one reader of the process environment (src/api/settings.c). */
#ifndef TDM_API_SETTINGS_H
#define TDM_API_SETTINGS_H

#include "core/settings.h"
#include "tandem/tandem.h"

/* Resolves the settings of a new environment: each field of `o` (may be NULL) that is set,
 * else its TANDEM_* environment variable, else the built-in default (the cache folder's
 * default comes from XDG_CACHE_HOME or HOME). Reads the environment here and nowhere else in
 * the library. A malformed field or variable: TDM_ERR_INVALID_ARGUMENT naming it, *out
 * untouched. Not safe against setenv in other threads (the C library's environment is not). */
tdm_status *tdm_settings_read(const tdm_env_options *o, tdm_settings *out);

#endif
