/* tandem generate and tandem bench --llm (language models). Public API only. */
#ifndef TDM_CLI_CMD_GENERATE_H
#define TDM_CLI_CMD_GENERATE_H

#include <stddef.h>
#include <stdint.h>

int cmd_generate(int argc, char **argv);
/* tandem bench MODEL_DIR --llm ... (cmd_bench_llm.c) */
int cmd_bench_llm(int argc, char **argv);
/* tandem bench MODEL_DIR --llm --streams N ... (cmd_bench_llm_streams.c) */
int cmd_bench_llm_streams(const char *dir, long streams, long threads, long prompt_tokens,
                          long gen_tokens, long repetitions, unsigned long long seed, bool json,
                          const char *kv_type, bool profile);
/* "1,2,3" -> malloc'd ids (free()); 0, or -1 when malformed or empty. */
int cli_parse_ids(const char *s, int32_t **ids, size_t *n);

#endif
