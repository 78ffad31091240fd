#include <string>

#include "csrc/common/check.h"
#include "csrc/rope_norm/rope_norm.h"

namespace hpc {
namespace {

constexpr int kMinHeadDim = 16;
constexpr int kMaxHeadDim = 256;

Status ValidateOptionalWeight(const ArgCheck& c, const char* name, const TensorView& w, int64_t head_dim,
                              const TensorView& q) {
  if (!w.present()) return Status::Ok();
  HPC_RETURN_IF_ERROR(c.Required(name, w, 1, "[D]"));
  HPC_RETURN_IF_ERROR(c.Dtype(name, w, {DType::kF32, DType::kBF16, DType::kF16}));
  HPC_RETURN_IF_ERROR(c.Dim(name, w, 0, head_dim, "head_dim, from q"));
  HPC_RETURN_IF_ERROR(c.Contiguous(name, w));
  return c.SameDevice(name, w, "q", q);
}

}  // namespace

Status RopeNormIndexError(int64_t token, int64_t position, int64_t max_pos, int64_t slot, int64_t num_slots) {
  ArgCheck c("rope_norm");
  if (position < 0 || position >= max_pos) {
    return c.Fail("positions[" + std::to_string(token) + "] = " + std::to_string(position) +
                  " is outside [0, " + std::to_string(max_pos) + ") (cos_sin_cache.shape[0])");
  }
  if (slot < -1 || slot >= num_slots) {
    return c.Fail("slot_mapping[" + std::to_string(token) + "] = " + std::to_string(slot) +
                  " is outside [-1, " + std::to_string(num_slots) + ") (num_blocks * page_size of k_cache)");
  }
  return Status::Ok();
}

Status ValidateRopeNorm(const RopeNormArgs& a) {
  ArgCheck c("rope_norm");
  HPC_RETURN_IF_ERROR(c.Required("q", a.q, 3, "[T, Hq, D]"));
  HPC_RETURN_IF_ERROR(c.Dtype("q", a.q, {DType::kBF16, DType::kF16}));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("q", a.q));
  const int64_t tokens = a.q.shape[0], num_q_heads = a.q.shape[1], head_dim = a.q.shape[2];
  if (head_dim % 8 != 0 || head_dim < kMinHeadDim || head_dim > kMaxHeadDim) {
    return c.Fail("head_dim (q.shape[2]) must be a multiple of 8 in [" + std::to_string(kMinHeadDim) + ", " +
                  std::to_string(kMaxHeadDim) + "]; got " + std::to_string(head_dim));
  }
  if (num_q_heads < 1) return c.Fail("q must have at least one head; got shape " + ShapeString(a.q));

