// moe_route's per-token routine (route.h's definition), one warp per token: the moe_route kernel runs it over a
// grid, and fused_moe's stream kernels run it inside every CTA (fused routing, no separate launch). One source,
// so fused routing gives moe_route's ids and weights bit for bit.
//
// Per token: scores and selection values in registers (expert e is lane e % 32's slot e / 32), group ranks through
// the warp's shared memory (`scratch`); group ranks and the top-k come from warp-wide arg-max rounds with the CPU
// reference's tie rule (larger value first, then lower index).
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

// A lane's logits (experts lane + 32 i, -inf past the experts), all loads issued together: one memory round trip
// per token instead of one per element.
template <int kSlots, typename T>
__device__ __forceinline__ void LoadSlots(const T* row, int experts, int lane, float (&x)[kSlots]) {
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    x[i] = e < experts ? static_cast<float>(row[e]) : -INFINITY;
  }
}

// Routes token t (the whole warp calls it): lane j < top_k gets the j-th choice (best first) in *weight / *id.
// kSlots: experts per lane (experts <= 32 * kSlots); scores and selection values stay in registers (expert
// lane + 32 i in slot i), so the top-k rounds are register compares plus one warp arg-max each. `scratch`: the
// warp's shared memory, used for the group ranks only (experts floats). Same arithmetic, in the same order, as
// moe_route always did: sums over a lane's experts in ascending order, then the xor tree.
template <int kSlots>
__device__ __forceinline__ void RouteTokenIn(const RouteParams& p, int t, float* scratch, float* weight, int32_t* id) {
  const int lane = threadIdx.x % 32;
  const int64_t row = t * p.logits_stride;
  float x[kSlots];
  switch (p.logits_dtype) {
    case DType::kBF16: LoadSlots(static_cast<const __nv_bfloat16*>(p.logits) + row, p.experts, lane, x); break;
    case DType::kF16: LoadSlots(static_cast<const __half*>(p.logits) + row, p.experts, lane, x); break;
    default: LoadSlots(static_cast<const float*>(p.logits) + row, p.experts, lane, x);
  }
  float mx = -INFINITY;
#pragma unroll
  for (int i = 0; i < kSlots; ++i) mx = fmaxf(mx, x[i]);
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
  float score[kSlots], select[kSlots];
  uint32_t valid = 0;  // bit i: slot i is an expert
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const bool ok = lane + 32 * i < p.experts;
    valid |= ok ? 1u << i : 0u;
    const float s = p.sigmoid ? 1.f / (1.f + expf(-x[i])) : expf(x[i] - mx);
    score[i] = ok ? s : 0.f;
    if (ok) sum += s;
  }
  if (!p.sigmoid) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
#pragma unroll
  for (int i = 0; i < kSlots; ++i) {
    const int e = lane + 32 * i;
    if (!p.sigmoid) score[i] /= sum;
    select[i] = score[i] + (p.bias && e < p.experts ? RouteLoad(p.bias, p.bias_dtype, e) : 0.f);
  }

  const bool grouped = p.num_groups > 1;
  const int group_size = grouped ? p.experts / p.num_groups : p.experts;
  uint32_t allowed = valid;  // bit i: slot i may be chosen (an expert of a kept group)
  if (grouped) {
    // group ranks over experts spread across lanes: the selection values through shared memory
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if ((valid >> i) & 1) scratch[lane + 32 * i] = select[i];
    }
    __syncwarp();
    float rank[2] = {-INFINITY, -INFINITY};  // groups lane and lane + 32 (num_groups <= 64)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int g = lane + 32 * s;
      if (g >= p.num_groups) continue;
      float first = -INFINITY, second = -INFINITY;
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float v = scratch[e];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      rank[s] = p.bias && group_size > 1 ? first + second : first;
    }
    __syncwarp();  // (the next token's values overwrite these)
    uint64_t kept = 0;  // warp-uniform: bit g = group g is eligible
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
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if (!((kept >> ((lane + 32 * i) / group_size)) & 1)) allowed &= ~(1u << i);
    }
  }

  float my_weight = 0.f, total = 0.f;
  int my_id = -1;
  for (int j = 0; j < p.top_k; ++j) {
    float best = -INFINITY, best_score = 0.f;
    int best_e = -1;
#pragma unroll
    for (int i = 0; i < kSlots; ++i) {
      if (((allowed >> i) & 1) && (best_e < 0 || select[i] > best)) {
        best = select[i], best_score = score[i], best_e = lane + 32 * i;
      }
    }
    const int e = RouteArgMax(best, best_e);
    const float w = __shfl_sync(0xffffffffu, best_score, e % 32);  // the winner's own lane holds its score
    total += w;
    if (lane == j) my_weight = w, my_id = e;
    if (lane == e % 32) allowed &= ~(1u << (e / 32));
  }
  const float norm = p.renormalize && total > 0.f ? p.routed_scaling / total : p.routed_scaling;
  *weight = my_weight * norm;
  *id = my_id;
}

// Up to 256 experts (every model the bench knows) in 8 slots a lane; up to kMaxRouteExperts in 32.
__device__ __forceinline__ void RouteToken(const RouteParams& p, int t, float* scratch, float* weight, int32_t* id) {
  static_assert(kMaxRouteExperts <= 32 * 32, "a lane's taken / allowed bits are one word");
  if (p.experts <= 256) {
    RouteTokenIn<8>(p, t, scratch, weight, id);
  } else {
    RouteTokenIn<32>(p, t, scratch, weight, id);
  }
}

// fused_moe's in-CTA routing (experts <= kMaxInKernelRouteExperts): the CTA's first `warps` warps route tokens w, w + warps, ..., each in its own
// `experts` floats of `scratch`; pair t * top_k + j's id -> ids[pair] and weight -> weights[pair] (both shared
// memory; weights may be null), and to out_ids / out_weights too when given (global: the op's outputs). The
// caller synchronizes before reading ids / weights.
__device__ __forceinline__ void RouteIntoShared(const RouteParams& p, int warps, float* scratch, int32_t* ids,
                                                float* weights, int32_t* out_ids, float* out_weights) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp >= warps) return;
  float* mine = scratch + static_cast<int64_t>(warp) * p.experts;
  for (int t = warp; t < p.tokens; t += warps) {
    float w;
    int32_t e;
    RouteTokenIn<kMaxInKernelRouteExperts / 32>(p, t, mine, &w, &e);
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
