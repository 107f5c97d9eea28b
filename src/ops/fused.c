/* Operator schemas: fused family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_fused[] = {
    {0},
};
const int tdm_ops_fused_count = 0;
