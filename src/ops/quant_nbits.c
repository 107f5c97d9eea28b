/* Operator schemas, quant_nbits family: ONNX Runtime's block-quantized weight ops in the
 * com.microsoft domain, as its ContribOperators.md defines them.
 *
 * MatMulNBits(A, B, scales, zero_points?, g_idx?, bias?) -> Y: Y = A . dequant(B)^T + bias,
 * where the logical weight is [N, K], quantized along K in blocks of block_size with one
 * scale (and zero point) per block; B is uint8 [N, k_blocks, blob] (blob = block_size * bits
 * / 8, codes packed low bits first), scales [N, k_blocks] (or flat), zero_points either packed
 * uint8 [N, ceil(k_blocks * bits / 8)] or of the scales' type [N, k_blocks]; the default zero
 * point is 2^(bits - 1). Y has A's shape with the last dim N.
 *
 * GatherBlockQuantized(data, indices, scales, zero_points?) -> output: Gather of a uint8
 * block-quantized table (codes of `bits` packed along the last dim for bits < 8), dequantized
 * with the scales (blocks of block_size along quantize_axis; the scales have data's logical
 * shape with that dim divided into blocks) and zero points (data's packing; default
 * 2^(bits - 1)). Out-of-range indices give zeros. */
#include <stdint.h>
#include <string.h>

#include "ops/fused.h"
#include "ops/nbits_pack.h"
#include "ops/op.h"

#define MS_DOMAIN "com.microsoft"

/* a block size: a power of 2 from 16 to 2^30 (sums of it and a dim stay inside int64) */
static bool pow2_at_least16(int64_t v) { return v >= 16 && v <= (1 << 30) && (v & (v - 1)) == 0; }

#define BAD(...) tdm_node_error(n, TDM_ERR_INVALID_MODEL, __VA_ARGS__)
#define LL(v) ((long long)(v))

/* Element count of v, or -1 when unknown. */
static int64_t info_count(const tdm_value_info *v) {
    if (v->rank < 0) return -1;
    int64_t c = 1;
    for (int i = 0; i < v->rank; i++) {
        if (v->dims[i] < 0) return -1;
        c *= v->dims[i];
    }
    return c;
}

/* ---- MatMulNBits ---- */

static tdm_status *infer_matmul_nbits(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    int64_t K = tdm_attr_int(n, "K", -1), N = tdm_attr_int(n, "N", -1);
    int64_t bits = tdm_attr_int(n, "bits", 4), bs = tdm_attr_int(n, "block_size", -1);
    int64_t acc = tdm_attr_int(n, "accuracy_level", 0);
    if (K < 1 || N < 1 || K > INT32_MAX || N > INT32_MAX)
        return BAD("attributes K (%lld) and N (%lld) must be in 1..2^31-1", LL(K), LL(N));
    if (bits != 2 && bits != 4 && bits != 8)
        return BAD("bits %lld is not supported (2, 4 or 8)", LL(bits));
    if (!pow2_at_least16(bs))
        return BAD("block_size %lld must be a power of 2 from 16 to 2^30", LL(bs));
    if (acc < 0 || acc > 4) return BAD("accuracy_level %lld is not in 0..4", LL(acc));
    if (tdm_attr_int(n, "weight_prepacked", 0) != 0)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED, "weight_prepacked B is not supported");
    int64_t nb = (K + bs - 1) / bs, blob = bs * bits / 8;
    const tdm_value_info *a = &c->in[0], *b = &c->in[1], *s = &c->in[2];
    tdm_dtype t = a->dtype;
    if (t != TDM_UNDEFINED && t != TDM_FLOAT && t != TDM_FLOAT16 && t != TDM_BFLOAT16)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "input A has type %s, not a float type",
                              tdm_dtype_name(t));
    if (a->rank == 0) return BAD("input A must not be a scalar");
    if (a->rank > 0 && a->dims[a->rank - 1] >= 0 && a->dims[a->rank - 1] != K)
        return BAD("A's last dim is %lld, attribute K is %lld", LL(a->dims[a->rank - 1]), LL(K));
    if (b->dtype != TDM_UNDEFINED && b->dtype != TDM_UINT8)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "input B has type %s, not uint8",
                              tdm_dtype_name(b->dtype));
    bool b_empty = false; /* an omitted projection: Y is the bias (or zeros) */
    if (b->rank >= 0) {
        if (b->rank != 3) return BAD("B has rank %lld, not 3 [N, k_blocks, blob]", LL(b->rank));
        const int64_t want[3] = {N, nb, blob};
        for (int i = 0; i < 3; i++) {
            if (b->dims[i] == 0) b_empty = true;
            else if (b->dims[i] >= 0 && b->dims[i] != want[i])
                return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                                      "B has shape [%lld, %lld, %lld], expected [%lld, %lld, %lld]",
                                      (long long)b->dims[0], (long long)b->dims[1],
                                      (long long)b->dims[2], (long long)N, (long long)nb,
                                      (long long)blob);
        }
    }
    int64_t sc = info_count(s);
    if (!b_empty && sc >= 0 && sc != N * nb)
        return BAD("scales has %lld values, expected N * k_blocks = %lld", LL(sc), LL(N * nb));
    if (s->dtype != TDM_UNDEFINED && t != TDM_UNDEFINED && s->dtype != t)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "scales has type %s, A has %s",
                              tdm_dtype_name(s->dtype), tdm_dtype_name(t));
    if (c->n_in > 3 && c->in[3].present && !b_empty) {
        const tdm_value_info *z = &c->in[3];
        int64_t zc = info_count(z);
        if (z->dtype == TDM_UINT8) {
            int64_t want = N * ((nb * bits + 7) / 8);
            if (zc >= 0 && zc != want)
                return BAD("packed zero_points has %lld values, expected %lld", LL(zc), LL(want));
        } else if (z->dtype != TDM_UNDEFINED) {
            if (t != TDM_UNDEFINED && z->dtype != t)
                return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                                      "zero_points has type %s: uint8 or A's type %s",
                                      tdm_dtype_name(z->dtype), tdm_dtype_name(t));
            if (zc >= 0 && zc != N * nb)
                return BAD("zero_points has %lld values, expected %lld", LL(zc), LL(N * nb));
        }
    }
    if (c->n_in > 4 && c->in[4].present && c->in[4].dtype != TDM_UNDEFINED &&
        c->in[4].dtype != TDM_INT32)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "g_idx has type %s, not int32",
                              tdm_dtype_name(c->in[4].dtype));
    if (c->n_in > 5 && c->in[5].present) {
        int64_t bc = info_count(&c->in[5]);
        if (bc >= 0 && bc != N)
            return BAD("bias has %lld values, expected N = %lld", LL(bc), LL(N));
    }
    tdm_value_info *y = &c->out[0];
    y->dtype = t;
    y->rank = a->rank;
    if (a->rank > 0) {
        memcpy(y->dims, a->dims, sizeof y->dims);
        y->dims[a->rank - 1] = N;
    }
    return NULL;
}

