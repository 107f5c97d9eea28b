/* Fuzz target: the OpenAI request parser of tandem serve (oa_parse_request in
 * src/serve/openai_parse.c, what POST /v1/completions and /v1/chat/completions call after the
 * JSON is read). Input: one byte picking the endpoint (even: completions, odd: chat) and the
 * tokenizer (the byte / 2, modulo 2: with a ChatML template or without any), then the body.
 * The body goes through the server's own checks first (nesting depth, jansson with duplicate
 * keys refused); an accepted request must have sane fields (stop strings within the limits,
 * token ids that decode), a refused one a message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz_common.h"
#include "serve/openai_parse.h"
#include "serve/sv.h"

#define DEPTH 64 /* openai.c's OA_JSON_DEPTH */

static tdm_tokenizer *toks[2];

/* Two folders: the qwen2 test tokenizer with a tokenizer_config.json holding the ChatML
 * template (as a model folder has it), and the bare tokenizer.json (no template). */
static void init(void) {
    char dir[64], path[1100];
    snprintf(dir, sizeof dir, "/tmp/fuzz_openai_%d", (int)getpid());
    if (mkdir(dir, 0700) && access(dir, F_OK)) abort();
    size_t n = 0, tn = 0;
    char *tj = fz_read_file(TANDEM_SOURCE_DIR "/tests/tokenizers/qwen2.json", &n);
    char *tmpl = fz_read_file(TANDEM_SOURCE_DIR "/tests/chat_templates/chatml_qwen.jinja", &tn);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    fz_write_file(path, tj, n);
    json_t *cfg = json_pack("{s:s#, s:s, s:s}", "chat_template", tmpl, tn, "eos_token", "<|im_end|>",
                            "bos_token", "<|endoftext|>");
    char *cfg_text = cfg ? json_dumps(cfg, 0) : NULL;
    if (!cfg_text) abort();
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    fz_write_file(path, cfg_text, strlen(cfg_text));
    tdm_status *st = tdm_tokenizer_load(dir, &toks[0]);
    if (!st) st = tdm_tokenizer_load(TANDEM_SOURCE_DIR "/tests/tokenizers/qwen2.json", &toks[1]);
    if (st) {
        fprintf(stderr, "fuzz_openai: %s\n", tdm_status_message(st));
        abort();
    }
    if (!tdm_tokenizer_chat_template(toks[0]) || tdm_tokenizer_chat_template(toks[1])) abort();
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    unlink(path);
    rmdir(dir);
    free(cfg_text);
    json_decref(cfg);
    free(tj);
    free(tmpl);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!toks[0]) init();
    if (size < 1) return 0;
    bool chat = data[0] & 1;
    const tdm_tokenizer *tok = toks[(data[0] >> 1) & 1];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    if (sv_json_depth(body, len, DEPTH) > DEPTH) return 0;
    json_error_t jerr;
    json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) return 0;
    if (!json_is_object(root)) {
        json_decref(root);
        return 0;
    }
    oa_params o;
    oa_bad b = {"", NULL};
    int32_t *ids = NULL;
    size_t n = 0;
    bool ids_tok = false;
    if (oa_parse_request(root, chat, tok, "fuzz", &o, &ids, &n, &ids_tok, &b)) {
        if (o.n_stop < 0 || o.n_stop > OA_MAX_STOP || o.top_logprobs < 0 || o.top_logprobs > OA_MAX_TOP) abort();
        for (int i = 0; i < o.n_stop; i++)
            if (!o.stop[i] || !o.stop_len[i] || o.stop_len[i] > OA_MAX_STOP_LEN) abort();
        if (!(o.p.sampling.temperature >= 0 && o.p.sampling.temperature <= 2)) abort();
        if (n && !ids) abort();
        /* ids from text decode; ids given as numbers may be outside the vocabulary (the engine
           refuses those): decoding them must fail cleanly, not crash */
        char *text = NULL;
        size_t tl = 0;
        tdm_status *st = tdm_tokenizer_decode(tok, ids, n, false, &text, &tl);
        if (st) {
            if (ids_tok || !tdm_status_message(st)[0]) abort();
            tdm_status_free(st);
        }
        tdm_string_free(text);
        if (ids_tok) tdm_tokens_free(ids);
        else free(ids);
    } else if (!b.msg[0] || ids || n) {
        abort();
    }
    json_decref(root);
    return 0;
}
