// Pieces the fused_moe paths share (included by fused_moe.cu, fused_moe_grouped.cu / grouped_gemm_sm90.cu and
// fused_moe_stream.cu): the once-per-kernel shared-memory attribute, the activation and the final weighted reduce.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "csrc/common/arch.h"
#include "csrc/common/launch.cuh"
#include "csrc/common/occupancy.h"
#include "csrc/common/status.h"
#include "csrc/common/vec.cuh"

namespace hpc::moe {

// Raises a kernel's dynamic shared-memory limit once per kernel (never on the hot path after the first call).
inline Status AllowSmem(const void* fn, int bytes) {
  return AllowDynamicSmem(fn, bytes, "fused_moe: shared memory attribute");
}

// silu(g) in fp32 with the fast exp2 / reciprocal forms: the accurate expf and IEEE division took ~20 instructions
// and a slow-path branch per element (the grouped act kernel's SASS: 1048 -> 792 instructions). Their error
// (a few ulp, ~1e-6 relative) is far below the bf16 / e4m3 rounding that follows; the CPU reference (std::exp and
// IEEE division) was never bitwise-equal to the GPU's expf either. g -> -inf: 1 + exp(-g) overflows and the
// quotient is 0 (silu's limit).
__device__ __forceinline__ float Silu(float g) { return __fdividef(g, 1.f + __expf(-g)); }

__device__ __forceinline__ void LoadRow8(const float* src, float (&d)[8]) {
  const float4 lo = reinterpret_cast<const float4*>(src)[0], hi = reinterpret_cast<const float4*>(src)[1];
  d[0] = lo.x, d[1] = lo.y, d[2] = lo.z, d[3] = lo.w, d[4] = hi.x, d[5] = hi.y, d[6] = hi.z, d[7] = hi.w;
}
__device__ __forceinline__ void LoadRow8(const __nv_bfloat16* src, float (&d)[8]) { LoadVec8(src, d); }

// y[t] = sum_j (j order) w[t,j] * down[row(t*k+j)] over local experts (+ shared_output), fp32 math -> bf16:
// bitwise deterministic. row(pair): tiled path = the pair itself if its expert is local (down has a row per
// pair, f32); grouped path = pair_row[pair] (sorted rows, bf16), -1 for another rank's expert.
template <typename DownT>
struct ReduceParams {
  const DownT* down;          // tiled: f32 [T*k, H]; grouped: bf16 [rows, H]
  const float* weights;       // [T, k]
  const int32_t* ids;         // tiled: topk_ids [T*k]
  const int32_t* pair_row;    // grouped: [T*k]; null on the tiled path
  const __nv_bfloat16* shared;
  __nv_bfloat16* out;
  int64_t tokens;
  int hidden, top_k, experts, expert_offset;
};

constexpr int kReduceThreads = 128;
constexpr int kReduceBatch = 8;  // top-k slots whose loads are issued together

// One batch of a token's slots: the down row of each (-1: past top_k, or another rank's expert -- contributes 0,
// its row was never computed) and its routing weight.
struct ReduceSlots {
  int32_t row[kReduceBatch];
  float w[kReduceBatch];
};

// One slot's down row and weight. kL2: through L2 (ld.cg) -- the loads issued before the kernel's PDL wait (see
// MoeReduceKernel).
template <bool kL2, typename DownT>
__device__ __forceinline__ void LoadReduceSlot(const ReduceParams<DownT>& p, int64_t pair, int32_t& row, float& w) {
  auto ld = [](const auto* src) { return kL2 ? __ldcg(src) : *src; };
  if (p.pair_row != nullptr) {
    row = ld(p.pair_row + pair);
  } else {
    const int e = ld(p.ids + pair) - p.expert_offset;
    row = e >= 0 && e < p.experts ? static_cast<int32_t>(pair) : -1;
  }
  w = ld(p.weights + pair);
}

template <bool kL2, typename DownT>
__device__ __forceinline__ ReduceSlots LoadReduceSlots(const ReduceParams<DownT>& p, int64_t t, int j0) {
  ReduceSlots s;
#pragma unroll
  for (int b = 0; b < kReduceBatch; ++b) {
    const int j = j0 + b;
    s.row[b] = -1;
    s.w[b] = 0.f;
    if (j < p.top_k) LoadReduceSlot<kL2>(p, t * p.top_k + j, s.row[b], s.w[b]);
  }
  return s;
}

// 8 consecutive values of a down row, kept packed in registers until the sums (bf16: 16 bytes, not 8 floats).
template <typename DownT>
struct Packed8 {
  uint4 v[sizeof(DownT) == 2 ? 1 : 2];
  __device__ __forceinline__ void Load(const DownT* src) {
#pragma unroll
    for (int i = 0; i < (sizeof(DownT) == 2 ? 1 : 2); ++i) v[i] = reinterpret_cast<const uint4*>(src)[i];
  }
  // y += w * row, element by element, rounded as the reference's y += w * acc (no FMA contraction).
  __device__ __forceinline__ void AddWeighted(float (&y)[8], float w) const {
    float v[8];
    Unpack(v);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(y[i], __fmul_rn(w, v[i]));
  }
  __device__ __forceinline__ void Unpack(float (&d)[8]) const {
    if constexpr (sizeof(DownT) == 2) {
      UnpackVec8<DownT>(v[0], d);
    } else {
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        d[4 * i] = __uint_as_float(v[i].x), d[4 * i + 1] = __uint_as_float(v[i].y);
        d[4 * i + 2] = __uint_as_float(v[i].z), d[4 * i + 3] = __uint_as_float(v[i].w);
      }
    }
  }
};

