#include "csrc/common/check.h"

#include <cmath>
#include <cstdint>
#include <utility>

namespace hpc {
namespace {

std::string DeviceString(const TensorView& t) {
  return t.device == DeviceKind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(t.device_id);
}

}  // namespace

Status ArgCheck::Required(const char* name, const TensorView& t, int rank, const char* layout) const {
  if (!t.present()) return Fail(std::string(name) + " is required");
  if (t.rank != rank) {
    return Fail(std::string(name) + " must be a " + std::to_string(rank) + "-D tensor " + layout + "; got shape " +
                ShapeString(t));
  }
  return Status::Ok();
}

Status ArgCheck::Dtype(const char* name, const TensorView& t, std::initializer_list<DType> allowed) const {
  std::string names;
  int i = 0;
  for (DType d : allowed) {
    if (d == t.dtype) return Status::Ok();
    if (i > 0) names += (i + 1 == static_cast<int>(allowed.size())) ? " or " : ", ";
    names += DTypeName(d);
    ++i;
  }
  return Fail(std::string(name) + " must have dtype " + names + "; got " + DTypeName(t.dtype));
}

Status ArgCheck::SameDtype(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) const {
  if (t.dtype == ref.dtype) return Status::Ok();
  return Fail(std::string(name) + " must have the dtype of " + ref_name + " (" + DTypeName(ref.dtype) + "); got " +
              DTypeName(t.dtype));
}

Status ArgCheck::Dim(const char* name, const TensorView& t, int dim, int64_t expected, const char* why) const {
  if (t.shape[dim] == expected) return Status::Ok();
  return Fail(std::string(name) + ".shape[" + std::to_string(dim) + "] must be " + std::to_string(expected) + " (" +
              why + "); got shape " + ShapeString(t));
}

Status ArgCheck::InnerContiguous(const char* name, const TensorView& t) const {
  // (an empty view has no element to misread: numpy gives [0, E] arrays strides (0, 0), as contiguous() allows)
  if (t.rank == 0 || t.shape[t.rank - 1] == 1 || t.strides[t.rank - 1] == 1 || t.numel() == 0) return Status::Ok();
  return Fail(std::string(name) + " must be contiguous in its last dimension (stride 1); got stride " +
              std::to_string(t.strides[t.rank - 1]));
}

Status ArgCheck::Contiguous(const char* name, const TensorView& t) const {
  if (t.contiguous()) return Status::Ok();
  return Fail(std::string(name) + " must be contiguous; got a strided view of shape " + ShapeString(t));
}

Status ArgCheck::VectorAligned(const char* name, const TensorView& t, int bytes) const {
  const int64_t elem = DTypeBytes(t.dtype);
  bool ok = reinterpret_cast<uintptr_t>(t.data) % bytes == 0;
  for (int d = 0; d + 1 < t.rank; ++d) ok = ok && (t.shape[d] == 1 || t.strides[d] * elem % bytes == 0);
  if (ok) return Status::Ok();
  return Fail(std::string(name) + " must be " + std::to_string(bytes) +
              "-byte aligned on the GPU (data pointer and outer strides); got a view at offset " +
              std::to_string(reinterpret_cast<uintptr_t>(t.data) % bytes) + " bytes from alignment, strides " +
              StridesString(t) + " elements");
}

Status ArgCheck::Writable(const char* name, const TensorView& t) const {
  for (int d = 0; d < t.rank; ++d) {
    if (t.shape[d] > 1 && t.strides[d] == 0) {
      return Fail(std::string(name) + " is written by the op, so it cannot be a broadcast (expanded) view; got "
                  "stride 0 in dimension " + std::to_string(d) + " of shape " + ShapeString(t));
    }
  }
  return Status::Ok();
}

namespace {
// [first byte, one past the last byte) an operand can address (non-negative strides), or {0, 0} when it has none.
std::pair<uintptr_t, uintptr_t> ByteRange(const TensorView& t) {
  if (!t.present() || t.numel() == 0) return {0, 0};
  int64_t last = 0;
  for (int d = 0; d < t.rank; ++d) last += (t.shape[d] - 1) * t.strides[d];
  const uintptr_t lo = reinterpret_cast<uintptr_t>(t.data);
  return {lo, lo + static_cast<uintptr_t>((last + 1) * DTypeBytes(t.dtype))};
}

bool SameView(const TensorView& a, const TensorView& b) {
  if (a.data != b.data || a.rank != b.rank || a.dtype != b.dtype) return false;
  for (int d = 0; d < a.rank; ++d) {
    if (a.shape[d] != b.shape[d] || (a.shape[d] > 1 && a.strides[d] != b.strides[d])) return false;
  }
  return true;
}
}  // namespace

Status ArgCheck::Disjoint(const char* name, const TensorView& t, const char* other_name, const TensorView& other,
                          bool allow_same) const {
  const auto [lo, hi] = ByteRange(t);
  const auto [other_lo, other_hi] = ByteRange(other);
  if (lo == hi || other_lo == other_hi || hi <= other_lo || other_hi <= lo) return Status::Ok();
  if (allow_same && SameView(t, other)) return Status::Ok();
  return Fail(std::string(name) + " overlaps " + other_name + " in memory (the op writes " + name + "; " +
              (allow_same ? std::string("it may be ") + other_name + " itself, or a separate buffer)"
                          : std::string("pass separate buffers)")));
}

Status ArgCheck::PositiveFiniteScales(const char* name, const TensorView& t, bool zero_ok) const {
  if (!t.present()) return Status::Ok();
  const float* s = t.ptr<const float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (!(s[i] > 0.0f || (zero_ok && s[i] == 0.0f)) || !std::isfinite(s[i])) {
      return Fail(std::string(name) + (t.numel() == 1 ? "" : "[" + std::to_string(i) + "] (flat index)") +
                  " must be finite and " + (zero_ok ? ">= 0" : "> 0") + "; got " + std::to_string(s[i]));
    }
  }
  return Status::Ok();
}

