/* Packed weights for MatMulNBits (tdm_graph_pack_nbits, fuse.h): each com.microsoft
 * MatMulNBits whose B, scales and zero points are constants becomes tandem's
 * MatMulNBitsPacked(A, P, bias) with one constant P in the layout of ops/nbits_pack.h (the
 * CPU's decode kernels stream it linearly). Applies to float A and float32 scales, 4 or 8
 * bits, no g_idx. The constants the node read alone are freed as soon as P is made, so the
 * session never holds both copies of more than one matrix.
 *
 * ONNX Runtime's fast form of an asymmetric layer (a MatMulNBits without zero points, then
 * the zero-point term as a float MatMul of A's block sums) is folded in:
 *     Y = Add(MatMulNBits(A, ...), MatMul(ReduceSum(Reshape(A, [0.., nb, bs]), axes -1,
 *             keepdims 0), C))        C: constant float32 [nb, N]
 * becomes one MatMulNBitsPacked whose per-block mz takes C (ops/nbits_pack.h, off): the
 * same sum, without the four nodes and with C read as part of P (float16 when it keeps the
 * values). The inner values must be read by the pattern alone.
 *
 * Then packed nodes that read the same A are joined (tdm_graph_pack_nbits' second step), so
 * a decode step streams their weights as one matrix, quantizes A once and runs one node:
 *  - an attention's q, k and v projections (GroupQueryAttention or PagedAttention reading
 *    them alone) become one node whose output is the attention's packed QKV input (key and
 *    value omitted: [.., (H + 2 KVH) D], the layout both kernels take);
 *  - a SwiGLU MLP's gate and up projections, Mul(Mul(G, Sigmoid(G)), U) (either order of
 *    each Mul), become one node with glu = 1 whose output is that product.
 * Each part keeps its rows' sums exactly (a panel holds rows of one matrix: every part but
 * the last has a multiple of 16 rows), so the outputs are those of the separate nodes. */
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/tensor.h"
#include "graph/fuse_impl.h"
#include "ops/fused.h"
#include "ops/nbits_pack.h"

static tdm_status *oom(void) {
    return TDM_ERR(TDM_ERR_OUT_OF_MEMORY, "out of memory packing MatMulNBits weights");
}

/* A packed weight's tensor (zeroed), the whole 2 MiB pages inside it advised onto transparent
 * huge pages before its first write (the 8-bit LM head of a small model, most matrices of a
 * large one: a decode step streams each once). */
static tdm_status *packed_new(const tdm_allocator *a, int64_t bytes, tdm_tensor **out) {
    TDM_TRY(tdm_tensor_new_uninit(a, TDM_UINT8, 1, &bytes, out));
    tdm_advise_huge((*out)->data, (size_t)bytes);
    memset((*out)->data, 0, (size_t)bytes);
    return NULL;
}

static bool is_nbits(const fz_ctx *fz, int i) {
    const tdm_node *n = fz_node(fz, i);
    return !n->dead && strcmp(n->domain, "com.microsoft") == 0 &&
           strcmp(n->op_type, "MatMulNBits") == 0;
}

/* Frees constant v when node i was its only reader (its slot is gone with the node). */
static void drop_const(fz_ctx *fz, int v, int uses_before) {
    if (v < 0 || uses_before != 1) return;
    tdm_value *val = &fz->g->values[v];
    if (!val->data || val->is_input || val->is_output) return;
    tdm_tensor_destroy(val->data);
    val->data = NULL;
}

/* The offset pattern after node i (see the header): the MatMul's constant C (*ic) and the
 * nodes the packed node replaces (kill: Add, MatMul, ReduceSum, Reshape). */
