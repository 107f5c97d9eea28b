/* The packed form of MatMulNBits' weights (layout and contract in nbits_pack.h). */
#include "ops/nbits_pack.h"

#include <math.h>
#include <string.h>

#include "core/half.h"

bool tdm_nbits_pk_layout(int64_t N, int64_t K, int bits, int64_t bs, unsigned form,
                         tdm_nbits_pk *pk) {
    if (N < 1 || K < 1 || bs < 16 || bs % 16 != 0 || (bits != 4 && bits != 8)) return false;
    pk->N = N;
    pk->K = K;
    pk->bs = bs;
    pk->nb = (K + bs - 1) / bs;
    pk->bits = bits;
    pk->form = form;
    pk->groups = bs * bits / 32;
    pk->sbytes = TDM_NBP_ROWS * ((form & TDM_NBP_S16) ? 2 : 4);
    pk->zbytes = (form & TDM_NBP_MZ) ? TDM_NBP_ROWS * ((form & TDM_NBP_MZ16) ? 2 : 4) : 0;
    pk->bstride = 64 * pk->groups + pk->sbytes + pk->zbytes;
    pk->pstride = pk->nb * pk->bstride;
    pk->panels = (N + TDM_NBP_ROWS - 1) / TDM_NBP_ROWS;
    return true;
}

static bool f16_exact(float x) { return isfinite(x) && tdm_f16_to_f32(tdm_f32_to_f16(x)) == x; }

/* x within 2 float32 ulps of its float16 rounding (and in float16's normal range or 0) */
static bool f16_close(float x) {
    if (!isfinite(x)) return false;
    float h = tdm_f16_to_f32(tdm_f32_to_f16(x));
    if (h == x) return true;
    if (fabsf(x) < 6.2e-5f) return false;
    return fabsf(h - x) <= fabsf(x) * 0x1p-22f;
}

/* mz of row n, block b: s * zp (zp NULL: the default 2^(bits - 1)) - off[b * N + n] */
static float mz_of(int64_t N, int64_t nb, int bits, const float *scales, const float *zp,
                   const float *off, int64_t n, int64_t b) {
    float s = scales[n * nb + b];
    float m = s * (zp ? zp[n * nb + b] : (float)(1 << (bits - 1)));
    return off ? m - off[b * N + n] : m;
}

unsigned tdm_nbits_pk_form_off(int64_t N, int64_t nb, int bits, const float *scales,
                               const float *zp, const float *off) {
    unsigned form = TDM_NBP_S16;
    int64_t n = N * nb;
    for (int64_t i = 0; i < n && (form & TDM_NBP_S16); i++)
        if (!f16_exact(scales[i])) form &= ~TDM_NBP_S16;
    if (!zp && !off) return form;
    if (!off) {
        float d = (float)(1 << (bits - 1));
        bool dflt = true;
        for (int64_t i = 0; i < n && dflt; i++) dflt = zp[i] == d;
        if (dflt) return form;
    }
    form |= TDM_NBP_MZ | TDM_NBP_MZ16;
    for (int64_t r = 0; r < N && (form & TDM_NBP_MZ16); r++)
        for (int64_t b = 0; b < nb; b++)
            if (!f16_close(mz_of(N, nb, bits, scales, zp, off, r, b))) {
                form &= ~TDM_NBP_MZ16;
                break;
            }
    return form;
}

unsigned tdm_nbits_pk_form(int64_t N, int64_t nb, int bits, const float *scales,
                           const float *zp) {
    return tdm_nbits_pk_form_off(N, nb, bits, scales, zp, NULL);
}

static void put_val(uint8_t *p, int r, bool f16, float v) {
    if (f16) {
        uint16_t h = tdm_f32_to_f16(v);
        memcpy(p + 2 * r, &h, 2);
    } else {
        memcpy(p + 4 * r, &v, 4);
    }
}

static float get_val(const uint8_t *p, int r, bool f16) {
    if (f16) {
        uint16_t h;
        memcpy(&h, p + 2 * r, 2);
        return tdm_f16_to_f32(h);
    }
    float v;
    memcpy(&v, p + 4 * r, 4);
    return v;
}

void tdm_nbits_pk_pack(const tdm_nbits_pk *pk, const uint8_t *B, const float *scales,
                       const float *zp, uint8_t *out) {
    tdm_nbits_pk_pack_off(pk, B, scales, zp, NULL, out);
}

