/* synthetic: the AVX2 8-bit head loop (sign trick) vs an int16 vpmaddwd form, R=4 rows, K=576 (18 blocks of 32 = 8 groups of 4 k), 16 columns a panel */
#include <immintrin.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+1e-9*t.tv_nsec;}
enum {K=576, NB=K/32, G=8, P=64};
static uint8_t W[P][NB][G*64] __attribute__((aligned(64)));
static int8_t A[4][K] __attribute__((aligned(64)));
static int16_t A16[4][K] __attribute__((aligned(64)));
static int32_t S[P][4][16];
__attribute__((noinline)) void cur(void){
 const __m256i off=_mm256_set1_epi8((char)0x80), one=_mm256_set1_epi16(1);
 for(int p=0;p<P;p++){ __m256i tot[4][2]; for(int r=0;r<4;r++) tot[r][0]=tot[r][1]=_mm256_setzero_si256();
  for(int b=0;b<NB;b++){ __m256i d[4][2]; for(int r=0;r<4;r++) d[r][0]=d[r][1]=_mm256_setzero_si256();
#pragma GCC unroll 1
   for(int g=0;g<G;g++){ const __m256i *c=(const __m256i*)(W[p][b]+64*g);
    __m256i w0=_mm256_xor_si256(_mm256_loadu_si256(c),off), w1=_mm256_xor_si256(_mm256_loadu_si256(c+1),off);
    __m256i u0=_mm256_abs_epi8(w0), u1=_mm256_abs_epi8(w1);
#pragma GCC unroll 4
    for(int r=0;r<4;r++){ int32_t x; memcpy(&x,&A[r][b*32+4*g],4); __m256i a=_mm256_set1_epi32(x);
     d[r][0]=_mm256_add_epi32(d[r][0],_mm256_madd_epi16(_mm256_maddubs_epi16(u0,_mm256_sign_epi8(a,w0)),one));
     d[r][1]=_mm256_add_epi32(d[r][1],_mm256_madd_epi16(_mm256_maddubs_epi16(u1,_mm256_sign_epi8(a,w1)),one)); } }
   for(int r=0;r<4;r++){tot[r][0]=_mm256_add_epi32(tot[r][0],d[r][0]);tot[r][1]=_mm256_add_epi32(tot[r][1],d[r][1]);} }
  for(int r=0;r<4;r++){_mm256_storeu_si256((__m256i*)S[p][r],tot[r][0]);_mm256_storeu_si256((__m256i*)(S[p][r]+8),tot[r][1]);} } }
/* int16: u (0..255) zero-extended, a as int16; a group's 64 bytes: 4 k x 16 columns (dword = col's 4 k); widen 16 bytes (4 cols) -> 8 dwords (col c: (k0,k1),(k2,k3)) */
__attribute__((noinline)) void i16(void){
 for(int p=0;p<P;p++){ __m256i tot[4][2]; for(int r=0;r<4;r++) tot[r][0]=tot[r][1]=_mm256_setzero_si256();
  for(int b=0;b<NB;b++){ __m256i d[4][4]; for(int r=0;r<4;r++) d[r][0]=d[r][1]=d[r][2]=d[r][3]=_mm256_setzero_si256();
#pragma GCC unroll 1
   for(int g=0;g<G;g++){ const __m128i *c=(const __m128i*)(W[p][b]+64*g);
    __m256i x0=_mm256_cvtepu8_epi16(_mm_loadu_si128(c)), x1=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+1));
    __m256i x2=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+2)), x3=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+3));
#pragma GCC unroll 4
    for(int r=0;r<4;r++){ int64_t x; memcpy(&x,&A16[r][b*32+4*g],8); __m256i a=_mm256_set1_epi64x(x);
     d[r][0]=_mm256_add_epi32(d[r][0],_mm256_madd_epi16(x0,a)); d[r][1]=_mm256_add_epi32(d[r][1],_mm256_madd_epi16(x1,a));
     d[r][2]=_mm256_add_epi32(d[r][2],_mm256_madd_epi16(x2,a)); d[r][3]=_mm256_add_epi32(d[r][3],_mm256_madd_epi16(x3,a)); } }
   for(int r=0;r<4;r++){ /* pair the dwords: col c's two dwords adjacent -> hadd */
     __m256i h0=_mm256_hadd_epi32(d[r][0],d[r][1]), h1=_mm256_hadd_epi32(d[r][2],d[r][3]);
     tot[r][0]=_mm256_add_epi32(tot[r][0],h0);tot[r][1]=_mm256_add_epi32(tot[r][1],h1);} }
  for(int r=0;r<4;r++){_mm256_storeu_si256((__m256i*)S[p][r],tot[r][0]);_mm256_storeu_si256((__m256i*)(S[p][r]+8),tot[r][1]);} } }

__attribute__((noinline)) void i16r2(void){
 for(int p=0;p<P;p++) for(int r0=0;r0<4;r0+=2){ __m256i tot[2][2]; for(int r=0;r<2;r++) tot[r][0]=tot[r][1]=_mm256_setzero_si256();
  for(int b=0;b<NB;b++){ __m256i d[2][4]; for(int r=0;r<2;r++) d[r][0]=d[r][1]=d[r][2]=d[r][3]=_mm256_setzero_si256();
#pragma GCC unroll 1
   for(int g=0;g<G;g++){ const __m128i *c=(const __m128i*)(W[p][b]+64*g);
    __m256i x0=_mm256_cvtepu8_epi16(_mm_loadu_si128(c)), x1=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+1));
    __m256i x2=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+2)), x3=_mm256_cvtepu8_epi16(_mm_loadu_si128(c+3));
#pragma GCC unroll 2
    for(int r=0;r<2;r++){ int64_t x; memcpy(&x,&A16[r0+r][b*32+4*g],8); __m256i a=_mm256_set1_epi64x(x);
     d[r][0]=_mm256_add_epi32(d[r][0],_mm256_madd_epi16(x0,a)); d[r][1]=_mm256_add_epi32(d[r][1],_mm256_madd_epi16(x1,a));
     d[r][2]=_mm256_add_epi32(d[r][2],_mm256_madd_epi16(x2,a)); d[r][3]=_mm256_add_epi32(d[r][3],_mm256_madd_epi16(x3,a)); } }
   for(int r=0;r<2;r++){ __m256i h0=_mm256_hadd_epi32(d[r][0],d[r][1]), h1=_mm256_hadd_epi32(d[r][2],d[r][3]);
     tot[r][0]=_mm256_add_epi32(tot[r][0],h0);tot[r][1]=_mm256_add_epi32(tot[r][1],h1);} }
  for(int r=0;r<2;r++){_mm256_storeu_si256((__m256i*)S[p][r0+r],tot[r][0]);_mm256_storeu_si256((__m256i*)(S[p][r0+r]+8),tot[r][1]);} } }
int main(){ srand(1); for(size_t i=0;i<sizeof W;i++) ((uint8_t*)W)[i]=rand(); for(int r=0;r<4;r++) for(int k=0;k<K;k++){A[r][k]=rand()%255-127; A16[r][k]=A[r][k];}
 for(int rep=0;rep<3;rep++){ double t0=now(); for(int i=0;i<2000;i++) cur(); double t1=now(); for(int i=0;i<2000;i++) i16(); double t2=now(); for(int i=0;i<2000;i++) i16r2(); double t3=now();
 printf("i16r2 %.2f us ",(t3-t2)/2000*1e6);
 printf("cur %.2f us  i16 %.2f us (per call: 64 panels x 16 cols x 4 rows x 576)\n",(t1-t0)/2000*1e6,(t2-t1)/2000*1e6);} }
