/* Operator schemas: reduce family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_reduce[] = {
    {0},
};
const int tdm_ops_reduce_count = 0;
