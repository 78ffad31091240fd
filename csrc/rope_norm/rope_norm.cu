// rope_norm on sm_90a: one memory-bound pass. Each (token, head) row of q, k and v is owned by a group of G
// lanes, 8 elements (16 bytes) per lane; a group holds up to 4 rows of one token, so the token's position,
// slot and cos/sin row are loaded once. Per row: 16-byte load -> [RMSNorm: group shuffle-sum] -> RoPE (neox
// partners exchanged by shuffles, or through shared memory when rotary_dim/2 is not a multiple of 8) ->
// [RMSNorm] -> store q (or fp8 q + per-row scale), or K/V straight into their paged-cache slot (fp8: x/scale).
// Two kernels share that per-row code (FinishRows): a one-pass kernel for small batches (latency) and a
// persistent cp.async-pipelined one for large batches (bandwidth); the launcher picks by the batch size.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "csrc/common/arch.h"
#include "csrc/common/check.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/mma.cuh"
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
// or e/2 (gptj). The rotation's sign is folded into s, once per token: y = x c + partner s, where s is
// negated for the element that takes -partner (neox first half, gptj even elements).
//
// Fast path (f32 table, aligned rows, rot/2 a multiple of 8 (neox) or 4 (gptj)): a lane inside the rotary part
// reads 16-byte chunks -- neox: c[idx..idx+8), s[idx..idx+8) (4 chunks); gptj: c[first/2..+4), s[..] (2).
__device__ __forceinline__ int FastCosSinChunks(const RopeNormParams& p) { return p.neox ? 4 : 2; }

__device__ __forceinline__ const float* FastCosSinChunk(const RopeNormParams& p, int64_t pos, int lane, int chunk) {
  const int half = p.rotary_dim / 2, first = lane * kVec;
  const float* base = static_cast<const float*>(p.cos_sin) + pos * p.cos_sin_stride;
  if (p.neox) {
    const int idx = first < half ? first : first - half;
    return base + (chunk >= 2 ? half : 0) + idx + 4 * (chunk & 1);
  }
  return base + (chunk == 1 ? half : 0) + first / 2;
}

// raw chunks -> per-element c and signed s
__device__ __forceinline__ void ExpandCosSin(const RopeNormParams& p, int lane, const float4 (&raw)[4], float (&c)[8],
                                             float (&s)[8]) {
  if (p.neox) {
    const float sign = lane * kVec < p.rotary_dim / 2 ? -1.0f : 1.0f;
    c[0] = raw[0].x, c[1] = raw[0].y, c[2] = raw[0].z, c[3] = raw[0].w;
    c[4] = raw[1].x, c[5] = raw[1].y, c[6] = raw[1].z, c[7] = raw[1].w;
    s[0] = sign * raw[2].x, s[1] = sign * raw[2].y, s[2] = sign * raw[2].z, s[3] = sign * raw[2].w;
    s[4] = sign * raw[3].x, s[5] = sign * raw[3].y, s[6] = sign * raw[3].z, s[7] = sign * raw[3].w;
  } else {
    const float cv[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w}, sv[4] = {raw[1].x, raw[1].y, raw[1].z, raw[1].w};
#pragma unroll
    for (int i = 0; i < kVec; ++i) c[i] = cv[i / 2], s[i] = (i % 2 == 0 ? -1.0f : 1.0f) * sv[i / 2];
  }
}

__device__ __forceinline__ void LoadCosSin(const RopeNormParams& p, int64_t pos, int lane, float (&c)[8],
                                           float (&s)[8]) {
  const int half = p.rotary_dim / 2;
  const int first = lane * kVec;
  if (p.fast_rope) {
    if (first >= p.rotary_dim) return;  // lane outside the rotary part
    float4 raw[4] = {};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      if (q < FastCosSinChunks(p)) raw[q] = *reinterpret_cast<const float4*>(FastCosSinChunk(p, pos, lane, q));
    }
    ExpandCosSin(p, lane, raw, c, s);
    return;
  }
  const int64_t row = pos * p.cos_sin_stride;
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

