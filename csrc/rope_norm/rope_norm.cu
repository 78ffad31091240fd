// rope_norm on sm_90a: one memory-bound pass. Each (token, head) row of q, k and v is owned by a group of G
// lanes, 8 elements (16 bytes) per lane; a group holds up to 4 rows of one token, so the token's position,
// slot and cos/sin row are loaded once and all its loads are in flight together. Per row: 16-byte load ->
// [RMSNorm: group shuffle-sum] -> RoPE (neox partners exchanged by shuffles, or through shared memory when
// rotary_dim/2 is not a multiple of 8) -> [RMSNorm] -> store q (or fp8 q + per-row scale), or K/V straight into
// their paged-cache slot (fp8: saturated x/scale).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/numeric.h"
#include "csrc/common/vec.cuh"
#include "csrc/rope_norm/rope_norm.h"

namespace hpc {
namespace {

constexpr int kThreads = 256;
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

__device__ __forceinline__ void LoadWeight8(const void* w, DType dtype, int first, float (&out)[8]) {
  if (dtype == DType::kF32) {
    const float4 a = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + first);
    const float4 b = *reinterpret_cast<const float4*>(static_cast<const float*>(w) + first + 4);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w, out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else if (dtype == DType::kBF16) {
    LoadVec8(static_cast<const __nv_bfloat16*>(w) + first, out);
  } else {
    LoadVec8(static_cast<const __half*>(w) + first, out);
  }
}

// RMSNorm over the row held by the group. All lanes call it (shuffles); only `apply` rows change.
template <int G>
__device__ __forceinline__ void RmsNormRow(float (&x)[8], bool apply, const void* w, DType w_dtype, int lane,
                                           float inv_head_dim, float eps) {
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kVec; ++i) ss += x[i] * x[i];
  ss = GroupSum<G>(ss);
  if (!apply) return;
  float wv[8];
  LoadWeight8(w, w_dtype, lane * kVec, wv);
  const float inv = rsqrtf(ss * inv_head_dim + eps);
#pragma unroll
  for (int i = 0; i < kVec; ++i) x[i] = x[i] * inv * wv[i];
}

// cos/sin for this lane's 8 elements: element e uses index e (neox, e < rot/2), e - rot/2 (neox, second half)
// or e/2 (gptj). The rotation's sign is folded into s here, once per token: y = x c + partner s, where s is
// negated for the element that takes -partner (neox first half, gptj even elements).
__device__ __forceinline__ void LoadCosSin(const RopeNormParams& p, int64_t pos, int lane, float (&c)[8],
                                           float (&s)[8]) {
  const int half = p.rotary_dim / 2;
  const int64_t row = pos * p.cos_sin_stride;
  const int first = lane * kVec;
  if (p.fast_rope) {
    const float* base = static_cast<const float*>(p.cos_sin) + row;
    if (p.neox) {
      if (first >= p.rotary_dim) return;  // lane outside the rotary part
      const int idx = first < half ? first : first - half;
      const float4 c0 = *reinterpret_cast<const float4*>(base + idx);
      const float4 c1 = *reinterpret_cast<const float4*>(base + idx + 4);
      const float4 s0 = *reinterpret_cast<const float4*>(base + half + idx);
      const float4 s1 = *reinterpret_cast<const float4*>(base + half + idx + 4);
      const float sign = first < half ? -1.0f : 1.0f;
      c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
      s[0] = sign * s0.x, s[1] = sign * s0.y, s[2] = sign * s0.z, s[3] = sign * s0.w;
      s[4] = sign * s1.x, s[5] = sign * s1.y, s[6] = sign * s1.z, s[7] = sign * s1.w;
    } else {
      if (first >= p.rotary_dim) return;
      const float4 c0 = *reinterpret_cast<const float4*>(base + first / 2);
      const float4 s0 = *reinterpret_cast<const float4*>(base + half + first / 2);
      const float cv[4] = {c0.x, c0.y, c0.z, c0.w}, sv[4] = {s0.x, s0.y, s0.z, s0.w};
#pragma unroll
      for (int i = 0; i < kVec; ++i) c[i] = cv[i / 2], s[i] = (i % 2 == 0 ? -1.0f : 1.0f) * sv[i / 2];
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    const int e = first + i;
    int idx = p.neox ? (e < half ? e : e - half) : e / 2;
    if (e >= p.rotary_dim) idx = 0;  // not rotated; any valid index
    const bool negate = p.neox ? e < half : e % 2 == 0;
    c[i] = LoadAny(p.cos_sin, p.cos_sin_dtype, row + idx);
    s[i] = (negate ? -1.0f : 1.0f) * LoadAny(p.cos_sin, p.cos_sin_dtype, row + half + idx);
  }
}

// Rotary embedding of the group's row. All lanes call it (shuffles / __syncwarp); only `apply` rows change.
template <int G>
__device__ __forceinline__ void RopeRow(const RopeNormParams& p, float (&x)[8], bool apply, const float (&c)[8],
                                        const float (&s)[8], int lane, float* exchange) {
  float partner[8];
  const int half = p.rotary_dim / 2;
  const int first = lane * kVec;
  if (p.neox) {
    if (p.fast_rope) {
      // half is a multiple of 8: a lane's partner elements are the whole vector of the lane half/8 away.
      const int shift = half / kVec;
      const int src = lane < shift ? lane + shift : (lane < 2 * shift ? lane - shift : lane);
#pragma unroll
      for (int i = 0; i < kVec; ++i) partner[i] = __shfl_sync(0xffffffffu, x[i], src, G);
    } else {
      float* mine = exchange + threadIdx.x * kVec;
#pragma unroll
      for (int i = 0; i < kVec; ++i) mine[i] = x[i];
      __syncwarp();
      const float* row = exchange + (threadIdx.x - lane) * kVec;  // the group's row, element-indexed
#pragma unroll
      for (int i = 0; i < kVec; ++i) {
        const int e = first + i;
        partner[i] = e < p.rotary_dim ? row[e < half ? e + half : e - half] : 0.0f;
      }
    }
  }
  if (!apply) return;
  if (p.fast_rope) {
    // rot/2 is a multiple of 8 (neox) or 4 (gptj): a lane is wholly inside or outside the rotary part
    if (first >= p.rotary_dim) return;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float other = p.neox ? partner[i] : ((i % 2 == 0) ? x[i + 1] : x[i - 1]);
      partner[i] = x[i] * c[i] + other * s[i];
    }
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[i] = partner[i];
    return;
  }
  float y[8];
#pragma unroll
  for (int i = 0; i < kVec; ++i) {
    // gptj: pairs (2j, 2j+1) sit in the same lane: i even -> partner i+1, i odd -> partner i-1
    const float other = p.neox ? partner[i] : ((i % 2 == 0) ? x[i + 1] : x[i - 1]);
    y[i] = first + i < p.rotary_dim ? x[i] * c[i] + other * s[i] : x[i];
  }
#pragma unroll
  for (int i = 0; i < kVec; ++i) x[i] = y[i];
}

// One row's identity within its token: q head, k head or v head.
struct RowRef {
  int head;
  bool is_q, is_k, exists;
};

__device__ __forceinline__ RowRef DecodeRow(const RopeNormParams& p, int j) {
  RowRef r;
  r.exists = j < p.num_q_heads + 2 * p.num_kv_heads;
  r.is_q = j < p.num_q_heads;
  r.is_k = !r.is_q && j < p.num_q_heads + p.num_kv_heads;
  r.head = r.is_q ? j : (r.is_k ? j - p.num_q_heads : j - p.num_q_heads - p.num_kv_heads);
  return r;
}

// Token-major: a group of G lanes owns kRows rows of ONE token (rows j, j+S, j+2S, ... of its Hq+2Hkv rows,
// S = groups_per_token), so the token's position, slot and cos/sin are loaded once per thread and shared by its
// rows. Every load -- indices, kRows 16-byte row vectors, then cos/sin as soon as the position arrives -- is
// issued before any math: the kernel is latency-bound unless each thread keeps several loads in flight
// (bench/NOTES.md v1-v4).
template <int G, int kRows, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __launch_bounds__(kThreads, 3) RopeNormKernel(const __grid_constant__ RopeNormParams p) {
  __shared__ __align__(16) float exchange[kThreads * kVec];
  const int lane = threadIdx.x % G;
  const uint32_t group = blockIdx.x * (kThreads / G) + threadIdx.x / G;
  const uint32_t token = group / p.groups_per_token;
  const int first_row = static_cast<int>(group - token * p.groups_per_token);
  const bool token_ok = token < static_cast<uint32_t>(p.tokens);
  const bool lane_has_data = lane * kVec < p.head_dim;

  PdlWait();  // inputs may come from the previous kernel in the stream
  const int64_t pos = token_ok ? LoadIndex(p.positions, p.positions_i64, token) : 0;
  const int64_t slot = token_ok ? LoadIndex(p.slot_mapping, p.slots_i64, token) : -1;
  RowRef rows[kRows];
  float x[kRows][8];
  bool any_rotated = false;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    rows[k] = DecodeRow(p, first_row + k * p.groups_per_token);
    const RowRef& r = rows[k];
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[k][i] = 0.0f;
    if (!token_ok || !r.exists) continue;
    any_rotated = any_rotated || r.is_q || r.is_k;
    if (!lane_has_data) continue;
    const T* src = r.is_q ? static_cast<const T*>(p.q) + token * p.q_stride_t + r.head * p.q_stride_h
                 : r.is_k ? static_cast<const T*>(p.k) + token * p.k_stride_t + r.head * p.k_stride_h
                          : static_cast<const T*>(p.v) + token * p.v_stride_t + r.head * p.v_stride_h;
    LoadVec8(src + lane * kVec, x[k]);
  }
  // Out-of-range positions (only possible without HPC_XLA_CHECK) make q/k rows NaN rather than read outside
  // cos_sin_cache; out-of-range slots are not written.
  const bool pos_ok = pos >= 0 && pos < p.max_pos;
  // the token's K/V rows in the paged cache (head 0), once per thread; -1: not written
  int64_t k_dst = -1, v_dst = -1;
  if (slot >= 0 && slot < p.num_slots) {
    const int64_t block = p.num_slots <= INT32_MAX ? static_cast<uint32_t>(slot) / static_cast<uint32_t>(p.page_size)
                                                   : slot / p.page_size;
    const int64_t in_page = slot - block * p.page_size;
    k_dst = block * p.k_cache_stride_b + in_page * p.k_cache_stride_p;
    v_dst = block * p.v_cache_stride_b + in_page * p.v_cache_stride_p;
  }
  float c[8] = {}, s[8] = {};
  if (any_rotated && pos_ok && lane_has_data) LoadCosSin(p, pos, lane, c, s);
  PdlLaunchDependents();

#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const RowRef& r = rows[k];
    const bool is_v = !r.is_q && !r.is_k;
    const bool active = token_ok && r.exists && lane_has_data;
    const void* w = r.is_q ? p.q_norm_weight : (r.is_k ? p.k_norm_weight : nullptr);
    const DType w_dtype = r.is_q ? p.q_norm_dtype : p.k_norm_dtype;
    const bool normalize = active && w != nullptr;
    if (p.norm_before_rope) RmsNormRow<G>(x[k], normalize, w, w_dtype, lane, p.inv_head_dim, p.eps);
    if (k > 0) __syncwarp();  // the shared-memory exchange buffer is reused row after row
    RopeRow<G>(p, x[k], active && !is_v && pos_ok, c, s, lane, exchange);
    if (!p.norm_before_rope) RmsNormRow<G>(x[k], normalize, w, w_dtype, lane, p.inv_head_dim, p.eps);
    if (!is_v && !pos_ok) {
#pragma unroll
      for (int i = 0; i < kVec; ++i) x[k][i] = __int_as_float(0x7fc00000);
    }
    float q_scale = 0.0f;
    if constexpr (kFp8Q) {
      float amax = 0.0f;
#pragma unroll
      for (int i = 0; i < kVec; ++i) amax = fmaxf(amax, fabsf(x[k][i]));
      q_scale = GroupMax<G>(amax) / kFp8E4M3Max;
    }
    if (!active) continue;
    if (r.is_q) {
      const int64_t off = token * p.q_out_stride_t + r.head * p.q_out_stride_h + lane * kVec;
      if constexpr (kFp8Q) {
        StoreE4M3x8(static_cast<uint8_t*>(p.q_out) + off, x[k], q_scale);
        if (lane == 0) p.q_scale[token * p.num_q_heads + r.head] = q_scale;
      } else {
        StoreVec8(static_cast<T*>(p.q_out) + off, x[k]);
      }
      continue;
    }
    if (k_dst < 0) continue;
    const int64_t off = r.is_k ? k_dst + r.head * p.k_cache_stride_h : v_dst + r.head * p.v_cache_stride_h;
    void* cache = r.is_k ? p.k_cache : p.v_cache;
    if constexpr (kFp8Cache) {
      StoreE4M3x8(static_cast<uint8_t*>(cache) + off + lane * kVec, x[k], r.is_k ? *p.k_scale : *p.v_scale);
    } else {
      StoreVec8(static_cast<T*>(cache) + off + lane * kVec, x[k]);
    }
  }
}

