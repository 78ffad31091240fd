// rope_norm's general kernel: any head_dim that is a multiple of 8, any rotary_dim, cos/sin in any float type.
// Each (token, head) row of q, k and v is owned by a group of G lanes, 8 elements (16 bytes) per lane; a group
// holds up to kRows rows of one token. Per row: 16-byte load -> [RMSNorm: group shuffle-sum] -> RoPE (neox
// partners exchanged by shuffles, or through shared memory when rotary_dim/2 is not a multiple of 8) ->
// [RMSNorm] -> store q (or fp8 q + per-row scale), or K/V straight into their paged-cache slot (fp8: saturated
// x/scale). The common shapes take the paired kernel (rope_norm_paired.cuh) instead.
#pragma once

#include "csrc/common/launch.cuh"
#include "csrc/rope_norm/rope_norm_params.cuh"

namespace hpc {
namespace rope_norm_detail {

// RMSNorm over the row held by the group. All lanes call it (shuffles); only `apply` rows change.
template <int G>
__device__ __forceinline__ void RmsNormRow(float (&x)[8], bool apply, const void* w, DType w_dtype, int lane,
                                           float inv_head_dim, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) ss += x[i] * x[i];
  ss = GroupSum<G>(ss);
  if (!apply) return;
  float wv[8];
  LoadWeight8(w, w_dtype, lane * kVec, wv);
  const float inv = rsqrtf(ss * inv_head_dim + eps);
#pragma unroll
  for (int i = 0; i < kVec; ++i) x[i] = x[i] * inv * wv[i];
}

// cos/sin for this lane's 8 elements: element e uses index e (neox, e < rot/2), e - rot/2 (neox, second half)
// or e/2 (gptj). The rotation's sign is folded into s here, once per token: y = x c + partner s, where s is
// negated for the element that takes -partner (neox first half, gptj even elements).
__device__ __forceinline__ void LoadCosSin(const RopeNormParams& p, int64_t pos, int lane, float (&c)[8],
                                           float (&s)[8]) {
  const int half = p.rotary_dim / 2;
  const int64_t row = pos * p.cos_sin_stride;
  const int first = lane * kVec;
  if (p.fast_rope) {
    const float* base = static_cast<const float*>(p.cos_sin) + row;
    if (p.neox) {
      if (first >= p.rotary_dim) return;  // lane outside the rotary part
      const int idx = first < half ? first : first - half;
      const float4 c0 = *reinterpret_cast<const float4*>(base + idx);
      const float4 c1 = *reinterpret_cast<const float4*>(base + idx + 4);
      const float4 s0 = *reinterpret_cast<const float4*>(base + half + idx);
      const float4 s1 = *reinterpret_cast<const float4*>(base + half + idx + 4);
      const float sign = first < half ? -1.0f : 1.0f;
      c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
      s[0] = sign * s0.x, s[1] = sign * s0.y, s[2] = sign * s0.z, s[3] = sign * s0.w;
      s[4] = sign * s1.x, s[5] = sign * s1.y, s[6] = sign * s1.z, s[7] = sign * s1.w;
    } else {
      if (first >= p.rotary_dim) return;
      const float4 c0 = *reinterpret_cast<const float4*>(base + first / 2);
      const float4 s0 = *reinterpret_cast<const float4*>(base + half + first / 2);
      const float cv[4] = {c0.x, c0.y, c0.z, c0.w}, sv[4] = {s0.x, s0.y, s0.z, s0.w};
#pragma unroll
      for (int i = 0; i < kVec; ++i) c[i] = cv[i / 2], s[i] = (i % 2 == 0 ? -1.0f : 1.0f) * sv[i / 2];
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int e = first + i;
    int idx = p.neox ? (e < half ? e : e - half) : e / 2;
    if (e >= p.rotary_dim) idx = 0;  // not rotated; any valid index
    const bool negate = p.neox ? e < half : e % 2 == 0;
    c[i] = LoadAny(p.cos_sin, p.cos_sin_dtype, row + idx);
    s[i] = (negate ? -1.0f : 1.0f) * LoadAny(p.cos_sin, p.cos_sin_dtype, row + half + idx);
  }
}

// Rotary embedding of the group's row. All lanes call it (shuffles / __syncwarp); only `apply` rows change.
template <int G>
__device__ __forceinline__ void RopeRow(const RopeNormParams& p, float (&x)[8], bool apply, const float (&c)[8],
                                        const float (&s)[8], int lane, float* exchange) {
  float partner[8];
  const int half = p.rotary_dim / 2;
  const int first = lane * kVec;
  if (p.neox) {
    if (p.fast_rope) {
      // half is a multiple of 8: a lane's partner elements are the whole vector of the lane half/8 away.
      const int shift = half / kVec;
      const int src = lane < shift ? lane + shift : (lane < 2 * shift ? lane - shift : lane);
#pragma unroll
      for (int i = 0; i < kVec; ++i) partner[i] = __shfl_sync(0xffffffffu, x[i], src, G);
    } else {
      float* mine = exchange + threadIdx.x * kVec;
#pragma unroll
      for (int i = 0; i < kVec; ++i) mine[i] = x[i];
      __syncwarp();
      const float* row = exchange + (threadIdx.x - lane) * kVec;  // the group's row, element-indexed
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int e = first + i;
        partner[i] = e < p.rotary_dim ? row[e < half ? e + half : e - half] : 0.0f;
      }
    }
  }
  if (!apply) return;
  if (p.fast_rope) {
    // rot/2 is a multiple of 8 (neox) or 4 (gptj): a lane is wholly inside or outside the rotary part
    if (first >= p.rotary_dim) return;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float other = p.neox ? partner[i] : ((i % 2 == 0) ? x[i + 1] : x[i - 1]);
      partner[i] = x[i] * c[i] + other * s[i];
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[i] = partner[i];
    return;
  }
  float y[8];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    // gptj: pairs (2j, 2j+1) sit in the same lane: i even -> partner i+1, i odd -> partner i-1
    const float other = p.neox ? partner[i] : ((i % 2 == 0) ? x[i + 1] : x[i - 1]);
    y[i] = first + i < p.rotary_dim ? x[i] * c[i] + other * s[i] : x[i];
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) x[i] = y[i];
}

