// Argument validation helpers. Every op validates once, in csrc, through an ArgCheck bound to its name, so
// the messages read the same in JAX and torch: "<op>: <argument> ...; got ...".
#pragma once

#include <initializer_list>
#include <string>

#include "csrc/common/status.h"
#include "csrc/common/tensor_view.h"

namespace hpc {

class ArgCheck {
 public:
  explicit ArgCheck(const char* op) : op_(op) {}

  Status Fail(const std::string& msg) const { return Status::InvalidArgument(op_ + ": " + msg); }

  // `layout` names the dims, e.g. "[T, Hq, D]".
  Status Required(const char* name, const TensorView& t, int rank, const char* layout) const;
  Status Dtype(const char* name, const TensorView& t, std::initializer_list<DType> allowed) const;
  Status SameDtype(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) const;
  // shape[dim] == expected; `why` says where expected comes from, e.g. "num_kv_heads, from k".
  Status Dim(const char* name, const TensorView& t, int dim, int64_t expected, const char* why) const;
  Status InnerContiguous(const char* name, const TensorView& t) const;  // stride 1 in the last dim
  Status Contiguous(const char* name, const TensorView& t) const;
  // GPU vector access of `bytes` bytes along the last dim: the data pointer and every outer stride (in bytes)
  // must be multiples of `bytes` (a misaligned access would fault and take the CUDA context with it).
  Status VectorAligned(const char* name, const TensorView& t, int bytes) const;
  // A tensor the op writes: no broadcast (stride-0) dimension, whose elements would overwrite each other.
  Status Writable(const char* name, const TensorView& t) const;
  // A tensor the op writes against another operand: their address ranges must not overlap (a shifted `out` over q
  // gave a wrong q; moe_route's two outputs as views of one buffer, garbage ids), unless allow_same and `t` is
  // exactly `other` (the same data, shape and strides: rope_norm's out=q). Ranges, not elements: interleaved views
  // of one buffer (vLLM's K/V pages) are disjoint element-wise but overlap here, so pass only pairs that never
  // interleave legitimately.
  Status Disjoint(const char* name, const TensorView& t, const char* other_name, const TensorView& other,
                  bool allow_same = false) const;
  // Host (CPU) float32 scale(s), contiguous: every element finite and > 0 (>= 0 with zero_ok: a weight block of
  // zeros may carry scale 0). A bad scale turns every value it touches into 0, inf or NaN without another sign.
  Status PositiveFiniteScales(const char* name, const TensorView& t, bool zero_ok = false) const;
  Status SameDevice(const char* name, const TensorView& t, const char* ref_name, const TensorView& ref) const;
  Status Scalar(const char* name, const TensorView& t) const;  // exactly one float32 element
  // Everything a dense operand must satisfy, in one call: present with len(dims) dims, one of `dtypes`,
  // shape[i] == dims[i].value (unless < 0; the message gives dims[i].why), contiguous, on ref's device.
  struct DimRule {
    int64_t value;
    const char* why;
  };
  Status Dense(const char* name, const TensorView& t, const char* layout, std::initializer_list<DType> dtypes,
               std::initializer_list<DimRule> dims, const char* ref_name, const TensorView& ref) const;
  // A paged KV cache pair [num_blocks, page_size, Hkv, D], in two steps with the op's own checks of k_cache's dims
  // between them: v_cache is compared with k_cache only once k_cache is known right, else a k_cache of the wrong
  // head count or head_dim beside a right v_cache was blamed on v_cache ("v_cache.shape[2] must be 3 (from
  // k_cache)").
  // k_cache: one of `dtypes`, contiguous in the last dim (other strides free: vLLM's views), on ref's device.
  Status PagedKCache(const TensorView& k_cache, std::initializer_list<DType> dtypes, const char* ref_name,
                     const TensorView& ref) const;
  // v_cache: k_cache's dtype and shape, contiguous in the last dim, on ref's device.
  Status PagedVCacheLikeK(const TensorView& v_cache, const TensorView& k_cache, const char* ref_name,
                          const TensorView& ref) const;
  // A per-tensor dequantization scale: required (float32 scalar) with a float8_e4m3fn cache, absent otherwise.
  Status CacheScale(const char* name, const TensorView& scale, const char* cache_name, const TensorView& cache) const;

 private:
  std::string op_;
};

}  // namespace hpc
