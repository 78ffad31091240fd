// The stream path's single-token fp8_tensor layer as ONE cooperative kernel (experiment 41, HPC_XLA_MOE_ONE_KERNEL;
// stream_one_kernel.cu has the design). The two-kernel stream path spends ~2/3 of its T = 1 time outside weight
// streaming (bench/NOTES.md, sessions 14-15: gate-up 11 us for 25 MB, down 7.6 us for 12.6 MB at Qwen3-30B, the
// down grid waiting for the gate-up grid to drain); here one grid streams both stages' weights through one ring per
// SM and meets at grid barriers only for the tiny activations.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

// HPC_XLA_MOE_ONE_KERNEL (read once): unset / "0" off; "1" on wherever it fits, launched with PDL like every other
// kernel; "nopdl" on, without the PDL attribute; "ws" on, warp-specialized (experiment 41d: a producer warpgroup
// copies, a consumer warpgroup multiplies). Anything else: kInvalid, refused by ValidateFusedMoeCuda.
enum class OneKernelChoice { kOff, kOn, kNoPdl, kWarpSpecialized, kInvalid };
inline bool OneKernelOn(OneKernelChoice c) {
  return c == OneKernelChoice::kOn || c == OneKernelChoice::kNoPdl || c == OneKernelChoice::kWarpSpecialized;
}
OneKernelChoice OneKernelFromEnv();  // fused_moe_validate.cc

// Shapes it takes: one token, top_k <= 8 (its pairs are the 8 columns of the down MMAs), H a multiple of 128 up to
// 4096 and I a multiple of 32 up to 4096 (x and the intermediate are held in shared memory as wgmma B tiles).
constexpr int kOneKernelMaxTopK = 8;
constexpr int64_t kOneKernelMaxHidden = 4096;
constexpr int64_t kOneKernelMaxInter = 4096;
inline bool StreamOneKernelShapeFits(int64_t top_k, int64_t hidden, int64_t inter) {
  return top_k >= 1 && top_k <= kOneKernelMaxTopK && hidden % 128 == 0 && hidden <= kOneKernelMaxHidden &&
         inter % 32 == 0 && inter <= kOneKernelMaxInter;
}

// Its workspace beyond the stream path's intermediate: one 64-float gate/up partial per (unit, 256-column chunk of
// H), at most min(top_k, E) hit experts x I/32 units x ceil(H/256) chunks (Qwen3-30B: 384 KB).
inline int64_t StreamOneKernelPartialBytes(int64_t top_k, int64_t experts, int64_t hidden, int64_t inter) {
  return std::max<int64_t>(0, std::min(top_k, experts)) * (inter / 32) * ((hidden + 255) / 256) * 64 * 4;
}

struct OneKernelArgs {
  const void* x;                 // [1, H] bf16, or e4m3 when x_fp8 (scaled by a13_scale either way)
  bool x_fp8;
  const uint8_t* w13;            // [E, 2I, H] e4m3 (rows by W13GateRow / W13UpDelta)
  bool w13_interleaved;
  const float* w13_scale;        // [E]
  const uint8_t* w2;             // [E, H, I] e4m3
  const float* w2_scale;         // [E]
  const float* a13_scale;        // [1]
  const float* a2_scale;         // [1]
  const float* weights;          // [1, top_k]
  const int32_t* ids;            // [1, top_k] global expert ids
  const __nv_bfloat16* shared;   // [1, H] or null
  __nv_bfloat16* out;            // [1, H]
  uint8_t* inter;                // [top_k, I] e4m3 (workspace)
  float* partial;                // StreamOneKernelPartialBytes (workspace)
  int top_k, experts, expert_offset, hidden, inter_size;
  bool pdl;                      // launch with the PDL attribute
  bool warp_specialized;         // experiment 41d's kernel
};

Status LaunchStreamOneKernel(const OneKernelArgs& a, int device, cudaStream_t stream);

}  // namespace hpc::moe