  HPC_RETURN_IF_ERROR(c.Required("k", a.k, 3, "[T, Hkv, D]"));
  HPC_RETURN_IF_ERROR(c.SameDtype("k", a.k, "q", a.q));
  HPC_RETURN_IF_ERROR(c.Dim("k", a.k, 0, tokens, "T, from q"));
  HPC_RETURN_IF_ERROR(c.Dim("k", a.k, 2, head_dim, "head_dim, from q"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("k", a.k));
  HPC_RETURN_IF_ERROR(c.SameDevice("k", a.k, "q", a.q));
  const int64_t num_kv_heads = a.k.shape[1];
  if (num_kv_heads < 1) return c.Fail("k must have at least one head; got shape " + ShapeString(a.k));

  HPC_RETURN_IF_ERROR(c.Required("v", a.v, 3, "[T, Hkv, D]"));
  HPC_RETURN_IF_ERROR(c.SameDtype("v", a.v, "q", a.q));
  HPC_RETURN_IF_ERROR(c.Dim("v", a.v, 0, tokens, "T, from q"));
  HPC_RETURN_IF_ERROR(c.Dim("v", a.v, 1, num_kv_heads, "num_kv_heads, from k"));
  HPC_RETURN_IF_ERROR(c.Dim("v", a.v, 2, head_dim, "head_dim, from q"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("v", a.v));
  HPC_RETURN_IF_ERROR(c.SameDevice("v", a.v, "q", a.q));

  HPC_RETURN_IF_ERROR(c.Required("positions", a.positions, 1, "[T]"));
  HPC_RETURN_IF_ERROR(c.Dtype("positions", a.positions, {DType::kI32, DType::kI64}));
  HPC_RETURN_IF_ERROR(c.Dim("positions", a.positions, 0, tokens, "T, from q"));
  HPC_RETURN_IF_ERROR(c.Contiguous("positions", a.positions));  // the GPU kernels index it densely
  HPC_RETURN_IF_ERROR(c.SameDevice("positions", a.positions, "q", a.q));

  if (a.rotary_dim < 2 || a.rotary_dim > head_dim || a.rotary_dim % 2 != 0) {
    return c.Fail("rotary_dim must be even and in [2, head_dim=" + std::to_string(head_dim) + "]; got " +
                  std::to_string(a.rotary_dim));
  }
  if (a.rope_style != RopeStyle::kNeox && a.rope_style != RopeStyle::kGptj) {
    return c.Fail("rope_style must be 'neox' or 'gptj'");
  }
  HPC_RETURN_IF_ERROR(c.Required("cos_sin_cache", a.cos_sin_cache, 2, "[max_position, rotary_dim]"));
  HPC_RETURN_IF_ERROR(c.Dtype("cos_sin_cache", a.cos_sin_cache, {DType::kF32, DType::kBF16, DType::kF16}));
  HPC_RETURN_IF_ERROR(c.Dim("cos_sin_cache", a.cos_sin_cache, 1, a.rotary_dim, "rotary_dim"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("cos_sin_cache", a.cos_sin_cache));
  HPC_RETURN_IF_ERROR(c.SameDevice("cos_sin_cache", a.cos_sin_cache, "q", a.q));
  if (a.cos_sin_cache.shape[0] < 1) return c.Fail("cos_sin_cache must have at least one position");

  HPC_RETURN_IF_ERROR(c.Required("slot_mapping", a.slot_mapping, 1, "[T]"));
  HPC_RETURN_IF_ERROR(c.Dtype("slot_mapping", a.slot_mapping, {DType::kI32, DType::kI64}));
  HPC_RETURN_IF_ERROR(c.Dim("slot_mapping", a.slot_mapping, 0, tokens, "T, from q"));
  HPC_RETURN_IF_ERROR(c.Contiguous("slot_mapping", a.slot_mapping));  // the GPU kernels index it densely
  HPC_RETURN_IF_ERROR(c.SameDevice("slot_mapping", a.slot_mapping, "q", a.q));

  // k_cache against k and q before v_cache against k_cache (check.h, PagedKCache)
  HPC_RETURN_IF_ERROR(c.PagedKCache(a.k_cache, {a.q.dtype, DType::kF8E4M3}, "q", a.q));
  HPC_RETURN_IF_ERROR(c.Dim("k_cache", a.k_cache, 2, num_kv_heads, "num_kv_heads, from k"));
  HPC_RETURN_IF_ERROR(c.Dim("k_cache", a.k_cache, 3, head_dim, "head_dim, from q"));
  if (a.k_cache.shape[1] < 1) return c.Fail("k_cache page_size (shape[1]) must be at least 1");
  HPC_RETURN_IF_ERROR(c.PagedVCacheLikeK(a.v_cache, a.k_cache, "q", a.q));
  HPC_RETURN_IF_ERROR(c.Writable("k_cache", a.k_cache));
  HPC_RETURN_IF_ERROR(c.Writable("v_cache", a.v_cache));
  HPC_RETURN_IF_ERROR(c.CacheScale("k_scale", a.k_scale, "k_cache", a.k_cache));
  HPC_RETURN_IF_ERROR(c.CacheScale("v_scale", a.v_scale, "k_cache", a.k_cache));

  HPC_RETURN_IF_ERROR(c.Required("q_out", a.q_out, 3, "[T, Hq, D]"));
  HPC_RETURN_IF_ERROR(c.Dtype("q_out", a.q_out, {a.q.dtype, DType::kF8E4M3}));
  for (int d = 0; d < 3; ++d) HPC_RETURN_IF_ERROR(c.Dim("q_out", a.q_out, d, a.q.shape[d], "from q"));
  HPC_RETURN_IF_ERROR(c.InnerContiguous("q_out", a.q_out));
  HPC_RETURN_IF_ERROR(c.Writable("q_out", a.q_out));
  HPC_RETURN_IF_ERROR(c.SameDevice("q_out", a.q_out, "q", a.q));
  // q_out may be q itself; any other overlap with q, k or v (a view shifted by a head) reads rows already written.
  // (q, k and v may interleave in one qkv buffer, so k and v are compared only with a q_out of its own.)
  HPC_RETURN_IF_ERROR(c.Disjoint("q_out", a.q_out, "q", a.q, /*allow_same=*/true));
  if (a.q_out.data != a.q.data) {
    HPC_RETURN_IF_ERROR(c.Disjoint("q_out", a.q_out, "k", a.k));
    HPC_RETURN_IF_ERROR(c.Disjoint("q_out", a.q_out, "v", a.v));
  }
  // (their pages may interleave in one buffer: only the same start is wrong; caches of no blocks are never written --
  // every slot must be -1 -- and two empty tensors may both have a null data pointer)
  if (a.k_cache.data == a.v_cache.data && a.k_cache.shape[0] > 0) {
    return c.Fail("k_cache and v_cache start at the same address: both are written (pass two caches, or the K and V "
                  "halves of one)");
  }
  if (a.q_out.dtype == DType::kF8E4M3) {
    HPC_RETURN_IF_ERROR(c.Dense("q_scale", a.q_scale, "[T, Hq]", {DType::kF32},
                                {{tokens, "T, from q"}, {num_q_heads, "num_q_heads, from q"}}, "q", a.q));
    HPC_RETURN_IF_ERROR(c.Disjoint("q_scale", a.q_scale, "q_out", a.q_out));
  } else if (a.q_scale.present()) {
    return c.Fail("q_scale is only written when q_out is float8_e4m3fn (q_quant='fp8'); q_out is " +
                  std::string(DTypeName(a.q_out.dtype)));
  }

  HPC_RETURN_IF_ERROR(ValidateOptionalWeight(c, "q_norm_weight", a.q_norm_weight, head_dim, a.q));
  HPC_RETURN_IF_ERROR(ValidateOptionalWeight(c, "k_norm_weight", a.k_norm_weight, head_dim, a.q));
  if (!(a.eps >= 0.0f) || a.eps > 1.0f) return c.Fail("eps must be in [0, 1]; got " + std::to_string(a.eps));
  // Indices are computed in 64 bits in the kernel, but the grid's row count must fit in 32 bits.
  if (tokens * (num_q_heads + 2 * num_kv_heads) >= (int64_t{1} << 31)) {
    return c.Fail("T * (Hq + 2 * Hkv) must be below 2^31");
  }
  return Status::Ok();
}

}  // namespace hpc