// Token-major work split: a group of G lanes owns kRows rows of ONE token (rows j, j+S, j+2S, ... of its
// Hq+2Hkv rows, S = groups_per_token), so the token's position, slot and cos/sin are loaded once per thread and
// shared by its rows.
struct GroupWork {
  uint32_t token;
  int first_row;
  bool token_ok;
};

__device__ __forceinline__ GroupWork GroupAt(const RopeNormParams& p, int64_t group) {
  GroupWork g;
  g.token = static_cast<uint32_t>(group / p.groups_per_token);
  g.first_row = static_cast<int>(group - static_cast<int64_t>(g.token) * p.groups_per_token);
  g.token_ok = group < static_cast<int64_t>(p.tokens) * p.groups_per_token;
  return g;
}

template <typename T>
__device__ __forceinline__ const T* RowSource(const RopeNormParams& p, const RowRef& r, uint32_t token) {
  return r.is_q ? static_cast<const T*>(p.q) + token * p.q_stride_t + r.head * p.q_stride_h
       : r.is_k ? static_cast<const T*>(p.k) + token * p.k_stride_t + r.head * p.k_stride_h
                : static_cast<const T*>(p.v) + token * p.v_stride_t + r.head * p.v_stride_h;
}

// Out-of-range positions (only possible without HPC_XLA_CHECK) make q/k rows NaN rather than read outside
// cos_sin_cache; out-of-range slots are not written.
__device__ __forceinline__ bool PositionOk(const RopeNormParams& p, int64_t pos) { return pos >= 0 && pos < p.max_pos; }

