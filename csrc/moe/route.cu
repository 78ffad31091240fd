// moe_route on the GPU: one warp per token. Scores and selection values live in the warp's shared memory;
// group ranks and the top-k are found by warp-wide arg-max rounds with the CPU reference's tie rule
// (larger value first, then lower index).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/moe/route.h"

namespace hpc {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxGroups = 64;

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

// One warp's scratch in dynamic shared memory, sized by E (the static arrays at kMaxRouteExperts were 37 KB a CTA).
__host__ __device__ constexpr int WarpScratchBytes(int experts) {
  return ((experts * 9 + kMaxGroups * 5) + 15) / 16 * 16;  // score, select (f32), taken (u8); group rank, kept
}

template <typename T>
__device__ __forceinline__ float ToFloat(T v) { return static_cast<float>(v); }
template <>
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }
template <>
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

// One instance per logits dtype and grouping, and the per-expert loops kept rolled (`unroll 1`): the kernel is a
// few microseconds of latency at T = 1 whose instructions run cold on one SM, so its size is part of its time
// (session 55's reading; the single kernel held three dtype paths, unrolled by 4, 1712 instructions; now 520, and a
// chain of routing calls 7.6 -> 6.4 us each at E = 128, session 56).
template <typename LogitT, bool kGrouped>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) MoeRouteKernel(const __grid_constant__ RouteParams p) {
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  PdlWait();
  // The next kernel may launch now and run its prologue while this one routes. Measured (session 56, H100): with the
  // old kernel this early trigger alone was 0..+4.9 us SLOWER a routed Qwen3 layer at T <= 4 (-0.5 on 64 experts);
  // with this lean kernel the pair is 0.4..2.8 us faster than the old kernel with the trigger at its end -- its share
  // is being separated (bench/NOTES.md). Safe: every consumer reads the ids / weights after its own PdlWait, which
  // waits for this whole grid; and PDL launches the dependent only once every CTA here has triggered or exited.
  PdlLaunchDependents();
  if (t >= p.tokens) return;  // whole warps exit together
  const int experts = p.experts;
  unsigned char* mine = route_smem + warp * WarpScratchBytes(experts);
  float* score = reinterpret_cast<float*>(mine);
  float* select = score + experts;
  float* group_rank = select + experts;
  unsigned char* taken = reinterpret_cast<unsigned char*>(group_rank + kMaxGroups);
  unsigned char* group_kept = taken + experts;
  const LogitT* row = static_cast<const LogitT*>(p.logits) + t * p.logits_stride;

  float mx = -INFINITY;
#pragma unroll 1
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
    taken[e] = 0;
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

  float my_weight = 0.f;
  int my_id = -1;
  float total = 0.f;
#pragma unroll 1
  for (int j = 0; j < p.top_k; ++j) {
    float best = -INFINITY;
    int best_e = -1;
#pragma unroll 1
    for (int e = lane; e < experts; e += 32) {
      const bool eligible = !taken[e] && (!kGrouped || group_kept[e / group_size]);
      if (eligible && (best_e < 0 || select[e] > best)) best = select[e], best_e = e;
    }
    const int e = WarpArgMax(best, best_e);
    const float w = score[e];
    total += w;
    if (lane == j) my_weight = w, my_id = e;
    __syncwarp();
    if (lane == 0) taken[e] = 1;
    __syncwarp();
  }
  if (lane < p.top_k) {
    const float norm = p.renormalize && total > 0.f ? p.routed_scaling / total : p.routed_scaling;
    p.weights[static_cast<int64_t>(t) * p.top_k + lane] = my_weight * norm;
    p.ids[static_cast<int64_t>(t) * p.top_k + lane] = my_id;
  }
}

template <typename LogitT>
Status LaunchFor(const RouteParams& p, dim3 grid, size_t smem, cudaStream_t stream) {
  if (p.num_groups > 1)
    return Launch("moe_route kernel launch", MoeRouteKernel<LogitT, true>, grid, dim3(kWarpsPerBlock * 32), smem, stream, p);
  return Launch("moe_route kernel launch", MoeRouteKernel<LogitT, false>, grid, dim3(kWarpsPerBlock * 32), smem, stream, p);
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