/* ---- GatherBlockQuantized ---- */

static tdm_status *infer_gather_bq(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    const tdm_value_info *d = &c->in[0], *ix = &c->in[1], *s = &c->in[2];
    int64_t bits = tdm_attr_int(n, "bits", 4), bs = tdm_attr_int(n, "block_size", 128);
    if (d->dtype != TDM_UNDEFINED && d->dtype != TDM_UINT8)
        return tdm_node_error(n, TDM_ERR_UNSUPPORTED,
                              "data of type %s is not supported (uint8 block-quantized only)",
                              tdm_dtype_name(d->dtype));
    if (bits != 2 && bits != 4 && bits != 8)
        return BAD("bits %lld is not supported (2, 4 or 8)", LL(bits));
    if (!pow2_at_least16(bs))
        return BAD("block_size %lld must be a power of 2 from 16 to 2^30", LL(bs));
    if (ix->dtype != TDM_UNDEFINED && ix->dtype != TDM_INT32 && ix->dtype != TDM_INT64)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "indices have type %s, not int32/int64",
                              tdm_dtype_name(ix->dtype));
    if (s->dtype != TDM_UNDEFINED && !tdm_dtype_is_float(s->dtype))
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "scales have type %s, not a float type",
                              tdm_dtype_name(s->dtype));
    tdm_value_info *y = &c->out[0];
    y->dtype = s->dtype;
    if (d->rank < 0) return NULL;
    int r = d->rank;
    if (r < 1) return BAD("data must have rank >= 1 (got %lld)", LL(r));
    int g, q;
    TDM_TRY(tdm_norm_axis(n, tdm_attr_int(n, "gather_axis", 0), r, &g));
    TDM_TRY(tdm_norm_axis(n, tdm_attr_int(n, "quantize_axis", 1), r, &q));
    if (g != 0) return BAD("gather_axis must be 0 for uint8 data (got %lld)", LL(g));
    if (bits < 8 && g == q)
        return BAD("gather_axis and quantize_axis must differ for bits %lld", LL(bits));
    int64_t ld[TDM_MAX_RANK]; /* data's logical dims */
    memcpy(ld, d->dims, sizeof ld);
    if (ld[r - 1] >= 0) ld[r - 1] *= 8 / bits;
    if (s->rank >= 0) {
        if (s->rank != r) return BAD("scales have rank %lld, data %lld", LL(s->rank), LL(r));
        for (int i = 0; i < r; i++) {
            int64_t want = ld[i] < 0 ? -1 : i == q ? (ld[i] + bs - 1) / bs : ld[i];
            if (want >= 0 && s->dims[i] >= 0 && s->dims[i] != want)
                return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                                      "scales dim %d is %lld, expected %lld", i,
                                      (long long)s->dims[i], (long long)want);
        }
    }
    if (c->n_in > 3 && c->in[3].present) {
        const tdm_value_info *z = &c->in[3];
        if (z->dtype != TDM_UNDEFINED && z->dtype != TDM_UINT8)
            return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "zero_points have type %s, not uint8",
                                  tdm_dtype_name(z->dtype));
        if (z->rank >= 0 && s->rank >= 0) {
            if (z->rank != r)
                return BAD("zero_points have rank %lld, data %lld", LL(z->rank), LL(r));
            for (int i = 0; i < r; i++) {
                int64_t want = s->dims[i];
                if (want >= 0 && i == r - 1) want = (want * bits + 7) / 8;
                if (want >= 0 && z->dims[i] >= 0 && z->dims[i] != want)
                    return tdm_node_error(n, TDM_ERR_INVALID_MODEL,
                                          "zero_points dim %d is %lld, expected %lld", i,
                                          (long long)z->dims[i], (long long)want);
            }
        }
    }
    if (ix->rank < 0) return NULL;
    if (r - 1 + ix->rank > TDM_MAX_RANK)
        return BAD("output rank %lld exceeds %lld", LL(r - 1 + ix->rank), LL(TDM_MAX_RANK));
    y->rank = r - 1 + ix->rank;
    int o = 0;
    for (int i = 0; i < g; i++) y->dims[o++] = ld[i];
    for (int i = 0; i < ix->rank; i++) y->dims[o++] = ix->dims[i];
    for (int i = g + 1; i < r; i++) y->dims[o++] = ld[i];
    return NULL;
}