// The rows' math and stores, once x (the group's rows), pos, slot and the lane's cos/sin are in registers.
template <int G, int kRows, typename T, bool kFp8Cache, bool kFp8Q>
__device__ __forceinline__ void FinishRows(const RopeNormParams& p, const GroupWork& g, const RowRef (&rows)[kRows],
                                           float (&x)[kRows][8], int64_t pos, int64_t slot, const float (&c)[8],
                                           const float (&s)[8], int lane, float* exchange) {
  const bool lane_has_data = lane * kVec < p.head_dim;
  const bool pos_ok = PositionOk(p, pos);
  // the token's K/V rows in the paged cache (head 0), once per thread; -1: not written
  int64_t k_dst = -1, v_dst = -1;
  if (slot >= 0 && slot < p.num_slots) {
    const int64_t block = p.num_slots <= INT32_MAX ? static_cast<uint32_t>(slot) / static_cast<uint32_t>(p.page_size)
                                                   : slot / p.page_size;
    const int64_t in_page = slot - block * p.page_size;
    k_dst = block * p.k_cache_stride_b + in_page * p.k_cache_stride_p;
    v_dst = block * p.v_cache_stride_b + in_page * p.v_cache_stride_p;
  }
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    const RowRef& r = rows[k];
    const bool is_v = !r.is_q && !r.is_k;
    const bool active = g.token_ok && r.exists && lane_has_data;
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
      const int64_t off = g.token * p.q_out_stride_t + r.head * p.q_out_stride_h + lane * kVec;
      if constexpr (kFp8Q) {
        StoreE4M3x8(static_cast<uint8_t*>(p.q_out) + off, x[k], q_scale);
        if (lane == 0) p.q_scale[g.token * p.num_q_heads + r.head] = q_scale;
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

// One pass, one group of rows per thread: every load -- indices, kRows 16-byte row vectors, then cos/sin as
// soon as the position arrives -- is issued before any math. Used for small batches (latency: T=1 ~2 us).
template <int G, int kRows, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __launch_bounds__(kThreads, 3) RopeNormKernel(const __grid_constant__ RopeNormParams p) {
  __shared__ __align__(16) float exchange[kThreads * kVec];
  const int lane = threadIdx.x % G;
  const GroupWork g = GroupAt(p, static_cast<int64_t>(blockIdx.x) * (kThreads / G) + threadIdx.x / G);
  const bool lane_has_data = lane * kVec < p.head_dim;

  PdlWait();  // inputs may come from the previous kernel in the stream
  const int64_t pos = g.token_ok ? LoadIndex(p.positions, p.positions_i64, g.token) : 0;
  const int64_t slot = g.token_ok ? LoadIndex(p.slot_mapping, p.slots_i64, g.token) : -1;
  RowRef rows[kRows];
  float x[kRows][8];
  bool any_rotated = false;
#pragma unroll
  for (int k = 0; k < kRows; ++k) {
    rows[k] = DecodeRow(p, g.first_row + k * p.groups_per_token);
    const RowRef& r = rows[k];
#pragma unroll
    for (int i = 0; i < kVec; ++i) x[k][i] = 0.0f;
    if (!g.token_ok || !r.exists) continue;
    any_rotated = any_rotated || r.is_q || r.is_k;
    if (lane_has_data) LoadVec8(RowSource<T>(p, r, g.token) + lane * kVec, x[k]);
  }
  float c[8] = {}, s[8] = {};
  if (any_rotated && PositionOk(p, pos) && lane_has_data) LoadCosSin(p, pos, lane, c, s);
  PdlLaunchDependents();
  FinishRows<G, kRows, T, kFp8Cache, kFp8Q>(p, g, rows, x, pos, slot, c, s, lane, exchange);
}

// Large batches: a persistent grid walks "items" (kThreads / G lane groups, kPipeRows rows each) and keeps the
// next items' loads in flight while it computes the current one: cp.async copies each thread's own row vectors
// and indices two items ahead (3 stages) and its cos/sin one item ahead (2 stages), so no thread ever waits on
// a load it just issued and no block-wide barrier is needed (a thread only reads what it copied itself).
// (The one-pass kernel alternates load and compute phases per warp: 49% of the copy ceiling at T=16384.)
constexpr int kPipeRows = 2;
constexpr int kXStages = 3, kCsStages = 2;
constexpr int kXBytes = kXStages * kPipeRows * kThreads * 16;  // [stage][row][thread] 16 B: conflict-free
constexpr int kMetaBytes = kXStages * kThreads * 16;             // [stage][thread] position (8 B), slot (8 B)
constexpr int kCsBytes = kCsStages * 4 * kThreads * 16;          // [stage][chunk][thread] 16 B
constexpr int kPipeSmemBytes = kXBytes + kMetaBytes + kCsBytes;

template <int G, typename T, bool kFp8Cache, bool kFp8Q>
__global__ void __launch_bounds__(kThreads, 2) RopeNormPipelinedKernel(const __grid_constant__ RopeNormParams p,
                                                                       int64_t num_items) {
  extern __shared__ __align__(16) char smem[];
  __shared__ __align__(16) float exchange[kThreads * kVec];
  char* const xs = smem;
  char* const meta = smem + kXBytes;
  char* const cs = smem + kXBytes + kMetaBytes;
  const int tid = threadIdx.x, lane = tid % G;
  const bool lane_has_data = lane * kVec < p.head_dim;
  constexpr int kGroupsPerItem = kThreads / G;
  auto work_of = [&](int64_t item) { return GroupAt(p, item * kGroupsPerItem + tid / G); };
  auto x_slot = [&](int stage, int k) { return xs + ((stage * kPipeRows + k) * kThreads + tid) * 16; };
  auto meta_slot = [&](int stage) { return meta + (stage * kThreads + tid) * 16; };
  auto cs_slot = [&](int stage, int chunk) { return cs + ((stage * 4 + chunk) * kThreads + tid) * 16; };
  auto rows_of = [&](const GroupWork& g, RowRef (&rows)[kPipeRows]) {
    bool any_rotated = false;
#pragma unroll
    for (int k = 0; k < kPipeRows; ++k) {
      rows[k] = DecodeRow(p, g.first_row + k * p.groups_per_token);
      any_rotated = any_rotated || (rows[k].exists && (rows[k].is_q || rows[k].is_k));
    }
    return any_rotated;
  };
  auto read_index = [&](const char* at, bool is_i64) {
    return is_i64 ? *reinterpret_cast<const int64_t*>(at) : static_cast<int64_t>(*reinterpret_cast<const int32_t*>(at));
  };
  // stage A: the item's row vectors, position and slot
  auto issue_rows = [&](int64_t item, int stage) {
    if (item < num_items) {
      const GroupWork g = work_of(item);
      if (g.token_ok) {
        char* m = meta_slot(stage);
        if (p.positions_i64) CpAsyncSmall<8>(m, static_cast<const int64_t*>(p.positions) + g.token);
        else CpAsyncSmall<4>(m, static_cast<const int32_t*>(p.positions) + g.token);
        if (p.slots_i64) CpAsyncSmall<8>(m + 8, static_cast<const int64_t*>(p.slot_mapping) + g.token);
        else CpAsyncSmall<4>(m + 8, static_cast<const int32_t*>(p.slot_mapping) + g.token);
        RowRef rows[kPipeRows];
        rows_of(g, rows);
#pragma unroll
        for (int k = 0; k < kPipeRows; ++k) {
          if (rows[k].exists && lane_has_data) CpAsync16(x_slot(stage, k), RowSource<T>(p, rows[k], g.token) + lane * kVec, true);
        }
      }
    }
    CpAsyncCommit();
  };
  // stage B: the lane's cos/sin chunks (fast table layout only), once the item's position has landed
  auto issue_cos_sin = [&](int64_t item, int x_stage, int cs_stage) {
    if (item < num_items && p.fast_rope && lane_has_data && lane * kVec < p.rotary_dim) {
      const GroupWork g = work_of(item);
      RowRef rows[kPipeRows];
      if (g.token_ok && rows_of(g, rows)) {
        const int64_t pos = read_index(meta_slot(x_stage), p.positions_i64);
        if (PositionOk(p, pos)) {
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (q < FastCosSinChunks(p)) CpAsync16(cs_slot(cs_stage, q), FastCosSinChunk(p, pos, lane, q), true);
          }
        }
      }
    }
    CpAsyncCommit();
  };

  PdlWait();  // inputs may come from the previous kernel in the stream
  const int64_t first = blockIdx.x, stride = gridDim.x;
  issue_rows(first, 0);
  issue_rows(first + stride, 1);
  CpAsyncWait<1>();
  issue_cos_sin(first, 0, 0);
  PdlLaunchDependents();
  int i = 0;
  for (int64_t item = first; item < num_items; item += stride, ++i) {
    const int x_stage = i % kXStages, cs_stage = i % kCsStages;
    issue_rows(item + 2 * stride, (i + 2) % kXStages);
    CpAsyncWait<1>();  // everything but the group just committed: rows of item+1, cos/sin of item
    issue_cos_sin(item + stride, (i + 1) % kXStages, (i + 1) % kCsStages);

    const GroupWork g = work_of(item);
    RowRef rows[kPipeRows];
    const bool any_rotated = rows_of(g, rows);
    float x[kPipeRows][8];
#pragma unroll
    for (int k = 0; k < kPipeRows; ++k) {
      if (g.token_ok && rows[k].exists && lane_has_data) {
        LoadVec8(reinterpret_cast<const T*>(x_slot(x_stage, k)), x[k]);
      } else {
#pragma unroll
        for (int e = 0; e < kVec; ++e) x[k][e] = 0.0f;
      }
    }
    const int64_t pos = g.token_ok ? read_index(meta_slot(x_stage), p.positions_i64) : 0;
    const int64_t slot = g.token_ok ? read_index(meta_slot(x_stage) + 8, p.slots_i64) : -1;
    float c[8] = {}, s[8] = {};
    if (any_rotated && g.token_ok && PositionOk(p, pos) && lane_has_data) {
      if (p.fast_rope) {
        if (lane * kVec < p.rotary_dim) {
          float4 raw[4] = {};
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            if (q < FastCosSinChunks(p)) raw[q] = *reinterpret_cast<const float4*>(cs_slot(cs_stage, q));
          }
          ExpandCosSin(p, lane, raw, c, s);
        }
      } else {
        LoadCosSin(p, pos, lane, c, s);  // general table layouts read straight from global memory
      }
    }
    FinishRows<G, kPipeRows, T, kFp8Cache, kFp8Q>(p, g, rows, x, pos, slot, c, s, lane, exchange);
  }
  CpAsyncWait<0>();
}