static bool match_offsets(const fz_ctx *fz, int i, int64_t N, int64_t nb, int64_t bs, int *ic,
                          int kill[4]) {
    const tdm_node *n = fz_node(fz, i);
    int y = n->outputs[0], ia = n->inputs[0];
    int add = fz_sole_consumer(fz, y);
    if (add < 0 || !fz_is_op(fz, add, "Add") || fz_node(fz, add)->n_inputs != 2) return false;
    int mo = fz_other_input(fz_node(fz, add), y);
    int mm = mo >= 0 ? fz_producer(fz, mo) : -1;
    if (mm < 0 || !fz_is_op(fz, mm, "MatMul") || fz_sole_consumer(fz, mo) != add) return false;
    const tdm_node *m = fz_node(fz, mm);
    if (m->n_inputs != 2 || m->inputs[0] < 0 || m->inputs[1] < 0) return false;
    const tdm_tensor *C = fz_const(fz, m->inputs[1]);
    if (!C || C->device || C->dtype != TDM_FLOAT || C->rank != 2 || C->dims[0] != nb ||
        C->dims[1] != N)
        return false;
    int sv = m->inputs[0], rsum = fz_producer(fz, sv);
    if (rsum < 0 || !fz_is_op(fz, rsum, "ReduceSum") || fz_sole_consumer(fz, sv) != mm) return false;
    const tdm_node *r = fz_node(fz, rsum);
    if (tdm_attr_int(r, "keepdims", 1) != 0 || r->n_inputs < 2 || r->inputs[0] < 0 || r->inputs[1] < 0)
        return false;
    const tdm_tensor *ax = fz_const(fz, r->inputs[1]);
    int rv = r->inputs[0], resh = fz_producer(fz, rv);
    if (resh < 0 || !fz_is_op(fz, resh, "Reshape") || fz_sole_consumer(fz, rv) != rsum) return false;
    const tdm_node *rs = fz_node(fz, resh);
    if (rs->n_inputs != 2 || rs->inputs[0] != ia || tdm_attr_int(rs, "allowzero", 0) != 0) return false;
    const tdm_tensor *shape = fz_const(fz, rs->inputs[1]);
    if (!shape || shape->dtype != TDM_INT64 || shape->rank != 1 || shape->count < 2 ||
        shape->count > 8)
        return false;
    const int64_t *sh = shape->data;
    int64_t rank = shape->count;
    for (int64_t k = 0; k + 2 < rank; k++)
        if (sh[k] != 0) return false; /* A's leading dims, copied */
    if (sh[rank - 2] != nb || sh[rank - 1] != bs) return false;
    /* the sum over the last axis (of the reshaped rank) */
    if (!ax || ax->dtype != TDM_INT64 || ax->count != 1) return false;
    int64_t a0 = ((const int64_t *)ax->data)[0];
    if (a0 != -1 && a0 != rank - 1) return false;
    *ic = m->inputs[1];
    kill[0] = add, kill[1] = mm, kill[2] = rsum, kill[3] = resh;
    return true;
}

/* The attributes every MatMulNBitsPacked carries (the kernel's layout contract, nbits_pack.h). */
static tdm_status *set_packed_attrs(fz_ctx *fz, int fi, int64_t K, int64_t N, int64_t bits,
                                    int64_t bs, int64_t acc, unsigned form) {
    TDM_TRY(fz_attr_int(fz, fi, "K", K));
    TDM_TRY(fz_attr_int(fz, fi, "N", N));
    TDM_TRY(fz_attr_int(fz, fi, "bits", bits));
    TDM_TRY(fz_attr_int(fz, fi, "block_size", bs));
    TDM_TRY(fz_attr_int(fz, fi, "accuracy_level", acc));
    return fz_attr_int(fz, fi, "packed_form", (int64_t)form);
}