/* ---- MatMulNBitsPacked (tandem's internal form, ops/nbits_pack.h) ---- */

static tdm_status *infer_matmul_nbits_packed(tdm_infer_ctx *c) {
    const tdm_node *n = c->node;
    int64_t K = tdm_attr_int(n, "K", -1), N = tdm_attr_int(n, "N", -1);
    int64_t bits = tdm_attr_int(n, "bits", 4), bs = tdm_attr_int(n, "block_size", -1);
    unsigned form = (unsigned)tdm_attr_int(n, "packed_form", 0);
    tdm_nbits_pk pk;
    if (!tdm_nbits_pk_layout(N, K, (int)bits, bs, form, &pk))
        return BAD("bad K, N, bits or block_size for the packed form");
    const tdm_value_info *a = &c->in[0], *p = &c->in[1];
    if (a->dtype != TDM_UNDEFINED && a->dtype != TDM_FLOAT)
        return tdm_node_error(n, TDM_ERR_INVALID_MODEL, "input A has type %s, not float",
                              tdm_dtype_name(a->dtype));
    if (a->rank == 0) return BAD("input A must not be a scalar");
    if (a->rank > 0 && a->dims[a->rank - 1] >= 0 && a->dims[a->rank - 1] != K)
        return BAD("A's last dim is %lld, attribute K is %lld", LL(a->dims[a->rank - 1]), LL(K));
    int64_t pc = info_count(p);
    if ((p->dtype != TDM_UNDEFINED && p->dtype != TDM_UINT8) ||
        (pc >= 0 && pc != (int64_t)tdm_nbits_pk_bytes(&pk)))
        return BAD("P is not uint8 [%lld]", LL(tdm_nbits_pk_bytes(&pk)));
    if (c->n_in > 2 && c->in[2].present) {
        int64_t bc = info_count(&c->in[2]);
        if (bc >= 0 && bc != N)
            return BAD("bias has %lld values, expected N = %lld", LL(bc), LL(N));
    }
    int64_t glu = tdm_attr_int(n, "glu", 0);
    if (glu != 0 && (glu != 1 || N % 2 != 0 || (c->n_in > 2 && c->in[2].present)))
        return BAD("glu must be 0, or 1 with an even N and no bias");
    tdm_value_info *y = &c->out[0];
    y->dtype = TDM_FLOAT;
    y->rank = a->rank;
    if (a->rank > 0) {
        memcpy(y->dims, a->dims, sizeof y->dims);
        y->dims[a->rank - 1] = glu ? N / 2 : N;
    }
    return NULL;
}

const tdm_op_schema tdm_ops_quant_nbits[] = {
    {MS_DOMAIN, "MatMulNBits", 1, 3, 6, 1, 1, infer_matmul_nbits, 0, 0},
    {TDM_FUSED_DOMAIN, "MatMulNBitsPacked", 1, 2, 3, 1, 1, infer_matmul_nbits_packed, 0, 0},
    {MS_DOMAIN, "GatherBlockQuantized", 1, 3, 4, 1, 1, infer_gather_bq, 0, 0},
};
const int tdm_ops_quant_nbits_count =
    (int)(sizeof tdm_ops_quant_nbits / sizeof tdm_ops_quant_nbits[0]);
