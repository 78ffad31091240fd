// XLA FFI handlers for the MoE ops (CUDA and CPU). Operand order is the one hpc_xla/jax/moe.py passes.
//   moe_route: args router_logits, correction_bias (shape (0,) when absent)   rets topk_weights, topk_ids
//              attrs top_k, scoring, renormalize, num_groups, topk_groups, routed_scaling
#include <cuda_runtime.h>

#include <utility>

#include "csrc/moe/route.h"
#include "ffi/buffers.h"
#include "ffi/targets.h"

namespace hpc::ffi_glue {
namespace {

using ffi::AnyBuffer;
using ffi::Result;

ffi::Error MoeRoute(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer router_logits,
                    AnyBuffer correction_bias, Result<AnyBuffer> topk_weights, Result<AnyBuffer> topk_ids,
                    int32_t top_k, int32_t scoring, bool renormalize, int32_t num_groups, int32_t topk_groups,
                    float routed_scaling) {
  MoeRouteArgs a;
  a.router_logits = View(router_logits, device, device_id);
  a.correction_bias = View(correction_bias, device, device_id, /*optional=*/true);
  a.topk_weights = View(*topk_weights, device, device_id);
  a.topk_ids = View(*topk_ids, device, device_id);
  a.top_k = top_k;
  a.scoring = static_cast<RouteScoring>(scoring);
  a.renormalize = renormalize;
  a.num_groups = num_groups;
  a.topk_groups = topk_groups;
  a.routed_scaling = routed_scaling;
  return ToError(device == DeviceKind::kCuda ? MoeRouteCuda(a, stream) : MoeRouteCpu(a));
}

template <typename Binding>
auto BindMoeRouteOperands(Binding binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()  // router_logits
      .template Arg<AnyBuffer>()  // correction_bias
      .template Ret<AnyBuffer>()  // topk_weights
      .template Ret<AnyBuffer>()  // topk_ids
      .template Attr<int32_t>("top_k")
      .template Attr<int32_t>("scoring")
      .template Attr<bool>("renormalize")
      .template Attr<int32_t>("num_groups")
      .template Attr<int32_t>("topk_groups")
      .template Attr<float>("routed_scaling");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaMoeRouteCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                return MoeRoute(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindMoeRouteOperands(
                                  ffi::Ffi::Bind().Ctx<ffi::PlatformStream<cudaStream_t>>().Ctx<ffi::DeviceOrdinal>()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaMoeRouteCpu,
                              [](auto... operands) { return MoeRoute(DeviceKind::kCpu, nullptr, 0, operands...); },
                              BindMoeRouteOperands(ffi::Ffi::Bind()));

}  // namespace hpc::ffi_glue