// One row's identity within its token: q head, k head or v head.
struct RowRef {
  int head;
  bool is_q, is_k, exists;
};

__device__ __forceinline__ RowRef DecodeRow(const RopeNormParams& p, int j) {
  RowRef r;
  r.exists = j < p.num_q_heads + 2 * p.num_kv_heads;
  r.is_q = j < p.num_q_heads;
  r.is_k = !r.is_q && j < p.num_q_heads + p.num_kv_heads;
  r.head = r.is_q ? j : (r.is_k ? j - p.num_q_heads : j - p.num_q_heads - p.num_kv_heads);
  return r;
}

// Token-major: a group of G lanes owns kRows rows of ONE token (rows j, j+S, j+2S, ... of its Hq+2Hkv rows,
// S = groups_per_token), so the token's position, slot and cos/sin are loaded once per thread and shared by its
// rows. Every load -- indices, kRows 16-byte row vectors, then cos/sin as soon as the position arrives -- is
// issued before any math: the kernel is latency-bound unless each thread keeps several loads in flight
// (bench/NOTES.md v1-v4).
template <int G, int kRows, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __launch_bounds__(kThreads, 3) RopeNormGeneralKernel(const __grid_constant__ RopeNormParams p) {
  __shared__ __align__(16) float exchange[kThreads * kVec];
  const int lane = threadIdx.x % G;
  const uint32_t group = blockIdx.x * (kThreads / G) + threadIdx.x / G;
  const uint32_t token = group / p.groups_per_token;
  const int first_row = static_cast<int>(group - token * p.groups_per_token);
  const bool token_ok = token < static_cast<uint32_t>(p.tokens);
  const bool lane_has_data = lane * kVec < p.head_dim;

  PdlWait();  // inputs may come from the previous kernel in the stream
  const int64_t pos = token_ok ? LoadIndex(p.positions, p.positions_i64, token) : 0;
  const int64_t slot = token_ok ? LoadIndex(p.slot_mapping, p.slots_i64, token) : -1;
  RowRef rows[kRows];
  float x[kRows][8];
  bool any_rotated = false;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    rows[k] = DecodeRow(p, first_row + k * p.groups_per_token);
    const RowRef& r = rows[k];
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[k][i] = 0.0f;
    if (!token_ok || !r.exists) continue;
    any_rotated = any_rotated || r.is_q || r.is_k;
    if (!lane_has_data) continue;
    const T* src = r.is_q ? static_cast<const T*>(p.q) + token * p.q_stride_t + r.head * p.q_stride_h
                 : r.is_k ? static_cast<const T*>(p.k) + token * p.k_stride_t + r.head * p.k_stride_h
                          : static_cast<const T*>(p.v) + token * p.v_stride_t + r.head * p.v_stride_h;
    LoadVec8(src + lane * kVec, x[k]);
  }
  // Out-of-range positions (only possible without HPC_XLA_CHECK) make q/k rows NaN rather than read outside
  // cos_sin_cache; out-of-range slots are not written.
  const bool pos_ok = pos >= 0 && pos < p.max_pos;
  // the token's K/V rows in the paged cache (head 0), once per thread; -1: not written
  int64_t k_dst = -1, v_dst = -1;
  if (slot >= 0 && slot < p.num_slots) {
    const int64_t block = p.num_slots <= INT32_MAX ? static_cast<uint32_t>(slot) / static_cast<uint32_t>(p.page_size)
                                                   : slot / p.page_size;
    const int64_t in_page = slot - block * p.page_size;
    k_dst = block * p.k_cache_stride_b + in_page * p.k_cache_stride_p;
    v_dst = block * p.v_cache_stride_b + in_page * p.v_cache_stride_p;
  }
  float c[8] = {}, s[8] = {};
  if (any_rotated && pos_ok && lane_has_data) LoadCosSin(p, pos, lane, c, s);
  PdlLaunchDependents();

