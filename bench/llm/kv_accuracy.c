/* The KV cache types against each other on a text (teacher forcing): the text's tokens are fed
 * one at a time (each a decode step, attending to the whole cache so far) to two generators of
 * the same folder, one with the model's cache (kv_type auto) and one with KV_TYPE; after each
 * token both give the logits of the next. Prints, for both: perplexity of the text (exp of
 * the mean negative log-likelihood of each next token), and between them: the mean and the
 * minimum cosine of the logits, the share of positions whose arg max agrees, and the largest
 * absolute logit difference; also per 256-position window (the cache's error grows with its
 * length, if at all).
 *
 *   cc -O2 -std=c11 -D_GNU_SOURCE -Iinclude bench/llm/kv_accuracy.c build/libtandem.a \
 *      -ldnnl -lprotobuf-c -fopenmp -lpthread -ldl -lm -o build/kv_accuracy
 *   build/kv_accuracy MODEL_DIR TEXT_FILE [TOKENS=1024] [KV_TYPE=int8] [THREADS=1]
 * KV_TYPE may also be another folder of the same model (e.g. converted with --kv-dtype float16),
 * run with its own cache. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tandem/generator.h"
#include "tandem/tandem.h"
#include "tandem/tokenizer.h"

static int fail(tdm_status *st) {
    fprintf(stderr, "kv_accuracy: %s\n", tdm_status_message(st));
    tdm_status_free(st);
    return 1;
}

/* log softmax(l)[id] */
static double log_prob(const float *l, size_t n, int32_t id) {
    double mx = -INFINITY, s = 0;
    for (size_t i = 0; i < n; i++) mx = l[i] > mx ? l[i] : mx;
    for (size_t i = 0; i < n; i++) s += exp((double)l[i] - mx);
    return (double)l[id] - mx - log(s);
}

static size_t arg_max(const float *l, size_t n) {
    size_t b = 0;
    for (size_t i = 1; i < n; i++) b = l[i] > l[b] ? i : b;
    return b;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: kv_accuracy MODEL_DIR TEXT_FILE [TOKENS=1024] [KV_TYPE=int8] [THREADS=1]\n");
        return 2;
    }
    const char *dir = argv[1], *kv = argc > 4 ? argv[4] : "int8";
    size_t want = argc > 3 ? (size_t)atol(argv[3]) : 1024;
    int threads = argc > 5 ? atoi(argv[5]) : 1;
    FILE *fp = fopen(argv[2], "rb");
    if (!fp) {
        perror(argv[2]);
        return 1;
    }
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = 0;
    tdm_tokenizer *tok = NULL;
    tdm_status *st = tdm_tokenizer_load(dir, &tok);
    if (st) return fail(st);
    int32_t *ids = NULL;
    size_t n = 0;
    if ((st = tdm_tokenizer_encode(tok, text, len, true, &ids, &n))) return fail(st);
    if (n > want + 1) n = want + 1;
    tdm_env_options eo = {0};
    eo.api_version = TDM_API_VERSION;
    eo.threads = threads;
    tdm_env *env = NULL;
    if ((st = tdm_env_create(&eo, &env))) return fail(st);
    tdm_generator *g[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++) {
        tdm_generator_options o = {sizeof o};
        o.threads = threads;
        o.max_length = (int)n + 1;
        bool other_dir = i && strchr(kv, '/'); /* KV_TYPE a folder: that one, its own cache */
        o.kv_type = i && !other_dir ? kv : NULL;
        if ((st = tdm_generator_create(env, other_dir ? kv : dir, &o, &g[i]))) return fail(st);
    }
    double nll[2] = {0, 0}, cos_sum = 0, cos_min = 1, maxdiff = 0;
    size_t agree = 0, steps = 0;
    double w_cos = 0, w_nll[2] = {0, 0};
    size_t w_agree = 0, w_n = 0;
    printf("window      ppl(auto)  ppl(%s)  mean cos   argmax agree\n", kv);
    for (size_t t = 0; t + 1 < n; t++) {
        const float *l[2];
        size_t vocab = 0;
        for (int i = 0; i < 2; i++) {
            if ((st = tdm_generator_append(g[i], &ids[t], 1))) return fail(st);
            if ((st = tdm_generator_logits(g[i], &l[i], &vocab))) return fail(st);
        }
        double dot = 0, a2 = 0, b2 = 0;
        for (size_t i = 0; i < vocab; i++) {
            dot += (double)l[0][i] * l[1][i];
            a2 += (double)l[0][i] * l[0][i];
            b2 += (double)l[1][i] * l[1][i];
            double d = fabs((double)l[0][i] - l[1][i]);
            maxdiff = d > maxdiff ? d : maxdiff;
        }
        double c = dot / sqrt(a2 * b2);
        cos_sum += c, w_cos += c;
        cos_min = c < cos_min ? c : cos_min;
        bool same = arg_max(l[0], vocab) == arg_max(l[1], vocab);
        agree += same, w_agree += same;
        for (int i = 0; i < 2; i++) {
            double lp = -log_prob(l[i], vocab, ids[t + 1]);
            nll[i] += lp, w_nll[i] += lp;
        }
        steps++, w_n++;
        if (w_n == 256 || t + 2 == n) {
            printf("%5zu-%-5zu %9.3f %9.3f %10.6f %9.3f\n", t + 1 - w_n, t, exp(w_nll[0] / w_n),
                   exp(w_nll[1] / w_n), w_cos / w_n, (double)w_agree / w_n);
            w_cos = 0, w_nll[0] = w_nll[1] = 0, w_agree = 0, w_n = 0;
        }
    }
    printf("tokens %zu: perplexity auto %.4f, %s %.4f (%+.3f%%); logits cosine mean %.6f min %.6f; "
           "arg max agrees %.2f%%; max |logit diff| %.3f\n",
           steps, exp(nll[0] / steps), kv, exp(nll[1] / steps),
           100.0 * (exp(nll[1] / steps) / exp(nll[0] / steps) - 1.0), cos_sum / steps, cos_min,
           100.0 * agree / steps, maxdiff);
    for (int i = 0; i < 2; i++) tdm_generator_free(g[i]);
    tdm_tokens_free(ids);
    tdm_tokenizer_free(tok);
    tdm_env_free(env);
    return 0;
}
