/* Operator schemas: text family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_text[] = {
    {0},
};
const int tdm_ops_text_count = 0;
