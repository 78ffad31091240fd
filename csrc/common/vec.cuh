// 16-byte vector moves between global memory and fp32 registers, and warp-group reductions. A "group" is G
// consecutive lanes (G a power of two <= 32) that together own one row; reductions use xor shuffles, which
// stay inside an aligned group. Every lane of the warp must call a reduction (full-mask shuffles).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "csrc/common/numeric.h"

namespace hpc {

// Eight 16-bit floats packed in 16 bytes -> fp32.
template <typename T>
__device__ __forceinline__ void UnpackVec8(const uint4& raw, float (&x)[8]) {
  static_assert(sizeof(T) == 2, "16-bit element types only");
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      // a bf16 is the top half of its fp32: one shift or one mask per element (the intrinsic spent two on the
      // high half)
      x[2 * i] = __uint_as_float(words[i] << 16);
      x[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      x[2 * i] = f.x;
      x[2 * i + 1] = f.y;
    }
  }
}

template <typename T>
__device__ __forceinline__ void LoadVec8(const T* src, float (&x)[8]) {
  UnpackVec8<T>(*reinterpret_cast<const uint4*>(src), x);
}

// One 16-byte store. (A plain `*reinterpret_cast<uint4*>(p) = ...` was split by the compiler into four 4-byte
// stores, seen in the PTX: partial-sector writes and 4x the store instructions.)
__device__ __forceinline__ void StoreGlobal16(void* dst, const uint32_t (&w)[4]) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(dst), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
               : "memory");
}

template <typename T>
__device__ __forceinline__ void StoreVec8(T* dst, const float (&x)[8]) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const __nv_bfloat162 h = __floats2bfloat162_rn(x[2 * i], x[2 * i + 1]);
      words[i] = *reinterpret_cast<const uint32_t*>(&h);
    } else {
      const __half2 h = __floats2half2_rn(x[2 * i], x[2 * i + 1]);
      words[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  StoreGlobal16(dst, words);
}

__device__ __forceinline__ void StoreGlobal16(void* dst, const uint4& v) {
  const uint32_t w[4] = {v.x, v.y, v.z, v.w};
  StoreGlobal16(dst, w);
}

// Eight floats times `mul` (QuantMultiplier of the scale), saturated to e4m3: 8 bytes as two words.
__device__ __forceinline__ uint2 PackE4M3x8Scaled(const float (&x)[8], float mul) {
  uint32_t words[2] = {0u, 0u};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 pair = make_float2(x[2 * i] * mul, x[2 * i + 1] * mul);
    const uint32_t two = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
    words[i / 2] |= two << (16 * (i % 2));
  }
  return make_uint2(words[0], words[1]);
}

__device__ __forceinline__ void StoreGlobal8(void* dst, const uint2& v) {
  asm volatile("st.global.v2.u32 [%0], {%1, %2};\n" ::"l"(dst), "r"(v.x), "r"(v.y) : "memory");
}

// Eight floats times `mul` (QuantMultiplier of the scale), saturated to e4m3 and stored as 8 bytes.
__device__ __forceinline__ void StoreE4M3x8Scaled(uint8_t* dst, const float (&x)[8], float mul) {
  StoreGlobal8(dst, PackE4M3x8Scaled(x, mul));
}

// Eight floats divided by `scale` (0 -> zeros), saturated to e4m3 and stored as 8 bytes.
__device__ __forceinline__ void StoreE4M3x8(uint8_t* dst, const float (&x)[8], float scale) {
  StoreE4M3x8Scaled(dst, x, QuantMultiplier(scale));  // same rule as QuantizeE4M3 (the CPU reference)
}

// Reductions over the G lanes of each aligned group, of N rows' values at once (the N shuffles of a step are
// independent, so N rows wait on one chain of log2(G) steps, and one convergence check, instead of N in a row).
// `mask`: the lanes taking part, the full warp by default. A partial mask that ptxas cannot prove constant costs a
// convergence check (S2R, MATCH.ANY, REDUX.OR) before each reduction: rope_norm's paired kernel gave its groups'
// masks up for the full warp (see its row loop).
template <int G, int N>
__device__ __forceinline__ void GroupSumRows(float (&v)[N], uint32_t mask = 0xffffffffu) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] += __shfl_xor_sync(mask, v[i], offset);
  }
}

template <int G, int N>
__device__ __forceinline__ void GroupMaxRows(float (&v)[N], uint32_t mask = 0xffffffffu) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = fmaxf(v[i], __shfl_xor_sync(mask, v[i], offset));
  }
}

// GroupSumRows of `sum` and GroupMaxRows of `max` in one pass.
template <int G, int N>
__device__ __forceinline__ void GroupSumMaxRows(float (&sum)[N], float (&max)[N], uint32_t mask = 0xffffffffu) {
#pragma unroll
  for (int offset = G / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const float s = __shfl_xor_sync(mask, sum[i], offset), m = __shfl_xor_sync(mask, max[i], offset);
      sum[i] += s, max[i] = fmaxf(max[i], m);
    }
  }
}

template <int G>
__device__ __forceinline__ float GroupSum(float v, uint32_t mask = 0xffffffffu) {
  float r[1] = {v};
  GroupSumRows<G>(r, mask);
  return r[0];
}

template <int G>
__device__ __forceinline__ float GroupMax(float v, uint32_t mask = 0xffffffffu) {
  float r[1] = {v};
  GroupMaxRows<G>(r, mask);
  return r[0];
}

template <int G>
__device__ __forceinline__ void GroupSumMax(float& sum, float& max, uint32_t mask = 0xffffffffu) {
  float s[1] = {sum}, m[1] = {max};
  GroupSumMaxRows<G>(s, m, mask);
  sum = s[0], max = m[0];
}

}  // namespace hpc