// HPC_XLA_CHECK=1: find the first token whose position or slot is out of range.
__global__ void RopeNormIndexCheckKernel(RopeNormParams p, unsigned long long* first_bad) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= p.tokens) return;
  const int64_t pos = LoadIndex(p.positions, p.positions_i64, t);
  const int64_t slot = LoadIndex(p.slot_mapping, p.slots_i64, t);
  if (pos < 0 || pos >= p.max_pos || slot < -1 || slot >= p.num_slots) atomicMin(first_bad, t);
}

// Rows per lane group of the one-pass kernel. Several rows per thread amortize the token's index/cos-sin loads
// but serialize the rows' math: a small batch (too few threads to fill the GPU twice) takes 1 row per group
// (T=1: 2.1 us vs 5.2 us with 4), a larger one 4 when that leaves at most 1/8 of the token's row slots idle.
// HPC_XLA_ROPE_ROWS=1|4 forces one for A/B runs.
int RowsPerGroup(int64_t tokens, int rows_per_token, int group_lanes, int sms) {
  static const int forced = [] {
    const char* v = std::getenv("HPC_XLA_ROPE_ROWS");
    const int r = v == nullptr ? 0 : std::atoi(v);
    return r == 1 || r == 4 ? r : 0;
  }();
  if (forced != 0) return forced;
  const int64_t groups = (rows_per_token + 3) / 4;
  const bool fills = tokens * groups * group_lanes >= 2 * static_cast<int64_t>(sms) * 2048;
  return fills && 8 * (groups * 4 - rows_per_token) <= rows_per_token ? 4 : 1;
}

