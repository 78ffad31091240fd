// moe_route on the GPU: one warp per token (route_warp.cuh's RouteToken, which fused_moe's stream kernels run
// too), four tokens per CTA.
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/moe/route.h"
#include "csrc/moe/route_warp.cuh"

namespace hpc {
namespace {

constexpr int kWarpsPerBlock = 4;

__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    MoeRouteKernel(const __grid_constant__ RouteParams p, float* weights, int32_t* ids) {
  __shared__ float scratch[kWarpsPerBlock][kMaxRouteExperts];  // the group ranks' selection values
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kWarpsPerBlock + warp;
  PdlWait();
  if (t >= p.tokens) return;  // whole warps exit together
  float w;
  int32_t e;
  moe::RouteToken(p, t, scratch[warp], &w, &e);
  PdlLaunchDependents();
  if (lane < p.top_k) {
    weights[static_cast<int64_t>(t) * p.top_k + lane] = w;
    ids[static_cast<int64_t>(t) * p.top_k + lane] = e;
  }
}

}  // namespace

Status LaunchMoeRoute(const MoeRouteArgs& a, cudaStream_t stream) {
  const RouteParams p = RouteParamsOf(a);
  if (p.tokens == 0) return Status::Ok();
  const dim3 grid((p.tokens + kWarpsPerBlock - 1) / kWarpsPerBlock);
  return Launch("moe_route kernel launch", MoeRouteKernel, grid, dim3(kWarpsPerBlock * 32), 0, stream, p,
                a.topk_weights.ptr<float>(), a.topk_ids.ptr<int32_t>());
}

Status MoeRouteCuda(const MoeRouteArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateMoeRoute(a));
  if (a.router_logits.device != DeviceKind::kCuda) return Status::Internal("moe_route: CUDA path called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.router_logits.device_id));
  return LaunchMoeRoute(a, stream);
}

}  // namespace hpc
