// moe_route's per-token routine (route.h's definition), one warp per token: the moe_route kernel runs it over a
// grid, and fused_moe's stream kernels run it inside every CTA (fused routing, no separate launch). One source,
// so fused routing gives moe_route's ids and weights bit for bit.
//
// Per token: scores and selection values in two arrays of the warp's shared memory (`scratch`, 2 * experts
// floats); group ranks, kept groups and taken experts in registers (expert e is lane e % 32's bit e / 32, group g
// lane g % 32's slot g / 32; kept groups are a warp-uniform mask). Group ranks and the top-k come from warp-wide
// arg-max rounds with the CPU reference's tie rule (larger value first, then lower index).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "csrc/moe/route.h"

namespace hpc::moe {

__device__ __forceinline__ float RouteLoad(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Warp arg-max of (value, index): larger value wins, then lower index; index -1 = no candidate.
__device__ __forceinline__ int RouteArgMax(float value, int index) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, o);
    const int i = __shfl_xor_sync(0xffffffffu, index, o);
    if (i >= 0 && (index < 0 || v > value || (v == value && i < index))) value = v, index = i;
  }
  return index;
}

// Routes token t (the whole warp calls it): lane j < top_k gets the j-th choice (best first) in *weight / *id.
// `scratch`: 2 * experts floats of this warp's shared memory.
__device__ __forceinline__ void RouteToken(const RouteParams& p, int t, float* scratch, float* weight, int32_t* id) {
  const int lane = threadIdx.x % 32;
  float* score = scratch;
  float* select = scratch + p.experts;
  const int64_t row = t * p.logits_stride;

  float mx = -INFINITY;
  for (int e = lane; e < p.experts; e += 32) {
    const float x = RouteLoad(p.logits, p.logits_dtype, row + e);
    score[e] = x;
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  for (int e = lane; e < p.experts; e += 32) {
    const float s = p.sigmoid ? 1.f / (1.f + expf(-score[e])) : expf(score[e] - mx);
    score[e] = s;
    sum += s;
  }
  if (!p.sigmoid) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  for (int e = lane; e < p.experts; e += 32) {
    if (!p.sigmoid) score[e] /= sum;
    select[e] = score[e] + (p.bias ? RouteLoad(p.bias, p.bias_dtype, e) : 0.f);
  }
  __syncwarp();

  const bool grouped = p.num_groups > 1;
  const int group_size = grouped ? p.experts / p.num_groups : p.experts;
  uint64_t kept = ~uint64_t{0};  // warp-uniform: bit g = group g is eligible
  if (grouped) {
    float rank[2] = {-INFINITY, -INFINITY};  // groups lane and lane + 32 (num_groups <= 64)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int g = lane + 32 * s;
      if (g >= p.num_groups) continue;
      float first = -INFINITY, second = -INFINITY;
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float v = select[e];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      rank[s] = p.bias && group_size > 1 ? first + second : first;
    }
    kept = 0;
    for (int i = 0; i < p.topk_groups; ++i) {
      float best = -INFINITY;
      int best_g = -1;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const int g = lane + 32 * s;
        if (g < p.num_groups && !((kept >> g) & 1) && (best_g < 0 || rank[s] > best)) best = rank[s], best_g = g;
      }
      kept |= uint64_t{1} << RouteArgMax(best, best_g);
    }
  }

  uint32_t taken = 0;  // bit i: expert lane + 32 i was chosen
  float my_weight = 0.f, total = 0.f;
  int my_id = -1;
  for (int j = 0; j < p.top_k; ++j) {
    float best = -INFINITY;
    int best_e = -1;
    for (int e = lane, i = 0; e < p.experts; e += 32, ++i) {
      const bool eligible = !((taken >> i) & 1) && (!grouped || ((kept >> (e / group_size)) & 1));
      if (eligible && (best_e < 0 || select[e] > best)) best = select[e], best_e = e;
    }
    const int e = RouteArgMax(best, best_e);
    const float w = score[e];
    total += w;
    if (lane == j) my_weight = w, my_id = e;
    if (lane == e % 32) taken |= 1u << (e / 32);
  }
  const float norm = p.renormalize && total > 0.f ? p.routed_scaling / total : p.routed_scaling;
  *weight = my_weight * norm;
  *id = my_id;
}

// fused_moe's in-CTA routing: the CTA's first `warps` warps route tokens w, w + warps, ..., each in its own
// 2 * experts floats of `scratch`; pair t * top_k + j's id -> ids[pair] and weight -> weights[pair] (both shared
// memory; weights may be null), and to out_ids / out_weights too when given (global: the op's outputs). The
// caller synchronizes before reading ids / weights.
__device__ __forceinline__ void RouteIntoShared(const RouteParams& p, int warps, float* scratch, int32_t* ids,
                                                float* weights, int32_t* out_ids, float* out_weights) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= warps) return;
  float* mine = scratch + static_cast<int64_t>(warp) * 2 * p.experts;
  for (int t = warp; t < p.tokens; t += warps) {
    float w;
    int32_t e;
    RouteToken(p, t, mine, &w, &e);
    if (lane < p.top_k) {
      const int pair = t * p.top_k + lane;
      ids[pair] = e;
      if (weights) weights[pair] = w;
      if (out_ids) out_ids[pair] = e, out_weights[pair] = w;
    }
    __syncwarp();  // the next token's scores overwrite this one's
  }
}

}  // namespace hpc::moe
