// moe_route on the GPU: one warp per token, each running moe_route's routine (route_warp.cuh) in its own shared
// memory.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/moe/route.h"
#include "csrc/moe/route_warp.cuh"

namespace hpc {
namespace {

constexpr int kWarpsPerBlock = 4;

// The routing kernel: a warp per token (RouteTokenWarp), kWarpsPerBlock tokens a CTA.
template <typename LogitT, bool kGrouped>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) MoeRouteKernel(const __grid_constant__ RouteParams p) {
  extern __shared__ __align__(16) unsigned char route_smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  PdlWait();
  if (t >= p.tokens) return;  // whole warps exit together
  float weight;
  int id;
  RouteTokenWarp<LogitT, kGrouped>(p, t, route_smem + warp * RouteWarpScratchBytes(p.experts), weight, id);
  // (Triggering the next kernel right after PdlWait instead: slower with the old kernel, no faster with this one;
  // session 56, experiments 79 / 80 / 81.)
  PdlLaunchDependents();
  if (lane < p.top_k) {
    p.weights[static_cast<int64_t>(t) * p.top_k + lane] = weight;
    p.ids[static_cast<int64_t>(t) * p.top_k + lane] = id;
  }
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
  const RouteParams p = RouteParamsOf(a);
  if (p.tokens == 0) return Status::Ok();
  const dim3 grid((p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const size_t smem = static_cast<size_t>(kWarpsPerBlock) * RouteWarpScratchBytes(p.experts);  // <= 38 KB at E = 1024
  switch (p.logits_dtype) {
    case DType::kBF16: return LaunchFor<__nv_bfloat16>(p, grid, smem, stream);
    case DType::kF16: return LaunchFor<__half>(p, grid, smem, stream);
    default: return LaunchFor<float>(p, grid, smem, stream);
  }
}

}  // namespace hpc
