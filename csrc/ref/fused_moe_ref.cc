// CPU reference of fused_moe with the same quantization rounding the GPU pipeline uses:
//   x      -> fp8 (static a13 scale | per token per 128 columns, scale = amax/448) unless given as fp8
//   gate/up = fp32 sums of fp8 x fp8 products, times the activation and weight scales (block128: per 128-deep
//             K block, DeepGEMM-style promotion)
//   h       = silu(gate) * up in fp32 -> bf16 (quant=None) | fp8 (static a2 scale | per token per 128)
//   y       = sum over local experts of w * down, fp32; + shared_output; -> bf16
#include <algorithm>
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

// Tokens per chunk of the CPU reference: bounds its per-pair down rows (chunk * top_k * H floats).
constexpr int64_t kChunkTokens = 1024;

// out[n] = sum over k of a[k] * wt[k][n] (wt: [K][N] floats), K in order for every column -- the loop over columns
// innermost, so it vectorizes without reordering any column's sum. `block`: fp8_block128's promotion instead: per
// 128-deep K block kb, part = the block's sum, out[n] += part * a_scale[kb] * w_scale(n, kb) (a fresh out).
// Neither scales the plain sums (the caller applies fp8_tensor's scales).
template <typename WScale>
void ColumnSums(const float* a, const float* wt, int64_t depth, int64_t cols, bool block, const float* a_scale,
                WScale w_scale, float* out, float* part) {
  std::fill(out, out + cols, 0.f);
  if (!block) {
    for (int64_t k = 0; k < depth; ++k) {
      const float ak = a[k];
      const float* w = wt + k * cols;
      for (int64_t n = 0; n < cols; ++n) out[n] += ak * w[n];
    }
    return;
  }
  for (int64_t kb = 0; kb < depth / kMoeBlock; ++kb) {
    std::fill(part, part + cols, 0.f);
    for (int64_t k = kb * kMoeBlock; k < (kb + 1) * kMoeBlock; ++k) {
      const float ak = a[k];
      const float* w = wt + k * cols;
      for (int64_t n = 0; n < cols; ++n) part[n] += ak * w[n];
    }
    for (int64_t n = 0; n < cols; ++n) out[n] += part[n] * a_scale[kb] * w_scale(n, kb);
  }
}

}  // namespace

