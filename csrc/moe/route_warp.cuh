// moe_route's per-token routine (route.h's rule), one warp per token. The moe_route kernel (route.cu) runs it over
// a grid; fused_moe's single-token wgmma gate-up runs it inside its CTAs instead of waiting for that kernel
// (fused_moe_stream.cu, StreamRoutesInCta). One source, so both give the same ids and weights bit for bit.
#pragma once

#include <climits>
#include <cstdint>

#include "csrc/common/numeric.h"
#include "csrc/moe/route.h"

namespace hpc {

struct RouteParams {
  const void* logits;
  int64_t logits_stride;
  DType logits_dtype;
  const void* bias;
  DType bias_dtype;
  float* weights;
  int32_t* ids;
  int tokens, experts, top_k, num_groups, topk_groups;
  bool sigmoid, renormalize;
  float routed_scaling;
};

inline RouteParams RouteParamsOf(const MoeRouteArgs& a) {
  RouteParams p = {};
  p.logits = a.router_logits.data;
  p.logits_stride = a.router_logits.strides[0];
  p.logits_dtype = a.router_logits.dtype;
  p.bias = a.correction_bias.present() ? a.correction_bias.data : nullptr;
  p.bias_dtype = a.correction_bias.dtype;
  p.weights = a.topk_weights.ptr<float>();
  p.ids = a.topk_ids.ptr<int32_t>();
  p.tokens = static_cast<int>(a.router_logits.shape[0]);
  p.experts = static_cast<int>(a.router_logits.shape[1]);
  p.top_k = a.top_k;
  p.num_groups = a.num_groups;
  p.topk_groups = a.topk_groups;
  p.sigmoid = a.scoring == RouteScoring::kSigmoid;
  p.renormalize = a.renormalize;
  p.routed_scaling = a.routed_scaling;
  return p;
}

constexpr int kRouteMaxGroups = 64;

// One warp's scratch in shared memory, sized by E: score, select (f32); group rank (f32), kept (u8).
HPC_HD constexpr int RouteWarpScratchBytes(int experts) {
  return ((experts * 8 + kRouteMaxGroups * 5) + 15) / 16 * 16;
}

#ifdef __CUDACC__
namespace route {

__device__ __forceinline__ float LoadValue(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// Warp arg-max of (value, index): larger value wins, then lower index. Returns the winning index (-1 if all
// values are -inf and indices are -1).
__device__ __forceinline__ int WarpArgMax(float value, int index) {
#pragma unroll
  for (int o = 16; o > 0; o /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, value, o);
    const int i = __shfl_xor_sync(0xffffffffu, index, o);
    if (i >= 0 && (index < 0 || v > value || (v == value && i < index))) value = v, index = i;
  }
  return index;
}

// A float's bits as an unsigned key in the same order (-0 folded into +0 first, as the compare treated them equal).
__device__ __forceinline__ uint32_t OrderKey(float v) {
  const uint32_t b = __float_as_uint(v + 0.f);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

}  // namespace route

// Routes token t (the whole warp calls it; `mine`: its RouteWarpScratchBytes(E) of shared memory): lane j < top_k
// gets the j-th choice (best first) in weight / id. One instance per logits dtype and grouping, the per-expert loops
// rolled (`unroll 1`) except where loads must be in flight together (the logits, a lane's rescan): a few
// microseconds of latency at T = 1 whose instructions run cold on one SM, so its size is part of its time (session
// 55's reading; the single kernel held three dtype paths, unrolled by 4, 1712 instructions; ~520 since, and a chain
// of routing calls went 7.6 -> 4.6 us each at E = 128 with the top-k below, H100, session 56).
template <typename LogitT, bool kGrouped>
__device__ __forceinline__ void RouteTokenWarp(const RouteParams& p, int t, unsigned char* mine, float& weight,
                                               int& id) {
  using namespace route;
  const int lane = threadIdx.x % 32;
  const int experts = p.experts;
  float* score = reinterpret_cast<float*>(mine);
  float* select = score + experts;
  float* group_rank = select + experts;
  unsigned char* group_kept = reinterpret_cast<unsigned char*>(group_rank + kRouteMaxGroups);
  const LogitT* row = static_cast<const LogitT*>(p.logits) + t * p.logits_stride;

  float mx = -INFINITY;
#pragma unroll 4  // the logits' global loads in flight together (rolled, each waited for the last: 4 at E = 128)
  for (int e = lane; e < experts; e += 32) {
    const float x = ToFloat(row[e]);
    score[e] = x;
    mx = fmaxf(mx, x);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  float sum = 0.f;
#pragma unroll 1
  for (int e = lane; e < experts; e += 32) {
    const float s = p.sigmoid ? 1.f / (1.f + expf(-score[e])) : expf(score[e] - mx);
    score[e] = s;
    sum += s;
  }
  if (!p.sigmoid) {
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
#pragma unroll 1
  for (int e = lane; e < experts; e += 32) {
    if (!p.sigmoid) score[e] /= sum;
    select[e] = score[e] + (p.bias ? LoadValue(p.bias, p.bias_dtype, e) : 0.f);
  }
  __syncwarp();

  const int group_size = kGrouped ? experts / p.num_groups : experts;
  if constexpr (kGrouped) {
#pragma unroll 1
    for (int g = lane; g < p.num_groups; g += 32) {
      float first = -INFINITY, second = -INFINITY;
#pragma unroll 1
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float v = select[e];
        if (v > first) {
          second = first;
          first = v;
        } else if (v > second) {
          second = v;
        }
      }
      group_rank[g] = p.bias && group_size > 1 ? first + second : first;
      group_kept[g] = 0;
    }
    __syncwarp();
#pragma unroll 1
    for (int i = 0; i < p.topk_groups; ++i) {
      float best = -INFINITY;
      int best_g = -1;
#pragma unroll 1
      for (int g = lane; g < p.num_groups; g += 32) {
        if (!group_kept[g] && (best_g < 0 || group_rank[g] > best)) best = group_rank[g], best_g = g;
      }
      const int g = WarpArgMax(best, best_g);
      if (lane == 0) group_kept[g] = 1;
      __syncwarp();
    }
  }

  // Top-k by warp reductions: each lane keeps the best of its own experts (e = lane + 32 i, taken ones flagged in a
  // register mask, E <= 1024) as an order-preserving key; a round is one max over the keys and one min over the
  // indices holding it (the tie rule: larger value, then lower index), and only the winning lane rescans. The scan
  // of every expert per round, each a shared-memory round trip, was the routing's critical path (~450 cycles a
  // round; a chain of moe_route calls measured 6.4 us each at E = 128 against 4.7 at E = 64, session 56).
  uint32_t taken_mask = 0;
  uint32_t my_key;
  int my_best;
  const auto lane_best = [&] {
    my_key = 0, my_best = INT_MAX;  // key 0: nothing eligible (every real value's key is larger)
    int i = 0;
#pragma unroll 4
    for (int e = lane; e < experts; e += 32, ++i) {
      if ((taken_mask >> i & 1u) || (kGrouped && !group_kept[e / group_size])) continue;
      const uint32_t k = max(OrderKey(select[e]), 1u);  // (-NaN's key 0 made eligible)
      if (k > my_key) my_key = k, my_best = e;  // strictly: the lower index stays on ties
    }
  };
  bool rescan = true;  // every lane first, then the round's winner
  float my_weight = 0.f;
  int my_id = -1;
  float total = 0.f;
#pragma unroll 1
  for (int j = 0; j < p.top_k; ++j) {
    if (rescan) lane_best();
    const uint32_t best = __reduce_max_sync(0xffffffffu, my_key);
    const uint32_t cand = my_key == best ? static_cast<uint32_t>(my_best) : 0xffffffffu;
    const int e = static_cast<int>(__reduce_min_sync(0xffffffffu, cand));
    const float w = score[e];
    total += w;
    if (lane == j) my_weight = w, my_id = e;
    rescan = e % 32 == lane;
    if (rescan) taken_mask |= 1u << (e / 32);
  }
  const float norm = p.renormalize && total > 0.f ? p.routed_scaling / total : p.routed_scaling;
  weight = my_weight * norm;
  id = my_id;
}
#endif  // __CUDACC__

}  // namespace hpc