template <int G, int R, typename T>
void* PickKernel(bool fp8_cache, bool fp8_q) {
  if (fp8_cache) {
    return fp8_q ? reinterpret_cast<void*>(&RopeNormKernel<G, R, T, true, true>)
                 : reinterpret_cast<void*>(&RopeNormKernel<G, R, T, true, false>);
  }
  return fp8_q ? reinterpret_cast<void*>(&RopeNormKernel<G, R, T, false, true>)
               : reinterpret_cast<void*>(&RopeNormKernel<G, R, T, false, false>);
}

template <int G>
void* PickKernel(int rows, DType dtype, bool fp8_cache, bool fp8_q) {
  const bool bf16 = dtype == DType::kBF16;
  if (rows == 1) return bf16 ? PickKernel<G, 1, __nv_bfloat16>(fp8_cache, fp8_q) : PickKernel<G, 1, __half>(fp8_cache, fp8_q);
  return bf16 ? PickKernel<G, 4, __nv_bfloat16>(fp8_cache, fp8_q) : PickKernel<G, 4, __half>(fp8_cache, fp8_q);
}

template <int G, typename T>
void* PickPipelined(bool fp8_cache, bool fp8_q) {
  if (fp8_cache) {
    return fp8_q ? reinterpret_cast<void*>(&RopeNormPipelinedKernel<G, T, true, true>)
                 : reinterpret_cast<void*>(&RopeNormPipelinedKernel<G, T, true, false>);
  }
  return fp8_q ? reinterpret_cast<void*>(&RopeNormPipelinedKernel<G, T, false, true>)
               : reinterpret_cast<void*>(&RopeNormPipelinedKernel<G, T, false, false>);
}

