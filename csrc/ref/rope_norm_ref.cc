// CPU reference of rope_norm: the CPU platform of both frameworks and the structure the CUDA kernel mirrors.
// fp32 arithmetic, one (token, head) row at a time: [norm] -> rope -> [norm] -> store.
#include <cmath>
#include <vector>

#include "csrc/common/check.h"
#include "csrc/ref/element_access.h"
#include "csrc/rope_norm/rope_norm.h"

namespace hpc {
namespace {

using ref::LoadFloat;
using ref::LoadIndex;
using ref::Offset;
using ref::StoreFloat;

void RmsNorm(std::vector<float>& x, const TensorView& weight, float eps) {
  if (!weight.present()) return;
  float ss = 0.0f;
  for (float e : x) ss += e * e;
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(x.size()) + eps);
  for (size_t i = 0; i < x.size(); ++i) x[i] = x[i] * inv * LoadFloat(weight, static_cast<int64_t>(i));
}

void Rope(std::vector<float>& x, const RopeNormArgs& a, int64_t position) {
  const int64_t half = a.rotary_dim / 2;
  const int64_t row = position * a.cos_sin_cache.strides[0];
  std::vector<float> y = x;
  for (int64_t i = 0; i < half; ++i) {
    const float c = LoadFloat(a.cos_sin_cache, row + i), s = LoadFloat(a.cos_sin_cache, row + half + i);
    // neox rotates (i, i + rot/2); gptj rotates (2i, 2i + 1).
    const int64_t i0 = a.rope_style == RopeStyle::kNeox ? i : 2 * i;
    const int64_t i1 = a.rope_style == RopeStyle::kNeox ? i + half : 2 * i + 1;
    y[i0] = x[i0] * c - x[i1] * s;
    y[i1] = x[i1] * c + x[i0] * s;
  }
  x.swap(y);
}

void NormRope(std::vector<float>& x, const RopeNormArgs& a, const TensorView& weight, int64_t position) {
  if (a.norm_before_rope) RmsNorm(x, weight, a.eps);
  Rope(x, a, position);
  if (!a.norm_before_rope) RmsNorm(x, weight, a.eps);
}

void LoadRow(std::vector<float>& x, const TensorView& t, int64_t token, int64_t head) {
  const int64_t base = Offset(t, token, head);
  for (size_t i = 0; i < x.size(); ++i) x[i] = LoadFloat(t, base + static_cast<int64_t>(i));
}

void StoreRow(const std::vector<float>& x, const TensorView& t, int64_t base, float scale) {
  for (size_t i = 0; i < x.size(); ++i) StoreFloat(t, base + static_cast<int64_t>(i), x[i], scale);
}

}  // namespace

Status RopeNormCpu(const RopeNormArgs& a) {
  HPC_RETURN_IF_ERROR(ValidateRopeNorm(a));
  if (a.q.device != DeviceKind::kCpu) return Status::Internal("rope_norm: CPU reference called with device tensors");
  const int64_t tokens = a.q.shape[0], hq = a.q.shape[1], hkv = a.k.shape[1], d = a.q.shape[2];
  const int64_t page = a.k_cache.shape[1], num_slots = a.k_cache.shape[0] * page;
  const int64_t max_pos = a.cos_sin_cache.shape[0];
  // Check every index before writing anything, so a bad call leaves the caches untouched.
  for (int64_t t = 0; t < tokens; ++t) {
    HPC_RETURN_IF_ERROR(RopeNormIndexError(t, LoadIndex(a.positions, t * a.positions.strides[0]), max_pos,
                                           LoadIndex(a.slot_mapping, t * a.slot_mapping.strides[0]), num_slots));
  }
  HPC_RETURN_IF_ERROR(ArgCheck("rope_norm").PositiveFiniteScales("k_scale", a.k_scale));
  HPC_RETURN_IF_ERROR(ArgCheck("rope_norm").PositiveFiniteScales("v_scale", a.v_scale));
  const bool fp8_cache = a.k_cache.dtype == DType::kF8E4M3;
  const float k_scale = fp8_cache ? a.k_scale.ptr<const float>()[0] : 1.0f;
  const float v_scale = fp8_cache ? a.v_scale.ptr<const float>()[0] : 1.0f;
  const bool fp8_q = a.q_out.dtype == DType::kF8E4M3;
  std::vector<float> x(static_cast<size_t>(d));
  for (int64_t t = 0; t < tokens; ++t) {
    const int64_t pos = LoadIndex(a.positions, t * a.positions.strides[0]);
    const int64_t slot = LoadIndex(a.slot_mapping, t * a.slot_mapping.strides[0]);
    for (int64_t h = 0; h < hq; ++h) {
      LoadRow(x, a.q, t, h);
      NormRope(x, a, a.q_norm_weight, pos);
      float scale = 1.0f;
      if (fp8_q) {
        float amax = 0.0f;
        for (float e : x) amax = std::fmax(amax, std::fabs(e));
        scale = amax / kFp8E4M3Max;
        a.q_scale.ptr<float>()[t * hq + h] = scale;
      }
      StoreRow(x, a.q_out, Offset(a.q_out, t, h), scale);
    }
    if (slot < 0) continue;
    const int64_t block = slot / page, offset = slot % page;
    for (int64_t h = 0; h < hkv; ++h) {
      LoadRow(x, a.k, t, h);
      NormRope(x, a, a.k_norm_weight, pos);
      StoreRow(x, a.k_cache, Offset(a.k_cache, block, offset, h), k_scale);
      LoadRow(x, a.v, t, h);
      StoreRow(x, a.v_cache, Offset(a.v_cache, block, offset, h), v_scale);
    }
  }
  return Status::Ok();
}

}  // namespace hpc