static tdm_status *pack_node(fz_ctx *fz, int i) {
    const tdm_allocator *a = fz->g->alloc;
    const tdm_node *n = fz_node(fz, i);
    if (n->n_outputs != 1 || n->outputs[0] < 0 || n->n_inputs < 3) return NULL;
    int64_t K = tdm_attr_int(n, "K", 0), N = tdm_attr_int(n, "N", 0);
    int bits = (int)tdm_attr_int(n, "bits", 4);
    int64_t bs = tdm_attr_int(n, "block_size", 0), acc = tdm_attr_int(n, "accuracy_level", 0);
    if (tdm_attr_int(n, "weight_prepacked", 0) != 0) return NULL;
    tdm_nbits_pk pk;
    if (!tdm_nbits_pk_layout(N, K, bits, bs, 0, &pk)) return NULL;
    int ia = n->inputs[0], ib = n->inputs[1], is = n->inputs[2];
    int iz = n->n_inputs > 3 ? n->inputs[3] : -1, ig = n->n_inputs > 4 ? n->inputs[4] : -1;
    int ibias = n->n_inputs > 5 ? n->inputs[5] : -1;
    if (ig >= 0 || ia < 0 || !fz_is_f32(fz, ia)) return NULL;
    const tdm_tensor *B = fz_const(fz, ib), *S = fz_const(fz, is);
    const tdm_tensor *Z = iz >= 0 ? fz_const(fz, iz) : NULL;
    int64_t nb = pk.nb, blob = bs * bits / 8;
    if (!B || !S || (iz >= 0 && !Z) || B->device || S->device || (Z && Z->device)) return NULL;
    if (B->dtype != TDM_UINT8 || (int64_t)B->nbytes != N * nb * blob) return NULL;
    if (S->dtype != TDM_FLOAT || S->count != N * nb) return NULL;
    if (ibias >= 0 && (fz->g->values[ibias].dtype != TDM_FLOAT)) return NULL;
    float *zpf = NULL;
    if (Z) {
        int64_t zrow = (nb * bits + 7) / 8;
        if (Z->dtype == TDM_FLOAT && Z->count == N * nb) {
            zpf = Z->data;
        } else if (Z->dtype == TDM_UINT8 && Z->count == N * zrow) {
            zpf = tdm_alloc(a, (size_t)(N * nb) * sizeof(float));
            if (!zpf) return oom();
            const uint8_t *z = Z->data;
            for (int64_t r = 0; r < N; r++)
                for (int64_t b = 0; b < nb; b++) {
                    int64_t bit = b * bits;
                    zpf[r * nb + b] =
                        (float)((z[r * zrow + (bit >> 3)] >> (bit & 7)) & ((1 << bits) - 1));
                }
        } else {
            return NULL;
        }
    }
    /* the offsets of ONNX Runtime's fast form (needs whole blocks: K = nb * bs) */
    int ic = -1, kill[4] = {-1, -1, -1, -1};
    const float *off = NULL;
    if (!Z && ibias < 0 && K == nb * bs && match_offsets(fz, i, N, nb, bs, &ic, kill))
        off = fz_const(fz, ic)->data;
    unsigned form = tdm_nbits_pk_form_off(N, nb, bits, S->data, zpf, off);
    tdm_nbits_pk_layout(N, K, bits, bs, form, &pk);
    int64_t bytes = (int64_t)tdm_nbits_pk_bytes(&pk);
    tdm_tensor *P = NULL;
    tdm_status *st = packed_new(a, bytes, &P);
    if (st) {
        if (zpf && (!Z || zpf != Z->data)) tdm_free(a, zpf);
        return st;
    }
    tdm_nbits_pk_pack_off(&pk, B->data, S->data, zpf, off, P->data);
    if (zpf != (Z ? Z->data : NULL)) tdm_free(a, zpf);
    int uses_b = fz_uses(fz, ib), uses_s = fz_uses(fz, is), uses_z = iz >= 0 ? fz_uses(fz, iz) : 0;
    int uses_c = ic >= 0 ? fz_uses(fz, ic) : 0;
    char *name = tdm_strdup(a, n->name);
    if (!name) {
        tdm_tensor_destroy(P);
        return oom();
    }
    int pv, fi;
    st = fz_new_const(fz, name, P, &pv);
    if (!st) st = fz_new_node(fz, "MatMulNBitsPacked", TDM_FUSED_DOMAIN, name, ibias >= 0 ? 3 : 2,
                              1, &fi);
    tdm_free(a, name);
    TDM_TRY(st);
    n = fz_node(fz, i);
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = ia;
    f->inputs[1] = pv;
    if (ibias >= 0) f->inputs[2] = ibias;
    f->outputs[0] = off ? fz_node(fz, kill[0])->outputs[0] : n->outputs[0];
    TDM_TRY(set_packed_attrs(fz, fi, K, N, bits, bs, acc, form));
    fz_kill(fz, i);
    for (int k = 0; off && k < 4; k++) fz_kill(fz, kill[k]);
    drop_const(fz, ic, uses_c);
    drop_const(fz, ib, uses_b);
    drop_const(fz, is, uses_s);
    drop_const(fz, iz, uses_z);
    fz->count++;
    return NULL;
}

