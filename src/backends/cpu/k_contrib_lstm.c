/* CPU kernels: contrib family — DynamicQuantizeLSTM (placeholder). */
#include "backends/cpu/k_contrib.h"

tdm_status *tdm_contrib_run_dq_lstm(tdm_kernel_ctx *ctx) {
    return tdm_node_error(ctx->node, TDM_ERR_UNSUPPORTED, "DynamicQuantizeLSTM is not implemented yet");
}
