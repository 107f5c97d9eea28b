/* Operator schemas: control family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_control[] = {
    {0},
};
const int tdm_ops_control_count = 0;
