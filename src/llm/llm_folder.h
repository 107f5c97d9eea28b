/* A language model's folder (include/tandem/generator.h): what genai_config.json,
 * generation_config.json and config.json say that the generator needs. Internal to src/llm. */
#ifndef TDM_LLM_FOLDER_H
#define TDM_LLM_FOLDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tandem/tandem.h"

#define TDM_LLM_NAME 128
#define TDM_LLM_MAX_EOS 16

typedef struct tdm_llm_folder {
    char model_path[4096];    /* the ONNX file: genai's model.decoder.filename, else model.onnx */
    bool genai;               /* genai_config.json was read */
    int share_buffer;         /* genai search.past_present_share_buffer: 1, 0, -1 = not said */
    int max_length;           /* search.max_length, else max_position_embeddings; 0 = none */
    int32_t eos[TDM_LLM_MAX_EOS];
    int n_eos;
    /* graph names; the per-layer ones hold one %d */
    char input_ids[TDM_LLM_NAME], attention_mask[TDM_LLM_NAME], position_ids[TDM_LLM_NAME];
    char past_key[TDM_LLM_NAME], past_value[TDM_LLM_NAME];
    char present_key[TDM_LLM_NAME], present_value[TDM_LLM_NAME], logits[TDM_LLM_NAME];
} tdm_llm_folder;

/* Reads the folder's JSON files (each optional; a file that is there but malformed is an
 * error naming it) and finds its model file. */
tdm_status *tdm_llm_folder_read(const char *dir, tdm_llm_folder *out);

#endif
