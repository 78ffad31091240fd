// XLA FFI handlers for the MoE ops (CUDA and CPU). Operand order is the one hpc_xla/jax/moe.py passes.
//   moe_route: args router_logits, correction_bias (shape (0,) when absent)   rets topk_weights, topk_ids
//              attrs top_k, scoring, renormalize, num_groups, topk_groups, routed_scaling
//   fused_moe: args x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale, topk_weights, topk_ids,
//              shared_output, traced_offset (optional ones shape (0,))       rets out, workspace (uint8
//              [fused_moe_call_workspace_size] scratch of the CUDA pipeline; the CPU handler ignores it)
//              attrs quant, expert_offset, num_experts_global, w13_interleaved
//   fused_moe_routed (fused routing): fused_moe's args with router_logits, correction_bias in place of
//              topk_weights, topk_ids (and no traced_offset)     rets out, topk_weights, topk_ids (written), workspace
//              attrs fused_moe's, then moe_route's but top_k (topk_ids.shape[1])
#include <cuda_runtime.h>

#include <utility>

#include "csrc/moe/fused_moe.h"
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
  SetRouteOptions(a, scoring, renormalize, num_groups, topk_groups, routed_scaling);
  return ToError(device == DeviceKind::kCuda ? MoeRouteCuda(a, stream) : MoeRouteCpu(a));
}

// fused_moe's operands but the routing's, shared by both handlers.
FusedMoeArgs FusedMoeCommon(DeviceKind device, int device_id, AnyBuffer x, AnyBuffer x_scale, AnyBuffer w13,
                            AnyBuffer w2, AnyBuffer w13_scale, AnyBuffer w2_scale, AnyBuffer a13_scale,
                            AnyBuffer a2_scale, AnyBuffer shared_output, AnyBuffer out, AnyBuffer workspace,
                            int32_t quant, int64_t expert_offset, int64_t num_experts_global, bool w13_interleaved) {
  FusedMoeArgs a;
  a.x = View(x, device, device_id);
  a.x_scale = View(x_scale, device, device_id, /*optional=*/true);
  a.w13 = View(w13, device, device_id);
  a.w2 = View(w2, device, device_id);
  a.w13_scale = View(w13_scale, device, device_id, /*optional=*/true);
  a.w2_scale = View(w2_scale, device, device_id, /*optional=*/true);
  a.a13_scale = View(a13_scale, device, device_id, /*optional=*/true);
  a.a2_scale = View(a2_scale, device, device_id, /*optional=*/true);
  a.shared_output = View(shared_output, device, device_id, /*optional=*/true);
  a.out = View(out, device, device_id);
  a.workspace = View(workspace, device, device_id);
  a.quant = static_cast<MoeQuant>(quant);
  a.expert_offset = expert_offset;
  a.num_experts_global = num_experts_global;
  a.w13_interleaved = w13_interleaved;
  return a;
}

ffi::Error FusedMoe(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer x, AnyBuffer x_scale,
                    AnyBuffer w13, AnyBuffer w2, AnyBuffer w13_scale, AnyBuffer w2_scale, AnyBuffer a13_scale,
                    AnyBuffer a2_scale, AnyBuffer topk_weights, AnyBuffer topk_ids, AnyBuffer shared_output,
                    AnyBuffer traced_offset, Result<AnyBuffer> out, Result<AnyBuffer> workspace, int32_t quant,
                    int64_t expert_offset, int64_t num_experts_global, bool w13_interleaved) {
  FusedMoeArgs a = FusedMoeCommon(device, device_id, x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale,
                                  shared_output, *out, *workspace, quant, expert_offset, num_experts_global,
                                  w13_interleaved);
  a.topk_weights = View(topk_weights, device, device_id);
  a.topk_ids = View(topk_ids, device, device_id);
  a.traced_offset = View(traced_offset, device, device_id, /*optional=*/true);
  return ToError(device == DeviceKind::kCuda ? FusedMoeCuda(a, stream) : FusedMoeCpu(a));
}

