/* Operator schemas: misc family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_misc[] = {
    {0},
};
const int tdm_ops_misc_count = 0;