// HPC_XLA_CHECK=1: find the first token whose position or slot is out of range.
__global__ void RopeNormIndexCheckKernel(RopeNormParams p, unsigned long long* first_bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.tokens) return;
  const int64_t pos = LoadIndex(p.positions, p.positions_i64, t);
  const int64_t slot = LoadIndex(p.slot_mapping, p.slots_i64, t);
  if (pos < 0 || pos >= p.max_pos || slot < -1 || slot >= p.num_slots) atomicMin(first_bad, t);
}

// Rows per lane group. Several rows per thread amortize the token's index/cos-sin loads and the per-row setup,
// but serialize the rows' math: a small batch (too few threads to fill the GPU twice) takes 1 row per group
// (T=1: 2.1 us vs 5.2 us with 4). Otherwise the most of {4, 2} that leaves at most 1/8 of the token's row
// slots idle (64/8 heads: 80 rows = 20 groups x 4; 8/1: 10 rows = 5 groups x 2). HPC_XLA_ROPE_ROWS=1|2|4
// forces one for A/B runs.
int RowsPerGroup(int64_t tokens, int rows_per_token, int group_lanes, int sms) {
  static const int forced = [] {
    const int r = EnvInt("HPC_XLA_ROPE_ROWS", 0);
    return r == 1 || r == 2 || r == 4 ? r : 0;
  }();
  if (forced != 0) return forced;
  for (int r : {4, 2}) {
    const int64_t groups = (rows_per_token + r - 1) / r;
    const bool fills = tokens * groups * group_lanes >= 2 * static_cast<int64_t>(sms) * 2048;
    if (fills && 8 * (groups * r - rows_per_token) <= rows_per_token) return r;
  }
  return 1;
}

