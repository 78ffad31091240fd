// rope_norm for torch (and any DLPack producer): tensors in, caches and q_out written in place, nothing
// allocated. The torch.library op in hpc_xla/torch/rope_norm.py calls this.
#include <nanobind/nanobind.h>

#include "csrc/common/fp8_scale_check.h"
#include "csrc/rope_norm/rope_norm.h"
#include "torch_bridge/bindings.h"
#include "torch_bridge/tensor_args.h"

namespace hpc::bridge {
namespace {

void RopeNorm(nb::handle q, nb::handle k, nb::handle v, nb::handle positions, nb::handle cos_sin_cache,
              nb::handle slot_mapping, nb::handle k_cache, nb::handle v_cache, nb::handle q_out, nb::handle q_scale,
              nb::handle q_norm_weight, nb::handle k_norm_weight, nb::handle k_scale, nb::handle v_scale, float eps,
              int32_t rope_style, int64_t rotary_dim, bool norm_before_rope, int64_t stream) {
  TensorArgs t;
  RopeNormArgs a;
  a.q = t.Get("q", q);
  a.k = t.Get("k", k);
  a.v = t.Get("v", v);
  a.positions = t.Get("positions", positions);
  a.cos_sin_cache = t.Get("cos_sin_cache", cos_sin_cache);
  a.slot_mapping = t.Get("slot_mapping", slot_mapping);
  a.k_cache = t.Get("k_cache", k_cache);
  a.v_cache = t.Get("v_cache", v_cache);
  a.q_out = t.Get("q_out", q_out);
  a.q_scale = t.Get("q_scale", q_scale);
  a.q_norm_weight = t.Get("q_norm_weight", q_norm_weight);
  a.k_norm_weight = t.Get("k_norm_weight", k_norm_weight);
  a.k_scale = t.Get("k_scale", k_scale);
  a.v_scale = t.Get("v_scale", v_scale);
  a.eps = eps;
  a.rope_style = static_cast<RopeStyle>(rope_style);
  a.rotary_dim = rotary_dim;
  a.norm_before_rope = norm_before_rope;
  RunOp(a.q, t, stream, &RopeNormCuda, &RopeNormCpu, a);
}

}  // namespace

void BindRopeNorm(nb::module_& m) {
  m.def("rope_norm", &RopeNorm, nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("positions"),
        nb::arg("cos_sin_cache"), nb::arg("slot_mapping"), nb::arg("k_cache"), nb::arg("v_cache"), nb::arg("q_out"),
        nb::arg("q_scale").none(), nb::arg("q_norm_weight").none(), nb::arg("k_norm_weight").none(),
        nb::arg("k_scale").none(), nb::arg("v_scale").none(), nb::arg("eps"), nb::arg("rope_style"),
        nb::arg("rotary_dim"), nb::arg("norm_before_rope"), nb::arg("stream") = -1,
        "Fused QK-RMSNorm + RoPE + paged KV-cache write (see hpc_xla.torch.rope_norm). Writes q_out, q_scale, "
        "k_cache and v_cache in place; launches on `stream` if >= 0, else on the tensors' current stream.");
  m.def("rope_norm_last_launch", [] {
    const RopeNormLaunchInfo info = RopeNormLastLaunch();
    return nb::make_tuple(info.rows_per_group, info.kv_merged);
  }, "(rows per lane group, k/v groups merged) of the last CUDA rope_norm launch; rows 0 = the general kernel, "
     "-1 = none yet.");
  m.def("fp8_scale_selfcheck", [](int device) {
    Fp8ScaleCheckResult r;
    ThrowIfError(Fp8ScaleSelfCheck(device, &r));
    return nb::make_tuple(r.scale_mismatches, r.multiplier_mismatches, r.row_mismatches);
  }, nb::arg("device") = 0,
     "(amax/448 mismatches, 1/scale mismatches, per-row pair mismatches) of the call-free fp8 scale helpers over "
     "every float bit pattern on GPU `device` (csrc/common/fp8_scale.cuh); all 0 when they are bit-exact. "
     "Synchronous.");
}

}  // namespace hpc::bridge
