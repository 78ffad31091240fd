// CPU reference of fused_moe with the same quantization rounding the GPU pipeline uses:
//   x      -> fp8 (static a13 scale | per token per 128 columns, scale = amax/448) unless given as fp8
//   gate/up = fp32 sums of fp8 x fp8 products, times the activation and weight scales (block128: per 128-deep
//             K block, DeepGEMM-style promotion)
//   h       = silu(gate) * up in fp32 -> bf16 (quant=None) | fp8 (static a2 scale | per token per 128)
//   y       = sum over local experts of w * down, fp32; + shared_output; -> bf16
#include <cmath>
#include <string>
#include <vector>

#include "csrc/common/check.h"
#include "csrc/moe/fused_moe.h"
#include "csrc/ref/element_access.h"

namespace hpc {
namespace {

using ref::LoadFloat;

// Quantizes `v` (in place) to e4m3 values (kept as floats) in blocks of `block`; returns each block's scale.
// A static scale (> 0) is used for every block when given.
std::vector<float> QuantizeE4M3Blocks(std::vector<float>& v, int block, float static_scale) {
  std::vector<float> scales((v.size() + block - 1) / block);
  for (size_t b = 0; b < scales.size(); ++b) {
    float scale = static_scale;
    if (!(scale > 0.f)) {
      float amax = 0.f;
      for (size_t i = b * block; i < std::min(v.size(), (b + 1) * block); ++i) amax = std::fmax(amax, std::fabs(v[i]));
      scale = amax / kFp8E4M3Max;
    }
    for (size_t i = b * block; i < std::min(v.size(), (b + 1) * block); ++i) v[i] = E4M3ToFloat(QuantizeE4M3(v[i], scale));
    scales[b] = scale;
  }
  return scales;
}

float Silu(float g) { return g / (1.f + std::exp(-g)); }

}  // namespace

Status FusedMoeCpu(const FusedMoeArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateFusedMoe(a));
  if (a.x.device != DeviceKind::kCpu) return Status::Internal("fused_moe: CPU path called with GPU tensors");
  const int64_t tokens = a.x.shape[0], hidden = a.x.shape[1], experts = a.w13.shape[0], inter = a.w13.shape[1] / 2;
  const int top_k = static_cast<int>(a.topk_ids.shape[1]);
  const int64_t global = a.num_experts_global > 0 ? a.num_experts_global : experts + a.expert_offset;
  const int32_t* ids = a.topk_ids.ptr<const int32_t>();
  for (int64_t i = 0; i < tokens * top_k; ++i) {
    if (ids[i] >= global) {  // negative ids are "no expert" (vLLM's -1 for other ranks' experts): they add 0
      return ArgCheck("fused_moe").Fail("topk_ids[" + std::to_string(i / top_k) + ", " + std::to_string(i % top_k) +
                                        "] = " + std::to_string(ids[i]) + " is not below num_experts_global=" +
                                        std::to_string(global) + " (negative ids are skipped)");
    }
  }
  const ArgCheck c("fused_moe");
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("a13_scale", a.a13_scale));
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("a2_scale", a.a2_scale));
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("w13_scale", a.w13_scale, /*zero_ok=*/true));
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("w2_scale", a.w2_scale, /*zero_ok=*/true));
  const bool block = a.quant == MoeQuant::kFp8Block128, tensor = a.quant == MoeQuant::kFp8Tensor;
  const float a13 = tensor ? a.a13_scale.ptr<const float>()[0] : 0.f;
  const float a2 = tensor ? a.a2_scale.ptr<const float>()[0] : 0.f;
  const int64_t kb_h = hidden / kMoeBlock, kb_i = inter / kMoeBlock;
  std::vector<float> x(hidden), gu(2 * inter), h(inter), y(hidden);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t k = 0; k < hidden; ++k) x[k] = LoadFloat(a.x, t * hidden + k);
    std::vector<float> xs;  // x's scale per K block (block128) or per tensor
    if (a.quant == MoeQuant::kNone) {
      xs = {1.f};
    } else if (a.x.dtype == DType::kF8E4M3) {
      xs = block ? std::vector<float>(a.x_scale.ptr<const float>() + t * kb_h, a.x_scale.ptr<const float>() + (t + 1) * kb_h)
                 : std::vector<float>{a13};
    } else {
      xs = QuantizeE4M3Blocks(x, block ? kMoeBlock : static_cast<int>(hidden), tensor ? a13 : 0.f);
    }
    std::fill(y.begin(), y.end(), 0.f);
    for (int j = 0; j < top_k; ++j) {
      const int64_t e = ids[t * top_k + j] - a.expert_offset;
      if (e < 0 || e >= experts) continue;  // another rank's expert (EP)
      const float w = a.topk_weights.ptr<const float>()[t * top_k + j];
      for (int64_t n = 0; n < 2 * inter; ++n) {  // n: gate column n, or up column n - I; its w13 row by the layout
        const int64_t w13_row = n < inter ? W13GateRow(n, a.w13_interleaved)
                                          : W13GateRow(n - inter, a.w13_interleaved) + W13UpDelta(inter, a.w13_interleaved);
        const int64_t row = (e * 2 * inter + w13_row) * hidden;
        float acc = 0.f;
        if (block) {
          for (int64_t kb = 0; kb < kb_h; ++kb) {
            float part = 0.f;
            for (int64_t k = kb * kMoeBlock; k < (kb + 1) * kMoeBlock; ++k) part += x[k] * LoadFloat(a.w13, row + k);
            acc += part * xs[kb] * a.w13_scale.ptr<const float>()[(e * (2 * inter / kMoeBlock) + n / kMoeBlock) * kb_h + kb];
          }
        } else {
          for (int64_t k = 0; k < hidden; ++k) acc += x[k] * LoadFloat(a.w13, row + k);
          if (tensor) acc *= xs[0] * a.w13_scale.ptr<const float>()[e];
        }
        gu[n] = acc;
      }
      for (int64_t i = 0; i < inter; ++i) h[i] = Silu(gu[i]) * gu[inter + i];
      std::vector<float> hs = {1.f};
      if (a.quant == MoeQuant::kNone) {
        for (float& v : h) v = ToFloat(FromFloat<__nv_bfloat16>(v));
      } else {
        hs = QuantizeE4M3Blocks(h, block ? kMoeBlock : static_cast<int>(inter), tensor ? a2 : 0.f);
      }
      for (int64_t n = 0; n < hidden; ++n) {
        const int64_t row = (e * hidden + n) * inter;
        float acc = 0.f;
        if (block) {
          for (int64_t kb = 0; kb < kb_i; ++kb) {
            float part = 0.f;
            for (int64_t k = kb * kMoeBlock; k < (kb + 1) * kMoeBlock; ++k) part += h[k] * LoadFloat(a.w2, row + k);
            acc += part * hs[kb] * a.w2_scale.ptr<const float>()[(e * kb_h + n / kMoeBlock) * kb_i + kb];
          }
        } else {
          for (int64_t k = 0; k < inter; ++k) acc += h[k] * LoadFloat(a.w2, row + k);
          if (tensor) acc *= hs[0] * a.w2_scale.ptr<const float>()[e];
        }
        y[n] += w * acc;
      }
    }
    for (int64_t n = 0; n < hidden; ++n) {
      const float shared = a.shared_output.present() ? LoadFloat(a.shared_output, t * hidden + n) : 0.f;
      a.out.ptr<__nv_bfloat16>()[t * hidden + n] = FromFloat<__nv_bfloat16>(y[n] + shared);
    }
  }
  return Status::Ok();
}

}  // namespace hpc
