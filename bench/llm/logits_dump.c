/* Real logit rows for the sampler's bench: generates N tokens from a prompt with a language
 * model folder (sampling at temperature T and top-p P, seed 1) and writes each step's logits
 * (the vocabulary's floats, the row the pick was made from) to OUT, one row after the other.
 * build/sampler_bench OUT then times the picks on those rows instead of drawn ones.
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/llm/logits_dump.c -Lbuild -ltandem \
 *      -Wl,-rpath,$PWD/build -o build/logits_dump
 *   build/logits_dump MODEL_DIR OUT [N=64] [T=1.0] [P=0.95] [PROMPT]
 * The prompt goes in as it is (no chat template), tokenized with the folder's tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/generator.h"
#include "tandem/tandem.h"
#include "tandem/tokenizer.h"

static int fail(tdm_status *st) {
    fprintf(stderr, "logits_dump: %s\n", tdm_status_message(st));
    tdm_status_free(st);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: logits_dump MODEL_DIR OUT [N=64] [T=1.0] [P=0.95] [PROMPT]\n");
        return 2;
    }
    const char *dir = argv[1], *out = argv[2];
    long n = argc > 3 ? atol(argv[3]) : 64;
    float temp = argc > 4 ? (float)atof(argv[4]) : 1.0f, top_p = argc > 5 ? (float)atof(argv[5]) : 0.95f;
    const char *prompt = argc > 6 ? argv[6]
                                  : "The history of the printing press begins in the fifteenth century, when";
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tdm_tokenizer *tok = NULL;
    tdm_status *st = tdm_tokenizer_load(path, &tok);
    if (st) return fail(st);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    if ((st = tdm_tokenizer_encode(tok, prompt, strlen(prompt), true, &ids, &n_ids))) return fail(st);
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    tdm_env *env = NULL;
    if ((st = tdm_env_create(&eo, &env))) return fail(st);
    tdm_generator_options go;
    memset(&go, 0, sizeof go);
    go.struct_size = sizeof go;
    go.max_length = (int)(n_ids + (size_t)n + 2);
    go.ignore_eos = true;
    tdm_generator *gen = NULL;
    if ((st = tdm_generator_create(env, dir, &go, &gen))) return fail(st);
    tdm_sampling sp = {temp, 0, top_p, 0, 1};
    tdm_generator_set_sampling(gen, &sp);
    if ((st = tdm_generator_append(gen, ids, n_ids))) return fail(st);
    FILE *f = fopen(out, "wb");
    if (!f) {
        perror(out);
        return 1;
    }
    for (long i = 0; i < n; i++) {
        const float *lg = NULL;
        size_t vocab = 0;
        int32_t t;
        if ((st = tdm_generator_logits(gen, &lg, &vocab))) return fail(st);
        if (fwrite(lg, sizeof *lg, vocab, f) != vocab) {
            perror(out);
            return 1;
        }
        if ((st = tdm_generator_next(gen, &t))) return fail(st);
    }
    fclose(f);
    fprintf(stderr, "logits_dump: %ld rows of %zu to %s\n", n, tdm_generator_vocab_size(gen), out);
    tdm_tokens_free(ids);
    tdm_generator_free(gen);
    tdm_env_free(env);
    tdm_tokenizer_free(tok);
    return 0;
}
