/* The packed form of MatMulNBits' weights (tandem's internal op MatMulNBitsPacked, domain
 * "tandem"): made once at session creation from the model's constant B, scales and zero
 * points (graph/fuse_nbits.c), in place of them, so that a decode step reads one linear array
 * per matrix. Shared by the graph pass (which packs) and the CPU kernels (which read it).
 *
 * MatMulNBitsPacked(A, P, bias?) -> Y
 *   attributes: K, N, bits (4 or 8), block_size (a multiple of 16), accuracy_level (as
 *   MatMulNBits), packed_form (TDM_NBP_* flags below), glu (optional, default 0; 1: P holds
 *   two matrices of N / 2 rows each, a gate G then an up projection U, and
 *   Y = (G(A) * Sigmoid(G(A))) * U(A), N / 2 wide: a SwiGLU MLP's two projections and its
 *   activation in one node). Several matrices that read the same A are one P (their panels
 *   one after the other, graph/fuse_nbits.c), so a step streams them as one matrix.
 *   P: uint8 [tdm_nbits_pk_bytes], laid out as:
 *
 *   panels of 16 rows of the logical weight W [N, K] (the last one padded with zero rows);
 *   per panel, per block b of K (nb = ceil(K / block_size) blocks), one record of
 *     codes   G = block_size * bits / 32 groups of 64 bytes: group g holds 4 bytes per row,
 *             row r at bytes 4r..4r+3 (so one 64-byte load is one int32 lane per row);
 *             8 bits: byte j of group g is element 4g + j of the block;
 *             4 bits: byte j of group g has element 4g + j in its low nibble and element
 *             block_size / 2 + 4g + j in its high nibble;
 *     scales  16 (one per row), float16 when TDM_NBP_S16 else float32;
 *     mz      (TDM_NBP_MZ only) 16 values s * zp, float16 when TDM_NBP_MZ16 else float32.
 *
 *   Y[m, n] = sum_b s[n, b] * sum_{k in b} A[m, k] q[n, k] - sum_b mz[n, b] * asum[m, b]
 *   (+ bias[n]), asum = A's sum over the block; without TDM_NBP_MZ, mz = 2^(bits - 1) s.
 *
 * Precision: scales become float16 only when every one converts exactly; s * zp (computed in
 * float32) becomes float16 when every product is within 2 float32 ulps of a float16 (Q4_1
 * from GGUF: s * (-m / d) is -m up to the division's rounding). */
#ifndef TDM_OPS_NBITS_PACK_H
#define TDM_OPS_NBITS_PACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TDM_NBP_S16 1u  /* scales float16 */
#define TDM_NBP_MZ 2u   /* s * zp stored (else the default zero point) */
#define TDM_NBP_MZ16 4u /* ... as float16 */

#define TDM_NBP_ROWS 16 /* rows per panel */

typedef struct tdm_nbits_pk {
    int64_t N, K, nb, bs;
    int bits;
    unsigned form;
    int64_t groups;  /* 64-byte groups of codes per block record */
    int64_t sbytes;  /* bytes of scales per record (16 x 2 or 4) */
    int64_t zbytes;  /* bytes of mz per record (0, 16 x 2 or 4) */
    int64_t bstride; /* bytes per block record */
    int64_t pstride; /* bytes per panel */
    int64_t panels;
} tdm_nbits_pk;

/* The layout for these sizes; false when the form does not apply (bits not 4 or 8,
 * block_size not a multiple of 16, sizes < 1). */
bool tdm_nbits_pk_layout(int64_t N, int64_t K, int bits, int64_t bs, unsigned form,
                         tdm_nbits_pk *pk);
static inline size_t tdm_nbits_pk_bytes(const tdm_nbits_pk *pk) {
    return (size_t)(pk->panels * pk->pstride);
}

/* The form B's scales (float32 [N * nb]) and zero points (floats [N * nb], NULL = default)
 * take (the float16 flags where they keep the values, see above). */
unsigned tdm_nbits_pk_form(int64_t N, int64_t nb, int bits, const float *scales,
                           const float *zp);
/* Writes the packed form of B (MatMulNBits' uint8 [N][nb][bs * bits / 8]) into out
 * (tdm_nbits_pk_bytes). */
void tdm_nbits_pk_pack(const tdm_nbits_pk *pk, const uint8_t *B, const float *scales,
                       const float *zp, uint8_t *out);

/* The same with per-block offsets off[b * N + n] (float32 [nb][N]) taken from mz: Y gains
 * sum_b off[b, n] * asum[m, b] (ONNX Runtime's fast form adds that product, a float MatMul of
 * A's block sums, after a MatMulNBits without zero points; graph/fuse_nbits.c folds it in).
 * off NULL: tdm_nbits_pk_form / tdm_nbits_pk_pack. */
unsigned tdm_nbits_pk_form_off(int64_t N, int64_t nb, int bits, const float *scales,
                               const float *zp, const float *off);
void tdm_nbits_pk_pack_off(const tdm_nbits_pk *pk, const uint8_t *B, const float *scales,
                           const float *zp, const float *off, uint8_t *out);

/* The form that holds the values of both forms (float16 only where both have it, mz stored
 * where either stores it): matrices of forms a and b packed together take it. */
unsigned tdm_nbits_pk_form_union(unsigned a, unsigned b);
/* Writes P (layout src) into out in layout dst: same N, K, bits and block size, dst's form
 * tdm_nbits_pk_form_union(src's, another), so every value is kept exactly. */
void tdm_nbits_pk_reform(const tdm_nbits_pk *src, const uint8_t *P, const tdm_nbits_pk *dst,
                         uint8_t *out);

/* Row n of W dequantized, elements k0..k1 of it (k1 <= nb * bs): out[k - k0] = (q - zp) s
 * (computed as q * s - mz). */
void tdm_nbits_pk_row(const tdm_nbits_pk *pk, const uint8_t *P, int64_t n, int64_t k0,
                      int64_t k1, float *out);
/* Scale and mz (s * zp) of row n, block b. */
void tdm_nbits_pk_sz(const tdm_nbits_pk *pk, const uint8_t *P, int64_t n, int64_t b, float *s,
                     float *mz);

#endif
