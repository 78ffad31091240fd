// XLA FFI handlers for rope_norm (CUDA and CPU). Operand order is the one hpc_xla/jax/rope_norm.py passes:
//   args:  q, k, v, positions, cos_sin_cache, slot_mapping, k_cache, v_cache,
//          q_norm_weight, k_norm_weight, k_scale, v_scale        (optional ones are shape (0,) when absent)
//   rets:  q_out, [q_scale,] k_cache, v_cache                     (caches aliased to the inputs)
//   attrs: eps, rope_style, rotary_dim, norm_before_rope
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <utility>

#include "csrc/rope_norm/rope_norm.h"
#include "ffi/buffers.h"
#include "ffi/targets.h"

namespace hpc::ffi_glue {
namespace {

using ffi::AnyBuffer;

ffi::Error RopeNorm(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer q, AnyBuffer k, AnyBuffer v,
                    AnyBuffer positions, AnyBuffer cos_sin_cache, AnyBuffer slot_mapping, AnyBuffer k_cache,
                    AnyBuffer v_cache, AnyBuffer q_norm_weight, AnyBuffer k_norm_weight, AnyBuffer k_scale,
                    AnyBuffer v_scale, ffi::RemainingRets rets, float eps, int32_t rope_style, int64_t rotary_dim,
                    bool norm_before_rope) {
  const bool quant_q = rets.size() == 4;
  if (rets.size() != 3 && !quant_q) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "rope_norm: expected 3 or 4 results");
  }
  auto ret = [&](size_t i) { return View(**rets.get<AnyBuffer>(i), device, device_id); };
  RopeNormArgs a;
  a.q = View(q, device, device_id);
  a.k = View(k, device, device_id);
  a.v = View(v, device, device_id);
  a.positions = View(positions, device, device_id);
  a.cos_sin_cache = View(cos_sin_cache, device, device_id);
  a.slot_mapping = View(slot_mapping, device, device_id);
  a.q_norm_weight = View(q_norm_weight, device, device_id, /*optional=*/true);
  a.k_norm_weight = View(k_norm_weight, device, device_id, /*optional=*/true);
  a.k_scale = View(k_scale, device, device_id, /*optional=*/true);
  a.v_scale = View(v_scale, device, device_id, /*optional=*/true);
  a.q_out = ret(0);
  if (quant_q) a.q_scale = ret(1);
  // The cache results alias the cache operands (input_output_aliases): write into the results, whose
  // contents XLA guarantees are the operands' (in place when donated, otherwise a copy it made first).
  a.k_cache = ret(quant_q ? 2 : 1);
  a.v_cache = ret(quant_q ? 3 : 2);
  TensorView k_in = View(k_cache, device, device_id), v_in = View(v_cache, device, device_id);
  if (a.k_cache.dtype != k_in.dtype || a.v_cache.dtype != v_in.dtype || a.k_cache.numel() != k_in.numel() ||
      a.v_cache.numel() != v_in.numel()) {
    return ffi::Error(ffi::ErrorCode::kInvalidArgument, "rope_norm: cache results must match the cache operands");
  }
  // The results alias the operands when XLA honours input_output_aliases (the in-place path). Where it hands
  // us a separate result buffer (seen inside lax.scan/vmap loops on the GPU), start it as a copy of the
  // operand so slots this call does not write keep their contents.
  for (const auto& [in, out] : {std::pair<const TensorView*, const TensorView*>{&k_in, &a.k_cache}, {&v_in, &a.v_cache}}) {
    if (in->data == out->data) continue;
    const size_t bytes = static_cast<size_t>(in->numel()) * DTypeBytes(in->dtype);
    if (device == DeviceKind::kCuda) {
      const cudaError_t err = cudaMemcpyAsync(out->data, in->data, bytes, cudaMemcpyDeviceToDevice, stream);
      if (err != cudaSuccess) {
        return ffi::Error(ffi::ErrorCode::kInternal, std::string("rope_norm: cache copy: ") + cudaGetErrorString(err));
      }
    } else {
      std::memcpy(out->data, in->data, bytes);
    }
  }
  a.eps = eps;
  a.rope_style = static_cast<RopeStyle>(rope_style);
  a.rotary_dim = rotary_dim;
  a.norm_before_rope = norm_before_rope;
  return ToError(device == DeviceKind::kCuda ? RopeNormCuda(a, stream) : RopeNormCpu(a));
}

template <typename Binding>
auto BindRopeNormOperands(Binding binding) {
  return std::move(binding).template Arg<AnyBuffer>()  // q
      .template Arg<AnyBuffer>()            // k
      .template Arg<AnyBuffer>()            // v
      .template Arg<AnyBuffer>()            // positions
      .template Arg<AnyBuffer>()            // cos_sin_cache
      .template Arg<AnyBuffer>()            // slot_mapping
      .template Arg<AnyBuffer>()            // k_cache
      .template Arg<AnyBuffer>()            // v_cache
      .template Arg<AnyBuffer>()            // q_norm_weight
      .template Arg<AnyBuffer>()            // k_norm_weight
      .template Arg<AnyBuffer>()            // k_scale
      .template Arg<AnyBuffer>()            // v_scale
      .RemainingRets()
      .template Attr<float>("eps")
      .template Attr<int32_t>("rope_style")
      .template Attr<int64_t>("rotary_dim")
      .template Attr<bool>("norm_before_rope");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaRopeNormCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return RopeNorm(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindRopeNormOperands(CudaBinding()),
                              {ffi::Traits::kCmdBufferCompatible});

XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaRopeNormCpu,
                              [](auto... operands) {
                                return RopeNorm(DeviceKind::kCpu, nullptr, 0, operands...);
                              },
                              BindRopeNormOperands(ffi::Ffi::Bind()));

}  // namespace hpc::ffi_glue