template <int G, int R, typename T, bool kFp8Cache, bool kFp8Q>
void* PickKernel() {
  return reinterpret_cast<void*>(&RopeNormKernel<G, R, T, kFp8Cache, kFp8Q>);
}

template <int G, int R, typename T>
void* PickKernel(bool fp8_cache, bool fp8_q) {
  if (fp8_cache) return fp8_q ? PickKernel<G, R, T, true, true>() : PickKernel<G, R, T, true, false>();
  return fp8_q ? PickKernel<G, R, T, false, true>() : PickKernel<G, R, T, false, false>();
}

template <int G>
void* PickKernel(int rows, DType dtype, bool fp8_cache, bool fp8_q) {
  const bool bf16 = dtype == DType::kBF16;
  switch (rows) {
    case 1: return bf16 ? PickKernel<G, 1, __nv_bfloat16>(fp8_cache, fp8_q) : PickKernel<G, 1, __half>(fp8_cache, fp8_q);
    case 2: return bf16 ? PickKernel<G, 2, __nv_bfloat16>(fp8_cache, fp8_q) : PickKernel<G, 2, __half>(fp8_cache, fp8_q);
    default: return bf16 ? PickKernel<G, 4, __nv_bfloat16>(fp8_cache, fp8_q) : PickKernel<G, 4, __half>(fp8_cache, fp8_q);
  }
}

