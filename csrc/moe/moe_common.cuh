// Pieces the fused_moe paths share (included by fused_moe.cu, fused_moe_grouped.cu / grouped_gemm_sm90.cu and
// fused_moe_stream.cu): the once-per-kernel shared-memory attribute, the activation and the final weighted reduce.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/launch.cuh"
#include "csrc/common/occupancy.h"
#include "csrc/common/status.h"
#include "csrc/common/vec.cuh"

namespace hpc::moe {

// Raises a kernel's dynamic shared-memory limit once per kernel (never on the hot path after the first call).
inline Status AllowSmem(const void* fn, int bytes) {
  return AllowDynamicSmem(fn, bytes, "fused_moe: shared memory attribute");
}

// silu(g) in fp32, as the reference computes it.
__device__ __forceinline__ float Silu(float g) { return g / (1.f + expf(-g)); }

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
  int hidden, top_k, experts, expert_offset;
};

constexpr int kReduceThreads = 128;
constexpr int kReduceBatch = 8;  // top-k slots whose loads are issued together

template <typename DownT>
__global__ void __launch_bounds__(kReduceThreads) MoeReduceKernel(const __grid_constant__ ReduceParams<DownT> p) {
  PdlWait();
  PdlLaunchDependents();
  const int64_t t = blockIdx.x;
  const int col = (blockIdx.y * kReduceThreads + threadIdx.x) * 8;
  if (col >= p.hidden) return;
  float y[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  // kReduceBatch slots at a time: all their rows / weights first, then all their down rows, then the sums in slot
  // order -- two dependent memory round trips per batch instead of two per slot (the PDL-waited reduce sat ~5 us
  // after the down GEMM at T=16 for 1 MB of rows). Same adds in the same order as one slot at a time.
  for (int j0 = 0; j0 < p.top_k; j0 += kReduceBatch) {
    int64_t row[kReduceBatch];
    float w[kReduceBatch];
#pragma unroll
    for (int b = 0; b < kReduceBatch; ++b) {
      const int j = j0 + b;
      const int64_t pair = t * p.top_k + j;
      row[b] = -1;  // past top_k, or another rank's expert: contributes 0, its row was never computed
      w[b] = 0.f;
      if (j < p.top_k) {
        if (p.pair_row != nullptr) {
          row[b] = p.pair_row[pair];
        } else {
          const int e = p.ids[pair] - p.expert_offset;
          row[b] = e >= 0 && e < p.experts ? pair : -1;
        }
        w[b] = p.weights[pair];
      }
    }
    float d[kReduceBatch][8];
#pragma unroll
    for (int b = 0; b < kReduceBatch; ++b) {
      if (row[b] >= 0) LoadRow8(p.down + row[b] * p.hidden + col, d[b]);
    }
#pragma unroll
    for (int b = 0; b < kReduceBatch; ++b) {
      if (row[b] < 0) continue;
#pragma unroll
      for (int i = 0; i < 8; ++i) y[i] = __fadd_rn(y[i], __fmul_rn(w[b], d[b][i]));  // the reference's y += w * acc
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

template <typename DownT>
Status LaunchMoeReduce(const ReduceParams<DownT>& p, int64_t tokens, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((p.hidden / 8 + kReduceThreads - 1) / kReduceThreads));
  return Launch("fused_moe reduce launch", MoeReduceKernel<DownT>, grid, dim3(kReduceThreads), 0, stream, p);
}

}  // namespace hpc::moe
