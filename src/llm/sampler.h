/* Choosing the next token from logits (tdm_sampling, include/tandem/generator.h): repetition
 * penalty, then greedy or temperature, top-k, top-p and a draw from the generator's own
 * random numbers (xoshiro256** seeded by splitmix64: deterministic for a seed). Internal. */
#ifndef TDM_LLM_SAMPLER_H
#define TDM_LLM_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "tandem/generator.h"

/* An exp row (tdm_sampler_exp_row and its variants, below). */
typedef double (*tdm_exp_row_fn)(const float *x, size_t n, float mx, float inv, float *out);
/* A max row (tdm_sampler_max_row and its variants, below). */
typedef float (*tdm_max_row_fn)(const float *x, size_t n, size_t *at);
/* A near row (tdm_sampler_near_row and its variants, below). */
typedef size_t (*tdm_near_row_fn)(const float *x, size_t n, float mx, float k, float lim,
                                  int32_t *ids);

typedef struct tdm_sampler {
    tdm_sampling cfg;
    uint64_t rng[4];
    size_t vocab;
    float *work;          /* vocab: the logits after the penalty */
    uint8_t *seen;        /* vocab: marks for the penalty */
    int32_t *cand;        /* vocab: candidate ids */
    float *prob;          /* vocab: their probabilities */
    void *sorted;         /* 2 vocab (key, id) pairs for top-p's nucleus and its sort, then
                             vocab + 16 ids (near), from the first pick that needs them */
    int32_t *near;        /* in sorted: the ids a nucleus may hold (tdm_sampler_near_row) */
    float presence, frequency; /* OpenAI's penalties (tdm_sampler_set_penalties) */
    int32_t *count;       /* vocab, while penalties are set: counts, zero between picks */
    const int32_t *bias_ids; /* logit bias (tdm_sampler_set_bias; not owned) */
    const float *bias_values;
    size_t n_bias;
    tdm_exp_row_fn exp_row; /* portable unless tdm_sampler_set_exp_row chose another */
    tdm_max_row_fn max_row; /* portable unless tdm_sampler_set_max_row chose another */
    tdm_near_row_fn near_row; /* portable unless tdm_sampler_set_near_row chose another */
    float last_max;         /* tdm_sampler_last_max */
    const tdm_allocator *a;
} tdm_sampler;

tdm_status *tdm_sampler_init(tdm_sampler *s, const tdm_allocator *a, size_t vocab,
                             const tdm_sampling *cfg);
void tdm_sampler_free(tdm_sampler *s);
/* Restarts the random numbers from the seed. */
void tdm_sampler_reseed(tdm_sampler *s);
/* OpenAI's presence and frequency penalties (tdm_llm_request_params), finite; 0, 0 = none. */
tdm_status *tdm_sampler_set_penalties(tdm_sampler *s, float presence, float frequency);
/* The exp row variant (tdm_sampler_exp_row_for; NULL: the portable one). */
void tdm_sampler_set_exp_row(tdm_sampler *s, tdm_exp_row_fn fn);
/* The max row variant (tdm_sampler_max_row_for; NULL: the portable one). */
void tdm_sampler_set_max_row(tdm_sampler *s, tdm_max_row_fn fn);
/* The near row variant (tdm_sampler_near_row_for; NULL: the portable one). */
void tdm_sampler_set_near_row(tdm_sampler *s, tdm_near_row_fn fn);
/* A logit bias: bias_values[i] added to the logit of bias_ids[i] (inside the vocabulary, checked
 * by the caller) before each choice, i < n; the arrays must live as long as the sampler. */
void tdm_sampler_set_bias(tdm_sampler *s, const int32_t *bias_ids, const float *bias_values,
                          size_t n);
/* The next token for `logits` (vocab floats) after the sequence `seq` (all of it: the
 * repetition penalty's) of which gen[0..n_gen) are the tokens generated so far (the presence
 * and frequency penalties'). */
int32_t tdm_sampler_pick(tdm_sampler *s, const float *logits, const int32_t *seq, size_t n_seq,
                         const int32_t *gen, size_t n_gen);
/* The largest of the logits the last tdm_sampler_pick was given (tdm_sampler_max's value), when
 * that pick found it on them as they were (a greedy pick, or a draw or nucleus (top-p) over the
 * whole vocabulary, with no logit bias or penalty changing them): the log-probabilities' offset
 * without another pass over the vocabulary. NaN otherwise (then take tdm_sampler_max). */
float tdm_sampler_last_max(const tdm_sampler *s);
/* out[i] = e^((x[i] - mx) * inv) for i < n (out NULL: none kept; out == x allowed), the sum of
 * them in double: mx at least every x[i] (the row's largest), inv > 0. A polynomial exp within
 * 2 ulp of expf, e^-87 at most below (NaN too); the sampler's probabilities and the engine's
 * log-probabilities both come from it (sampler_exp.c). tdm_sampler_exp_row is the portable
 * variant (four-wide plain C vectors); tdm_sampler_exp_row_for gives the best variant at or below
 * an instruction-set level named as tdm_env_device_isa names them ("avx2", "avx512_core", ...;
 * NULL or another: portable) that this CPU runs. Every variant gives the same bits. */
double tdm_sampler_exp_row(const float *x, size_t n, float mx, float inv, float *out);
tdm_exp_row_fn tdm_sampler_exp_row_for(const char *isa);
/* The largest of x[0..n) that is not NaN; -inf when there is none (n = 0, all NaN). */
float tdm_sampler_max(const float *x, size_t n);
/* The same, and when at != NULL the first index holding it in *at (0 when every value is NaN):
 * tdm_sampler_max_row is the portable variant; tdm_sampler_max_row_for gives the best at or
 * below a level named as for tdm_sampler_exp_row_for. Every variant gives the same value and
 * index (sampler_exp.c). */
float tdm_sampler_max_row(const float *x, size_t n, size_t *at);
tdm_max_row_fn tdm_sampler_max_row_for(const char *isa);

/* The ids i < n, ascending, whose z = (mx - x[i]) * k (float: a subtraction, then a product)
 * is below lim, into ids (n + 16 entries: the AVX-512 variant stores sixteen at a time); returns
 * how many. NaN and -inf never are. Top-p's buckets (sampler.c) are z's whole part: the tokens
 * of the buckets below lim. tdm_sampler_near_row is the portable variant, tdm_sampler_near_row_for
 * the best at or below a level named as for tdm_sampler_exp_row_for; every variant gives the
 * same ids. */
size_t tdm_sampler_near_row(const float *x, size_t n, float mx, float k, float lim, int32_t *ids);
tdm_near_row_fn tdm_sampler_near_row_for(const char *isa);

/* The k largest of x[0..n) (k >= 0), largest first, their ids into ids[0..k) and values into
 * vals[0..k); returns how many (k, or n when n < k). Among equal values the lower id comes
 * first; a NaN met once k are held takes the k-th place (as inserting one value at a time
 * gives). The engine's top log-probabilities. */
int tdm_sampler_top_values(const float *x, size_t n, int k, int32_t *ids, float *vals);

#endif