// The pipelined kernel for D >= 64 (G >= 8); nullptr otherwise.
void* PickPipelined(int g, DType dtype, bool fp8_cache, bool fp8_q) {
  const bool bf16 = dtype == DType::kBF16;
  switch (g) {
    case 8: return bf16 ? PickPipelined<8, __nv_bfloat16>(fp8_cache, fp8_q) : PickPipelined<8, __half>(fp8_cache, fp8_q);
    case 16: return bf16 ? PickPipelined<16, __nv_bfloat16>(fp8_cache, fp8_q) : PickPipelined<16, __half>(fp8_cache, fp8_q);
    case 32: return bf16 ? PickPipelined<32, __nv_bfloat16>(fp8_cache, fp8_q) : PickPipelined<32, __half>(fp8_cache, fp8_q);
    default: return nullptr;
  }
}

// Resident blocks per SM of the pipelined kernel (occupancy API; raises its shared-memory limit once per
// kernel, never on the hot path after the first call).
Status PipelinedBlocksPerSm(void* kernel, int* blocks) {
  static std::mutex mu;
  static std::unordered_map<void*, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(kernel);
  if (it == cache.end()) {
    HPC_RETURN_IF_ERROR(CudaStatus(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        kPipeSmemBytes), "rope_norm: shared memory attribute"));
    int n = 0;
    HPC_RETURN_IF_ERROR(CudaStatus(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, kPipeSmemBytes),
                                   "rope_norm: occupancy"));
    it = cache.emplace(kernel, n).first;
  }
  *blocks = it->second;
  return Status::Ok();
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
  const int rows_per_token = p.num_q_heads + 2 * p.num_kv_heads;
  const int sms = MultiprocessorCount(a.q.device_id);
  using KernelFn = void (*)(RopeNormParams);

  // Large batches: the persistent pipelined kernel when every block gets >= 4 items (HPC_XLA_ROPE_PIPELINE=0
  // turns it off for A/B runs).
  static const bool pipeline_on = EnvFlag("HPC_XLA_ROPE_PIPELINE", true);
  if (void* pipelined = pipeline_on ? PickPipelined(g, a.q.dtype, fp8_cache, fp8_q) : nullptr) {
    int per_sm = 0;
    HPC_RETURN_IF_ERROR(PipelinedBlocksPerSm(pipelined, &per_sm));
    RopeNormParams pp = p;
    pp.groups_per_token = (rows_per_token + kPipeRows - 1) / kPipeRows;
    const int64_t items = (static_cast<int64_t>(p.tokens) * pp.groups_per_token + kThreads / g - 1) / (kThreads / g);
    const int64_t resident = static_cast<int64_t>(per_sm) * sms;
    if (per_sm > 0 && items >= 4 * resident) {
      using PipeFn = void (*)(RopeNormParams, int64_t);
      return Launch("rope_norm pipelined kernel launch", reinterpret_cast<PipeFn>(pipelined),
                    dim3(static_cast<unsigned>(resident)), dim3(kThreads), kPipeSmemBytes, stream, pp, items);
    }
  }

  void* kernel = nullptr;
  const int rows_per_group = RowsPerGroup(p.tokens, rows_per_token, g, sms);
  switch (g) {
    case 2: kernel = PickKernel<2>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 4: kernel = PickKernel<4>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 8: kernel = PickKernel<8>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    case 16: kernel = PickKernel<16>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
    default: kernel = PickKernel<32>(rows_per_group, a.q.dtype, fp8_cache, fp8_q); break;
  }
  p.groups_per_token = (rows_per_token + rows_per_group - 1) / rows_per_group;
  const int64_t groups = static_cast<int64_t>(p.tokens) * p.groups_per_token;
  const int groups_per_block = kThreads / g;
  const dim3 grid(static_cast<unsigned>((groups + groups_per_block - 1) / groups_per_block));
  return Launch("rope_norm kernel launch", reinterpret_cast<KernelFn>(kernel), grid, dim3(kThreads), 0, stream, p);
}

}  // namespace hpc
