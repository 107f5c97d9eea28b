/* Fuzz target: the model configuration reader of tandem serve: the protobuf text format
 * parser (sv_pb_parse, src/serve/pbtxt.c), the JSON form of a load request's "config"
 * (sv_pb_from_json) and the config reader (sv_config_from_tree, src/serve/config.c), through
 * sv_config_parse, the function the model repository calls. Input: a config.pbtxt text of a
 * model folder named "model"; text that starts with '{' is read as JSON too. An accepted
 * config is written back as Triton's JSON (GET .../config), which must be valid JSON, and
 * completed against two real models (tests/models:
 * mlp_dynamic_batch, resnet_blocks), as at load time. */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve/config.h"

static tdm_env *env;
static tdm_model *models[2];

static void init(void) {
    static const char *const paths[] = {TANDEM_SOURCE_DIR "/tests/models/mlp_dynamic_batch/model.onnx",
                                        TANDEM_SOURCE_DIR "/tests/models/resnet_blocks/model.onnx"};
    tdm_status *st = tdm_env_create(NULL, &env);
    for (int i = 0; !st && i < 2; i++) st = tdm_model_load(env, paths[i], &models[i]);
    if (st) {
        fprintf(stderr, "fuzz_config: %s\n", tdm_status_message(st));
        abort();
    }
}

static void check_error(sv_error *e) {
    if (!e->msg || !e->msg[0] || e->http < 400 || e->http > 599) {
        fprintf(stderr, "fuzz: malformed error (%d)\n", e->http);
        abort();
    }
    if (getenv("TDM_FUZZ_VERBOSE")) fprintf(stderr, "[%d] %s\n", e->http, e->msg);
    sv_error_free(e);
}

/* GET .../config of an accepted config: valid JSON. */
static void write_back(const sv_model_config *c) {
    sv_buf b = {0};
    sv_config_to_json(c, &b);
    if (b.oom) abort();
    json_error_t jerr;
    json_t *root = json_loadb(b.p, b.len, 0, &jerr);
    if (!root || !json_is_object(root)) {
        fprintf(stderr, "fuzz: the config's JSON does not parse: %s\n%.*s\n", jerr.text,
                (int)b.len, b.p);
        abort();
    }
    json_decref(root);
    sv_buf_free(&b);
}

static void one(const char *text, size_t len, bool json) {
    sv_model_config *c = NULL;
    sv_error *e = sv_config_parse(text, len, json, "model", &c);
    if (e) {
        check_error(e);
        return;
    }
    write_back(c);
    (void)sv_config_param(c, "tandem_gpu_backend");
    sv_config_free(c);
    for (int m = 0; m < 2; m++) {
        c = NULL;
        e = sv_config_parse(text, len, json, "model", &c);
        if (e) abort(); /* the same text was accepted a moment ago */
        e = sv_config_complete(c, models[m]);
        if (e) check_error(e);
        else write_back(c);
        sv_config_free(c);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!env) init();
    const char *text = (const char *)data;
    one(text, size, false);
    size_t ws = 0;
    while (ws < size && (text[ws] == ' ' || text[ws] == '\n' || text[ws] == '\t' || text[ws] == '\r')) ws++;
    if (ws < size && text[ws] == '{') one(text, size, true);
    return 0;
}
