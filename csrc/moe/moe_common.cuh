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

// kL2: through L2 (ld.cg) -- the loads issued before the kernel's PDL wait (see MoeReduceKernel).
template <bool kL2, typename DownT>
__device__ __forceinline__ ReduceSlots LoadReduceSlots(const ReduceParams<DownT>& p, int64_t t, int j0) {
  auto ld = [](const auto* src) { return kL2 ? __ldcg(src) : *src; };
  ReduceSlots s;
#pragma unroll
  for (int b = 0; b < kReduceBatch; ++b) {
    const int j = j0 + b;
    const int64_t pair = t * p.top_k + j;
    s.row[b] = -1;
    s.w[b] = 0.f;
    if (j < p.top_k) {
      if (p.pair_row != nullptr) {
        s.row[b] = ld(p.pair_row + pair);
      } else {
        const int e = ld(p.ids + pair) - p.expert_offset;
        s.row[b] = e >= 0 && e < p.experts ? static_cast<int32_t>(pair) : -1;
      }
      s.w[b] = ld(p.weights + pair);
    }
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
        if (cur.row[b] < 0) continue;
        float v[8];
        d[b].Unpack(v);
#pragma unroll
        for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(y[i], __fmul_rn(cur.w[b], v[i]));  // the reference's y += w * acc
      }
    }
    if (p.shared) {
      float s[8];
      LoadVec8(p.shared + t * p.hidden + col, s);
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(y[i], s[i]);
    }
    StoreVec8(p.out + t * p.hidden + col, y);
  }
}

// Grid: (tokens, capped at the CTAs that are resident at once over the column slices) x column slices. From the
// shapes, the device and the occupancy API only.
template <typename DownT>
Status LaunchMoeReduce(ReduceParams<DownT> p, int64_t tokens, int device, cudaStream_t stream) {
  p.tokens = tokens;
  auto* fn = &MoeReduceKernel<DownT>;
  int per_sm = 0;
  HPC_RETURN_IF_ERROR(ResidentCtasPerSm(reinterpret_cast<const void*>(fn), kReduceThreads, 0,
                                        "fused_moe reduce occupancy", &per_sm));
  const int64_t slices = (p.hidden / 8 + kReduceThreads - 1) / kReduceThreads;
  const int64_t resident = std::max<int64_t>(1, int64_t{per_sm} * MultiprocessorCount(device) / slices);
  const dim3 grid(static_cast<unsigned>(std::min(tokens, resident)), static_cast<unsigned>(slices));
  return Launch("fused_moe reduce launch", fn, grid, dim3(kReduceThreads), 0, stream, p);
}

}  // namespace hpc::moe
