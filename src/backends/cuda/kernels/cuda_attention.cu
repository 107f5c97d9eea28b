/* CUDA kernel: tandem's fused Attention (src/ops/fused.h), straightforward version. A block
 * per score row (b, h, s): the scaled query row goes to shared memory, a warp per key
 * computes q.k (coalesced over the head dimension), the row of scores (+ mask) stays in
 * shared memory for a numerically stable softmax, then a thread per output column sums
 * p_t * v[t][j]. float32 accumulation for every dtype. */
#include "backends/cuda/kernels/cuda_common.cuh"

#define ATTN_THREADS 128
#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float attn_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

/* block-wide max / sum through 32 floats of shared memory (uniform calls) */
__device__ float attn_block_reduce(float v, float *sh, bool is_max) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(FULL_MASK, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    __syncthreads();
    if (lane == 0) sh[w] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.0f);
    for (int o = 16; o > 0; o >>= 1) {
        float u = __shfl_xor_sync(FULL_MASK, v, o);
        v = is_max ? fmaxf(v, u) : v + u;
    }
    return v;
}

template <typename T>
__global__ void k_attention(const T *q, const T *k, const T *v, const T *mask, T *y,
                            tcu_attn_desc d) {
    extern __shared__ float smem[];
    __shared__ float red[32];
    float *qs = smem;          /* D */
    float *sc = smem + d.D;    /* To */
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    int64_t rows = d.B * d.H * d.So;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        int64_t s = row % d.So, p = row / d.So, h = p % d.H, b = p / d.H;
        const T *qr = q + b * d.q_stride[0] + h * d.q_stride[1] + (d.S == 1 ? 0 : s) * d.D;
        const T *kb = k + b * d.k_stride[0] + h * d.k_stride[1];
        const T *vb = v + b * d.v_stride[0] + h * d.v_stride[1];
        const T *mr = mask ? mask + b * d.mask_stride[0] + h * d.mask_stride[1] +
                                 s * d.mask_stride[2]
                           : NULL;
        __syncthreads(); /* the previous row's readers of qs / sc are done */
        for (int64_t j = threadIdx.x; j < d.D; j += blockDim.x) qs[j] = tcu_to_f(qr[j]) * d.scale;
        __syncthreads();
        for (int64_t t = warp; t < d.To; t += nwarps) {
            const T *kr = kb + (d.T == 1 ? 0 : t) * d.D;
            float dot = 0.0f;
            for (int64_t j = lane; j < d.D; j += 32) dot += qs[j] * tcu_to_f(kr[j]);
            dot = attn_warp_sum(dot);
            if (lane == 0) sc[t] = dot + (mr ? tcu_to_f(mr[t * d.mask_stride[3]]) : 0.0f);
        }
        __syncthreads();
        float m = -INFINITY;
        for (int64_t t = threadIdx.x; t < d.To; t += blockDim.x) m = fmaxf(m, sc[t]);
        m = attn_block_reduce(m, red, true);
        if (!(m > -INFINITY)) m = 0.0f; /* a fully masked row: exp gives 0s, then 0/0 = NaN
                                           like the reference */
        float sum = 0.0f;
        for (int64_t t = threadIdx.x; t < d.To; t += blockDim.x) {
            float e = expf(sc[t] - m);
            sc[t] = e;
            sum += e;
        }
        sum = attn_block_reduce(sum, red, false); /* its barriers also publish sc */
        float inv = 1.0f / sum;
        T *yr = y + row * d.Dv;
        for (int64_t j = threadIdx.x; j < d.Dv; j += blockDim.x) {
            float acc = 0.0f;
            for (int64_t t = 0; t < d.To; t++) acc += sc[t] * tcu_to_f(vb[t * d.Dv + j]);
            yr[j] = tcu_from_f<T>(acc * inv);
        }
    }
}

extern "C" int tcu_attention(int dtype, const void *q, const void *k, const void *v,
                             const void *mask, void *y, const tcu_attn_desc *d, void *stream) {
    if (!d || d->B < 0 || d->H < 0 || d->So < 0 || d->To < 0 || d->D < 0 || d->Dv < 0 ||
        d->S < 1 || d->T < 1 || (d->S != d->So && d->S != 1) || (d->T != d->To && d->T != 1))
        return TCU_E_ARG;
    int64_t rows = d->B * d->H * d->So;
    if (!rows || !d->Dv) return 0;
    if (!d->To) return TCU_E_ARG; /* softmax over nothing */
    /* q row and scores in shared memory: under the 48 KB a block gets without opting in */
    if (d->To > TCU_ATTN_MAX_T || d->D + d->To > 12000) return TCU_E_TOO_LARGE;
    size_t shmem = (size_t)(d->D + d->To) * sizeof(float);
    unsigned g = (unsigned)(rows < 65536 ? rows : 65536);
    cudaStream_t st = TCU_STREAM(stream);
    switch (dtype) {
#define L_(T)                                                                              \
    k_attention<T><<<g, ATTN_THREADS, shmem, st>>>((const T *)q, (const T *)k, (const T *)v, \
                                                   (const T *)mask, (T *)y, *d)
        TCU_FLOAT_CASES(L_)
#undef L_
    default:
        return TCU_E_DTYPE;
    }
    return tcu_launched();
}
