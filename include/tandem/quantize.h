/*
 * tandem — post-training INT8 quantization: calibration and QDQ model writing.
 *
 * A quantizer reads a float ONNX model, finds the nodes it can quantize (Conv, ConvTranspose,
 * MatMul, Gemm; Add, Mul, Concat, MaxPool, AveragePool, GlobalAveragePool), runs the float
 * model on calibration samples to collect the range (and, for the histogram methods, the
 * histogram) of every float activation those nodes read or write, and writes a standard
 * ONNX QDQ model that ONNX Runtime and tandem run:
 *
 *  - static mode: QuantizeLinear -> DequantizeLinear pairs on the quantized activations
 *    (uint8 asymmetric by default, or int8), weights stored as int8 initializers (symmetric,
 *    per output channel by default) read through a DequantizeLinear, Conv / Gemm biases as
 *    int32 (scale = input scale x weight scale, zero point 0). A node output read only by a
 *    Relu or Clip is quantized after it (the activation stays in the graph).
 *  - dynamic mode: weights as above; the activations that MatMul / Gemm read are quantized
 *    per run (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul by the scales); no
 *    calibration is needed. Conv stays float in this mode.
 *
 * Ranges per method (activations; weights always use their own min / max):
 *  - minmax: the smallest and largest value seen over all samples;
 *  - percentile: the values at the (100-p)/2 and 100-(100-p)/2 percentiles of a histogram
 *    of the values (p = 99.999 by default);
 *  - entropy: the threshold T whose clipped, quantized distribution is closest to the
 *    reference one in KL divergence (TensorRT's calibration: a histogram of |x|, candidate
 *    thresholds from 128 bins up, reference = clipped histogram with the outliers folded
 *    into its last bin, each quantized group spread over the bins where the reference is
 *    not 0), among the thresholds that clip at most 1% of the values; the range is [-T, T],
 *    or [0, T] for a tensor never negative.
 *  - values computed from constants only (a weight reshaped at run time) keep their whole
 *    range with every method.
 * Every range is widened to hold 0; scale = (max - min) / (qmax - qmin) and
 * zero point = round(qmin - min / scale) (as ONNX Runtime's quantize_static computes them).
 *
 * Usage:
 *
 *     tdm_quantizer *q = NULL;
 *     tdm_quantize_options o = {.api_version = TDM_API_VERSION};
 *     tdm_status *st = tdm_quantizer_create(env, "model.onnx", &o, &q);
 *     if (!st) st = tdm_quantizer_calibrate(q, n_samples, n_inputs, names, samples);
 *     if (!st) st = tdm_quantizer_save(q, "model.int8.onnx");
 *     tdm_quantizer_free(q);
 *
 * Threading: a quantizer is used by one thread at a time.
 */
#ifndef TANDEM_QUANTIZE_H
#define TANDEM_QUANTIZE_H

#include "tandem/tandem.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tdm_quant_method {
    TDM_QUANT_MINMAX = 0,
    TDM_QUANT_PERCENTILE = 1,
    TDM_QUANT_ENTROPY = 2,
} tdm_quant_method;

typedef enum tdm_quant_mode {
    TDM_QUANT_STATIC = 0,
    TDM_QUANT_DYNAMIC = 1,
} tdm_quant_mode;

typedef struct tdm_quantize_options {
    int api_version;             /* TDM_API_VERSION */
    tdm_quant_method method;     /* default minmax */
    double percentile;           /* percentile method: kept share in %; 0 = 99.999 */
    bool per_tensor;             /* one weight scale per tensor instead of per output channel */
    tdm_dtype activation_type;   /* TDM_UINT8 (0 = default) or TDM_INT8 */
    tdm_quant_mode mode;         /* default static */
    const char *exclude;         /* nodes kept in float: comma-separated patterns, each an op
                                    type ("Add"), /REGEX/ on node names, or #FIRST-LAST
                                    positions in the model's node order; may be NULL */
    int bins;                    /* histogram bins (percentile, entropy); 0 = 2048 */
    int threads;                 /* calibration session's threads; 0 = the environment's */
    bool reduce_range;           /* 7-bit weights ([-64, 64], as ONNX Runtime's reduce_range):
                                    on CPUs without VNNI, u8 x s8 kernels add pairs of products
                                    in saturating 16-bit lanes (vpmaddubsw), which full-range
                                    weights with large activations overflow; 7-bit weights
                                    cannot (255 * 128 <= 32767), for one bit of precision */
} tdm_quantize_options;

typedef struct tdm_quantizer tdm_quantizer;

/* Reads and analyses the model (main graph only). Fails with TDM_ERR_UNSUPPORTED when the
 * default-domain opset is below 13 and per-channel weights are asked for, or below 10. */
TDM_API tdm_status *tdm_quantizer_create(tdm_env *env, const char *model_path,
                                         const tdm_quantize_options *options, tdm_quantizer **out);
TDM_API void tdm_quantizer_free(tdm_quantizer *q);

/* The quantizable nodes, in the model's node order: name ("" when the model gave none),
 * op type, position in the model's node list, and whether the model written next quantizes
 * it (the exclude patterns clear it; tdm_quantizer_set_enabled changes it). */
TDM_API size_t tdm_quantizer_node_count(const tdm_quantizer *q);
TDM_API const char *tdm_quantizer_node_name(const tdm_quantizer *q, size_t index);
TDM_API const char *tdm_quantizer_node_op(const tdm_quantizer *q, size_t index);
TDM_API int64_t tdm_quantizer_node_position(const tdm_quantizer *q, size_t index);
TDM_API bool tdm_quantizer_node_enabled(const tdm_quantizer *q, size_t index);
TDM_API void tdm_quantizer_set_enabled(tdm_quantizer *q, size_t index, bool enabled);

/* Runs the float model on `n_samples` samples; sample k's inputs are
 * samples[k * n_inputs + i], named names[i]. Collects every candidate activation's range
 * (and a second pass its histogram for the percentile and entropy methods), replacing what
 * an earlier call collected. Static mode needs it before saving; dynamic mode ignores it. */
TDM_API tdm_status *tdm_quantizer_calibrate(tdm_quantizer *q, size_t n_samples, size_t n_inputs,
                                            const char *const *names,
                                            const tdm_tensor *const *samples);

/* The calibrated activations: name, observed min / max, the method's range, and the
 * scale and zero point the model gets. false past the end or before calibration. */
typedef struct tdm_quant_param {
    const char *name;
    float observed_min, observed_max;
    float range_min, range_max;
    float scale;
    int32_t zero_point;
} tdm_quant_param;
TDM_API size_t tdm_quantizer_tensor_count(const tdm_quantizer *q);
TDM_API bool tdm_quantizer_tensor(const tdm_quantizer *q, size_t index, tdm_quant_param *out);

/* Writes the quantized model (the enabled nodes quantized) to a file, or into a buffer that
 * the caller frees with tdm_string_free. */
TDM_API tdm_status *tdm_quantizer_save(tdm_quantizer *q, const char *path);
TDM_API tdm_status *tdm_quantizer_save_buffer(tdm_quantizer *q, void **data, size_t *size);

#ifdef __cplusplus
}
#endif

#endif
