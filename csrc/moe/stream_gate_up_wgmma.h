// The stream path's gate-up stage on Hopper's fp8 tensor cores (wgmma), for fp8_tensor at T <= 8 tokens (the
// decode regime). See stream_gate_up_wgmma.cu for the design; fused_moe_stream.cu picks it (UseWgmmaGateUp: by
// default single-token calls whose grid fits one wave) and runs its own down kernel after it unchanged.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "csrc/common/status.h"

namespace hpc::moe {

struct WgmmaGateUpArgs {
  const void* x;             // [T, H] bf16, or e4m3 when x_fp8 (scaled by a13_scale either way)
  bool x_fp8;
  const uint8_t* w13;        // [E, 2I, H] e4m3, rows in vLLM's or the interleaved layout (w13_interleaved)
  bool w13_interleaved;
  const float* w13_scale;    // [E]
  const float* a13_scale;    // [1]: x's static scale
  const float* a2_scale;     // [1]: the intermediate's static scale
  const int32_t* ids;        // [T, top_k] global expert ids
  uint8_t* inter;            // [T * top_k, I] e4m3 out
  int tokens, top_k, experts, expert_offset, hidden, inter_size;
};

// Shapes it takes: T <= 8 (every token is a column of one n8 MMA), H a multiple of 128 up to 8192 (a cluster of at
// most 8 CTAs, each <= 8 K groups of 128), I a multiple of 32 (units of 32 gate + 32 up rows).
bool StreamGateUpWgmmaFits(int tokens, int top_k, int hidden, int inter_size);

// Its grid (CTAs, one cluster per pair slot x 32 columns of I) and how many of its CTAs an SM holds (the shared
// memory of 8 K groups, 74 KB: 3), for the caller's one-wave test.
int64_t StreamGateUpWgmmaCtas(int tokens, int top_k, int hidden, int inter_size);
constexpr int kStreamGateUpWgmmaCtasPerSm = 3;

// Writes inter[pair, :] = e4m3(silu(gate) * up / a2_scale) for every pair whose expert is local; the pairs of
// other ranks' experts are not written (the down kernel skips them).
Status LaunchStreamGateUpWgmma(const WgmmaGateUpArgs& a, cudaStream_t stream);

}  // namespace hpc::moe
