/* The float32 element loops of the unary family, included by k_unary_f32.c once per SIMD
 * variant with UNARY_FN (the function's name) and UNARY_ATTR (its target attribute) defined;
 * the element functions (v_exp, ...) are k_unary_f32.c's. Private to that file. */

#define LOOP(expr)                                                                       \
    do {                                                                                 \
        for (int64_t i = 0; i < n; i++) {                                                \
            float v = x[i];                                                              \
            y[i] = (expr);                                                               \
        }                                                                                \
    } while (0)

UNARY_ATTR void UNARY_FN(const tdm_uparams *p, const float *restrict x, float *restrict y,
                         int64_t n) {
    const float alpha = p->alpha, beta = p->beta, gamma = p->gamma;
    switch (p->op) {
    case TDM_U_ABS: LOOP(fabsf(v)); break;
    case TDM_U_NEG: LOOP(-v); break;
    case TDM_U_RECIPROCAL: LOOP(1.0f / v); break;
    case TDM_U_SQRT: LOOP(sqrtf(v)); break;
    case TDM_U_EXP: LOOP(v_exp(v)); break;
    case TDM_U_LOG: LOOP(logf(v)); break;
    case TDM_U_ERF: LOOP(v_erf(v)); break;
    case TDM_U_SIN: LOOP(sinf(v)); break;
    case TDM_U_COS: LOOP(cosf(v)); break;
    case TDM_U_TAN: LOOP(tanf(v)); break;
    case TDM_U_ASIN: LOOP(asinf(v)); break;
    case TDM_U_ACOS: LOOP(acosf(v)); break;
    case TDM_U_ATAN: LOOP(atanf(v)); break;
    case TDM_U_SINH: LOOP(sinhf(v)); break;
    case TDM_U_COSH: LOOP(coshf(v)); break;
    case TDM_U_ASINH: LOOP(asinhf(v)); break;
    case TDM_U_ACOSH: LOOP(acoshf(v)); break;
    case TDM_U_ATANH: LOOP(atanhf(v)); break;
    case TDM_U_CEIL: LOOP(ceilf(v)); break;
    case TDM_U_FLOOR: LOOP(floorf(v)); break;
    case TDM_U_ROUND: LOOP(nearbyintf(v)); break; /* default mode: half to even */
    case TDM_U_SIGN: LOOP(v_sign(v)); break;
    case TDM_U_RELU: LOOP(v < 0.0f ? 0.0f : v); break;
    case TDM_U_LEAKY_RELU: LOOP(v < 0.0f ? v * alpha : v); break;
    case TDM_U_SIGMOID: LOOP(v_sigmoid(v)); break;
    case TDM_U_TANH: LOOP(v_tanh(v)); break;
    case TDM_U_HARD_SIGMOID: LOOP(clamp01(alpha * v + beta)); break;
    case TDM_U_HARD_SWISH: LOOP(v * clamp01(v * (1.0f / 6.0f) + 0.5f)); break;
    case TDM_U_ELU: LOOP(v < 0.0f ? alpha * expm1f(v) : v); break;
    case TDM_U_SELU: LOOP(v <= 0.0f ? gamma * alpha * expm1f(v) : gamma * v); break;
    case TDM_U_CELU: {
        float inv = 1.0f / alpha;
        LOOP(v < 0.0f ? alpha * expm1f(v * inv) : v);
        break;
    }
    case TDM_U_SOFTPLUS: LOOP(fmaxf(v, 0.0f) + log1pf(expf(-fabsf(v)))); break;
    case TDM_U_SOFTSIGN: LOOP(v / (1.0f + fabsf(v))); break;
    case TDM_U_THRESHOLDED_RELU: LOOP(v > alpha ? v : 0.0f); break;
    case TDM_U_SHRINK: {
        const float l = p->lambd, b = p->bias;
        LOOP(v < -l ? v + b : (v > l ? v - b : 0.0f));
        break;
    }
    case TDM_U_MISH: {
        /* tanh(log(1 + e^x)) = m / (m + 2) with m = e^x (e^x + 2). */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i];
            float e = v_exp(v > 20.0f ? 20.0f : v);
            float m = e * (e + 2.0f);
            float r = v * (m / (m + 2.0f));
            y[i] = v > 20.0f ? v : r;
        }
        break;
    }
    case TDM_U_GELU: LOOP(0.5f * v * v_one_plus_erf(v * 0.70710678118654752f)); break;
    case TDM_U_GELU_TANH: {
        /* 0.5 (1 + tanh(u)) = sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3). */
        const float k = 2.0f * 0.79788456080286536f;
        LOOP(v * v_sigmoid(k * (v + 0.044715f * v * v * v)));
        break;
    }
    case TDM_U_CLIP: {
        const float lo = p->lo, hi = p->hi;
        /* max then min: with lo > hi every value becomes hi, as ONNX specifies. */
        for (int64_t i = 0; i < n; i++) {
            float v = x[i] < lo ? lo : x[i];
            y[i] = v > hi ? hi : v;
        }
        break;
    }
    }
}

#undef LOOP
#undef UNARY_FN
#undef UNARY_ATTR
