#include "backends/kernel.h"

#include <string.h>

bool tdm_kernel_matches(const tdm_kernel_def *k, const tdm_node *node, const tdm_dtype *in_types,
                        int n_in) {
    const char *domain = node->domain && strcmp(node->domain, "ai.onnx") ? node->domain : "";
    if (strcmp(k->op, node->op_type) || strcmp(k->domain, domain)) return false;
    if (node->opset < k->since || (k->until && node->opset > k->until)) return false;
    if (k->type_input < 0) return true;
    if (k->type_input >= n_in) return false;
    tdm_dtype dt = in_types[k->type_input];
    return (k->types & tdm_kernel_type_bit(dt)) != 0;
}

const tdm_kernel_def *tdm_kernel_find(const tdm_kernel_def *const *tables, const int *counts,
                                      int n_tables, const tdm_node *node,
                                      const tdm_dtype *in_types, int n_in) {
    for (int t = 0; t < n_tables; t++)
        for (int i = 0; i < counts[t]; i++)
            if (tdm_kernel_matches(&tables[t][i], node, in_types, n_in)) return &tables[t][i];
    return NULL;
}

unsigned tdm_kernel_flags(const tdm_kernel_def *k, const tdm_node *node) {
    if (!k || !node) return 0;
    unsigned f = k->flags;
    int i = TDM_KF_INPLACE_INPUT(f);
    if (i >= 0 && (i >= node->n_inputs || node->inputs[i] < 0)) f &= ~TDM_KF_INPLACE(i);
    return f;
}
