/* Operator schemas: unary family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_unary[] = {
    {0},
};
const int tdm_ops_unary_count = 0;
