/*
 * tandem tokenizers and chat templates: text <-> token ids for language models.
 *
 * Loaded from a Hugging Face `tokenizer.json` (byte-level BPE as in GPT-2 / Llama 3 /
 * SmolLM, and SentencePiece-style BPE with byte fallback as in Llama 2 / Mistral), with the
 * special tokens and chat template of the `tokenizer_config.json` beside it. Conventions are
 * tandem.h's: statuses, NULL-safe frees, out-parameters untouched on failure. A loaded
 * tokenizer is immutable: any number of threads may encode and decode with it at once.
 */
#ifndef TANDEM_TOKENIZER_H
#define TANDEM_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct tdm_tokenizer tdm_tokenizer;

/* `path` is a tokenizer.json file or a folder holding one (and optionally
 * tokenizer_config.json, which adds the chat template, bos/eos names and add_bos_token).
 * A file that is not a tokenizer this library implements fails with TDM_ERR_UNSUPPORTED
 * and a message naming the part (model type, pre-tokenizer, normalizer...). */
TDM_API tdm_status *tdm_tokenizer_load(const char *path, tdm_tokenizer **out);
TDM_API void tdm_tokenizer_free(tdm_tokenizer *tok);

/* Text (UTF-8, `len` bytes; invalid UTF-8 is an error) to ids. `add_special` adds what the
 * tokenizer's post-processor adds (e.g. a BOS token), as HF's add_special_tokens=True does.
 * Special tokens written in the text (e.g. "<|im_start|>") are matched as themselves.
 * *ids is freed with tdm_tokens_free. */
TDM_API tdm_status *tdm_tokenizer_encode(const tdm_tokenizer *tok, const char *text, size_t len,
                                         bool add_special, int32_t **ids, size_t *n_ids);
/* Ids to text; `skip_special` drops special tokens as HF's skip_special_tokens=True does.
 * *text is NUL-terminated, *len its length (may be NULL); freed with tdm_string_free. An id
 * outside the vocabulary is TDM_ERR_INVALID_ARGUMENT. */
TDM_API tdm_status *tdm_tokenizer_decode(const tdm_tokenizer *tok, const int32_t *ids,
                                         size_t n_ids, bool skip_special, char **text,
                                         size_t *len);
TDM_API void tdm_tokens_free(int32_t *ids);

TDM_API size_t tdm_tokenizer_vocab_size(const tdm_tokenizer *tok);
/* Id of a token string (e.g. "<|im_end|>"), or -1. */
TDM_API int32_t tdm_tokenizer_token_id(const tdm_tokenizer *tok, const char *token);
/* The token string of an id (as in the vocabulary), or NULL. */
TDM_API const char *tdm_tokenizer_token(const tdm_tokenizer *tok, int32_t id);
TDM_API bool tdm_tokenizer_is_special(const tdm_tokenizer *tok, int32_t id);
/* Named special tokens from tokenizer_config.json / the post-processor: "bos", "eos",
 * "unk", "pad". Id -1 / NULL when the tokenizer has none. */
TDM_API int32_t tdm_tokenizer_special_id(const tdm_tokenizer *tok, const char *which);
TDM_API const char *tdm_tokenizer_special_text(const tdm_tokenizer *tok, const char *which);
/* The Jinja chat template from tokenizer_config.json, or NULL. */
TDM_API const char *tdm_tokenizer_chat_template(const tdm_tokenizer *tok);

/* Incremental decoding for streaming: push ids one at a time; each push gives the text
 * that became final with it (possibly "", when the id ends inside a UTF-8 character or a
 * SentencePiece word start is still undecided). The concatenation of all pieces equals
 * tdm_tokenizer_decode of all pushed ids, except where byte-fallback tokens (<0xAB>) make
 * invalid UTF-8 that the decode replaces after the fact (a valid character then a stray
 * byte: the decode has U+FFFD for both, the stream already gave out the character). *piece
 * is owned by the stream and valid until the next call; it is NUL-terminated, and *len (when
 * `len` is not NULL) is its length in bytes, which counts the NUL bytes a piece can hold (the
 * byte-level token of byte 0): use it, not strlen, where the text may hold them. */
typedef struct tdm_token_stream tdm_token_stream;
TDM_API tdm_status *tdm_token_stream_create(const tdm_tokenizer *tok, bool skip_special,
                                            tdm_token_stream **out);
TDM_API tdm_status *tdm_token_stream_push(tdm_token_stream *stream, int32_t id,
                                          const char **piece, size_t *len);
TDM_API void tdm_token_stream_free(tdm_token_stream *stream);

/* ---- chat templates ----------------------------------------------------------------- */

typedef struct tdm_chat_message {
    const char *role;    /* "system", "user", "assistant", ... */
    const char *content; /* UTF-8 */
} tdm_chat_message;

/* Renders a Hugging Face chat template (the Jinja subset such templates use: for/if/elif/
 * else/set, loop.first/last/index, comparisons, `in`, and/or/not, string concatenation
 * with + and ~, subscripts, filters trim/length/upper/lower/default, raise_exception) with
 * `messages`, `add_generation_prompt`, `bos_token` and `eos_token` (NULL = ""). A template
 * outside the subset fails with TDM_ERR_UNSUPPORTED naming the construct; an error the
 * template raises fails with TDM_ERR_INVALID_ARGUMENT and its message. *out is freed with
 * tdm_string_free. */
TDM_API tdm_status *tdm_chat_render(const char *template_text, const tdm_chat_message *messages,
                                    size_t n_messages, bool add_generation_prompt,
                                    const char *bos_token, const char *eos_token, char **out);

#ifdef __cplusplus
}
#endif
#endif /* TANDEM_TOKENIZER_H */