ffi::Error FusedMoeRouted(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer x, AnyBuffer x_scale,
                          AnyBuffer w13, AnyBuffer w2, AnyBuffer w13_scale, AnyBuffer w2_scale, AnyBuffer a13_scale,
                          AnyBuffer a2_scale, AnyBuffer router_logits, AnyBuffer correction_bias,
                          AnyBuffer shared_output, Result<AnyBuffer> out, Result<AnyBuffer> topk_weights,
                          Result<AnyBuffer> topk_ids, Result<AnyBuffer> workspace, int32_t quant,
                          int64_t expert_offset, int64_t num_experts_global, bool w13_interleaved, int32_t scoring,
                          bool renormalize, int32_t num_groups, int32_t topk_groups, float routed_scaling) {
  FusedMoeArgs a = FusedMoeCommon(device, device_id, x, x_scale, w13, w2, w13_scale, w2_scale, a13_scale, a2_scale,
                                  shared_output, *out, *workspace, quant, expert_offset, num_experts_global,
                                  w13_interleaved);
  a.topk_weights = View(*topk_weights, device, device_id);
  a.topk_ids = View(*topk_ids, device, device_id);
  SetFusedRouting(a, View(router_logits, device, device_id),
                  View(correction_bias, device, device_id, /*optional=*/true));
  SetRouteOptions(a.route, scoring, renormalize, num_groups, topk_groups, routed_scaling);
  return ToError(device == DeviceKind::kCuda ? FusedMoeCuda(a, stream) : FusedMoeCpu(a));
}

// fused_moe's layer operands, first in both of its bindings
// (by reference: a Binding moves only inside its own chain, so the helpers take it as the chain hands it over)
template <typename Binding>
auto BindLayerArgs(Binding&& binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()  // x
      .template Arg<AnyBuffer>()  // x_scale
      .template Arg<AnyBuffer>()  // w13
      .template Arg<AnyBuffer>()  // w2
      .template Arg<AnyBuffer>()  // w13_scale
      .template Arg<AnyBuffer>()  // w2_scale
      .template Arg<AnyBuffer>()  // a13_scale
      .template Arg<AnyBuffer>();  // a2_scale
}

// moe_route's options, last in both bindings that route
template <typename Binding>
auto BindRouteAttrs(Binding&& binding) {
  return std::move(binding)
      .template Attr<int32_t>("scoring")
      .template Attr<bool>("renormalize")
      .template Attr<int32_t>("num_groups")
      .template Attr<int32_t>("topk_groups")
      .template Attr<float>("routed_scaling");
}

template <typename Binding>
auto BindFusedMoeOperands(Binding binding) {
  return BindLayerArgs(std::move(binding))
      .template Arg<AnyBuffer>()  // topk_weights
      .template Arg<AnyBuffer>()  // topk_ids
      .template Arg<AnyBuffer>()  // shared_output
      .template Arg<AnyBuffer>()  // traced_offset
      .template Ret<AnyBuffer>()  // out
      .template Ret<AnyBuffer>()  // workspace
      .template Attr<int32_t>("quant")
      .template Attr<int64_t>("expert_offset")
      .template Attr<int64_t>("num_experts_global")
      .template Attr<bool>("w13_interleaved");
}

template <typename Binding>
auto BindFusedMoeRoutedOperands(Binding binding) {
  return BindRouteAttrs(BindLayerArgs(std::move(binding))
      .template Arg<AnyBuffer>()  // router_logits
      .template Arg<AnyBuffer>()  // correction_bias
      .template Arg<AnyBuffer>()  // shared_output
      .template Ret<AnyBuffer>()  // out
      .template Ret<AnyBuffer>()  // topk_weights
      .template Ret<AnyBuffer>()  // topk_ids
      .template Ret<AnyBuffer>()  // workspace
      .template Attr<int32_t>("quant")
      .template Attr<int64_t>("expert_offset")
      .template Attr<int64_t>("num_experts_global")
      .template Attr<bool>("w13_interleaved"));
}

template <typename Binding>
auto BindMoeRouteOperands(Binding binding) {
  return BindRouteAttrs(std::move(binding)
                            .template Arg<AnyBuffer>()  // router_logits
                            .template Arg<AnyBuffer>()  // correction_bias
                            .template Ret<AnyBuffer>()  // topk_weights
                            .template Ret<AnyBuffer>()  // topk_ids
                            .template Attr<int32_t>("top_k"));
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaFusedMoeCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return FusedMoe(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindFusedMoeOperands(CudaBinding()), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaFusedMoeCpu,
                              [](auto... operands) { return FusedMoe(DeviceKind::kCpu, nullptr, 0, operands...); },
                              BindFusedMoeOperands(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaFusedMoeRoutedCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return FusedMoeRouted(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindFusedMoeRoutedOperands(CudaBinding()), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaFusedMoeRoutedCpu,
                              [](auto... operands) { return FusedMoeRouted(DeviceKind::kCpu, nullptr, 0, operands...); },
                              BindFusedMoeRoutedOperands(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaMoeRouteCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return MoeRoute(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindMoeRouteOperands(CudaBinding()),
                              {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaMoeRouteCpu,
                              [](auto... operands) { return MoeRoute(DeviceKind::kCpu, nullptr, 0, operands...); },
                              BindMoeRouteOperands(ffi::Ffi::Bind()));

}  // namespace hpc::ffi_glue