int GroupLanes(int head_dim) {
  int g = 2;
  while (g * kVec < head_dim) g *= 2;
  return g;
}

bool Aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

// 16-byte vector access needs 16-byte aligned rows: base pointer and every outer stride.
Status CheckVectorAligned(const char* name, const TensorView& t) {
  const int64_t elems = 16 / DTypeBytes(t.dtype);
  bool ok = Aligned16(t.data);
  for (int d = 0; d + 1 < t.rank; ++d) ok = ok && (t.shape[d] == 1 || t.strides[d] % elems == 0);
  if (ok) return Status::Ok();
  return ArgCheck("rope_norm").Fail(std::string(name) +
                                    " must be 16-byte aligned on the GPU (data pointer and row strides); got a view "
                                    "at offset " + std::to_string(reinterpret_cast<uintptr_t>(t.data) % 16) +
                                    " bytes from alignment or with unaligned strides");
}

RopeNormParams MakeParams(const RopeNormArgs& a) {
  RopeNormParams p = {};
  p.q = a.q.data, p.k = a.k.data, p.v = a.v.data;
  p.q_stride_t = a.q.strides[0], p.q_stride_h = a.q.strides[1];
  p.k_stride_t = a.k.strides[0], p.k_stride_h = a.k.strides[1];
  p.v_stride_t = a.v.strides[0], p.v_stride_h = a.v.strides[1];
  p.q_out = a.q_out.data;
  p.q_out_stride_t = a.q_out.strides[0], p.q_out_stride_h = a.q_out.strides[1];
  p.q_scale = a.q_scale.present() ? a.q_scale.ptr<float>() : nullptr;
  p.positions = a.positions.data;
  p.slot_mapping = a.slot_mapping.data;
  p.cos_sin = a.cos_sin_cache.data;
  p.cos_sin_stride = a.cos_sin_cache.strides[0];
  p.max_pos = a.cos_sin_cache.shape[0];
  p.k_cache = a.k_cache.data, p.v_cache = a.v_cache.data;
  p.k_cache_stride_b = a.k_cache.strides[0], p.k_cache_stride_p = a.k_cache.strides[1];
  p.k_cache_stride_h = a.k_cache.strides[2];
  p.v_cache_stride_b = a.v_cache.strides[0], p.v_cache_stride_p = a.v_cache.strides[1];
  p.v_cache_stride_h = a.v_cache.strides[2];
  p.page_size = a.k_cache.shape[1];
  p.num_slots = a.k_cache.shape[0] * a.k_cache.shape[1];
  p.q_norm_weight = a.q_norm_weight.present() ? a.q_norm_weight.data : nullptr;
  p.k_norm_weight = a.k_norm_weight.present() ? a.k_norm_weight.data : nullptr;
  p.q_norm_dtype = a.q_norm_weight.dtype, p.k_norm_dtype = a.k_norm_weight.dtype;
  p.k_scale = a.k_scale.present() ? a.k_scale.ptr<const float>() : nullptr;
  p.v_scale = a.v_scale.present() ? a.v_scale.ptr<const float>() : nullptr;
  p.eps = a.eps;
  p.inv_head_dim = 1.0f / static_cast<float>(a.q.shape[2]);
  p.tokens = static_cast<int>(a.q.shape[0]);
  p.num_q_heads = static_cast<int>(a.q.shape[1]);
  p.num_kv_heads = static_cast<int>(a.k.shape[1]);
  p.head_dim = static_cast<int>(a.q.shape[2]);
  p.rotary_dim = static_cast<int>(a.rotary_dim);
  p.positions_i64 = a.positions.dtype == DType::kI64;
  p.slots_i64 = a.slot_mapping.dtype == DType::kI64;
  p.cos_sin_dtype = a.cos_sin_cache.dtype;
  p.neox = a.rope_style == RopeStyle::kNeox;
  p.norm_before_rope = a.norm_before_rope;
  const int half = p.rotary_dim / 2;
  p.fast_rope = a.cos_sin_cache.dtype == DType::kF32 && Aligned16(a.cos_sin_cache.data) &&
                a.cos_sin_cache.strides[0] % 4 == 0 && (p.neox ? half % kVec == 0 : half % 4 == 0);
  return p;
}

