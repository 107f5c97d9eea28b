/* Operator schemas: rnn family. */
#include "ops/op.h"

const tdm_op_schema tdm_ops_rnn[] = {
    {0},
};
const int tdm_ops_rnn_count = 0;
