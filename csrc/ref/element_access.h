// Element loads/stores by runtime dtype for the CPU reference ops (correctness first; not a fast path).
#pragma once

#include <cstdint>

#include "csrc/common/numeric.h"
#include "csrc/common/tensor_view.h"

namespace hpc {
namespace ref {

// Element offset of a multi-index in a strided view.
inline int64_t Offset(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  const int64_t idx[4] = {i0, i1, i2, i3};
  int64_t off = 0;
  for (int d = 0; d < t.rank && d < 4; ++d) off += idx[d] * t.strides[d];
  return off;
}

inline float LoadFloat(const TensorView& t, int64_t offset) {
  switch (t.dtype) {
    case DType::kF32: return t.ptr<const float>()[offset];
    case DType::kBF16: return ToFloat(t.ptr<const __nv_bfloat16>()[offset]);
    case DType::kF16: return ToFloat(t.ptr<const __half>()[offset]);
    case DType::kF8E4M3: return E4M3ToFloat(t.ptr<const uint8_t>()[offset]);
    default: return 0.0f;
  }
}

inline int64_t LoadIndex(const TensorView& t, int64_t offset) {
  return t.dtype == DType::kI64 ? t.ptr<const int64_t>()[offset] : t.ptr<const int32_t>()[offset];
}

// Stores x rounded to t's dtype; for float8_e4m3fn, x is first divided by `scale` and saturated.
inline void StoreFloat(const TensorView& t, int64_t offset, float x, float scale = 1.0f) {
  switch (t.dtype) {
    case DType::kF32: t.ptr<float>()[offset] = x; break;
    case DType::kBF16: t.ptr<__nv_bfloat16>()[offset] = FromFloat<__nv_bfloat16>(x); break;
    case DType::kF16: t.ptr<__half>()[offset] = FromFloat<__half>(x); break;
    case DType::kF8E4M3: t.ptr<uint8_t>()[offset] = QuantizeE4M3(x, scale); break;
    default: break;
  }
}

}  // namespace ref
}  // namespace hpc
