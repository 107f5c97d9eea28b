/* Operator schemas: binary family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_binary[] = {
    {0},
};
const int tdm_ops_binary_count = 0;