/* ---- joining packed nodes that share A ---- */

/* Node i is a MatMulNBitsPacked that can be a part: one matrix, no bias, constant P. */
static bool is_part(const fz_ctx *fz, int i) {
    if (!fz_is_fused(fz, i, "MatMulNBitsPacked")) return false;
    const tdm_node *n = fz_node(fz, i);
    return n->n_inputs == 2 &&
           n->n_outputs == 1 && n->inputs[0] >= 0 && n->outputs[0] >= 0 &&
           tdm_attr_int(n, "glu", 0) == 0 && fz_const(fz, n->inputs[1]) != NULL;
}

/* Parts i and j read the same A with the same K, bits, block size and accuracy level. */
static bool same_kind(const fz_ctx *fz, int i, int j) {
    const tdm_node *a = fz_node(fz, i), *b = fz_node(fz, j);
    static const char *const keys[] = {"K", "bits", "block_size", "accuracy_level"};
    if (a->inputs[0] != b->inputs[0]) return false;
    for (int k = 0; k < 4; k++)
        if (tdm_attr_int(a, keys[k], -1) != tdm_attr_int(b, keys[k], -1)) return false;
    return true;
}

static bool part_layout(const fz_ctx *fz, int i, unsigned form, tdm_nbits_pk *pk) {
    const tdm_node *n = fz_node(fz, i);
    return tdm_nbits_pk_layout(tdm_attr_int(n, "N", 0), tdm_attr_int(n, "K", 0),
                               (int)tdm_attr_int(n, "bits", 4), tdm_attr_int(n, "block_size", 0),
                               form, pk);
}

/* One MatMulNBitsPacked for parts[0..np) (same_kind; every part but the last a multiple of
 * 16 rows) writing value *out (< 0: a new value, made here); glu as in ops/nbits_pack.h. The
 * parts and kill[0..nk) die. Nothing changes (and *out stays) when the parts do not fit. */