Status ArgCheck::SameDevice(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) const {
  if (t.device == ref.device && (t.device == DeviceKind::kCpu || t.device_id == ref.device_id)) return Status::Ok();
  return Fail(std::string(name) + " is on " + DeviceString(t) + " but " + ref_name + " is on " + DeviceString(ref));
}

Status ArgCheck::Scalar(const char* name, const TensorView& t) const {
  if (t.dtype != DType::kF32 || t.numel() != 1) {
    return Fail(std::string(name) + " must be a float32 tensor with one element; got " + DTypeName(t.dtype) + " " +
                ShapeString(t));
  }
  return Status::Ok();
}

Status ArgCheck::Dense(const char* name, const TensorView& t, const char* layout, std::initializer_list<DType> dtypes,
                       std::initializer_list<DimRule> dims, const char* ref_name, const TensorView& ref) const {
  HPC_RETURN_IF_ERROR(Required(name, t, static_cast<int>(dims.size()), layout));
  HPC_RETURN_IF_ERROR(Dtype(name, t, dtypes));
  int d = 0;
  for (const DimRule& rule : dims) {
    if (rule.value >= 0) HPC_RETURN_IF_ERROR(Dim(name, t, d, rule.value, rule.why));
    ++d;
  }
  HPC_RETURN_IF_ERROR(Contiguous(name, t));
  return SameDevice(name, t, ref_name, ref);
}

Status ArgCheck::PagedKCache(const TensorView& k_cache, std::initializer_list<DType> dtypes, const char* ref_name,
                             const TensorView& ref) const {
  HPC_RETURN_IF_ERROR(Required("k_cache", k_cache, 4, "[num_blocks, page_size, Hkv, D]"));
  HPC_RETURN_IF_ERROR(Dtype("k_cache", k_cache, dtypes));
  HPC_RETURN_IF_ERROR(InnerContiguous("k_cache", k_cache));
  return SameDevice("k_cache", k_cache, ref_name, ref);
}

Status ArgCheck::PagedVCacheLikeK(const TensorView& v_cache, const TensorView& k_cache, const char* ref_name,
                                  const TensorView& ref) const {
  HPC_RETURN_IF_ERROR(Required("v_cache", v_cache, 4, "[num_blocks, page_size, Hkv, D]"));
  HPC_RETURN_IF_ERROR(SameDtype("v_cache", v_cache, "k_cache", k_cache));
  for (int d = 0; d < 4; ++d) HPC_RETURN_IF_ERROR(Dim("v_cache", v_cache, d, k_cache.shape[d], "from k_cache"));
  HPC_RETURN_IF_ERROR(InnerContiguous("v_cache", v_cache));
  return SameDevice("v_cache", v_cache, ref_name, ref);
}

Status ArgCheck::CacheScale(const char* name, const TensorView& scale, const char* cache_name,
                            const TensorView& cache) const {
  if (cache.dtype != DType::kF8E4M3) {
    if (!scale.present()) return Status::Ok();
    return Fail(std::string(name) + " is only used with a float8_e4m3fn cache, but " + cache_name + " is " +
                DTypeName(cache.dtype) + "; pass None");
  }
  if (!scale.present()) return Fail(std::string(name) + " is required with a float8_e4m3fn cache");
  HPC_RETURN_IF_ERROR(Scalar(name, scale));
  return SameDevice(name, scale, cache_name, cache);
}

}  // namespace hpc
