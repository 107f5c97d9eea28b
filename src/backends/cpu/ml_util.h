/* Score transforms of the ai.onnx.ml models (post_transform), computed as ONNX Runtime
 * computes them so that converted models give its numbers. */
#ifndef TDM_CPU_ML_UTIL_H
#define TDM_CPU_ML_UTIL_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

enum { PT_NONE, PT_LOGISTIC, PT_SOFTMAX, PT_SOFTMAX_ZERO, PT_PROBIT };

static inline int ml_parse_post(const char *s) {
    return !strcmp(s, "LOGISTIC") ? PT_LOGISTIC
           : !strcmp(s, "SOFTMAX") ? PT_SOFTMAX
           : !strcmp(s, "SOFTMAX_ZERO") ? PT_SOFTMAX_ZERO
           : !strcmp(s, "PROBIT") ? PT_PROBIT
                                  : PT_NONE;
}

static inline double ml_logistic(double v) {
    double e = 1.0 / (1.0 + exp(-fabs(v)));
    return v < 0 ? 1.0 - e : e;
}

/* ONNX Runtime's probit: sqrt(2) * erfinv(2v - 1) with Winitzki's erfinv approximation
 * (a = 0.147), so that PROBIT models give its numbers. */
static inline double ml_probit(double v) {
    double x = 2 * v - 1, sgn = x < 0 ? -1.0 : 1.0;
    double l = log((1 - x) * (1 + x));
    double t = 2 / (3.14159 * 0.147) + 0.5 * l;
    return 1.41421356 * sgn * sqrt(-t + sqrt(t * t - l / 0.147));
}

static inline void ml_post_transform(int post, double *s, int64_t n) {
    if (post == PT_LOGISTIC) {
        for (int64_t i = 0; i < n; i++) s[i] = ml_logistic(s[i]);
    } else if (post == PT_PROBIT) {
        for (int64_t i = 0; i < n; i++) s[i] = ml_probit(s[i]);
    } else if (post == PT_SOFTMAX || post == PT_SOFTMAX_ZERO) {
        double mx = -INFINITY, sum = 0;
        for (int64_t i = 0; i < n; i++) mx = s[i] > mx ? s[i] : mx;
        for (int64_t i = 0; i < n; i++) {
            bool zero = post == PT_SOFTMAX_ZERO && fabs(s[i]) <= 1e-7;
            s[i] = zero ? s[i] * exp(-mx) : exp(s[i] - mx); /* SOFTMAX_ZERO keeps zeros out */
            if (!zero) sum += s[i];
        }
        for (int64_t i = 0; i < n; i++) s[i] /= sum;
    }
}

#endif
