// moe_route on the GPU: one warp per token. Scores and selection values live in the warp's shared memory; the
// kept groups (from group ranks in registers) and the top-k experts are found by warp reductions over each lane's
// best, both with the CPU reference's tie rule (larger value first, then lower index).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/moe/route.h"

// Phase clocks of token 0's warp, compiled in only by tools/route_phase_probe.cu (which defines the hook before it
// includes this file): where a routing call's latency goes, phase by phase. Nothing here otherwise.
#ifndef HPC_ROUTE_STAMP
#define HPC_ROUTE_STAMP(phase) ((void)0)
#endif

namespace hpc {
namespace {

constexpr int kWarpsPerBlock = 4;

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

__device__ __forceinline__ float LoadValue(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

// One warp's scratch in dynamic shared memory, sized by E (the static arrays at kMaxRouteExperts were 37 KB a CTA).
__host__ __device__ constexpr int WarpScratchBytes(int experts) {
  return (experts * 8 + 15) / 16 * 16;  // score, select (f32 | order keys)
}

// A float's bits as an unsigned key in the same order (-0 folded into +0 first, as the compare treated them equal).
__device__ __forceinline__ uint32_t OrderKey(float v) {
  const uint32_t b = __float_as_uint(v + 0.f);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

template <typename T>
__device__ __forceinline__ float ToFloat(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

// One instance per logits dtype and grouping, and the per-expert loops rolled (`unroll 1`) except where loads must
// be in flight together (the logits, the softmax pass, a lane's rescan): the kernel is a few microseconds of latency
// at T = 1 whose instructions run cold on one SM, so its size is part of its time (session 55's reading; the single
// kernel held three dtype paths, unrolled by 4, 1712 instructions; ~700 now). What it costs in a chain of routing
// calls at E = 128 k = 8 (H100): 7.6 us (session 55) -> 4.6 (rolled, the top-k by warp reductions; session 56) ->
// 3.3 (loads in flight together, session 57; a one-element add costs 1.4 in the same chain).
template <typename LogitT, bool kGrouped>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) MoeRouteKernel(const __grid_constant__ RouteParams p) {
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  HPC_ROUTE_STAMP(0);
  PdlWait();
  if (t >= p.tokens) return;  // whole warps exit together
  HPC_ROUTE_STAMP(1);
  const int experts = p.experts;
  unsigned char* mine = route_smem + warp * WarpScratchBytes(experts);
  float* score = reinterpret_cast<float*>(mine);
  float* select = score + experts;
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
  HPC_ROUTE_STAMP(2);
  float sum = 0.f;
  if (p.sigmoid) {
#pragma unroll 1
    for (int e = lane; e < experts; e += 32) score[e] = 1.f / (1.f + expf(-score[e]));
  } else {
    // Branch-free and unrolled: the elements' shared-memory loads and exps overlap (rolled, with the sigmoid choice
    // inside, each element was one load -> exp -> store chain after the other).
#pragma unroll 4
    for (int e = lane; e < experts; e += 32) {
      const float s = expf(score[e] - mx);
      score[e] = s;
      sum += s;
    }
#pragma unroll
    for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  HPC_ROUTE_STAMP(3);
  // Selection values. Ungrouped, what is stored is each one's order key (below) and every lane keeps its best as
  // it goes, so the top-k's first round scans nothing.
  uint32_t* key = reinterpret_cast<uint32_t*>(select);
  uint32_t my_key = 0;  // key 0: nothing eligible (every real value's key is larger)
  int my_best = INT_MAX;
#pragma unroll 1
  for (int e = lane; e < experts; e += 32) {
    if (!p.sigmoid) score[e] /= sum;
    const float v = score[e] + (p.bias ? LoadValue(p.bias, p.bias_dtype, e) : 0.f);
    if constexpr (kGrouped) {
      select[e] = v;
    } else {
      const uint32_t k = max(OrderKey(v), 1u);  // (-NaN's key 0 made eligible)
      key[e] = k;
      if (k > my_key) my_key = k, my_best = e;  // strictly: the lower index stays on ties
    }
  }
  __syncwarp();
  HPC_ROUTE_STAMP(4);

  // Grouped: the groups' ranks in registers (lane g holds groups g and g + 32; num_groups <= 64), the topk_groups
  // best picked by the same warp reductions as the experts below, and the experts of the other groups marked taken
  // in each lane's mask (so no rescan divides e / group_size or loads a kept flag). A group's top two are found with
  // the inner loop's loads in flight together (the loop was rolled, each load waiting for the last: group_size
  // round trips).
  // DeepSeek-V3's grouped call (E = 256, 8 groups, 4 kept) in a chain: 15.2 -> 7.5 us on an H100 (session 58,
  // experiment 87; the warp arg-max rounds, shared-memory ranks and per-expert kept flags before).
  uint32_t taken_mask = 0;
  if constexpr (kGrouped) {
    const int group_size = experts / p.num_groups;
    uint32_t gkey[2] = {0u, 0u};  // key 0: no group there, or already kept
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int g = lane + 32 * s;
      if (g >= p.num_groups) continue;
      float first = -INFINITY, second = -INFINITY;
#pragma unroll 4
      for (int e = g * group_size; e < (g + 1) * group_size; ++e) {
        const float v = select[e];
        const bool above = v > first;
        second = above ? first : (v > second ? v : second);
        first = above ? v : first;
      }
      gkey[s] = max(OrderKey(p.bias && group_size > 1 ? first + second : first), 1u);
    }
    uint64_t kept = 0;  // warp-uniform
#pragma unroll 1
    for (int i = 0; i < p.topk_groups; ++i) {
      const bool hi = gkey[1] > gkey[0];  // ties: the lower group (lane's first)
      const uint32_t mine = hi ? gkey[1] : gkey[0];
      const uint32_t best = __reduce_max_sync(0xffffffffu, mine);
      const uint32_t cand = mine == best ? static_cast<uint32_t>(lane + (hi ? 32 : 0)) : 0xffffffffu;
      const int g = static_cast<int>(__reduce_min_sync(0xffffffffu, cand));
      kept |= uint64_t{1} << g;
      if (g == lane) gkey[0] = 0u;  // (no dynamic index: the pair stays in registers)
      if (g == lane + 32) gkey[1] = 0u;
    }
    int i = 0;
#pragma unroll 1
    for (int e = lane; e < experts; e += 32, ++i) {
      if (!(kept >> (e / group_size) & 1u)) taken_mask |= 1u << i;
    }
  }
  HPC_ROUTE_STAMP(5);

  // Top-k by warp reductions: each lane keeps the best of its own experts (e = lane + 32 i, taken ones flagged in a
  // register mask, E <= 1024) as an order-preserving key; a round is one max over the keys and one min over the
  // indices holding it (the tie rule: larger value, then lower index), and only the winning lane rescans. The scan
  // of every expert per round, each a shared-memory round trip, was the routing's critical path (~450 cycles a
  // round; a chain of moe_route calls measured 6.4 us each at E = 128 against 4.7 at E = 64, session 56).
  // A rescan loads every key of the lane whether taken or not, so its loads are in flight together (skipping the
  // taken ones put each load behind a branch: one shared-memory round trip per expert, ~370 cycles a round -- top_k
  // 1 -> 8 cost 1.3 us at E = 32; with this, the stored keys and the branch-free softmax pass, a chain's call went
  // 4.6 -> 3.3 us at E = 128, 7.0 -> 4.2 at 256, 11.7 -> 6.0 at 512; session 57, experiment 86).
  const auto lane_best = [&] {
    my_key = 0, my_best = INT_MAX;
    int i = 0;
#pragma unroll 4
    for (int e = lane; e < experts; e += 32, ++i) {
      uint32_t k = kGrouped ? max(OrderKey(select[e]), 1u) : key[e];
      if (taken_mask >> i & 1u) k = 0;  // taken, or (grouped) not in a kept group
      if (k > my_key) my_key = k, my_best = e;
    }
  };
  bool rescan = kGrouped;  // grouped: every lane first (its groups' eligibility is known now), then the winner
  float my_weight = 0.f;
  int my_id = -1;
  float total = 0.f;
#pragma unroll 1
  for (int j = 0; j < p.top_k; ++j) {
    if (rescan) lane_best();
    const uint32_t best = __reduce_max_sync(0xffffffffu, my_key);
    const uint32_t mine = my_key == best ? static_cast<uint32_t>(my_best) : 0xffffffffu;
    const int e = static_cast<int>(__reduce_min_sync(0xffffffffu, mine));
    const float w = score[e];
    total += w;
    if (lane == j) my_weight = w, my_id = e;
    rescan = (e & 31) == lane;
    if (rescan) taken_mask |= 1u << (e / 32);
  }
  HPC_ROUTE_STAMP(6);
  // (Triggering the next kernel right after PdlWait instead: slower with the old kernel, no faster with this one;
  // session 56, experiments 79 / 80 / 81.)
  PdlLaunchDependents();
  if (lane < p.top_k) {
    const float norm = p.renormalize && total > 0.f ? p.routed_scaling / total : p.routed_scaling;
    p.weights[static_cast<int64_t>(t) * p.top_k + lane] = my_weight * norm;
    p.ids[static_cast<int64_t>(t) * p.top_k + lane] = my_id;
  }
  HPC_ROUTE_STAMP(7);
}

template <typename LogitT>
Status LaunchFor(const RouteParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  auto* kernel = p.num_groups > 1 ? &MoeRouteKernel<LogitT, true> : &MoeRouteKernel<LogitT, false>;
  return Launch("moe_route kernel launch", kernel, grid, dim3(kWarpsPerBlock * 32), smem, stream, p);
}

}  // namespace

Status MoeRouteCuda(const MoeRouteArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateMoeRoute(a));
  if (a.router_logits.device != DeviceKind::kCuda) return Status::Internal("moe_route: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.router_logits.device_id));
  return LaunchMoeRoute(a, stream);
}

Status LaunchMoeRoute(const MoeRouteArgs& a, cudaStream_t stream) {
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
  if (p.tokens == 0) return Status::Ok();
  const dim3 grid((p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * WarpScratchBytes(p.experts);  // <= 38 KB at E = 1024
  switch (p.logits_dtype) {
    case DType::kBF16: return LaunchFor<__nv_bfloat16>(p, grid, smem, stream);
    case DType::kF16: return LaunchFor<__half>(p, grid, smem, stream);
    default: return LaunchFor<float>(p, grid, smem, stream);
  }
}

}  // namespace hpc