static tdm_status *join(fz_ctx *fz, const int *parts, int np, int glu, int *out, const int *kill,
                        int nk) {
    const tdm_allocator *a = fz->g->alloc;
    tdm_nbits_pk pk[3], all;
    unsigned form = (unsigned)tdm_attr_int(fz_node(fz, parts[0]), "packed_form", 0);
    for (int k = 1; k < np; k++)
        form = tdm_nbits_pk_form_union(
            form, (unsigned)tdm_attr_int(fz_node(fz, parts[k]), "packed_form", 0));
    int64_t N = 0;
    for (int k = 0; k < np; k++) {
        const tdm_node *n = fz_node(fz, parts[k]);
        if (!part_layout(fz, parts[k], (unsigned)tdm_attr_int(n, "packed_form", 0), &pk[k]) ||
            fz_const(fz, n->inputs[1])->nbytes != tdm_nbits_pk_bytes(&pk[k]) ||
            (k + 1 < np && pk[k].N % TDM_NBP_ROWS != 0))
            return NULL;
        N += pk[k].N;
    }
    const tdm_node *n0 = fz_node(fz, parts[0]);
    int64_t K = pk[0].K, bs = pk[0].bs, acc = tdm_attr_int(n0, "accuracy_level", 0);
    int bits = pk[0].bits, ia = n0->inputs[0];
    if (!tdm_nbits_pk_layout(N, K, bits, bs, form, &all)) return NULL;
    int64_t bytes = (int64_t)tdm_nbits_pk_bytes(&all);
    tdm_tensor *P = NULL;
    TDM_TRY(packed_new(a, bytes, &P));
    uint8_t *dst = P->data;
    for (int k = 0; k < np; k++) {
        tdm_nbits_pk d;
        tdm_nbits_pk_layout(pk[k].N, K, bits, bs, form, &d);
        tdm_nbits_pk_reform(&pk[k], fz_const(fz, fz_node(fz, parts[k])->inputs[1])->data, &d, dst);
        dst += tdm_nbits_pk_bytes(&d);
    }
    char *name = tdm_strdup(a, n0->name);
    if (!name) {
        tdm_tensor_destroy(P);
        return oom();
    }
    int pv, fi;
    tdm_status *st = fz_new_const(fz, name, P, &pv);
    if (!st && *out < 0) st = fz_new_value(fz, name, TDM_FLOAT, -1, NULL, out);
    if (!st) st = fz_new_node(fz, "MatMulNBitsPacked", TDM_FUSED_DOMAIN, name, 2, 1, &fi);
    tdm_free(a, name);
    TDM_TRY(st);
    tdm_node *f = fz_node(fz, fi);
    f->inputs[0] = ia;
    f->inputs[1] = pv;
    f->outputs[0] = *out;
    TDM_TRY(set_packed_attrs(fz, fi, K, N, bits, bs, acc, form));
    if (glu) TDM_TRY(fz_attr_int(fz, fi, "glu", glu));
    int pvs[3], uses[3];
    for (int k = 0; k < np; k++) {
        pvs[k] = fz_node(fz, parts[k])->inputs[1];
        uses[k] = fz_uses(fz, pvs[k]);
        fz_kill(fz, parts[k]);
    }
    for (int k = 0; k < nk; k++) fz_kill(fz, kill[k]);
    for (int k = 0; k < np; k++) drop_const(fz, pvs[k], uses[k]);
    fz->count++;
    return NULL;
}

/* Attention node i reading three parts as q, k and v (alone): one part, packed QKV. */
static tdm_status *join_qkv(fz_ctx *fz, int i) {
    const tdm_node *n = fz_node(fz, i);
    if (n->dead || strcmp(n->domain, "com.microsoft") != 0 ||
        (strcmp(n->op_type, "GroupQueryAttention") != 0 &&
         strcmp(n->op_type, "PagedAttention") != 0) ||
        n->n_inputs < 3)
        return NULL;
    int parts[3];
    for (int k = 0; k < 3; k++) {
        int v = n->inputs[k];
        parts[k] = v >= 0 ? fz_producer(fz, v) : -1;
        if (!is_part(fz, parts[k]) || fz_sole_consumer(fz, v) != i) return NULL;
        if (k && !same_kind(fz, parts[0], parts[k])) return NULL;
    }
    int64_t H = tdm_attr_int(n, "num_heads", 0), KVH = tdm_attr_int(n, "kv_num_heads", 0);
    int64_t nq = tdm_attr_int(fz_node(fz, parts[0]), "N", 0);
    int64_t nk = tdm_attr_int(fz_node(fz, parts[1]), "N", 0);
    int64_t nv = tdm_attr_int(fz_node(fz, parts[2]), "N", 0);
    /* the packed layout: q of H heads, then k and v of KVH heads each, one head size */
    if (H < 1 || KVH < 1 || nk != nv || nq * KVH != nk * H || nq % H != 0) return NULL;
    int y = -1;
    TDM_TRY(join(fz, parts, 3, 0, &y, NULL, 0));
    if (y < 0) return NULL;
    tdm_node *att = fz_node(fz, i);
    att->inputs[0] = y;
    att->inputs[1] = att->inputs[2] = -1;
    return NULL;
}

