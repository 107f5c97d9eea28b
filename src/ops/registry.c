#include <string.h>

#include "ops/op.h"

typedef struct family {
    const tdm_op_schema *ops;
    const int *count;
} family;

static const family families[] = {
#define TDM_X_(fam) {tdm_ops_##fam, &tdm_ops_##fam##_count},
    TDM_OP_FAMILIES(TDM_X_)
#undef TDM_X_
};

const tdm_op_schema *tdm_op_find(const char *domain, const char *name, int opset) {
    if (!domain || strcmp(domain, "ai.onnx") == 0) domain = "";
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        const tdm_op_schema *ops = families[f].ops;
        for (int i = 0; i < *families[f].count; i++) {
            if (strcmp(ops[i].name, name) == 0 && strcmp(ops[i].domain, domain) == 0)
                return opset >= ops[i].since ? &ops[i] : NULL;
        }
    }
    return NULL;
}
