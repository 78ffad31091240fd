// rope_norm's kernel parameters and the small loads both of its kernels share (included by rope_norm.cu only).
#pragma once

#include <cuda_runtime.h>
#include <cutlass/fast_math.h>

#include <cstdint>

#include "csrc/common/numeric.h"
#include "csrc/common/tensor_view.h"
#include "csrc/common/vec.cuh"

namespace hpc {
namespace rope_norm_detail {

constexpr int kThreads = 256;  // the general kernel's block (the paired kernel: kPairedThreads)
constexpr int kVec = 8;  // elements per lane

struct RopeNormParams {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_stride_t, q_stride_h, k_stride_t, k_stride_h, v_stride_t, v_stride_h;
  void* q_out;
  int64_t q_out_stride_t, q_out_stride_h;
  float* q_scale;
  const void* positions;
  const void* slot_mapping;
  const void* cos_sin;
  int64_t cos_sin_stride;
  int64_t max_pos;
  void* k_cache;
  void* v_cache;
  int64_t k_cache_stride_b, k_cache_stride_p, k_cache_stride_h;
  int64_t v_cache_stride_b, v_cache_stride_p, v_cache_stride_h;
  int64_t num_slots;
  int64_t page_size;
  const void* q_norm_weight;
  const void* k_norm_weight;
  const float* k_scale;
  const float* v_scale;
  float eps;
  float inv_head_dim;  // mean(x^2) as a product: a division per row was a visible share of the instructions
  int tokens, num_q_heads, num_kv_heads, head_dim, rotary_dim;
  int groups_per_token;  // lane groups sharing one token's Hq + 2 Hkv rows
  bool positions_i64, slots_i64;
  DType cos_sin_dtype, q_norm_dtype, k_norm_dtype;
  bool neox, norm_before_rope;
  bool fast_rope;  // f32 cos/sin rows 16-byte aligned and rotary halves aligned to the lanes' 8-element vectors
  // Paired kernel only: a token's rows are split into q groups, k groups and v groups of up to R rows each.
  // Groups are numbered by tiles of 2^tile_shift tokens, kind-major inside a tile (all its q groups, then its k
  // groups, then its v groups, token-minor), so that the groups of one warp run the same branch; tile_div maps
  // the global group index -> (tile, index in tile) by multiply-shift instead of a 32-bit division.
  int q_groups, kv_groups, tile_shift;
  // k and v share one group per token (its rows: the k heads, then the v heads) when both fit in R rows, e.g.
  // 8/1 heads at R=4: separate k and v groups would each hold 1 row of 4. Then the tile has no v groups.
  bool kv_merged;
  cutlass::FastDivmod tile_div;
  // Paired kernel only: groups prefetch into L2 the cos/sin row of the token of the group this many ahead
  // (0 = off). See CosSinAheadPosition.
  int prefetch_groups;
};

__device__ __forceinline__ float LoadAny(const void* base, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__device__ __forceinline__ int64_t LoadIndex(const void* base, bool is_i64, int64_t i) {
  return is_i64 ? static_cast<const int64_t*>(base)[i] : static_cast<const int32_t*>(base)[i];
}

// Eight consecutive floats, 16-byte aligned.
__device__ __forceinline__ void LoadF32x8(const float* p, float (&out)[8]) {
  const float4 a = *reinterpret_cast<const float4*>(p);
  const float4 b = *reinterpret_cast<const float4*>(p + 4);
  out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
}

__device__ __forceinline__ void LoadWeight8(const void* w, DType dtype, int first, float (&out)[8]) {
  if (dtype == DType::kF32) {
    LoadF32x8(static_cast<const float*>(w) + first, out);
  } else if (dtype == DType::kBF16) {
    LoadVec8(static_cast<const __nv_bfloat16*>(w) + first, out);
  } else {
    LoadVec8(static_cast<const __half*>(w) + first, out);
  }
}

}  // namespace rope_norm_detail
}  // namespace hpc
