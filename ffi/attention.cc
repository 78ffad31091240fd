// XLA FFI handlers for decode_plan and decode_attention (CUDA and CPU). Operand order is the one
// hpc_xla/jax/attention.py passes; optional operands are shape (0,) when absent.
//   decode_plan:      args seq_lens            rets plan
//                     attrs num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, max_ctas
//   decode_attention: args q, q_scale, k_cache, v_cache, block_table, seq_lens, plan, k_scale, v_scale
//                     rets out, workspace      attrs sm_scale, q_len, schedule, max_ctas
#include <cuda_runtime.h>

#include <utility>

#include "csrc/attention/decode.h"
#include "ffi/buffers.h"
#include "ffi/targets.h"

namespace hpc::ffi_glue {
namespace {

using ffi::AnyBuffer;
using ffi::Result;

ffi::Error DecodePlan(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer seq_lens,
                      Result<AnyBuffer> plan, int32_t num_kv_heads, int32_t num_q_heads, int32_t head_dim,
                      int32_t q_len, int32_t page_size, int32_t kv_dtype, int32_t max_ctas) {
  DecodePlanArgs a;
  a.seq_lens = View(seq_lens, device, device_id);
  a.plan = View(*plan, device, device_id);
  a.config.num_kv_heads = num_kv_heads;
  a.config.num_q_heads = num_q_heads;
  a.config.head_dim = head_dim;
  a.config.q_len = q_len;
  a.config.page_size = page_size;
  a.config.kv_dtype = static_cast<DType>(kv_dtype);
  a.max_ctas = max_ctas;
  return ToError(device == DeviceKind::kCuda ? DecodePlanCuda(a, stream) : DecodePlanCpu(a));
}

ffi::Error DecodeAttention(DeviceKind device, cudaStream_t stream, int device_id, AnyBuffer q, AnyBuffer q_scale,
                           AnyBuffer k_cache, AnyBuffer v_cache, AnyBuffer block_table, AnyBuffer seq_lens,
                           AnyBuffer plan, AnyBuffer k_scale, AnyBuffer v_scale, Result<AnyBuffer> out,
                           Result<AnyBuffer> workspace, float sm_scale, int32_t q_len, int32_t schedule,
                           int32_t max_ctas) {
  DecodeAttentionArgs a;
  a.q = View(q, device, device_id);
  a.q_scale = View(q_scale, device, device_id, /*optional=*/true);
  a.k_cache = View(k_cache, device, device_id);
  a.v_cache = View(v_cache, device, device_id);
  a.block_table = View(block_table, device, device_id);
  a.seq_lens = View(seq_lens, device, device_id);
  a.plan = View(plan, device, device_id, /*optional=*/true);
  a.k_scale = View(k_scale, device, device_id, /*optional=*/true);
  a.v_scale = View(v_scale, device, device_id, /*optional=*/true);
  a.out = View(*out, device, device_id);
  a.workspace = View(*workspace, device, device_id);
  a.sm_scale = sm_scale;
  a.q_len = q_len;
  a.schedule = static_cast<DecodeSchedule>(schedule);
  a.max_ctas = max_ctas;
  return ToError(device == DeviceKind::kCuda ? DecodeAttentionCuda(a, stream) : DecodeAttentionCpu(a));
}

template <typename Binding>
auto BindDecodePlanOperands(Binding binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()  // seq_lens
      .template Ret<AnyBuffer>()  // plan
      .template Attr<int32_t>("num_kv_heads")
      .template Attr<int32_t>("num_q_heads")
      .template Attr<int32_t>("head_dim")
      .template Attr<int32_t>("q_len")
      .template Attr<int32_t>("page_size")
      .template Attr<int32_t>("kv_dtype")
      .template Attr<int32_t>("max_ctas");
}

template <typename Binding>
auto BindDecodeAttentionOperands(Binding binding) {
  return std::move(binding)
      .template Arg<AnyBuffer>()  // q
      .template Arg<AnyBuffer>()  // q_scale
      .template Arg<AnyBuffer>()  // k_cache
      .template Arg<AnyBuffer>()  // v_cache
      .template Arg<AnyBuffer>()  // block_table
      .template Arg<AnyBuffer>()  // seq_lens
      .template Arg<AnyBuffer>()  // plan
      .template Arg<AnyBuffer>()  // k_scale
      .template Arg<AnyBuffer>()  // v_scale
      .template Ret<AnyBuffer>()  // out
      .template Ret<AnyBuffer>()  // workspace
      .template Attr<float>("sm_scale")
      .template Attr<int32_t>("q_len")
      .template Attr<int32_t>("schedule")
      .template Attr<int32_t>("max_ctas");
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaDecodePlanCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return DecodePlan(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindDecodePlanOperands(CudaBinding()), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaDecodePlanCpu,
                              [](auto... operands) { return DecodePlan(DeviceKind::kCpu, nullptr, 0, operands...); },
                              BindDecodePlanOperands(ffi::Ffi::Bind()));
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaDecodeAttentionCuda,
                              [](cudaStream_t stream, int32_t device_id, auto... operands) {
                                NoteHandlerStream(stream);
                                return DecodeAttention(DeviceKind::kCuda, stream, device_id, operands...);
                              },
                              BindDecodeAttentionOperands(CudaBinding()), {ffi::Traits::kCmdBufferCompatible});
XLA_FFI_DEFINE_HANDLER_SYMBOL(HpcXlaDecodeAttentionCpu,
                              [](auto... operands) {
                                return DecodeAttention(DeviceKind::kCpu, nullptr, 0, operands...);
                              },
                              BindDecodeAttentionOperands(ffi::Ffi::Bind()));

}  // namespace hpc::ffi_glue
