/* tandem serve, OpenAI's API: parsing a request body (openai_parse.c). */
#ifndef TDM_SERVE_OPENAI_PARSE_H
#define TDM_SERVE_OPENAI_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "tandem/engine.h"
#include "tandem/tokenizer.h"

#define OA_MAX_STOP 16
#define OA_MAX_STOP_LEN 256
#define OA_MAX_TOP 20
#define OA_MAX_BIAS 1024 /* logit_bias entries */

/* The fields of a request (stop strings point into the JSON tree). */
typedef struct oa_params {
    tdm_llm_request_params p;
    bool stream, include_usage, logprobs;
    int top_logprobs;
    int64_t max_tokens; /* -1: not given */
    int n_stop;
    const char *stop[OA_MAX_STOP];
    size_t stop_len[OA_MAX_STOP];
    int32_t bias_ids[OA_MAX_BIAS]; /* logit_bias (p.bias_ids / bias_values point here; the ids
                                      are not checked against the vocabulary) */
    float bias_values[OA_MAX_BIAS];
} oa_params;

/* Why a request is refused: the message and the field (OpenAI's `param`, may be NULL). */
typedef struct oa_bad {
    char msg[512];
    const char *param;
} oa_bad;

/* Parses `root` (a JSON object) of /v1/chat/completions (`chat`) or /v1/completions and
 * tokenizes its prompt with `tok` (the chat messages through its template; `name` is the
 * model's, for messages). On success *ids holds *n_ids ids (possibly 0), freed with
 * tdm_tokens_free when *ids_tok, else with free(). On failure *b says why and nothing is
 * allocated. */
bool oa_parse_request(json_t *root, bool chat, const tdm_tokenizer *tok, const char *name, oa_params *o,
                      int32_t **ids, size_t *n_ids, bool *ids_tok, oa_bad *b);

#endif