/* Part i as the gate of a SwiGLU MLP: Mul(Swish(G), U), U a part read by that Mul alone. */
static tdm_status *join_glu(fz_ctx *fz, int i) {
    if (!is_part(fz, i)) return NULL;
    fz_act_match m;
    if (!fz_match_swish(fz, fz_node(fz, i)->outputs[0], &m) || m.n + 1 > FZ_ACT_MAX_NODES)
        return NULL;
    int mul = fz_sole_consumer(fz, m.out);
    if (mul < 0 || !fz_is_op(fz, mul, "Mul") || fz_node(fz, mul)->n_inputs != 2 ||
        fz_node(fz, mul)->outputs[0] < 0)
        return NULL;
    int uv = fz_other_input(fz_node(fz, mul), m.out);
    int up = uv >= 0 ? fz_producer(fz, uv) : -1;
    if (!is_part(fz, up) || fz_sole_consumer(fz, uv) != mul || !same_kind(fz, i, up)) return NULL;
    int64_t ng = tdm_attr_int(fz_node(fz, i), "N", 0);
    if (ng != tdm_attr_int(fz_node(fz, up), "N", 0) || ng % TDM_NBP_ROWS != 0) return NULL;
    int parts[2] = {i, up}, y = fz_node(fz, mul)->outputs[0];
    m.nodes[m.n++] = mul;
    return join(fz, parts, 2, 1, &y, m.nodes, m.n);
}

/* All packed weights of the graph moved into one mapping on transparent huge pages, in node
 * order (tdm_tensors_share_huge): a decode step streams them one after another, and most are
 * smaller than a 2 MiB page (SmolLM2-135M: 0.3-1.3 MB each, 96 MB in all), so advised one by
 * one (packed_new) only the largest got huge pages. */
static tdm_status *share_packed(fz_ctx *fz) {
    tdm_graph *g = fz->g;
    size_t n = 0;
    tdm_tensor **ts = tdm_alloc(g->alloc, (g->n_nodes ? g->n_nodes : 1) * sizeof *ts);
    if (!ts) return oom();
    for (size_t i = 0; i < g->n_nodes; i++) {
        const tdm_node *nd = &g->nodes[i];
        if (!fz_node_is_fused(nd, "MatMulNBitsPacked") || nd->n_inputs < 2 || nd->inputs[1] < 0)
            continue;
        tdm_tensor *P = g->values[nd->inputs[1]].data;
        bool seen = false; /* a weight read by two nodes moves once */
        for (size_t k = 0; k < n && !seen; k++) seen = ts[k] == P;
        if (P && !seen) ts[n++] = P;
    }
    tdm_tensors_share_huge(ts, n);
    tdm_free(g->alloc, ts);
    return NULL;
}

tdm_status *fz_pass_nbits(fz_ctx *fz) {
    size_t n0 = fz->g->n_nodes; /* the new nodes (appended) are not revisited */
    for (size_t i = 0; i < n0; i++) {
        TDM_TRY(fz_refresh(fz));
        if (is_nbits(fz, (int)i)) TDM_TRY(pack_node(fz, (int)i));
    }
    n0 = fz->g->n_nodes;
    for (size_t i = 0; i < n0; i++) {
        TDM_TRY(fz_refresh(fz));
        TDM_TRY(join_qkv(fz, (int)i));
        TDM_TRY(fz_refresh(fz));
        TDM_TRY(join_glu(fz, (int)i));
    }
    return share_packed(fz);
}
