// decode_plan / decode_attention for torch (and any DLPack producer), plus the host queries the Python faces
// need to size plans and workspaces (max CTAs from the occupancy API, plan and workspace sizes).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "csrc/attention/decode.h"
#include "csrc/attention/decode_plan.h"
#include "torch_bridge/bindings.h"
#include "torch_bridge/tensor_args.h"

namespace hpc::bridge {
namespace {

DType DTypeFromName(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kF8E4M3, DType::kI32, DType::kI64, DType::kU8}) {
    if (name == DTypeName(d)) return d;
  }
  throw nb::value_error(("hpc_xla: unknown dtype name '" + name + "'").c_str());
}

DecodeConfig Config(int num_kv_heads, int num_q_heads, int head_dim, int q_len, int page_size, int kv_dtype,
                    int q_dtype) {
  DecodeConfig c;
  c.num_kv_heads = num_kv_heads;
  c.num_q_heads = num_q_heads;
  c.head_dim = head_dim;
  c.q_len = q_len;
  c.page_size = page_size;
  c.kv_dtype = static_cast<DType>(kv_dtype);
  c.q_dtype = static_cast<DType>(q_dtype);
  return c;
}

// CTAs of the persistent grid for this config on CUDA device `device` (< 0: the CPU platform's count), after the
// config is validated as decode_plan will (on the CPU too: the wrappers size the plan's workspace from this before
// csrc sees the plan; num_q_heads = 2^31 - 1 asked for 141 TB before "must be <= 16" came).
int DecodeMaxCtasBinding(int num_kv_heads, int num_q_heads, int head_dim, int q_len, int page_size, int kv_dtype,
                         int q_dtype, int device) {
  DecodeConfig c = Config(num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, q_dtype);
  DecodePlanArgs probe;  // validate the config the same way decode_plan will
  int64_t one = 1;
  int32_t dummy = 0;
  probe.seq_lens = DenseView(&dummy, DType::kI32, DeviceKind::kCpu, 0, &one, 1);
  const int64_t plan_ints = attention::PlanInts(1, 1);
  std::vector<int32_t> plan(plan_ints);
  probe.plan = DenseView(plan.data(), DType::kI32, DeviceKind::kCpu, 0, &plan_ints, 1);
  probe.config = c;
  probe.max_ctas = 1;
  ThrowIfError(ValidateDecodePlan(probe));
  if (device < 0) return kCpuMaxCtas;
  int max_ctas = 0;
  {
    DeviceGuard guard(device);
    ThrowIfError(DecodeMaxCtas(c, device, &max_ctas));
  }
  return max_ctas;
}

void DecodePlanBinding(nb::handle seq_lens, nb::handle plan, int num_kv_heads, int num_q_heads, int head_dim,
                       int q_len, int page_size, int kv_dtype, int max_ctas, int64_t stream) {
  TensorArgs t;
  DecodePlanArgs a;
  a.seq_lens = t.Get("seq_lens", seq_lens);
  a.plan = t.Get("plan", plan);
  a.config = Config(num_kv_heads, num_q_heads, head_dim, q_len, page_size, kv_dtype, static_cast<int>(DType::kBF16));
  a.max_ctas = max_ctas;
  RunOp(a.seq_lens, t, stream, &DecodePlanCuda, &DecodePlanCpu, a);
}

void DecodeAttentionBinding(nb::handle q, nb::handle q_scale, nb::handle k_cache, nb::handle v_cache,
                            nb::handle block_table, nb::handle seq_lens, nb::handle plan, nb::handle workspace,
                            nb::handle out, nb::handle k_scale, nb::handle v_scale, float sm_scale, int q_len,
                            int schedule, int max_ctas, int64_t stream) {
  TensorArgs t;
  DecodeAttentionArgs a;
  a.q = t.Get("q", q);
  a.q_scale = t.Get("q_scale", q_scale);
  a.k_cache = t.Get("k_cache", k_cache);
  a.v_cache = t.Get("v_cache", v_cache);
  a.block_table = t.Get("block_table", block_table);
  a.seq_lens = t.Get("seq_lens", seq_lens);
  a.plan = t.Get("plan", plan);
  a.workspace = t.Get("workspace", workspace);
  a.out = t.Get("out", out);
  a.k_scale = t.Get("k_scale", k_scale);
  a.v_scale = t.Get("v_scale", v_scale);
  a.sm_scale = sm_scale;
  a.q_len = q_len;
  a.schedule = static_cast<DecodeSchedule>(schedule);
  a.max_ctas = max_ctas;
  RunOp(a.q, t, stream, &DecodeAttentionCuda, &DecodeAttentionCpu, a);
}

}  // namespace

void BindAttention(nb::module_& m) {
  m.def("dtype_code", [](const std::string& name) { return static_cast<int>(DTypeFromName(name)); },
        "The binary's code for a dtype name ('bfloat16', 'float8_e4m3fn', ...).");
  m.def("decode_max_ctas", &DecodeMaxCtasBinding, nb::arg("num_kv_heads"), nb::arg("num_q_heads"),
        nb::arg("head_dim"), nb::arg("q_len"), nb::arg("page_size"), nb::arg("kv_dtype"), nb::arg("q_dtype"),
        nb::arg("device"));
  m.def("decode_plan_size", [](int64_t batch, int64_t max_ctas) { return attention::PlanInts(batch, max_ctas); });
  m.def("decode_max_ctas_limit", [] { return attention::kMaxCtas; }, "The largest max_ctas a plan may have.");
  m.def("decode_workspace_size", &DecodeWorkspaceFloats, nb::arg("batch"), nb::arg("num_kv_heads"),
        nb::arg("num_q_heads"), nb::arg("head_dim"), nb::arg("q_len"), nb::arg("max_ctas"));
  m.def("decode_static_splits", &StaticSplits);
  m.def("decode_plan", &DecodePlanBinding, nb::arg("seq_lens"), nb::arg("plan"), nb::arg("num_kv_heads"),
        nb::arg("num_q_heads"), nb::arg("head_dim"), nb::arg("q_len"), nb::arg("page_size"), nb::arg("kv_dtype"),
        nb::arg("max_ctas"), nb::arg("stream") = -1);
  m.def("decode_attention", &DecodeAttentionBinding, nb::arg("q"), nb::arg("q_scale").none(), nb::arg("k_cache"),
        nb::arg("v_cache"), nb::arg("block_table"), nb::arg("seq_lens"), nb::arg("plan").none(),
        nb::arg("workspace"), nb::arg("out"), nb::arg("k_scale").none(), nb::arg("v_scale").none(),
        nb::arg("sm_scale"), nb::arg("q_len"), nb::arg("schedule"), nb::arg("max_ctas"), nb::arg("stream") = -1);
}

}  // namespace hpc::bridge
