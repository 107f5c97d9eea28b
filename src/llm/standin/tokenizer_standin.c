/* Stand-in for the tokenizer (include/tandem/tokenizer.h) while its implementation
 * (src/llm/tokenizer*.c, another branch) is absent: CMake compiles this file only then. Every
 * load fails with TDM_ERR_UNSUPPORTED; the rest is never reached without a tokenizer. */
#include <stdlib.h>

#include "core/status.h"
#include "tandem/tokenizer.h"

tdm_status *tdm_tokenizer_load(const char *path, tdm_tokenizer **out) {
    (void)out;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "'%s': this build of tandem has no tokenizer", path ? path : "");
}

void tdm_tokenizer_free(tdm_tokenizer *tok) { (void)tok; }

tdm_status *tdm_tokenizer_encode(const tdm_tokenizer *tok, const char *text, size_t len,
                                 bool add_special, int32_t **ids, size_t *n_ids) {
    (void)tok, (void)text, (void)len, (void)add_special, (void)ids, (void)n_ids;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "this build of tandem has no tokenizer");
}

tdm_status *tdm_tokenizer_decode(const tdm_tokenizer *tok, const int32_t *ids, size_t n_ids,
                                 bool skip_special, char **text, size_t *len) {
    (void)tok, (void)ids, (void)n_ids, (void)skip_special, (void)text, (void)len;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "this build of tandem has no tokenizer");
}

void tdm_tokens_free(int32_t *ids) { free(ids); }
size_t tdm_tokenizer_vocab_size(const tdm_tokenizer *tok) { (void)tok; return 0; }
int32_t tdm_tokenizer_token_id(const tdm_tokenizer *tok, const char *token) { (void)tok, (void)token; return -1; }
const char *tdm_tokenizer_token(const tdm_tokenizer *tok, int32_t id) { (void)tok, (void)id; return NULL; }
bool tdm_tokenizer_is_special(const tdm_tokenizer *tok, int32_t id) { (void)tok, (void)id; return false; }
int32_t tdm_tokenizer_special_id(const tdm_tokenizer *tok, const char *which) { (void)tok, (void)which; return -1; }
const char *tdm_tokenizer_special_text(const tdm_tokenizer *tok, const char *which) { (void)tok, (void)which; return NULL; }
const char *tdm_tokenizer_chat_template(const tdm_tokenizer *tok) { (void)tok; return NULL; }

tdm_status *tdm_token_stream_create(const tdm_tokenizer *tok, bool skip_special,
                                    tdm_token_stream **out) {
    (void)tok, (void)skip_special, (void)out;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "this build of tandem has no tokenizer");
}

tdm_status *tdm_token_stream_push(tdm_token_stream *stream, int32_t id, const char **piece,
                                  size_t *len) {
    (void)stream, (void)id, (void)piece, (void)len;
    return TDM_ERR(TDM_ERR_UNSUPPORTED, "this build of tandem has no tokenizer");
}

void tdm_token_stream_free(tdm_token_stream *stream) { (void)stream; }