void tdm_nbits_pk_pack_off(const tdm_nbits_pk *pk, const uint8_t *B, const float *scales,
                           const float *zp, const float *off, uint8_t *out) {
    const int64_t blob = pk->bs * pk->bits / 8, half = pk->bs / 2;
    const bool s16 = pk->form & TDM_NBP_S16, mz = pk->form & TDM_NBP_MZ;
    const bool z16 = pk->form & TDM_NBP_MZ16;
    if (pk->N % TDM_NBP_ROWS) /* the padding rows of the last panel: zeros */
        memset(out + (pk->panels - 1) * pk->pstride, 0, (size_t)pk->pstride);
    uint8_t codes[4096]; /* one block's codes, one a byte (block_size <= 4096 here) */
    for (int64_t n = 0; n < pk->N; n++) {
        int r = (int)(n % TDM_NBP_ROWS);
        uint8_t *panel = out + (n / TDM_NBP_ROWS) * pk->pstride;
        for (int64_t b = 0; b < pk->nb; b++) {
            uint8_t *rec = panel + b * pk->bstride;
            const uint8_t *src = B + (n * pk->nb + b) * blob;
            if (pk->bits == 8 || pk->bs > 4096) {
                for (int64_t g = 0; g < pk->groups; g++)
                    for (int j = 0; j < 4; j++) {
                        uint8_t v;
                        if (pk->bits == 8) {
                            v = src[4 * g + j];
                        } else { /* elements 4g + j and half + 4g + j of the block */
                            int64_t e0 = 4 * g + j, e1 = half + e0;
                            int lo = (src[e0 / 2] >> (4 * (e0 & 1))) & 15;
                            int hi = (src[e1 / 2] >> (4 * (e1 & 1))) & 15;
                            v = (uint8_t)(lo | hi << 4);
                        }
                        rec[g * 64 + 4 * r + j] = v;
                    }
            } else {
                for (int64_t i = 0; i < blob; i++) {
                    codes[2 * i] = src[i] & 15;
                    codes[2 * i + 1] = src[i] >> 4;
                }
                for (int64_t g = 0; g < pk->groups; g++) {
                    const uint8_t *lo = codes + 4 * g, *hi = codes + half + 4 * g;
                    uint8_t *d = rec + g * 64 + 4 * r;
                    for (int j = 0; j < 4; j++) d[j] = (uint8_t)(lo[j] | hi[j] << 4);
                }
            }
            float s = scales[n * pk->nb + b];
            put_val(rec + 64 * pk->groups, r, s16, s);
            if (mz)
                put_val(rec + 64 * pk->groups + pk->sbytes, r, z16,
                        mz_of(pk->N, pk->nb, pk->bits, scales, zp, off, n, b));
        }
    }
}

unsigned tdm_nbits_pk_form_union(unsigned a, unsigned b) {
    unsigned f = a & b & TDM_NBP_S16;
    if ((a | b) & TDM_NBP_MZ) f |= TDM_NBP_MZ | (a & b & TDM_NBP_MZ16);
    return f;
}

void tdm_nbits_pk_reform(const tdm_nbits_pk *src, const uint8_t *P, const tdm_nbits_pk *dst,
                         uint8_t *out) {
    if (src->form == dst->form) {
        memcpy(out, P, tdm_nbits_pk_bytes(src));
        return;
    }
    const bool s16 = dst->form & TDM_NBP_S16, mz = dst->form & TDM_NBP_MZ;
    const bool z16 = dst->form & TDM_NBP_MZ16;
    const size_t cb = (size_t)(64 * src->groups);
    for (int64_t p = 0; p < src->panels; p++)
        for (int64_t b = 0; b < src->nb; b++) {
            uint8_t *rec = out + p * dst->pstride + b * dst->bstride;
            memcpy(rec, P + p * src->pstride + b * src->bstride, cb);
            for (int r = 0; r < TDM_NBP_ROWS; r++) {
                float s, m; /* (the padding rows: zeros) */
                tdm_nbits_pk_sz(src, P, p * TDM_NBP_ROWS + r, b, &s, &m);
                put_val(rec + cb, r, s16, s);
                if (mz) put_val(rec + cb + dst->sbytes, r, z16, m);
            }
        }
}

void tdm_nbits_pk_sz(const tdm_nbits_pk *pk, const uint8_t *P, int64_t n, int64_t b, float *s,
                     float *mz) {
    int r = (int)(n % TDM_NBP_ROWS);
    const uint8_t *rec = P + (n / TDM_NBP_ROWS) * pk->pstride + b * pk->bstride;
    *s = get_val(rec + 64 * pk->groups, r, pk->form & TDM_NBP_S16);
    if (pk->form & TDM_NBP_MZ)
        *mz = get_val(rec + 64 * pk->groups + pk->sbytes, r, pk->form & TDM_NBP_MZ16);
    else
        *mz = *s * (float)(1 << (pk->bits - 1));
}

void tdm_nbits_pk_row(const tdm_nbits_pk *pk, const uint8_t *P, int64_t n, int64_t k0,
                      int64_t k1, float *out) {
    const int64_t bs = pk->bs, half = bs / 2;
    int r = (int)(n % TDM_NBP_ROWS);
    for (int64_t b = k0 / bs; b * bs < k1; b++) {
        const uint8_t *rec = P + (n / TDM_NBP_ROWS) * pk->pstride + b * pk->bstride;
        float s, mz;
        tdm_nbits_pk_sz(pk, P, n, b, &s, &mz);
        int64_t e0 = k0 > b * bs ? k0 - b * bs : 0, e1 = k1 - b * bs < bs ? k1 - b * bs : bs;
        float *o = out + b * bs - k0;
        if (e0 == 0 && e1 == bs) { /* a whole block */
            for (int64_t g = 0; g < pk->groups; g++) {
                const uint8_t *c = rec + g * 64 + 4 * r;
                for (int e = 0; e < 4; e++) {
                    if (pk->bits == 8) {
                        o[4 * g + e] = (float)c[e] * s - mz;
                    } else {
                        o[4 * g + e] = (float)(c[e] & 15) * s - mz;
                        o[half + 4 * g + e] = (float)(c[e] >> 4) * s - mz;
                    }
                }
            }
            continue;
        }
        for (int64_t e = e0; e < e1; e++) {
            int q;
            if (pk->bits == 8) {
                q = rec[(e / 4) * 64 + 4 * r + (e & 3)];
            } else {
                int64_t i = e < half ? e : e - half;
                uint8_t v = rec[(i / 4) * 64 + 4 * r + (i & 3)];
                q = e < half ? v & 15 : v >> 4;
            }
            out[b * bs + e - k0] = (float)q * s - mz;
        }
    }
}
