/* The JSON files of a language model's folder (llm_folder.h), read with jansson. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/status.h"
#include "llm/llm_folder.h"

static bool file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
}

/* Loads dir/name into *root (NULL when the file is absent). */
static tdm_status *load_json(const char *dir, const char *name, json_t **root) {
    char path[4096];
    *root = NULL;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the folder path '%s' is too long", dir);
    if (!file_exists(path)) return NULL;
    json_error_t err;
    *root = json_load_file(path, 0, &err);
    if (!*root)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "'%s': line %d: %s", path, err.line, err.text);
    if (!json_is_object(*root)) {
        json_decref(*root);
        *root = NULL;
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "'%s' is not a JSON object", path);
    }
    return NULL;
}

/* Member `path` ("a.b.c") of an object, or NULL. */
static json_t *member(json_t *o, const char *path) {
    char key[64];
    while (o && *path) {
        size_t n = strcspn(path, ".");
        if (n >= sizeof key) return NULL;
        memcpy(key, path, n);
        key[n] = 0;
        o = json_is_object(o) ? json_object_get(o, key) : NULL;
        path += n + (path[n] == '.');
    }
    return o;
}

/* genai_config.json's string at `path` into dst (cap bytes) when present: a string of up to
 * cap - 1 bytes (at least 1 unless empty_ok) without a NUL, else an error (a name cut short or
 * skipped would load some other file or look for some other input) */
static tdm_status *copy_name(json_t *o, const char *path, char *dst, size_t cap, bool empty_ok) {
    json_t *v = member(o, path);
    if (!v) return NULL;
    size_t n = json_is_string(v) ? json_string_length(v) : 0;
    if (!json_is_string(v) || (n == 0 && !empty_ok) || n >= cap || strlen(json_string_value(v)) != n)
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "genai_config.json: %s must be a string of %d to %zu "
                       "bytes", path, empty_ok ? 0 : 1, cap - 1);
    memcpy(dst, json_string_value(v), n + 1);
    return NULL;
}

/* eos_token_id: an integer or a list of them. false when absent. */
static bool read_eos(json_t *v, tdm_llm_folder *f) {
    if (json_is_integer(v)) {
        f->eos[0] = (int32_t)json_integer_value(v);
        f->n_eos = 1;
        return true;
    }
    if (!json_is_array(v) || json_array_size(v) == 0) return false;
    f->n_eos = 0;
    for (size_t i = 0; i < json_array_size(v) && f->n_eos < TDM_LLM_MAX_EOS; i++)
        if (json_is_integer(json_array_get(v, i)))
            f->eos[f->n_eos++] = (int32_t)json_integer_value(json_array_get(v, i));
    return f->n_eos > 0;
}

tdm_status *tdm_llm_folder_read(const char *dir, tdm_llm_folder *out) {
    tdm_llm_folder f;
    memset(&f, 0, sizeof f);
    f.share_buffer = -1;
    snprintf(f.input_ids, sizeof f.input_ids, "input_ids");
    snprintf(f.attention_mask, sizeof f.attention_mask, "attention_mask");
    snprintf(f.position_ids, sizeof f.position_ids, "position_ids");
    snprintf(f.past_key, sizeof f.past_key, "past_key_values.%%d.key");
    snprintf(f.past_value, sizeof f.past_value, "past_key_values.%%d.value");
    snprintf(f.present_key, sizeof f.present_key, "present.%%d.key");
    snprintf(f.present_value, sizeof f.present_value, "present.%%d.value");
    snprintf(f.logits, sizeof f.logits, "logits");
    char model_file[1024] = "model.onnx";

    json_t *genai = NULL, *gen = NULL, *cfg = NULL;
    tdm_status *st = load_json(dir, "genai_config.json", &genai);
    if (!st) st = load_json(dir, "generation_config.json", &gen);
    if (!st) st = load_json(dir, "config.json", &cfg);
    if (!st && genai) {
        f.genai = true;
        st = copy_name(genai, "model.decoder.filename", model_file, sizeof model_file, false);
        static const char *const paths[8] = {
            "model.decoder.inputs.input_ids", "model.decoder.inputs.attention_mask",
            "model.decoder.inputs.position_ids", "model.decoder.inputs.past_key_names",
            "model.decoder.inputs.past_value_names", "model.decoder.outputs.present_key_names",
            "model.decoder.outputs.present_value_names", "model.decoder.outputs.logits"};
        char *dst[8] = {f.input_ids, f.attention_mask, f.position_ids, f.past_key,
                        f.past_value, f.present_key, f.present_value, f.logits};
        for (int i = 0; i < 8 && !st; i++) st = copy_name(genai, paths[i], dst[i], TDM_LLM_NAME, true);
        json_t *sb = member(genai, "search.past_present_share_buffer");
        if (json_is_boolean(sb)) f.share_buffer = json_is_true(sb);
        json_t *ml = member(genai, "search.max_length");
        if (json_is_integer(ml) && json_integer_value(ml) > 0 && json_integer_value(ml) < (1 << 24))
            f.max_length = (int)json_integer_value(ml);
        read_eos(member(genai, "model.eos_token_id"), &f);
    }
    if (!st && f.n_eos == 0 && gen) read_eos(member(gen, "eos_token_id"), &f);
    if (!st && f.n_eos == 0 && cfg) read_eos(member(cfg, "eos_token_id"), &f);
    if (!st && f.max_length == 0 && cfg) {
        json_t *ml = member(cfg, "max_position_embeddings");
        if (json_is_integer(ml) && json_integer_value(ml) > 0 && json_integer_value(ml) < (1 << 24))
            f.max_length = (int)json_integer_value(ml);
    }
    json_decref(genai);
    json_decref(gen);
    json_decref(cfg);
    if (st) return st;
    /* the per-layer names hold exactly one %d */
    const char *pats[4] = {f.past_key, f.past_value, f.present_key, f.present_value};
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(pats[i], "%d");
        if (!p || strchr(p + 2, '%') || strchr(pats[i], '%') != p)
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "genai_config.json: the name pattern '%s' must "
                           "hold one %%d", pats[i]);
    }
    if (strchr(model_file, '/') || strstr(model_file, ".."))
        return TDM_ERR(TDM_ERR_INVALID_MODEL, "genai_config.json: the model file '%s' must be a "
                       "name in the folder", model_file);
    if ((size_t)snprintf(f.model_path, sizeof f.model_path, "%s/%s", dir, model_file) >=
        sizeof f.model_path)
        return TDM_ERR(TDM_ERR_INVALID_ARGUMENT, "the folder path '%s' is too long", dir);
    if (!file_exists(f.model_path))
        return TDM_ERR(TDM_ERR_NOT_FOUND, "'%s': no such model file (a model folder holds "
                       "model.onnx, or genai_config.json naming its model)", f.model_path);
    *out = f;
    return NULL;
}