#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const RowRef& r = rows[k];
    const bool is_v = !r.is_q && !r.is_k;
    const bool active = token_ok && r.exists && lane_has_data;
    const void* w = r.is_q ? p.q_norm_weight : (r.is_k ? p.k_norm_weight : nullptr);
    const DType w_dtype = r.is_q ? p.q_norm_dtype : p.k_norm_dtype;
    const bool normalize = active && w != nullptr;
    if (p.norm_before_rope) RmsNormRow<G>(x[k], normalize, w, w_dtype, lane, p.inv_head_dim, p.eps);
    if (k > 0) __syncwarp();  // the shared-memory exchange buffer is reused row after row
    RopeRow<G>(p, x[k], active && !is_v && pos_ok, c, s, lane, exchange);
    if (!p.norm_before_rope) RmsNormRow<G>(x[k], normalize, w, w_dtype, lane, p.inv_head_dim, p.eps);
    if (!is_v && !pos_ok) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[k][i] = __int_as_float(0x7fc00000);
    }
    float q_scale = 0.0f;
    if constexpr (kFp8Q) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(x[k][i]));
      q_scale = GroupMax<G>(amax) / kFp8E4M3Max;
    }
    if (!active) continue;
    if (r.is_q) {
      const int64_t off = token * p.q_out_stride_t + r.head * p.q_out_stride_h + lane * kVec;
      if constexpr (kFp8Q) {
        StoreE4M3x8(static_cast<uint8_t*>(p.q_out) + off, x[k], q_scale);
        if (lane == 0) p.q_scale[token * p.num_q_heads + r.head] = q_scale;
      } else {
        StoreVec8(static_cast<T*>(p.q_out) + off, x[k]);
      }
      continue;
    }
    if (k_dst < 0) continue;
    const int64_t off = r.is_k ? k_dst + r.head * p.k_cache_stride_h : v_dst + r.head * p.v_cache_stride_h;
    void* cache = r.is_k ? p.k_cache : p.v_cache;
    if constexpr (kFp8Cache) {
      StoreE4M3x8(static_cast<uint8_t*>(cache) + off + lane * kVec, x[k], r.is_k ? *p.k_scale : *p.v_scale);
    } else {
      StoreVec8(static_cast<T*>(cache) + off + lane * kVec, x[k]);
    }
  }
}

}  // namespace rope_norm_detail
}  // namespace hpc