// y (+ shared_output) -> out[t, col : col + 8] as bf16: the last step of both reduce forms.
template <typename DownT>
__device__ __forceinline__ void StoreReducedRow(const ReduceParams<DownT>& p, int64_t t, int col, float (&y)[8]) {
  if (p.shared) {
    float s[8];
    LoadVec8(p.shared + t * p.hidden + col, s);
#pragma unroll
    for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(y[i], s[i]);
  }
  StoreVec8(p.out + t * p.hidden + col, y);
}

// A persistent grid over the tokens (CTA x walks t = x, x + gridDim.x, ...; blockIdx.y is a slice of
// kReduceThreads * 8 columns): the next slot batch's rows and weights -- the next token's, after a token's last
// batch -- are loaded while the current batch's down rows are in flight, so a token costs one dependent memory round
// trip instead of two. kReduceBatch slots' loads are issued together, and summed in slot order (the same adds in the
// same order as one slot at a time), the rows kept packed (bf16: 86 registers, 5 CTAs per SM; f32 rows of the tiled
// path: 124). The one-CTA-per-token grid ran two round trips per token at 4 CTAs per SM:
// latency-bound at large T (H200, session 20: Hy3-TP8 T=4096 80-100 us for ~300 MB, DeepSeek-V3 EP8 ~110 us for
// ~120 MB, most of its slots remote).
template <typename DownT>
__global__ void __launch_bounds__(kReduceThreads) MoeReduceKernel(const __grid_constant__ ReduceParams<DownT> p) {
  const int col = (blockIdx.y * kReduceThreads + threadIdx.x) * 8;
  int64_t t = blockIdx.x;
  const bool active = col < p.hidden && t < p.tokens;
  // The first token's slots are loaded BEFORE the PDL wait: ids and weights are op inputs, and pair_row is the align
  // kernel's, complete before the down GEMM (which launches us only after its own wait) began; read through L2.
  ReduceSlots next;
  if (active) next = LoadReduceSlots<true>(p, t, 0);
  PdlWait();  // the down rows are the down GEMM's
  PdlLaunchDependents();
  if (!active) return;
  for (; t < p.tokens; t += gridDim.x) {
    float y[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
    for (int j0 = 0; j0 < p.top_k; j0 += kReduceBatch) {
      const ReduceSlots cur = next;
      Packed8<DownT> d[kReduceBatch];
#pragma unroll
      for (int b = 0; b < kReduceBatch; ++b) {
        if (cur.row[b] >= 0) d[b].Load(p.down + static_cast<int64_t>(cur.row[b]) * p.hidden + col);
      }
      if (j0 + kReduceBatch < p.top_k) {
        next = LoadReduceSlots<false>(p, t, j0 + kReduceBatch);
      } else if (t + gridDim.x < p.tokens) {
        next = LoadReduceSlots<false>(p, t + gridDim.x, 0);
      }
#pragma unroll
      for (int b = 0; b < kReduceBatch; ++b) {
        if (cur.row[b] >= 0) d[b].AddWeighted(y, cur.w[b]);
      }
    }
    StoreReducedRow(p, t, col, y);
  }
}

// ------------------------------------------------------------------------------------ reduce, sparse form
// Under expert parallelism a token has few local slots (DeepSeek-V3 / Hy3 EP8 at top-8: one on average), so the
// dense kernel above has ONE 16-byte row load in flight per thread and token: ~1 TB/s, latency-bound (H200, session
// 21: DeepSeek-V3 EP8 T=4096 ~75 us for ~117 MB). Here a thread walks two tokens per step (t and t + gridDim.x), keeps
// the first kSparseRows local slots of each in registers (compacted in slot order) and issues all their row loads
// together -- 2x the bytes in flight at about the same registers; the next two tokens' slots load meanwhile. Slots
// past the kept ones that are local (a token with > kSparseRows local slots) are summed after them, loaded one by
// one: the same adds in the same slot order as the dense kernel and the reference. Taken where k <= kReduceBatch
// and the expected local slots k * E_local / E_global are <= kSparseRows (ReduceSparse).
constexpr int kSparseRows = 2;

struct SparseSlots {
  int32_t row[kSparseRows];
  float w[kSparseRows];
  int rest;  // the first local slot past the kept ones (top_k: none)
};

// The first kSparseRows local slots of a batch (no dynamic register indexing: predicated moves).
__device__ __forceinline__ SparseSlots CompactSlots(const ReduceSlots& s, int top_k) {
  SparseSlots c;
#pragma unroll
  for (int i = 0; i < kSparseRows; ++i) c.row[i] = -1, c.w[i] = 0.f;
  c.rest = top_k;
  int n = 0;
#pragma unroll
  for (int b = 0; b < kReduceBatch; ++b) {
    if (s.row[b] < 0) continue;
#pragma unroll
    for (int i = 0; i < kSparseRows; ++i) {
      if (n == i) c.row[i] = s.row[b], c.w[i] = s.w[b];
    }
    if (n == kSparseRows) c.rest = b;
    ++n;
  }
  return c;
}

// y = sum over the token's local slots in slot order (+ shared), stored as bf16. `d` holds the kept slots' rows.
template <typename DownT>
__device__ __forceinline__ void FinishSparseToken(const ReduceParams<DownT>& p, int64_t t, int col, const SparseSlots& c,
                                                  const Packed8<DownT> (&d)[kSparseRows]) {
  float y[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kSparseRows; ++i) {
    if (c.row[i] >= 0) d[i].AddWeighted(y, c.w[i]);
  }
  for (int j = c.rest; j < p.top_k; ++j) {  // rare: more local slots than kept
    int32_t row;
    float w;
    LoadReduceSlot<false>(p, t * p.top_k + j, row, w);
    if (row < 0) continue;
    Packed8<DownT> r;
    r.Load(p.down + static_cast<int64_t>(row) * p.hidden + col);
    r.AddWeighted(y, w);
  }
  StoreReducedRow(p, t, col, y);
}

template <typename DownT>
__global__ void __launch_bounds__(kReduceThreads) MoeReduceSparseKernel(const __grid_constant__ ReduceParams<DownT> p) {
  const int col = (blockIdx.y * kReduceThreads + threadIdx.x) * 8;
  const int64_t g = gridDim.x;
  int64_t t = blockIdx.x;
  const bool active = col < p.hidden && t < p.tokens;
  // Before the PDL wait, as in MoeReduceKernel: slots are op inputs or align's, complete before the down GEMM began.
  ReduceSlots next0 = {}, next1 = {};  // next1 is compacted even when unused (its result masked): defined contents
  if (active) next0 = LoadReduceSlots<true>(p, t, 0);
  if (active && t + g < p.tokens) next1 = LoadReduceSlots<true>(p, t + g, 0);
  PdlWait();  // the down rows are the down GEMM's
  PdlLaunchDependents();
  if (!active) return;
  for (; t < p.tokens; t += 2 * g) {
    const bool second = t + g < p.tokens;
    const SparseSlots c0 = CompactSlots(next0, p.top_k);
    SparseSlots c1 = CompactSlots(next1, p.top_k);
    if (!second) c1.row[0] = c1.row[1] = -1;
    Packed8<DownT> d0[kSparseRows], d1[kSparseRows];
#pragma unroll
    for (int i = 0; i < kSparseRows; ++i) {
      if (c0.row[i] >= 0) d0[i].Load(p.down + static_cast<int64_t>(c0.row[i]) * p.hidden + col);
      if (c1.row[i] >= 0) d1[i].Load(p.down + static_cast<int64_t>(c1.row[i]) * p.hidden + col);
    }
    if (t + 2 * g < p.tokens) next0 = LoadReduceSlots<false>(p, t + 2 * g, 0);
    if (t + 3 * g < p.tokens) next1 = LoadReduceSlots<false>(p, t + 3 * g, 0);
    FinishSparseToken(p, t, col, c0, d0);
    if (second) FinishSparseToken(p, t + g, col, c1, d1);
  }
}

// HPC_XLA_MOE_REDUCE=dense|sparse forces the form (A/B runs and the bitwise test; sparse needs k <= kReduceBatch).
int MoeReduceFormFromEnv();  // fused_moe_validate.cc: 0 unset, 1 dense, 2 sparse, -1 anything else (validated there)

// The sparse form where k <= kReduceBatch and a token's expected local slots k * E_local / E_global <= kSparseRows.
inline bool ReduceSparse(int64_t top_k, int64_t experts, int64_t experts_global) {
  if (top_k > kReduceBatch) return false;
  const int forced = MoeReduceFormFromEnv();
  if (forced > 0) return forced == 2;
  return top_k * experts <= kSparseRows * std::max(experts_global, experts);
}

// Grid: (tokens, capped at the CTAs that are resident at once over the column slices) x column slices. From the
// shapes, the device and the occupancy API only.
template <typename DownT>
Status LaunchMoeReduce(ReduceParams<DownT> p, int64_t tokens, int64_t experts_global, int device, cudaStream_t stream) {
  p.tokens = tokens;
  auto* fn = ReduceSparse(p.top_k, p.experts, experts_global) ? &MoeReduceSparseKernel<DownT> : &MoeReduceKernel<DownT>;
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(reinterpret_cast<const void*>(fn), kReduceThreads, 0,
                                        "fused_moe reduce occupancy", &per_sm));
  const int64_t slices = (p.hidden / 8 + kReduceThreads - 1) / kReduceThreads;
  const int64_t resident = std::max<int64_t>(1, int64_t{per_sm} * MultiprocessorCount(device) / slices);
  const dim3 grid(static_cast<unsigned>(std::min(tokens, resident)), static_cast<unsigned>(slices));
  return Launch("fused_moe reduce launch", fn, grid, dim3(kReduceThreads), 0, stream, p);
}

// fp8_block128 activation scale of one 128-column block held by an aligned 16-lane group, 8 columns per lane:
// amax / 448 (the CPU reference's rule). Every lane of the warp must call it (full-mask shuffles).
__device__ __forceinline__ float Block128Scale(const float (&x)[8]) {
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) amax = fmaxf(amax, fabsf(x[i]));
  return GroupMax<16>(amax) / kFp8E4M3Max;
}

}  // namespace hpc::moe
