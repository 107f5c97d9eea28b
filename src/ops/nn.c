/* Operator schemas: nn family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_nn[] = {
    {0},
};
const int tdm_ops_nn_count = 0;
