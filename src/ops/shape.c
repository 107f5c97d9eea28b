/* Operator schemas: shape family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_shape[] = {
    {0},
};
const int tdm_ops_shape_count = 0;