// Debug mode: validate indices on the GPU and report the first bad token like the CPU path does.
Status CheckIndicesOnDevice(const RopeNormParams& p, cudaStream_t stream, int device) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaStreamIsCapturing(stream, &capture), "rope_norm check"));
  if (capture != cudaStreamCaptureStatusNone) return Status::Ok();  // cannot sync inside a capture
  static unsigned long long* flags[64] = {};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (flags[device] == nullptr) {
    HPC_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&flags[device], sizeof(unsigned long long)), "rope_norm check"));
  }
  const unsigned long long none = ~0ull;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(flags[device], &none, sizeof(none), cudaMemcpyHostToDevice, stream),
                                 "rope_norm check"));
  RopeNormIndexCheckKernel<<<(p.tokens + 255) / 256, 256, 0, stream>>>(p, flags[device]);
  unsigned long long bad = none;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(&bad, flags[device], sizeof(bad), cudaMemcpyDeviceToHost, stream),
                                 "rope_norm check"));
  HPC_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream), "rope_norm check"));
  if (bad == none) return Status::Ok();
  int64_t pos = 0, slot = 0;
  const int pbytes = p.positions_i64 ? 8 : 4, sbytes = p.slots_i64 ? 8 : 4;
  int32_t tmp32 = 0;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p.positions_i64 ? static_cast<void*>(&pos) : &tmp32,
                                            static_cast<const char*>(p.positions) + bad * pbytes, pbytes,
                                            cudaMemcpyDeviceToHost), "rope_norm check"));
  if (!p.positions_i64) pos = tmp32;
  HPC_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(p.slots_i64 ? static_cast<void*>(&slot) : &tmp32,
                                            static_cast<const char*>(p.slot_mapping) + bad * sbytes, sbytes,
                                            cudaMemcpyDeviceToHost), "rope_norm check"));
  if (!p.slots_i64) slot = tmp32;
  return RopeNormIndexError(static_cast<int64_t>(bad), pos, p.max_pos, slot, p.num_slots);
}

}  // namespace

