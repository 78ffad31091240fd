// fused_moe's single-token fp8_tensor layer with its two weight streams overlapped (stream_overlap.cu has the
// design). fused_moe_stream.cu takes it where the shapes fit (StreamOverlapPlanFor) and falls back to its own two
// kernels elsewhere.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

struct OverlapArgs {
  const void* x;               // [T, H] bf16, or e4m3 when x_fp8 (scaled by a13_scale either way)
  bool x_fp8;
  const uint8_t* w13;          // [E, 2I, H] e4m3
  const float* w13_scale;      // [E]
  const uint8_t* w2;           // [E, H, I] e4m3
  const float* w2_scale;       // [E]
  const float* a13_scale;      // [1]
  const float* a2_scale;       // [1]
  const float* weights;        // [T, top_k]
  const int32_t* ids;          // [T, top_k] global expert ids
  const __nv_bfloat16* shared; // [T, H] or null
  __nv_bfloat16* out;          // [T, H]
  uint8_t* inter;              // [T * top_k, I] e4m3 scratch
  int tokens, top_k, experts, expert_offset, hidden, inter_size;
};

// The launch shape both kernels take, a pure function of the shapes and the SM count.
struct OverlapPlan {
  bool fits = false;
  int up_cluster = 0;     // gate-up CTAs per unit (K split)
  int up_clusters = 0;    // gate-up clusters (persistent: units round-robin)
  int down_cluster = 0;   // down CTAs per 64-row block (hit experts split)
  int up_smem = 0, down_smem = 0;
};
OverlapPlan StreamOverlapPlanFor(int tokens, int top_k, int experts, int hidden, int inter_size, int sms);

// Writes out[t, :] = sum_j w[t, j] * down_j (+ shared) for the local experts, like the stream path.
Status LaunchStreamOverlap(const OverlapArgs& a, const OverlapPlan& plan, cudaStream_t stream);

}  // namespace hpc::moe
