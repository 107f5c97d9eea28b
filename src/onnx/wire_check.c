/* Bounds protobuf nesting before protobuf-c sees the bytes. protobuf-c unpacks nested
 * messages recursively with no depth limit, so a small file nested 100k deep would overflow
 * the stack. This walks the wire format with knowledge of which fields of which ONNX messages
 * are messages that can contain further messages, and rejects anything nested deeper than
 * the limit, or malformed framing, with a clear status. */
#include <stdint.h>
#include <string.h>

#include "onnx/loader.h"

typedef enum kind {
    K_LEAF = 0, /* a message without nested recursive messages, or a scalar/bytes field */
    K_MODEL, K_GRAPH, K_NODE, K_ATTR, K_TENSOR, K_SPARSE, K_VALUEINFO, K_TYPE,
    K_TYPE_TENSOR, K_TYPE_SEQ, K_TYPE_MAP, K_TYPE_OPT, K_SHAPE, K_FUNCTION, K_TRAINING,
} kind;

typedef struct edge {
    kind parent;
    uint32_t field;
    kind child;
} edge;

/* Field numbers from onnx.proto (message-typed fields only). */
static const edge edges[] = {
    {K_MODEL, 7, K_GRAPH},        {K_MODEL, 25, K_FUNCTION},  {K_MODEL, 20, K_TRAINING},
    {K_GRAPH, 1, K_NODE},         {K_GRAPH, 5, K_TENSOR},     {K_GRAPH, 15, K_SPARSE},
    {K_GRAPH, 11, K_VALUEINFO},   {K_GRAPH, 12, K_VALUEINFO}, {K_GRAPH, 13, K_VALUEINFO},
    {K_NODE, 5, K_ATTR},          {K_ATTR, 5, K_TENSOR},      {K_ATTR, 6, K_GRAPH},
    {K_ATTR, 22, K_SPARSE},       {K_ATTR, 10, K_TENSOR},     {K_ATTR, 11, K_GRAPH},
    {K_ATTR, 23, K_SPARSE},       {K_ATTR, 14, K_TYPE},       {K_ATTR, 15, K_TYPE},
    {K_VALUEINFO, 2, K_TYPE},     {K_TYPE, 1, K_TYPE_TENSOR}, {K_TYPE, 4, K_TYPE_SEQ},
    {K_TYPE, 5, K_TYPE_MAP},      {K_TYPE, 9, K_TYPE_OPT},    {K_TYPE, 8, K_TYPE_TENSOR},
    {K_TYPE_TENSOR, 2, K_SHAPE},  {K_TYPE_SEQ, 1, K_TYPE},    {K_TYPE_MAP, 2, K_TYPE},
    {K_TYPE_OPT, 1, K_TYPE},      {K_SPARSE, 1, K_TENSOR},    {K_SPARSE, 2, K_TENSOR},
    {K_FUNCTION, 7, K_NODE},      {K_FUNCTION, 11, K_ATTR},   {K_TRAINING, 1, K_GRAPH},
    {K_TRAINING, 2, K_GRAPH},
};

static kind child_of(kind parent, uint32_t field) {
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        if (edges[i].parent == parent && edges[i].field == field) return edges[i].child;
    return K_LEAF;
}

static int read_varint(const uint8_t **p, const uint8_t *end, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (*p >= end) return -1;
        uint8_t b = *(*p)++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 0;
        }
    }
    return -1;
}

static tdm_status *scan(const uint8_t *p, const uint8_t *end, kind k, int depth, int max_depth) {
    if (depth > max_depth)
        return TDM_ERR(TDM_ERR_LIMIT, "protobuf messages are nested deeper than %d levels", max_depth);
    while (p < end) {
        uint64_t key;
        if (read_varint(&p, end, &key))
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: truncated field key");
        uint32_t field = (uint32_t)(key >> 3);
        unsigned wt = (unsigned)(key & 7);
        if (field == 0) return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: field number 0");
        uint64_t v;
        switch (wt) {
        case 0:
            if (read_varint(&p, end, &v))
                return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: truncated varint");
            break;
        case 1:
            if (end - p < 8) return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: truncated fixed64");
            p += 8;
            break;
        case 5:
            if (end - p < 4) return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: truncated fixed32");
            p += 4;
            break;
        case 2: {
            if (read_varint(&p, end, &v))
                return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: truncated length");
            if (v > (uint64_t)(end - p))
                return TDM_ERR(TDM_ERR_INVALID_MODEL,
                               "malformed protobuf: a field of %llu bytes runs past the end of its "
                               "message (file truncated?)",
                               (unsigned long long)v);
            kind c = child_of(k, field);
            if (c != K_LEAF) TDM_TRY(scan(p, p + v, c, depth + 1, max_depth));
            p += v;
            break;
        }
        default:
            return TDM_ERR(TDM_ERR_INVALID_MODEL, "malformed protobuf: wire type %u (groups are not "
                           "used by ONNX)", wt);
        }
    }
    return NULL;
}

tdm_status *tdm_onnx_check_wire(const void *data, size_t size, int is_tensor, int max_depth) {
    const uint8_t *p = data;
    return scan(p, p + size, is_tensor ? K_TENSOR : K_MODEL, 0, max_depth);
}