Status RopeNormCuda(const RopeNormArgs& a, cudaStream_t stream) {
  HPC_RETURN_IF_ERROR(ValidateRopeNorm(a));
  if (a.q.device != DeviceKind::kCuda) return Status::Internal("rope_norm: CUDA launcher called with CPU tensors");
  HPC_RETURN_IF_ERROR(CheckHopper(a.q.device_id));
  for (const auto& [name, t] : {std::pair<const char*, const TensorView*>{"q", &a.q}, {"k", &a.k}, {"v", &a.v},
                                {"q_out", &a.q_out}, {"k_cache", &a.k_cache}, {"v_cache", &a.v_cache},
                                {"q_norm_weight", &a.q_norm_weight}, {"k_norm_weight", &a.k_norm_weight}}) {
    if (t->present()) HPC_RETURN_IF_ERROR(CheckVectorAligned(name, *t));
  }
  RopeNormParams p = MakeParams(a);
  if (p.tokens == 0) return Status::Ok();
  if (DeviceChecksEnabled()) HPC_RETURN_IF_ERROR(CheckIndicesOnDevice(p, stream, a.q.device_id));

  const int g = GroupLanes(p.head_dim);
  const bool fp8_cache = a.k_cache.dtype == DType::kF8E4M3, fp8_q = a.q_out.dtype == DType::kF8E4M3;
  void* kernel = nullptr;
  const int rows_per_token = p.num_q_heads + 2 * p.num_kv_heads;
  const int rows_per_group = RowsPerGroup(p.tokens, rows_per_token, g, MultiprocessorCount(a.q.device_id));
  p.groups_per_token = (rows_per_token + rows_per_group - 1) / rows_per_group;
  switch (g) {
    case 2: kernel = PickKernel<2>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 4: kernel = PickKernel<4>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 8: kernel = PickKernel<8>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 16: kernel = PickKernel<16>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    default: kernel = PickKernel<32>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
  }
  const int64_t groups = static_cast<int64_t>(p.tokens) * p.groups_per_token;
  const int groups_per_block = kThreads / g;
  const dim3 grid(static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block));
  using KernelFn = void (*)(RopeNormParams);
  return Launch("rope_norm kernel launch", reinterpret_cast<KernelFn>(kernel), grid, dim3(kThreads), 0, stream, p);
}

}  // namespace hpc
