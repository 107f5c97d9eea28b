/* What src/llm takes from the rest of the library besides the public API. Internal. */
#ifndef TDM_LLM_INTERNAL_H
#define TDM_LLM_INTERNAL_H

#include "tandem/tandem.h"

/* The environment's allocator hook, NULL = libc (src/api/env.c). */
const tdm_allocator *tdm_env_allocator(const tdm_env *env);

#endif