Status FusedMoeCpu(const FusedMoeArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateFusedMoe(a));
  if (a.x.device != DeviceKind::kCpu) return Status::Internal("fused_moe: CPU path called with GPU tensors");
  // before the ids: a bad traced offset folds valid ids into ones the id check would blame
  if (a.traced_offset.present()) HPC_RETURN_IF_ERROR(CheckTracedOffset(a, a.traced_offset.ptr<const int32_t>()[0]));
  if (Routed(a)) HPC_RETURN_IF_ERROR(MoeRouteCpu(a.route));  // fills topk_weights / topk_ids (validated above)
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
  // an fp8 x's per-token, per-128-column scales (fp8_block128): 0 for an all-zero block, never negative or NaN
  HPC_RETURN_IF_ERROR(c.PositiveFiniteScales("x_scale", a.x_scale, /*zero_ok=*/true));
  const bool block = a.quant == MoeQuant::kFp8Block128, tensor = a.quant == MoeQuant::kFp8Tensor;
  const float a13 = tensor ? a.a13_scale.ptr<const float>()[0] : 0.f;
  const float a2 = tensor ? a.a2_scale.ptr<const float>()[0] : 0.f;
  const int64_t kb_h = hidden / kMoeBlock, kb_i = inter / kMoeBlock;
  const int64_t xs_per_token = block ? kb_h : 1;
  // Tokens in chunks, and within a chunk the pairs by expert: each hit expert's weights are converted to float once
  // per chunk (transposed, so the per-column sums below run over contiguous rows and vectorize across columns)
  // instead of once per pair, and the chunk bounds the per-pair down rows kept for the slot-ordered sum.
  const int64_t chunk = std::min<int64_t>(tokens, kChunkTokens);
  std::vector<float> xq(chunk * hidden), xs(chunk * xs_per_token), down(chunk * top_k * hidden);
  std::vector<float> w13t(hidden * 2 * inter), w2t(inter * hidden);  // [K][N] floats of one expert
  std::vector<float> gu(2 * inter), part(std::max(2 * inter, hidden)), h(inter), y(hidden);
  std::vector<std::vector<int64_t>> pairs_of(experts);  // chunk-local pair indices t * top_k + j, in pair order
  for (int64_t t0 = 0; t0 < tokens; t0 += chunk) {
    const int64_t n_tok = std::min(chunk, tokens - t0);
    for (int64_t t = 0; t < n_tok; ++t) {  // x, quantized like the GPU: per tensor (a13) or per token per 128
      float* xt = xq.data() + t * hidden;
      std::vector<float> row(hidden);
      for (int64_t k = 0; k < hidden; ++k) row[k] = LoadFloat(a.x, (t0 + t) * hidden + k);
      std::vector<float> scales;
      if (a.quant == MoeQuant::kNone) {
        scales = {1.f};
      } else if (a.x.dtype == DType::kF8E4M3) {
        scales = block ? std::vector<float>(a.x_scale.ptr<const float>() + (t0 + t) * kb_h,
                                            a.x_scale.ptr<const float>() + (t0 + t + 1) * kb_h)
                       : std::vector<float>{a13};
      } else {
        scales = QuantizeE4M3Blocks(row, block ? kMoeBlock : static_cast<int>(hidden), tensor ? a13 : 0.f);
      }
      std::copy(row.begin(), row.end(), xt);
      std::copy(scales.begin(), scales.end(), xs.begin() + t * xs_per_token);
    }
    for (auto& v : pairs_of) v.clear();
    for (int64_t i = 0; i < n_tok * top_k; ++i) {
      const int64_t e = ids[t0 * top_k + i] - a.expert_offset;
      if (e >= 0 && e < experts) pairs_of[e].push_back(i);  // others: another rank's expert (EP) or no expert
    }
    for (int64_t e = 0; e < experts; ++e) {
      if (pairs_of[e].empty()) continue;
      for (int64_t n = 0; n < 2 * inter; ++n) {  // n: gate column n, or up column n - I; its w13 row by the layout
        const int64_t w13_row = n < inter ? W13GateRow(n, a.w13_interleaved)
                                          : W13GateRow(n - inter, a.w13_interleaved) + W13UpDelta(inter, a.w13_interleaved);
        const int64_t row = (e * 2 * inter + w13_row) * hidden;
        for (int64_t k = 0; k < hidden; ++k) w13t[k * 2 * inter + n] = LoadFloat(a.w13, row + k);
      }
      for (int64_t n = 0; n < hidden; ++n) {
        const int64_t row = (e * hidden + n) * inter;
        for (int64_t k = 0; k < inter; ++k) w2t[k * hidden + n] = LoadFloat(a.w2, row + k);
      }
      const float* w13_scale = block || tensor ? a.w13_scale.ptr<const float>() : nullptr;
      const float* w2_scale = block || tensor ? a.w2_scale.ptr<const float>() : nullptr;
      for (const int64_t pair : pairs_of[e]) {
        const int64_t t = pair / top_k;
        // Every sum below runs over K in order, one column at a time, as the per-pair loops it replaces did (the
        // same float operations: bit-identical results).
        ColumnSums(xq.data() + t * hidden, w13t.data(), hidden, 2 * inter, block, xs.data() + t * xs_per_token,
                   [&](int64_t n, int64_t kb) { return w13_scale[(e * (2 * inter / kMoeBlock) + n / kMoeBlock) * kb_h + kb]; },
                   gu.data(), part.data());
        if (tensor) {
          for (int64_t n = 0; n < 2 * inter; ++n) gu[n] *= xs[t * xs_per_token] * w13_scale[e];
        }
        for (int64_t i = 0; i < inter; ++i) h[i] = Silu(gu[i]) * gu[inter + i];
        std::vector<float> hs = {1.f};
        if (a.quant == MoeQuant::kNone) {
          for (float& v : h) v = ToFloat(FromFloat<__nv_bfloat16>(v));
        } else {
          hs = QuantizeE4M3Blocks(h, block ? kMoeBlock : static_cast<int>(inter), tensor ? a2 : 0.f);
        }
        float* d = down.data() + pair * hidden;
        ColumnSums(h.data(), w2t.data(), inter, hidden, block, hs.data(),
                   [&](int64_t n, int64_t kb) { return w2_scale[(e * kb_h + n / kMoeBlock) * kb_i + kb]; }, d,
                   part.data());
        if (tensor) {
          for (int64_t n = 0; n < hidden; ++n) d[n] *= hs[0] * w2_scale[e];
        }
      }
    }
    for (int64_t t = 0; t < n_tok; ++t) {  // y = sum over the token's local slots in slot order of w * down
      std::fill(y.begin(), y.end(), 0.f);
      for (int j = 0; j < top_k; ++j) {
        const int64_t e = ids[(t0 + t) * top_k + j] - a.expert_offset;
        if (e < 0 || e >= experts) continue;
        const float w = a.topk_weights.ptr<const float>()[(t0 + t) * top_k + j];
        const float* d = down.data() + (t * top_k + j) * hidden;
        for (int64_t n = 0; n < hidden; ++n) y[n] += w * d[n];
      }
      for (int64_t n = 0; n < hidden; ++n) {
        const float shared = a.shared_output.present() ? LoadFloat(a.shared_output, (t0 + t) * hidden + n) : 0.f;
        a.out.ptr<__nv_bfloat16>()[(t0 + t) * hidden + n] = FromFloat<__nv_bfloat16>(y[n] + shared);
      }
    }
  }
  return Status::Ok();
}

}  // namespace hpc
